// One-launch activation quantization on CUDA (sm_90a): fp8_act_quant's arithmetic (act_quant.h).
//
// A CTA of 256 threads takes 16 rows of one 128-wide group (grid x: rows / 16, grid y: groups); 16
// threads share a row's group, 8 consecutive columns each: one or two 16-byte loads where the row is
// K-contiguous and the chunk 16-byte aligned, element loads with any strides otherwise. The group's amax
// is an unsigned maximum of the sign-cleared bit patterns (NaN-propagating, act_quant.h) reduced over the
// 16 threads with shuffles; the scale is written by the first of them, the 8 codes per thread as one
// 8-byte store. e4m3fn codes come from the hardware's round-to-nearest-even conversion with saturation
// (cvt.rn.satfinite, which is clamp-then-round for every finite and infinite input) with NaN codes set
// by the sign rule; e4m3fnuz codes from the exact bit code of act_quant.h.
#include "act_quant_cuda.h"

#include <cuda_runtime.h>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>

namespace fp8gemm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLanesPerGroup = 16;                     // 16 x 8 columns = one 128-wide group
constexpr int kRowsPerCta = kThreads / kLanesPerGroup;  // 16
constexpr int kMaxGridY = 65535;

template <ActDtype D>
struct Elem;
template <>
struct Elem<ActDtype::kBFloat16> {
  using T = uint16_t;
  static __device__ __forceinline__ float f32(uint32_t b) { return __uint_as_float(b << 16); }
};
template <>
struct Elem<ActDtype::kFloat16> {
  using T = uint16_t;
  // Bit-exact, NaN sign included (the hardware conversion returns a canonical NaN, and the sign rule
  // gives a NaN input its own sign).
  static __device__ __forceinline__ float f32(uint32_t b) { return aq_f16_to_f32(static_cast<uint16_t>(b)); }
};
template <>
struct Elem<ActDtype::kFloat32> {
  using T = float;
};

// The thread's 8 elements as fp32 (0 where absent: n < 8 at the end of K, or a row past the end).
template <ActDtype D>
__device__ __forceinline__ void load8(const typename Elem<D>::T* src, int64_t stride_k, int n, float (&v)[8]) {
  using T = typename Elem<D>::T;
  if (n == 8 && stride_k == 1 && (reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
    if constexpr (sizeof(T) == 2) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(src));
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = Elem<D>::f32(words[i] & 0xFFFFu);
        v[2 * i + 1] = Elem<D>::f32(words[i] >> 16);
      }
    } else {
      const float4 lo = __ldg(reinterpret_cast<const float4*>(src));
      const float4 hi = __ldg(reinterpret_cast<const float4*>(src) + 1);
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (sizeof(T) == 2)
      v[i] = i < n ? Elem<D>::f32(__ldg(src + i * stride_k)) : 0.0f;
    else
      v[i] = i < n ? __ldg(src + i * stride_k) : 0.0f;
  }
}

template <ActDtype D>
__global__ void __launch_bounds__(kThreads) act_quant_kernel(const ActQuantProblem p) {
  using T = typename Elem<D>::T;
  const bool fnuz = p.format == Fp8Format::kE4M3FNUZ;
  const int sub = static_cast<int>(threadIdx.x) % kLanesPerGroup;
  const int64_t groups = p.groups();
  const float static_scale = p.mode == ActScaleMode::kStaticTensor ? __ldg(p.static_scale) : p.static_scale_value;
  const int64_t row_step = int64_t(gridDim.x) * kRowsPerCta;
  // Block-uniform loops: every thread of a warp reaches every shuffle.
  for (int64_t g = blockIdx.y; g < groups; g += gridDim.y) {
    const int64_t col = g * kQuantBlock + sub * 8;
    const int64_t left = p.k - col;
    const int n = left >= 8 ? 8 : left > 0 ? static_cast<int>(left) : 0;
    for (int64_t r0 = int64_t(blockIdx.x) * kRowsPerCta; r0 < p.rows; r0 += row_step) {
      const int64_t r = r0 + static_cast<int64_t>(threadIdx.x) / kLanesPerGroup;
      const bool valid = r < p.rows;
      const int nv = valid ? n : 0;
      const T* src = static_cast<const T*>(p.x) + (valid ? aq_row_offset(p, static_cast<uint32_t>(r)) : 0) +
                     (nv > 0 ? col * p.x_stride_k : 0);
      float v[8];
      load8<D>(src, p.x_stride_k, nv, v);
      // This CTA's loads are issued: a programmatic dependent may launch once every CTA got here.
      if (g + gridDim.y >= groups && r0 + row_step >= p.rows) asm volatile("griddepcontrol.launch_dependents;");

      float scale = static_scale;
      if (p.mode == ActScaleMode::kDynamic) {
        uint32_t amax = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = max(amax, __float_as_uint(v[i]) & 0x7FFFFFFFu);
#pragma unroll
        for (int offset = kLanesPerGroup / 2; offset > 0; offset /= 2)
          amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
        scale = aq_scale_from_quotient(amax, __fdiv_rn(__uint_as_float(amax), aq_fp8_max(fnuz)));
      }
      if (valid && sub == 0) p.scale[g * p.scale_ld + r] = scale;
      if (nv == 0) continue;

      uint32_t codes[2] = {0, 0};  // 8 codes, little-endian
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        const float q0 = __fdiv_rn(v[i], scale), q1 = __fdiv_rn(v[i + 1], scale);
        const uint32_t s0 = aq_quotient_sign(v[i], scale), s1 = aq_quotient_sign(v[i + 1], scale);
        uint32_t c0, c1;
        if (!fnuz) {
          const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(make_float2(q0, q1), __NV_SATFINITE, __NV_E4M3);
          c0 = q0 != q0 ? 0x7Fu | (s0 << 7) : pair & 0xFFu;  // NaN: the sign rule, not the hardware's
          c1 = q1 != q1 ? 0x7Fu | (s1 << 7) : (pair >> 8) & 0xFFu;
        } else {
          c0 = aq_encode(q0, s0, true);
          c1 = aq_encode(q1, s1, true);
        }
        codes[i / 4] |= (c0 | (c1 << 8)) << (8 * (i % 4));
      }
      uint8_t* dst = p.q + r * p.k + col;
      if (nv == 8 && (reinterpret_cast<uintptr_t>(dst) & 7u) == 0) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(codes[0], codes[1]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (i < nv) dst[i] = static_cast<uint8_t>(codes[i / 4] >> (8 * (i % 4)));
      }
    }
  }
}

bool problem_valid(const ActQuantProblem& p) {
  if (p.rows < 1 || p.rows > INT32_MAX || p.k < 1) return false;
  if (p.x == nullptr || p.q == nullptr || p.scale == nullptr || p.scale_ld < p.rows) return false;
  if (p.row_dims < 1 || p.row_dims > kActRowDims) return false;
  if (p.format != Fp8Format::kE4M3FN && p.format != Fp8Format::kE4M3FNUZ) return false;
  if (p.mode == ActScaleMode::kStaticTensor) return p.static_scale != nullptr;
  return p.mode == ActScaleMode::kDynamic || p.mode == ActScaleMode::kStaticValue;
}

}  // namespace

cudaError_t act_quant(const ActQuantProblem& p, cudaStream_t stream) {
  if (!problem_valid(p)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((p.rows + kRowsPerCta - 1) / kRowsPerCta),
                  static_cast<unsigned>(std::min<int64_t>(p.groups(), kMaxGridY)));
  switch (p.x_dtype) {
    case ActDtype::kBFloat16: act_quant_kernel<ActDtype::kBFloat16><<<grid, kThreads, 0, stream>>>(p); break;
    case ActDtype::kFloat16: act_quant_kernel<ActDtype::kFloat16><<<grid, kThreads, 0, stream>>>(p); break;
    case ActDtype::kFloat32: act_quant_kernel<ActDtype::kFloat32><<<grid, kThreads, 0, stream>>>(p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace fp8gemm::cuda
