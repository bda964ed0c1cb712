// RGB -> gray on the CPU, split across threads by at::parallel_for. Each task works in blocks of 32
// pixels: the RGB bytes are de-interleaved into three float arrays, then the formula runs over
// contiguous arrays, a loop the compiler vectorises (16-byte SSE at the x86-64 baseline).
#include "img2gray_cpu.h"

#include <ATen/Parallel.h>

#include "../img2gray_common.h"

namespace grayscale {

void rgb_to_gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t pixels) {
  // 64 Ki pixels per task: large enough to amortise scheduling, small enough to balance 4K frames.
  constexpr int64_t kGrain = 1 << 16;
  at::parallel_for(0, pixels, kGrain, [&](int64_t begin, int64_t end) {
    constexpr int kBlock = 32;
    const uint8_t* __restrict__ in = rgb + 3 * begin;
    uint8_t* __restrict__ out = gray + begin;
    const int64_t n = end - begin;
    int64_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      float r[kBlock], g[kBlock], b[kBlock];
      for (int j = 0; j < kBlock; ++j) {
        r[j] = in[3 * (i + j)];
        g[j] = in[3 * (i + j) + 1];
        b[j] = in[3 * (i + j) + 2];
      }
      for (int j = 0; j < kBlock; ++j) out[i + j] = gray_of_rgb(r[j], g[j], b[j]);
    }
    for (; i < n; ++i) out[i] = gray_of(in[3 * i], in[3 * i + 1], in[3 * i + 2]);
  });
}

}  // namespace grayscale
