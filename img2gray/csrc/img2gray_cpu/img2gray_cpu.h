#pragma once

#include <cstdint>

namespace grayscale {

// `pixels` packed RGB pixels -> `pixels` gray bytes, chunks of the range spread over
// at::get_num_threads() threads (torch's inter-op pool and the calling thread).
void rgb_to_gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t pixels);

}  // namespace grayscale
