// Checks gemm_cpu/fma_f32.h's emulated fp32 fma (used by the portable CPU path on targets without
// hardware FMA) against libm's correctly rounded fmaf, bit for bit. Compiled with
// -DFP8GEMM_EMULATE_FMA by test_gemm_cpu.py; prints "ok <cases>" or the first mismatch.
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "fma_f32.h"

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

bool same(float x, float y) { return (std::isnan(x) && std::isnan(y)) || bits_of(x) == bits_of(y); }

}  // namespace

int main() {
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::normal_distribution<float> normal;
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(), 1.0f + std::numeric_limits<float>::epsilon(),
                            0.5f, 3.0f, 1e-30f, 1e30f};
  long cases = 0;
  auto check = [&](float s, float p, float c) -> bool {
    ++cases;
    const float want = std::fmaf(s, p, c);
    const float got = fp8gemm::cpu::fma_f32(s, p, c);
    if (!same(want, got)) {
      std::printf("FAIL fma(%a, %a, %a): want %a got %a\n", s, p, c, want, got);
      return false;
    }
    return true;
  };
  for (float s : specials)
    for (float p : specials)
      for (float c : specials)
        if (!check(s, p, c)) return 1;
  for (int i = 0; i < 1000000; ++i) {
    // Arbitrary bit patterns (every exponent, subnormals, NaN, inf).
    if (!check(from_bits(any_bits(rng)), from_bits(any_bits(rng)), from_bits(any_bits(rng)))) return 1;
    // What the GEMM does: scale * block sum + accumulator, often nearly cancelling.
    const float s = normal(rng) * normal(rng);
    const float p = std::ldexp(std::round(normal(rng) * 4096.0f), -6);
    const float c = -s * p * (1.0f + std::ldexp(normal(rng), -20)) + normal(rng) * 1e-3f;
    if (!check(s, p, c)) return 1;
    // Halfway cases: c and s*p a few ulps apart in magnitude.
    const float t = from_bits(bits_of(s * p) ^ static_cast<uint32_t>(any_bits(rng) & 0x7));
    if (!check(s, p, -t) || !check(s, p, t)) return 1;
  }
  std::printf("ok %ld\n", cases);
  return 0;
}
