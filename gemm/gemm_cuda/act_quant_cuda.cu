// One-launch activation quantization on CUDA (sm_90a): fp8_act_quant's arithmetic (act_quant.h).
//
// Work items are (row, 128-wide group) pairs numbered row-major, so consecutive items are consecutive
// memory of a K-contiguous row. The grid is a few CTAs per SM (all resident at once) striding over the
// items. Two kernels:
//
// act_quant_fast_kernel, for a dynamic scale of K-contiguous rows of whole groups (k a multiple of 128)
// with one 16-byte-aligned row stride, at most 2^31 - 1 items, whatever their number: 8 lanes take an
// item, 16 elements a lane in two (fp32: four) 16-byte loads, and each thread takes 1 or 2 (fp32: 1)
// items a step, the loads of its next step issued before the arithmetic of this one. Per step each lane
// reduces its items' amax partials with a reduce-scatter of shuffles that leaves each lane with one item's
// amax, computes that item's scale (IEEE division) and reciprocal once, stores the scale, and the item's
// lanes fetch both with a shuffle: the division, reciprocal and scale store are paid once a lane and step,
// not once an item. Where every scale of the warp is finite (a finite amax, act_quant.h:
// aq_quotient_fast_ok then holds) all items take one branch-free path: x / scale from the reciprocal and
// two fmas (aq_quotient), e4m3fn codes from cvt.rn.satfinite two at a time with the signs of x ORed in (the
// only effect of aq_quotient's copysign), e4m3fnuz codes through aq_fnuz_from_fn_x4; one 8-byte (fp32:
// 4-byte) store a 16-byte load. Other warps take each item's path by its own scale.
//
// act_quant_kernel, for everything else (static scales, strided or unaligned rows or columns, a partial
// last group, dimensions that do not merge): a half-warp takes an item, 16 lanes of 8 consecutive
// columns, one 16-byte load each (two for fp32) where the row is K-contiguous and the chunk 16-byte
// aligned, element loads with any strides otherwise; each thread takes up to 4 items per step (fewer
// where that puts more CTAs to work), two half-warps of a warp reading adjacent items, and issues all
// their loads before any arithmetic. A group's amax is reduced over its 16 lanes with shuffles; the scale
// is written by the first of them, the 8 codes per lane as one 8-byte store.
//
// In both, a group's amax is an unsigned maximum of the sign-cleared bit patterns (NaN-propagating,
// act_quant.h; on packed pairs for 16-bit inputs). Where aq_quotient_fast_ok holds (always for a dynamic
// scale of a finite group) x / scale comes from one correctly rounded reciprocal per group and a multiply
// and two fmas per element (aq_quotient); other groups (NaN or inf in the group, or a static scale that
// is zero, negative, non-finite or out of range) divide with fp32 IEEE division and take NaN codes from
// the sign rule. e4m3fn codes come from the hardware's round-to-nearest-even conversion with saturation
// (cvt.rn.satfinite, which is clamp-then-round for every finite and infinite input); e4m3fnuz codes from
// the same conversion of 2 * q (aq_fnuz_from_fn_x4) on the fast path, from the exact bit code of
// act_quant.h otherwise. Each CTA executes griddepcontrol.launch_dependents once its first loads are
// issued; the grid also clears the caller's zero range (act_quant_cuda.h), a few words per thread at most.
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

// Words the launch clears besides quantizing (act_quant's zero range), spread over the grid.
struct ZeroWords {
  uint32_t* ptr = nullptr;
  uint32_t count = 0;
};

__device__ __forceinline__ void clear(const ZeroWords z) {
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < z.count; i += gridDim.x * kThreads) z.ptr[i] = 0;
}

template <ActDtype D, bool kFnuz>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<D>)
    act_quant_kernel(const ActQuantProblem p, int unroll, const ZeroWords zero) {
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

  clear(zero);
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

// ---- Fast path: dynamic scale, K-contiguous rows of whole 16-byte-aligned groups ----
//
// An item takes 8 lanes of 16 elements: lane `sub` loads the item's 16-byte vectors sub + 8 * i (two for
// 16-bit input, four for fp32), so each load instruction reads 128 contiguous bytes per item, and stores
// the codes of vector i at the same columns. Elements e of a lane: vector e / E, E = 16 / sizeof(T).
constexpr int kFastLanes = 8;
constexpr int kFastItemsPerWarp = 32 / kFastLanes;  // at a time: 4
// Resident CTAs per SM and items per thread and step: 64 registers a thread hold two 16-bit items and the
// two of the next step (128 bytes of loads in flight), 80 hold one fp32 item and the next.
template <ActDtype D>
constexpr int kFastCtasPerSm = D == ActDtype::kFloat32 ? 3 : 4;
template <ActDtype D>
constexpr int kFastMaxUnroll = D == ActDtype::kFloat32 ? 1 : 2;

struct FastArgs {
  ZeroWords zero;
  const char* x;              // row 0, column 0
  uint32_t row_stride_bytes;  // between rows (16-byte multiple)
  uint8_t* q;                // (rows, groups * 128) codes
  float* scale;              // scale[g * scale_ld + r]
  uint32_t rows, groups, scale_ld;
};

template <ActDtype D>
constexpr int kVectors = 16 * sizeof(typename Elem<D>::T) / 16;  // 16-byte loads per lane and item
template <ActDtype D>
constexpr int kVecElems = 16 / sizeof(typename Elem<D>::T);      // elements per 16-byte vector

// The lane's 16 elements of an item as two 8-element chunks (element e in chunk e / 8).
template <ActDtype D>
struct Lane16 {
  Chunk<D> c[2];
};

template <ActDtype D>
__device__ __forceinline__ uint32_t& lane_word(Lane16<D>& l, int w) {
  return l.c[w / Elem<D>::kWords].w[w % Elem<D>::kWords];
}
template <ActDtype D>
__device__ __forceinline__ uint32_t lane_word(const Lane16<D>& l, int w) {
  return l.c[w / Elem<D>::kWords].w[w % Elem<D>::kWords];
}

// `src_lane`: the lane's first 16-byte vector of the item.
template <ActDtype D>
__device__ __forceinline__ void fast_load(const char* src_lane, Lane16<D>& l) {
  // Read once: evict-first, so the codes the GEMM reads next stay in L2.
  const uint4* src = reinterpret_cast<const uint4*>(src_lane);
#pragma unroll
  for (int i = 0; i < kVectors<D>; ++i) {
    const uint4 v = __ldcs(src + kFastLanes * i);
    lane_word(l, 4 * i) = v.x, lane_word(l, 4 * i + 1) = v.y, lane_word(l, 4 * i + 2) = v.z, lane_word(l, 4 * i + 3) = v.w;
  }
}

// Code word c (elements 4c..4c+3, little-endian) of a group with finite amax under a dynamic scale, where
// aq_quotient_fast_ok holds. aq_quotient's closing copysign only matters for x = -0 (every other q already
// has the sign of x): e4m3fn takes the signs of x into bit 7 of each code instead (every negative x has a
// negative or -0 quotient, whose code has bit 7 set), four at a time for 16-bit input; e4m3fnuz has no -0.
template <ActDtype D, bool kFnuz>
__device__ __forceinline__ uint32_t fast_codes(const Lane16<D>& l, int c, float scale, float recip) {
  float q[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int e = 4 * c + j;
    float x;
    if constexpr (D == ActDtype::kFloat32) {
      x = __uint_as_float(lane_word(l, e));
    } else {
      const uint32_t w = lane_word(l, e / 2);
      const uint32_t h = e % 2 ? w >> 16 : w & 0xFFFFu;
      x = D == ActDtype::kBFloat16 ? __uint_as_float(e % 2 ? w & 0xFFFF0000u : w << 16)
                                   : __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
    }
    const float q0 = aq_mul_rn(x, recip);
    const float v = aq_fma_rn(aq_fma_rn(-q0, scale, x), recip, q0);
    q[j] = kFnuz || D != ActDtype::kFloat32 ? v : __builtin_copysignf(v, x);
  }
  uint32_t word = 0, edge = 0;
#pragma unroll
  for (int j = 0; j < 4; j += 2) {
    const float2 v = kFnuz ? make_float2(2.0f * q[j], 2.0f * q[j + 1]) : make_float2(q[j], q[j + 1]);
    word |= static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    if (kFnuz) {
      // |q| > 232 is |2q| >= 464 + 2^-15 (the next float), i.e. |2q| - (464 + 2^-15) >= 0: a non-negative
      // difference (+0 included; a nonzero one never rounds to zero) converts to a code with bit 7 clear,
      // a negative one to a code with bit 7 set. Two elements a conversion instead of a compare each.
      constexpr float kEdge = 464.0f + 0x1p-15f;
      const float2 d = make_float2(fabsf(v.x) - kEdge, fabsf(v.y) - kEdge);
      edge |= static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(d, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    }
  }
  if constexpr (kFnuz) return aq_fnuz_from_fn_x4(word, (~edge >> 7) & 0x01010101u);
  if constexpr (D != ActDtype::kFloat32) {
    // Bytes 1 and 3 of the two words hold the sign bits of elements 4c..4c+3.
    const uint32_t signs = __byte_perm(lane_word(l, 2 * c), lane_word(l, 2 * c + 1), 0x7531);
    word |= signs & 0x80808080u;
  }
  return word;
}

// The amax bits of items 0..U-1 of the thread (lane partials m[u], packed pairs for 16-bit input) reduced
// over their 8 lanes, as a reduce-scatter: at the shuffle distances 4 (and 2, for U = 4) each lane keeps
// half of its items and takes its partner's partials of them (3 shuffles for U <= 2, 4 for U = 4), and
// lane `sub` ends with the amax of item sub / (8 / U). Returned as fp32 bits.
template <ActDtype D, int U>
__device__ __forceinline__ uint32_t fast_group_amax(const uint32_t (&m)[U], uint32_t sub) {
  const auto vmax = [](uint32_t x, uint32_t y) { return D == ActDtype::kFloat32 ? max(x, y) : __vmaxu2(x, y); };
  uint32_t v[U];
#pragma unroll
  for (int j = 0; j < U; ++j) v[j] = m[j];
#pragma unroll
  for (int n = U, offset = kFastLanes / 2; offset > 0; offset /= 2) {
    if (n > 1) {
      // Items [0, n/2) stay in the lower lane of the pair, [n/2, n) in the upper.
      const bool upper = sub & offset;
#pragma unroll
      for (int k = 0; k < n / 2; ++k) {
        const uint32_t keep = upper ? v[k + n / 2] : v[k], send = upper ? v[k] : v[k + n / 2];
        v[k] = vmax(keep, __shfl_xor_sync(0xFFFFFFFFu, send, offset));
      }
      n /= 2;
    } else {
      v[0] = vmax(v[0], __shfl_xor_sync(0xFFFFFFFFu, v[0], offset));
    }
  }
  uint32_t r = v[0];
  if constexpr (D != ActDtype::kFloat32) r = max(r & 0xFFFFu, r >> 16);
  return widen_amax<D>(r);
}

// The lane's sign-cleared maximum over its 16 elements (packed pairs for 16-bit input).
template <ActDtype D>
__device__ __forceinline__ uint32_t fast_lane_amax(const Lane16<D>& l) {
  constexpr int kW = 2 * Elem<D>::kWords;
  constexpr uint32_t kMask = D == ActDtype::kFloat32 ? 0x7FFFFFFFu : 0x7FFF7FFFu;
  uint32_t m = lane_word(l, 0) & kMask;
#pragma unroll
  for (int i = 1; i < kW; ++i) m = D == ActDtype::kFloat32 ? max(m, lane_word(l, i) & kMask) : __vmaxu2(m, lane_word(l, i) & kMask);
  return m;
}

// One item's 16 codes of the lane, by the fast quotient or (`exact`) by IEEE division; stored where `valid`.
template <ActDtype D, bool kFnuz>
__device__ __forceinline__ void fast_item(const Lane16<D>& l, float scale, float recip, bool exact, bool valid, uint8_t* dst) {
  constexpr int E = kVecElems<D>;
  uint32_t codes[4];
  if (!exact) {
#pragma unroll
    for (int c = 0; c < 4; ++c) codes[c] = fast_codes<D, kFnuz>(l, c, scale, recip);
  } else {
    codes_exact<D, kFnuz>(l.c[0], scale, reinterpret_cast<uint32_t(&)[2]>(codes[0]));
    codes_exact<D, kFnuz>(l.c[1], scale, reinterpret_cast<uint32_t(&)[2]>(codes[2]));
  }
  if (!valid) return;
#pragma unroll
  for (int i = 0; i < kVectors<D>; ++i) {
    if constexpr (E == 8)
      *reinterpret_cast<uint2*>(dst + kFastLanes * E * i) = make_uint2(codes[2 * i], codes[2 * i + 1]);
    else
      *reinterpret_cast<uint32_t*>(dst + kFastLanes * E * i) = codes[i];
  }
}

template <ActDtype D, bool kFnuz, int U>
__global__ void __launch_bounds__(kThreads, kFastCtasPerSm<D>) act_quant_fast_kernel(const FastArgs a) {
  constexpr uint32_t kGroupBytes = kQuantBlock * sizeof(typename Elem<D>::T);
  constexpr uint32_t kShare = kFastLanes / U;  // lanes sharing one lane's scale
  const uint32_t lane = threadIdx.x % 32, sub = lane % kFastLanes;
  const uint32_t groups = a.groups;

  // As act_quant_kernel, with 4 items a warp at a time: the thread's item j of a step is
  // w * 4 * U + 4 * j + lane / 8 from the step's first. There are at most 2^31 - 1 items (launch_fast):
  // 32-bit indices throughout.
  constexpr uint32_t kPerCta = kThreads / kFastLanes * U;
  uint32_t item = blockIdx.x * kPerCta + threadIdx.x / 32 * kFastItemsPerWarp * U + lane / kFastLanes;
  const uint32_t stride = gridDim.x * kPerCta;
  uint32_t row = item / groups, g = item % groups;
  const uint32_t stride_rows = stride / groups, stride_groups = stride % groups;
  const uint32_t next_rows = kFastItemsPerWarp / groups, next_groups = kFastItemsPerWarp % groups;
  const char* const x_lane = a.x + sub * 16;
  uint8_t* const q_lane = a.q + sub * kVecElems<D>;
  const int mine = static_cast<int>(sub / kShare);  // the item whose scale this lane computes

  // Issues the loads of the step whose first item of the thread is (r, gr).
  const auto load_step = [&](uint32_t r, uint32_t gr, Lane16<D> (&data)[U]) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      // Rows past the end read the last row: their codes are never stored.
      fast_load<D>(x_lane + uint64_t(min(r, a.rows - 1)) * a.row_stride_bytes + uint64_t(gr) * kGroupBytes, data[j]);
      if (j + 1 < U) advance(r, gr, next_rows, next_groups, groups);
    }
  };

  // The loads of step s + 1 are issued before the arithmetic of step s, so each thread keeps a step's
  // loads in flight while it computes.
  Lane16<D> data[U];
  load_step(row, g, data);
  clear(a.zero);
  // The CTA's first loads are issued, and the whole grid is resident: a programmatic dependent may launch
  // once every CTA got here.
  asm volatile("griddepcontrol.launch_dependents;");
  while (__any_sync(0xFFFFFFFFu, row < a.rows)) {
    uint32_t rows_of[U], groups_of[U];
    {
      uint32_t r = row, gr = g;
#pragma unroll
      for (int j = 0; j < U; ++j) {
        rows_of[j] = r, groups_of[j] = gr;
        if (j + 1 < U) advance(r, gr, next_rows, next_groups, groups);
      }
    }
    advance(row, g, stride_rows, stride_groups, groups);
    Lane16<D> next[U];
    if (__any_sync(0xFFFFFFFFu, row < a.rows)) load_step(row, g, next);

    uint32_t m[U];
#pragma unroll
    for (int j = 0; j < U; ++j) m[j] = fast_lane_amax<D>(data[j]);
    const uint32_t amax = fast_group_amax<D, U>(m, sub);
    // One scale and reciprocal a lane, for item `mine`; the lanes of each item fetch them below.
    const float my_scale = aq_scale_from_quotient(amax, __fdiv_rn(__uint_as_float(amax), aq_fp8_max(kFnuz)));
    const float my_recip = __frcp_rn(my_scale);
    {
      uint32_t sr = rows_of[0], sg = groups_of[0];
#pragma unroll
      for (int j = 1; j < U; ++j) {
        if (mine == j) sr = rows_of[j], sg = groups_of[j];
      }
      if (sub % kShare == 0 && sr < a.rows) a.scale[uint64_t(sg) * a.scale_ld + sr] = my_scale;
    }
    float scale[U], recip[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      scale[j] = __shfl_sync(0xFFFFFFFFu, my_scale, j * kShare, kFastLanes);
      recip[j] = __shfl_sync(0xFFFFFFFFu, my_recip, j * kShare, kFastLanes);
    }
    // Codes of item j start at (its row * groups + its group) * 128 = (item + 4 j) * 128.
    uint8_t* const dst = q_lane + uint64_t(item) * kQuantBlock;
    // A dynamic scale passes aq_quotient_fast_ok whenever amax is finite (act_quant.h), which is when the
    // scale is finite. The common case, every item of the warp finite, takes one branch-free path.
    if (__all_sync(0xFFFFFFFFu, __float_as_uint(my_scale) < 0x7F800000u)) {
#pragma unroll
      for (int j = 0; j < U; ++j)
        fast_item<D, kFnuz>(data[j], scale[j], recip[j], false, rows_of[j] < a.rows, dst + j * kFastItemsPerWarp * kQuantBlock);
    } else {
#pragma unroll
      for (int j = 0; j < U; ++j)
        fast_item<D, kFnuz>(data[j], scale[j], recip[j], __float_as_uint(scale[j]) >= 0x7F800000u, rows_of[j] < a.rows,
                            dst + j * kFastItemsPerWarp * kQuantBlock);
    }
    item += stride;
#pragma unroll
    for (int j = 0; j < U; ++j) data[j] = next[j];
  }
}

// The single stride between consecutive rows where all row dimensions merge into one; false otherwise.
bool merged_row_stride(const ActQuantProblem& p, int64_t& stride) {
  stride = 0;
  bool have = false;
  int64_t expect = 0;
  for (int d = 0; d < p.row_dims; ++d) {
    if (p.row_size[d] == 1) continue;
    if (!have) {
      stride = p.row_stride[d], expect = stride * p.row_size[d], have = true;
    } else {
      if (p.row_stride[d] != expect) return false;
      expect *= p.row_size[d];
    }
  }
  return true;
}

template <ActDtype D>
bool launch_fast(const ActQuantProblem& p, const ZeroWords zero, cudaStream_t stream) {
  constexpr int64_t elem = sizeof(typename Elem<D>::T);
  int64_t stride = 0;
  if (p.mode != ActScaleMode::kDynamic || p.x_stride_k != 1 || p.k % kQuantBlock != 0) return false;
  if (p.rows * p.groups() > INT32_MAX || p.scale_ld > UINT32_MAX || !merged_row_stride(p, stride)) return false;
  if (stride < 0 || stride > int64_t(UINT32_MAX) / elem || (reinterpret_cast<uintptr_t>(p.x) | uintptr_t(stride * elem)) % 16 != 0)
    return false;
  if (reinterpret_cast<uintptr_t>(p.q) % 8 != 0) return false;
  const int64_t items = p.rows * p.groups();
  const int64_t cap = int64_t(device_sm_count()) * kFastCtasPerSm<D>;  // CTAs resident at once
  // Items a thread and step: the count whose last round of steps wastes least, weighed by the cost of an
  // element at that count (SASS instructions an element of the bf16 loop: about 13.5 for 1, 11.5 for 2);
  // a tie goes to the larger count.
  int unroll = 1;
  int64_t best = INT64_MAX;
  for (int u = 1; u <= kFastMaxUnroll<D>; u *= 2) {
    const int64_t per_round = cap * (kThreads / kFastLanes) * u;
    const int64_t cost = (items + per_round - 1) / per_round * u * (u == 1 ? 13 : 11);
    if (cost <= best) best = cost, unroll = u;
  }
  const int64_t per_cta = kThreads / kFastLanes * unroll;
  const int64_t ctas = (items + per_cta - 1) / per_cta;
  const unsigned grid = static_cast<unsigned>(ctas < cap ? ctas : cap);
  FastArgs a;
  a.zero = zero;
  a.x = static_cast<const char*>(p.x);
  a.row_stride_bytes = static_cast<uint32_t>(stride * elem);
  a.q = p.q;
  a.scale = p.scale;
  a.rows = static_cast<uint32_t>(p.rows);
  a.groups = static_cast<uint32_t>(p.groups());
  a.scale_ld = static_cast<uint32_t>(p.scale_ld);
  const bool fnuz = p.format == Fp8Format::kE4M3FNUZ;
  if constexpr (kFastMaxUnroll<D> >= 2) {
    if (unroll == 2) {
      (fnuz ? act_quant_fast_kernel<D, true, 2> : act_quant_fast_kernel<D, false, 2>)<<<grid, kThreads, 0, stream>>>(a);
      return true;
    }
  }
  (fnuz ? act_quant_fast_kernel<D, true, 1> : act_quant_fast_kernel<D, false, 1>)<<<grid, kThreads, 0, stream>>>(a);
  return true;
}

template <ActDtype D>
void launch(const ActQuantProblem& p, const ZeroWords zero, cudaStream_t stream) {
  if (launch_fast<D>(p, zero, stream)) return;
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
    act_quant_kernel<D, true><<<grid, kThreads, 0, stream>>>(p, unroll, zero);
  else
    act_quant_kernel<D, false><<<grid, kThreads, 0, stream>>>(p, unroll, zero);
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

cudaError_t act_quant(const ActQuantProblem& p, cudaStream_t stream, void* zero, size_t zero_bytes) {
  if (!problem_valid(p)) return cudaErrorInvalidValue;
  if (zero_bytes % 4 != 0 || zero_bytes / 4 > UINT32_MAX || (zero_bytes > 0 && zero == nullptr) ||
      reinterpret_cast<uintptr_t>(zero) % 4 != 0)
    return cudaErrorInvalidValue;
  const ZeroWords z{static_cast<uint32_t*>(zero), static_cast<uint32_t>(zero_bytes / 4)};
  switch (p.x_dtype) {
    case ActDtype::kBFloat16: launch<ActDtype::kBFloat16>(p, z, stream); break;
    case ActDtype::kFloat16: launch<ActDtype::kFloat16>(p, z, stream); break;
    case ActDtype::kFloat32: launch<ActDtype::kFloat32>(p, z, stream); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace fp8gemm::cuda
