// fp32 fused multiply-add with a single rounding, fast on every CPU the portable path runs on.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace fp8gemm {
namespace cpu {

// Hardware FMA where the target has it (aarch64, or x86 built with -mfma); otherwise an exact
// emulation, because glibc's software fmaf is very slow: s*p is exact in double (24 + 24 bits),
// TwoSum gives the exact error of adding c, and rounding that sum to odd in double
// (53 >= 24 + 2 bits) before the final rounding to float avoids double rounding.
inline float fma_f32(float s, float p, float c) {
#if (defined(__FMA__) || defined(__aarch64__) || defined(__ARM_FEATURE_FMA)) && !defined(FP8GEMM_EMULATE_FMA)
  return std::fma(s, p, c);
#else
  const double x = static_cast<double>(s) * static_cast<double>(p);
  const double y = c;
  double sum = x + y;
  if (!std::isfinite(sum)) return static_cast<float>(sum);  // inf, NaN: nothing to round
  const double y_part = sum - x;
  const double err = (x - (sum - y_part)) + (y - y_part);
  if (err != 0.0) {
    uint64_t bits;
    std::memcpy(&bits, &sum, sizeof(bits));
    // Inexact: replace an even result by its neighbour on the side of the exact value (round to odd).
    if ((bits & 1u) == 0) bits += ((err > 0) == (sum > 0)) ? uint64_t{1} : ~uint64_t{0};
    std::memcpy(&sum, &bits, sizeof(sum));
  }
  return static_cast<float>(sum);
#endif
}

}  // namespace cpu
}  // namespace fp8gemm
