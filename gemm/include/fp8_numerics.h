// Bit-exact numeric helpers shared by the gfx942 kernels, their host launcher, the CPU SIMT
// emulator and the host unit tests. Pure C++ bit manipulation: the same code runs on the GPU and
// on the CPU, so an emulated run rounds exactly like the device would.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__HIP__) || defined(__HIPCC__)
#define FP8GEMM_HOST_DEVICE __host__ __device__ inline
#else
#define FP8GEMM_HOST_DEVICE inline
#endif

namespace fp8gemm {

FP8GEMM_HOST_DEVICE uint32_t f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}

FP8GEMM_HOST_DEVICE float bits_f32(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
}

// float -> bfloat16 bits, round to nearest even (what torch's .to(bfloat16) does). NaN stays a
// quiet NaN with its sign; +-inf and overflow to inf behave as IEEE rounding says.
FP8GEMM_HOST_DEVICE uint16_t f32_to_bf16_rne(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// e4m3fn (OCP) -> e4m3fnuz (gfx942 MFMA input), four bytes at a time.
//
// For every e4m3fn pattern other than the special ones below, the same bits read as e4m3fnuz are
// exactly half the e4m3fn value: both formats have 3 mantissa bits and the same subnormal
// encoding, the exponent bias is 7 vs 8. So a product a*b of two e4m3fn values equals 4x the
// product of the reinterpreted bytes, exactly; the factor 4 (a power of two, exact in fp32) is
// folded into the block scale (kE4m3fnProductFactor). Special patterns:
//   0x80 (e4m3fn -0)       -> 0x00 (fnuz has no -0; 0x80 would be NaN there)
//   0x7f / 0xff (fn NaN)   -> 0x80 (the fnuz NaN; 0x7f/0xff would be +-240 there)
// No other pattern needs a change, so the conversion is exact for every input byte.
FP8GEMM_HOST_DEVICE uint32_t e4m3fn_to_e4m3fnuz_x4(uint32_t x) {
  const uint32_t low7 = x & 0x7f7f7f7fu;
  // 0x80 in each byte whose low 7 bits are all zero (byte is 0x00 or 0x80).
  const uint32_t zero_hi = ~(low7 + 0x7f7f7f7fu) & 0x80808080u;
  // 0x80 in each byte whose low 7 bits are all one (byte is 0x7f or 0xff). No carry crosses a
  // byte because low7 <= 0x7f.
  const uint32_t nan_hi = (low7 + 0x01010101u) & 0x80808080u;
  const uint32_t nan_bytes = (nan_hi >> 7) * 0xffu;
  x &= ~zero_hi;                     // -0 -> +0
  return (x & ~nan_bytes) | nan_hi;  // NaN -> 0x80
}

FP8GEMM_HOST_DEVICE uint8_t e4m3fn_to_e4m3fnuz(uint8_t b) {
  return static_cast<uint8_t>(e4m3fn_to_e4m3fnuz_x4(b) & 0xffu);
}

// fn(a) * fn(b) == kE4m3fnProductFactor * fnuz(a') * fnuz(b') for converted bytes a', b'.
constexpr float kE4m3fnProductFactor = 4.0f;

// Exact decoders (used by host tests and the emulator's MFMA; the GPU decodes in hardware).
FP8GEMM_HOST_DEVICE float decode_e4m3fnuz(uint8_t b) {
  if (b == 0x80) return bits_f32(0x7fc00000u);
  const int exp = (b >> 3) & 0xf, man = b & 7;
  float mag = exp == 0 ? static_cast<float>(man) * (1.0f / 1024.0f)  // man/8 * 2^-7
                       : static_cast<float>(8 + man) / 8.0f * bits_f32(static_cast<uint32_t>(exp - 8 + 127) << 23);
  return (b & 0x80) ? -mag : mag;
}

FP8GEMM_HOST_DEVICE float decode_e4m3fn(uint8_t b) {
  if ((b & 0x7f) == 0x7f) return bits_f32(0x7fc00000u);
  const int exp = (b >> 3) & 0xf, man = b & 7;
  float mag = exp == 0 ? static_cast<float>(man) * (1.0f / 512.0f)  // man/8 * 2^-6
                       : static_cast<float>(8 + man) / 8.0f * bits_f32(static_cast<uint32_t>(exp - 7 + 127) << 23);
  return (b & 0x80) ? -mag : mag;
}

}  // namespace fp8gemm
