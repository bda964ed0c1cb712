// One-launch activation quantization on CUDA (sm_90a): fp8_act_quant's arithmetic (act_quant.h).
//
// Work items are (row, 128-wide group) pairs numbered row-major, so consecutive items are consecutive
// memory of a K-contiguous row. A half-warp takes an item: 16 lanes of 8 consecutive columns, one
// 16-byte load each (two for fp32) where the row is K-contiguous and the chunk 16-byte aligned, element
// loads with any strides otherwise. The grid is a few CTAs per SM (all resident at once) striding over
// the items; each thread takes up to 4 items per step (fewer where that puts more CTAs to work), two
// half-warps of a warp reading adjacent items, and issues all their loads before any arithmetic, so a
// thread keeps up to 4 (fp32: 8) loads in flight.
//
// A group's amax is an unsigned maximum of the sign-cleared bit patterns (NaN-propagating, act_quant.h;
// on packed pairs for 16-bit inputs) reduced over its 16 lanes with shuffles; the scale is written by the
// first of them, the 8 codes per lane as one 8-byte store. Where aq_quotient_fast_ok holds (always for a
// dynamic scale of a finite group) x / scale comes from one correctly rounded reciprocal per group and
// a multiply and two fmas per element (aq_quotient); other groups (NaN or inf in the group, or a static
// scale that is zero, negative, non-finite or out of range) divide with fp32 IEEE division and take NaN
// codes from the sign rule. e4m3fn codes come from the hardware's round-to-nearest-even conversion with
// saturation (cvt.rn.satfinite, which is clamp-then-round for every finite and infinite input); e4m3fnuz
// codes from the same conversion of 2 * q (aq_fnuz_from_fn_x4) on the fast path, from the exact bit code
// of act_quant.h otherwise.
#include "act_quant_cuda.h"
#include "gemm_cuda.h"

#include <cuda_runtime.h>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <climits>
#include <cstdint>

namespace fp8gemm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLanesPerItem = 16;                                   // 16 x 8 columns = one 128-wide group
constexpr int kItemsPerWarp = 32 / kLanesPerItem;                  // at a time: 2
constexpr int kMaxUnroll = 4;                                       // items per thread and step
// Resident CTAs per SM (the register budget: 64 a thread for 16-bit input, 85 for fp32's 8 loads).
template <ActDtype D>
constexpr int kCtasPerSm = D == ActDtype::kFloat32 ? 3 : 4;

template <ActDtype D>
struct Elem {
  using T = uint16_t;
  static constexpr int kWords = 4;  // 8 elements as packed pairs
};
template <>
struct Elem<ActDtype::kFloat32> {
  using T = float;
  static constexpr int kWords = 8;
};

// One item's 8 elements in one lane as loaded: bit patterns, 0 where absent (past the end of K, or a row
// past the end).
template <ActDtype D>
struct Chunk {
  uint32_t w[Elem<D>::kWords];
};

// Columns of item (row, g) in lane `sub`: 0..8.
__device__ __forceinline__ int chunk_columns(const ActQuantProblem& p, uint32_t row, uint32_t g, int sub) {
  const int64_t left = p.k - (int64_t(g) * kQuantBlock + sub * 8);
  return row < p.rows ? (left >= 8 ? 8 : left > 0 ? static_cast<int>(left) : 0) : 0;
}

template <ActDtype D>
__device__ __forceinline__ void load_chunk(const ActQuantProblem& p, uint32_t row, uint32_t g, int sub, Chunk<D>& c) {
  using T = typename Elem<D>::T;
#pragma unroll
  for (int i = 0; i < Elem<D>::kWords; ++i) c.w[i] = 0;
  const int n = chunk_columns(p, row, g, sub);
  if (n == 0) return;
  const T* src = static_cast<const T*>(p.x) + aq_row_offset(p, row) + (int64_t(g) * kQuantBlock + sub * 8) * p.x_stride_k;
  if (n == 8 && p.x_stride_k == 1 && (reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
    // Read once: evict-first, so the codes the GEMM reads next stay in L2.
    const uint4 a = __ldcs(reinterpret_cast<const uint4*>(src));
    c.w[0] = a.x, c.w[1] = a.y, c.w[2] = a.z, c.w[3] = a.w;
    if constexpr (sizeof(T) == 4) {
      const uint4 b = __ldcs(reinterpret_cast<const uint4*>(src) + 1);
      c.w[4] = b.x, c.w[5] = b.y, c.w[6] = b.z, c.w[7] = b.w;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if (i >= n) break;
    if constexpr (sizeof(T) == 2)
      c.w[i / 2] |= static_cast<uint32_t>(__ldg(src + i * p.x_stride_k)) << (16 * (i % 2));
    else
      c.w[i] = __float_as_uint(__ldg(src + i * p.x_stride_k));
  }
}

// Largest sign-cleared bit pattern of the lane's elements (NaN-propagating): fp32 bits for fp32 input,
// the 16-bit pattern otherwise (widened once the group's maximum is known).
template <ActDtype D>
__device__ __forceinline__ uint32_t lane_amax(const Chunk<D>& c) {
  uint32_t m = 0;
  if constexpr (D == ActDtype::kFloat32) {
#pragma unroll
    for (int i = 0; i < 8; ++i) m = max(m, c.w[i] & 0x7FFFFFFFu);
    return m;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) m = __vmaxu2(m, c.w[i] & 0x7FFF7FFFu);
    return max(m & 0xFFFFu, m >> 16);
  }
}

// A group's amax pattern as fp32 bits (exact; a NaN stays a NaN).
template <ActDtype D>
__device__ __forceinline__ uint32_t widen_amax(uint32_t a) {
  if constexpr (D == ActDtype::kBFloat16) return a << 16;
  if constexpr (D == ActDtype::kFloat16) return __float_as_uint(__half2float(__ushort_as_half(static_cast<unsigned short>(a))));
  return a;
}

// Element i as fp32, exactly (fp16 NaNs keep their sign: the IEEE path's codes depend on it).
template <ActDtype D>
__device__ __forceinline__ float element(const Chunk<D>& c, int i) {
  if constexpr (D == ActDtype::kFloat32) return __uint_as_float(c.w[i]);
  const uint32_t w = c.w[i / 2];
  if constexpr (D == ActDtype::kBFloat16) return __uint_as_float(i % 2 ? w & 0xFFFF0000u : w << 16);
  return aq_f16_to_f32(static_cast<uint16_t>(i % 2 ? w >> 16 : w & 0xFFFFu));
}

// Element i where it cannot be a NaN: fp16 through the hardware conversion, which is exact but for NaNs.
template <ActDtype D>
__device__ __forceinline__ float finite_element(const Chunk<D>& c, int i) {
  if constexpr (D == ActDtype::kFloat16) {
    const uint32_t w = c.w[i / 2];
    return __half2float(__ushort_as_half(static_cast<unsigned short>(i % 2 ? w >> 16 : w & 0xFFFFu)));
  }
  return element<D>(c, i);
}

// The chunk's 8 codes (little-endian in two words) where aq_quotient_fast_ok(scale, group amax) holds:
// no NaN, infinity or overflow can occur.
template <ActDtype D, bool kFnuz>
__device__ __forceinline__ void codes_fast(const Chunk<D>& c, float scale, float recip, uint32_t (&codes)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t word = 0, over = 0;
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      const int i = 4 * h + j;
      const float q0 = aq_quotient(finite_element<D>(c, i), scale, recip);
      const float q1 = aq_quotient(finite_element<D>(c, i + 1), scale, recip);
      const float2 v = kFnuz ? make_float2(2.0f * q0, 2.0f * q1) : make_float2(q0, q1);
      word |= static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
      if (kFnuz) {
        over |= static_cast<uint32_t>((__float_as_uint(q0) & 0x7FFFFFFFu) > kAqFnuzOverBits) << (8 * j);
        over |= static_cast<uint32_t>((__float_as_uint(q1) & 0x7FFFFFFFu) > kAqFnuzOverBits) << (8 * j + 8);
      }
    }
    codes[h] = kFnuz ? aq_fnuz_from_fn_x4(word, over) : word;
  }
}

// The chunk's 8 codes with fp32 IEEE division: any scale, NaNs and infinities included.
template <ActDtype D, bool kFnuz>
__device__ __forceinline__ void codes_exact(const Chunk<D>& c, float scale, uint32_t (&codes)[2]) {
  codes[0] = codes[1] = 0;
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    const float x0 = element<D>(c, i), x1 = element<D>(c, i + 1);
    const float q0 = __fdiv_rn(x0, scale), q1 = __fdiv_rn(x1, scale);
    const uint32_t s0 = aq_quotient_sign(x0, scale), s1 = aq_quotient_sign(x1, scale);
    uint32_t c0, c1;
    if constexpr (!kFnuz) {
      const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(make_float2(q0, q1), __NV_SATFINITE, __NV_E4M3);
      c0 = q0 != q0 ? 0x7Fu | (s0 << 7) : pair & 0xFFu;  // NaN: the sign rule, not the hardware's
      c1 = q1 != q1 ? 0x7Fu | (s1 << 7) : (pair >> 8) & 0xFFu;
    } else {
      c0 = aq_encode(q0, s0, true);
      c1 = aq_encode(q1, s1, true);
    }
    codes[i / 4] |= (c0 | (c1 << 8)) << (8 * (i % 4));
  }
}

// Moves item (row, g) on by rows_on rows and groups_on < groups groups.
__device__ __forceinline__ void advance(uint32_t& row, uint32_t& g, uint32_t rows_on, uint32_t groups_on, uint32_t groups) {
  row += rows_on;
  g += groups_on;
  if (g >= groups) {
    g -= groups;
    ++row;
  }
}

template <ActDtype D, bool kFnuz>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<D>) act_quant_kernel(const ActQuantProblem p, int unroll) {
  const int lane = static_cast<int>(threadIdx.x) % 32, sub = lane % kLanesPerItem;
  const uint32_t groups = static_cast<uint32_t>(p.groups());  // < 2^32: act_quant()
  const float static_scale = p.mode == ActScaleMode::kStaticTensor ? __ldg(p.static_scale) : p.static_scale_value;
  const float static_recip = __frcp_rn(static_scale);

  // Items are numbered row * groups + g. Step s of CTA b covers the n = 16 * unroll items from
  // (s * gridDim.x + b) * n: warp w the 2 * unroll from w * 2 * unroll, its half-warp h the items
  // w * 2 * unroll + 2 * j + h, j < unroll. Rows stay below rows + the rows of one step <= 2^31 + 2^16:
  // 32 bits hold every index.
  const uint32_t per_cta = kThreads / kLanesPerItem * unroll;
  const uint32_t first = blockIdx.x * per_cta + threadIdx.x / 32 * kItemsPerWarp * unroll + lane / kLanesPerItem;
  const uint32_t stride = gridDim.x * per_cta;
  uint32_t row = first / groups, g = first % groups;
  const uint32_t stride_rows = stride / groups, stride_groups = stride % groups;
  const uint32_t next_rows = kItemsPerWarp / groups, next_groups = kItemsPerWarp % groups;

  bool triggered = false;
  // Warp-uniform: every lane of the warp reaches every shuffle below.
  while (__any_sync(0xFFFFFFFFu, row < p.rows)) {
    Chunk<D> chunks[kMaxUnroll];
    uint32_t r = row, gr = g;
#pragma unroll
    for (int j = 0; j < kMaxUnroll; ++j) {
      if (j == unroll) break;
      load_chunk<D>(p, r, gr, sub, chunks[j]);
      advance(r, gr, next_rows, next_groups, groups);
    }
    if (!triggered) {
      // The CTA's first loads are issued, and the whole grid is resident: a programmatic dependent may
      // launch once every CTA got here.
      asm volatile("griddepcontrol.launch_dependents;");
      triggered = true;
    }

    r = row, gr = g;
#pragma unroll
    for (int j = 0; j < kMaxUnroll; ++j, advance(r, gr, next_rows, next_groups, groups)) {
      if (j == unroll) break;
      uint32_t amax = lane_amax<D>(chunks[j]);
#pragma unroll
      for (int offset = kLanesPerItem / 2; offset > 0; offset /= 2)
        amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
      amax = widen_amax<D>(amax);
      float scale = static_scale, recip = static_recip;
      if (p.mode == ActScaleMode::kDynamic) {
        scale = aq_scale_from_quotient(amax, __fdiv_rn(__uint_as_float(amax), aq_fp8_max(kFnuz)));
        recip = __frcp_rn(scale);
      }
      if (r < p.rows && sub == 0) p.scale[int64_t(gr) * p.scale_ld + r] = scale;
      const int n = chunk_columns(p, r, gr, sub);
      if (n == 0) continue;

      uint32_t codes[2];
      if (aq_quotient_fast_ok(scale, amax))
        codes_fast<D, kFnuz>(chunks[j], scale, recip, codes);
      else
        codes_exact<D, kFnuz>(chunks[j], scale, codes);
      uint8_t* dst = p.q + int64_t(r) * p.k + int64_t(gr) * kQuantBlock + sub * 8;
      if (n == 8 && (reinterpret_cast<uintptr_t>(dst) & 7u) == 0) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(codes[0], codes[1]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (i < n) dst[i] = static_cast<uint8_t>(codes[i / 4] >> (8 * (i % 4)));
      }
    }
    advance(row, g, stride_rows, stride_groups, groups);
  }
}

template <ActDtype D>
void launch(const ActQuantProblem& p, cudaStream_t stream) {
  // Small problems spread over as many CTAs as fit at once (one item per half-warp: the shortest chain
  // of work per thread); larger ones batch up to kMaxUnroll items per thread.
  const int64_t items = p.rows * p.groups();  // rows <= INT32_MAX times groups < 2^32
  const int64_t cap = int64_t(device_sm_count()) * kCtasPerSm<D>;
  int unroll = 1;
  while (unroll < kMaxUnroll && items > cap * (kThreads / kLanesPerItem) * unroll) unroll *= 2;
  const int64_t per_cta = kThreads / kLanesPerItem * unroll;
  const int64_t ctas = (items + per_cta - 1) / per_cta;
  const unsigned grid = static_cast<unsigned>(ctas < cap ? ctas : cap);
  if (p.format == Fp8Format::kE4M3FNUZ)
    act_quant_kernel<D, true><<<grid, kThreads, 0, stream>>>(p, unroll);
  else
    act_quant_kernel<D, false><<<grid, kThreads, 0, stream>>>(p, unroll);
}

bool problem_valid(const ActQuantProblem& p) {
  if (p.rows < 1 || p.rows > INT32_MAX || p.k < 1) return false;
  if (p.x == nullptr || p.q == nullptr || p.scale == nullptr || p.scale_ld < p.rows) return false;
  if (p.row_dims < 1 || p.row_dims > kActRowDims) return false;
  if (p.groups() > UINT32_MAX) return false;  // q would take at least 512 GiB
  if (p.format != Fp8Format::kE4M3FN && p.format != Fp8Format::kE4M3FNUZ) return false;
  if (p.mode == ActScaleMode::kStaticTensor) return p.static_scale != nullptr;
  return p.mode == ActScaleMode::kDynamic || p.mode == ActScaleMode::kStaticValue;
}

}  // namespace

cudaError_t act_quant(const ActQuantProblem& p, cudaStream_t stream) {
  if (!problem_valid(p)) return cudaErrorInvalidValue;
  switch (p.x_dtype) {
    case ActDtype::kBFloat16: launch<ActDtype::kBFloat16>(p, stream); break;
    case ActDtype::kFloat16: launch<ActDtype::kFloat16>(p, stream); break;
    case ActDtype::kFloat32: launch<ActDtype::kFloat32>(p, stream); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace fp8gemm::cuda
