// RGB -> gray on the CPU: a flat loop the compiler vectorises, split across threads by at::parallel_for.
#include "img2gray_cpu.h"

#include <ATen/Parallel.h>

#include "../img2gray_common.h"

namespace grayscale {

void rgb_to_gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t pixels) {
  // 64 Ki pixels per task: large enough to amortise scheduling, small enough to balance 4K frames.
  constexpr int64_t kGrain = 1 << 16;
  at::parallel_for(0, pixels, kGrain, [&](int64_t begin, int64_t end) {
    const uint8_t* __restrict__ in = rgb + 3 * begin;
    uint8_t* __restrict__ out = gray + begin;
    for (int64_t i = 0, n = end - begin; i < n; ++i) out[i] = gray_of(in[3 * i], in[3 * i + 1], in[3 * i + 2]);
  });
}

}  // namespace grayscale
