// Torch-free description of one activation quantization (fp8_act_quant) and the exact scalar
// arithmetic every backend shares (CPU, CUDA, gfx942 HIP and its CPU emulation).
//
// For every row r of x (all leading dimensions flattened) and 128-wide group g of K (a partial last
// group uses only its real columns), with x converted to fp32 first:
//   amax  = max |x| over the group (NaN-propagating)
//   scale = max(amax / fp8_max, 1e-12) in fp32          (fp8_max: 448 e4m3fn, 240 e4m3fnuz)
//           or the static per-tensor scale when one is given (no amax)
//   q     = fp8_rne(clamp(x / scale, -fp8_max, fp8_max))  (fp32 IEEE division, round to nearest even)
// Special values: a NaN in the group makes the scale NaN (0x7FC00000) and every q of the group a NaN
// code; +-inf makes the scale inf (finite / inf = 0, inf / inf = NaN); an all-zero group gets 1e-12.
// The sign of q is the sign of x / scale by IEEE's rule (sign(x) XOR sign(scale)), NaN codes
// included: e4m3fn NaN is 0x7F | sign, -0 is 0x80; e4m3fnuz has one NaN (0x80) and no -0 (0x00).
#pragma once

#include <cstdint>

#include "gemm_problem.h"

#if defined(__CUDACC__) || defined(__HIP__) || defined(__HIPCC__)
#define FP8GEMM_AQ_HD __host__ __device__ inline
#else
#define FP8GEMM_AQ_HD inline
#endif

namespace fp8gemm {

enum class ActDtype : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// Leading dimensions of x that cannot be merged into one stride: up to this many are read in place.
constexpr int kActRowDims = 4;

// How the scale of a group is found.
enum class ActScaleMode : int32_t {
  kDynamic = 0,      // amax of the group / fp8_max
  kStaticTensor = 1, // *static_scale (one float in the device memory of x)
  kStaticValue = 2,  // static_scale_value
};

struct ActQuantProblem {
  int64_t rows = 0, k = 0;  // rows = product of x's leading sizes; 1 <= rows <= INT32_MAX
  const void* x = nullptr;
  ActDtype x_dtype = ActDtype::kBFloat16;
  // Row r starts at x + sum_d idx_d * row_stride[d] elements, idx_d the digits of r in the mixed
  // radix row_size[] (row_size[0] innermost). Sizes multiply to rows; unused dimensions have size 1.
  int32_t row_dims = 1;
  int64_t row_size[kActRowDims] = {1, 1, 1, 1};
  int64_t row_stride[kActRowDims] = {0, 0, 0, 0};
  int64_t x_stride_k = 1;  // elements between consecutive columns
  uint8_t* q = nullptr;    // (rows, k) fp8 codes, contiguous
  float* scale = nullptr;  // scale[g * scale_ld + r], g < groups()
  int64_t scale_ld = 0;    // >= rows
  Fp8Format format = Fp8Format::kE4M3FN;
  ActScaleMode mode = ActScaleMode::kDynamic;
  const float* static_scale = nullptr;  // kStaticTensor
  float static_scale_value = 1.0f;      // kStaticValue

  constexpr int64_t groups() const { return (k + kQuantBlock - 1) / kQuantBlock; }
};

FP8GEMM_AQ_HD uint32_t aq_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}

FP8GEMM_AQ_HD float aq_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
}

constexpr uint32_t kAqQuietNan = 0x7FC00000u;

// IEEE binary16 -> binary32, exact (NaN stays NaN, subnormals are normalised).
FP8GEMM_AQ_HD float aq_f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return aq_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // mantissa * 2^-24: both exact in fp32, so is their product.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return aq_float(sign | aq_bits(magnitude));
  }
  return aq_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

FP8GEMM_AQ_HD float aq_bf16_to_f32(uint16_t b) { return aq_float(static_cast<uint32_t>(b) << 16); }

FP8GEMM_AQ_HD float aq_fp8_max(bool fnuz) { return fnuz ? 240.0f : 448.0f; }

// The group's scale from amax_bits = the largest (bits & 0x7FFFFFFF) over the group, an unsigned
// maximum: for sign-cleared floats it orders like the values, and every NaN pattern is above +inf, so
// the maximum propagates NaN without any floating-point compare. `quotient` is amax / fp8_max,
// computed by the caller with an IEEE (correctly rounded) fp32 division.
FP8GEMM_AQ_HD float aq_scale_from_quotient(uint32_t amax_bits, float quotient) {
  if (amax_bits > 0x7F800000u) return aq_float(kAqQuietNan);
  return quotient < 1e-12f ? 1e-12f : quotient;
}

// Sign bit (0 or 1) of x / scale by IEEE's sign rule, for NaN quotients too.
FP8GEMM_AQ_HD uint32_t aq_quotient_sign(float x, float scale) { return (aq_bits(x) ^ aq_bits(scale)) >> 31; }

// The fp8 code of the fp32 quotient v = x / scale: clamp to +-fp8_max, round to nearest even.
// `neg` is aq_quotient_sign(x, scale) (the sign of v where v is not NaN).
FP8GEMM_AQ_HD uint8_t aq_encode(float v, uint32_t neg, bool fnuz) {
  uint32_t mag = aq_bits(v) & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return fnuz ? 0x80u : static_cast<uint8_t>(0x7Fu | (neg << 7));
  const uint32_t max_bits = fnuz ? 0x43700000u : 0x43E00000u;  // 240, 448
  if (mag > max_bits) mag = max_bits;                          // clamp (+-inf included)
  const uint32_t bias = fnuz ? 8u : 7u;
  const uint32_t e32 = mag >> 23;
  uint32_t code;
  if (e32 >= 128u - bias) {
    // Normal in e4m3: drop 20 mantissa bits, round to nearest even (a carry moves into the exponent),
    // then rebias the exponent from 127 to `bias`. Clamped values never round past the maximum.
    code = ((mag + 0x7FFFFu + ((mag >> 20) & 1u)) >> 20) - ((127u - bias) << 3);
  } else {
    // Subnormal (or zero) in e4m3: code = |v| / 2^(-bias-2), rounded to nearest even; a code of 8
    // is the smallest normal, which has the same bits.
    const uint32_t m = (mag & 0x7FFFFFu) | (e32 != 0 ? 0x800000u : 0u);
    const uint32_t shift = 148u - bias - (e32 != 0 ? e32 : 1u);  // >= 21
    if (shift > 24) {
      code = 0;  // |v| < 2^-1 of the smallest subnormal step: rounds to zero
    } else {
      const uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
      code = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
    }
  }
  if (fnuz && code == 0) return 0;  // no -0 in e4m3fnuz
  return static_cast<uint8_t>(code | (neg << 7));
}

// fp32 fma and product, each rounded once to nearest even. The product is an fma with a -0 addend: exact
// for signed zeros too, and nothing left for a compiler to contract it with.
FP8GEMM_AQ_HD float aq_fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

FP8GEMM_AQ_HD float aq_mul_rn(float a, float b) { return aq_fma_rn(a, b, -0.0f); }

// Whether aq_quotient may stand in for the IEEE quotient x / scale for every x of a group whose largest
// magnitude has the bits amax_bits: 2^-90 <= scale < 2^125 (sign clear), amax finite and below
// 2^100 * scale. Then every |x / scale| < 2^100, the reciprocal is a normal number, and wherever
// |x / scale| >= 2^-12 no step of aq_quotient overflows or underflows (the residual's grid,
// ulp(q0) * ulp(scale), is at least 2^-149, and a subnormal residual is exact). Dynamic scales always
// pass when amax is finite (1e-12 <= scale <= FLT_MAX / 240, amax <= 448.0001 * scale).
FP8GEMM_AQ_HD bool aq_quotient_fast_ok(float scale, uint32_t amax_bits) {
  const uint32_t s = aq_bits(scale);
  return s - 0x12800000u < 0x7E000000u - 0x12800000u && amax_bits < 0x7F800000u &&
         (amax_bits >> 23) < (s >> 23) + 100u;
}

// x / scale from recip = the correctly rounded 1 / scale, under aq_quotient_fast_ok. q0 = x * recip is
// within 1.5 ulp of the quotient, and q0 + (x - q0 * scale) * recip (Markstein's correction) rounds to
// the IEEE quotient wherever |x / scale| >= 2^-12: where q0 is a faithful rounding the residual is exact
// and the correction lands on the correctly rounded side; where it is not, the quotient lies far enough
// from the rounding boundary for the residual's own rounding not to matter
// (tests/act_quant_quotient_selftest.cpp checks both). Below 2^-12 both quotients are below 2^-11,
// which every fp8 format encodes as a zero. The sign is copied from x (scale > 0): the correction turns
// a -0 quotient into +0.
FP8GEMM_AQ_HD float aq_quotient(float x, float scale, float recip) {
  const float q0 = aq_mul_rn(x, recip);
  const float residual = aq_fma_rn(-q0, scale, x);
  const float q = aq_fma_rn(residual, recip, q0);
  return __builtin_copysignf(q, x);
}

// e4m3fnuz codes of four finite quotients q_i (byte i) from `fn`, the e4m3fn codes (round to nearest
// even, saturating) of 2 * q_i, and `over`, 1 in byte i where |q_i| > 232. The two formats' grids differ
// by exactly a factor of two up to 224; above, e4m3fnuz has one more value, 240 (0x7F, e4m3fn's NaN):
// 232 < |q| rounds or clamps to it, and e4m3fn saturated those to 0x7E. e4m3fn's -0 (0x80) becomes +0.
FP8GEMM_AQ_HD uint32_t aq_fnuz_from_fn_x4(uint32_t fn, uint32_t over) {
  fn |= over;
  const uint32_t nonzero = ((fn & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) & 0x80808080u;  // bit 7 of a byte: magnitude != 0
  return fn & (nonzero | 0x7F7F7F7Fu);
}

constexpr uint32_t kAqFnuzOverBits = 0x43680000u;  // 232.0f

// Element offset of row r's first element (r < rows <= INT32_MAX: 32-bit digit arithmetic).
FP8GEMM_AQ_HD int64_t aq_row_offset(const ActQuantProblem& p, uint32_t r) {
  int64_t offset = 0;
  for (int d = 0; d < kActRowDims; ++d) {
    if (d == p.row_dims - 1) {  // the outermost dimension takes what is left
      offset += static_cast<int64_t>(r) * p.row_stride[d];
      break;
    }
    const uint32_t size = static_cast<uint32_t>(p.row_size[d]);
    const uint32_t next = r / size;
    offset += static_cast<int64_t>(r - next * size) * p.row_stride[d];
    r = next;
  }
  return offset;
}

}  // namespace fp8gemm
