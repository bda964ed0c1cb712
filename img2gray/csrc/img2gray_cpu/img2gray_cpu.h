#pragma once

#include <cstdint>

namespace grayscale {

// `pixels` packed RGB pixels -> `pixels` gray bytes, parallel over chunks of the range.
void rgb_to_gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t pixels);

}  // namespace grayscale
