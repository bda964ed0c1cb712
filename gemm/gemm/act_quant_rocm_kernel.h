// Device body of the gfx942 activation quantization (fp8_act_quant; the arithmetic is act_quant.h's),
// a per-lane function written only against gfx942_arch.h: wrapped in a __global__ by
// act_quant_launcher.hip for the GPU, and run lane by lane by the CPU SIMT emulator
// (tests/emulation/gfx942_act_quant_driver.cpp) with the same launch geometry.
//
// A workgroup of 256 lanes (4 waves) takes 16 rows of one 128-wide group (grid x: rows / 16, grid y:
// groups). 16 lanes share a row's group, 8 consecutive columns each: one (2-byte inputs) or two (fp32)
// 16-byte global loads where the row is K-contiguous and the chunk 16-byte aligned, element loads with
// any strides otherwise. The group's amax is the unsigned maximum of the sign-cleared fp32 bit patterns
// (NaN-propagating, act_quant.h), reduced over the 16 lanes with four bpermutes; the first lane writes
// the scale, every lane its 8 codes as one 8-byte store (byte stores at a K tail or an unaligned row).
// The codes come from the exact bit code of act_quant.h for both fp8 kinds.
#pragma once

#include <climits>
#include <cstdint>

#include "act_quant.h"
#include "gfx942_arch.h"

namespace fp8gemm::rocm {

constexpr int kAqThreads = 256;
constexpr int kAqLanesPerGroup = 16;                         // 16 x 8 columns = one 128-wide group
constexpr int kAqRowsPerBlock = kAqThreads / kAqLanesPerGroup;  // 16
constexpr int64_t kAqMaxGridX = (int64_t{1} << 24) - 1;      // grid x * 256 work-items < 2^32
constexpr int64_t kAqMaxGridY = 65535;

// What the launcher refuses (the torch binding never passes such a problem).
inline bool act_quant_valid(const ActQuantProblem& p) {
  if (p.rows < 1 || p.rows > INT32_MAX || p.k < 1) return false;
  if (p.x == nullptr || p.q == nullptr || p.scale == nullptr || p.scale_ld < p.rows) return false;
  if (p.row_dims < 1 || p.row_dims > kActRowDims) return false;
  if (p.x_dtype != ActDtype::kFloat32 && p.x_dtype != ActDtype::kBFloat16 && p.x_dtype != ActDtype::kFloat16)
    return false;
  if (p.format != Fp8Format::kE4M3FN && p.format != Fp8Format::kE4M3FNUZ) return false;
  if (p.mode == ActScaleMode::kStaticTensor) return p.static_scale != nullptr;
  return p.mode == ActScaleMode::kDynamic || p.mode == ActScaleMode::kStaticValue;
}

// Launch geometry (launcher and emulator): workgroups in x (16 rows each) and y (one group each); the
// body loops over what a capped grid leaves.
struct AqGrid {
  uint32_t x, y;
};
inline AqGrid act_quant_grid(const ActQuantProblem& p) {
  const int64_t x = (p.rows + kAqRowsPerBlock - 1) / kAqRowsPerBlock, y = p.groups();
  return {static_cast<uint32_t>(x < kAqMaxGridX ? x : kAqMaxGridX), static_cast<uint32_t>(y < kAqMaxGridY ? y : kAqMaxGridY)};
}

template <ActDtype D>
struct AqElem;
template <>
struct AqElem<ActDtype::kBFloat16> {
  using Bits = uint16_t;
  static FP8GEMM_DEVICE float f32(uint32_t b) { return aq_bf16_to_f32(static_cast<uint16_t>(b)); }
};
template <>
struct AqElem<ActDtype::kFloat16> {
  using Bits = uint16_t;
  static FP8GEMM_DEVICE float f32(uint32_t b) { return aq_f16_to_f32(static_cast<uint16_t>(b)); }
};
template <>
struct AqElem<ActDtype::kFloat32> {
  using Bits = uint32_t;
  static FP8GEMM_DEVICE float f32(uint32_t b) { return aq_float(b); }
};

template <ActDtype D>
FP8GEMM_DEVICE void act_quant_body(const ActQuantProblem& p) {
  using Bits = typename AqElem<D>::Bits;
  constexpr int kElem = static_cast<int>(sizeof(Bits));
  const bool fnuz = p.format == Fp8Format::kE4M3FNUZ;
  const int tid = arch::thread_id(), lane = arch::lane_id();
  const int sub = tid % kAqLanesPerGroup;
  const int64_t groups = p.groups();
  const float static_scale =
      p.mode == ActScaleMode::kStaticTensor ? arch::global_load(p.static_scale) : p.static_scale_value;
  const int64_t row_step = static_cast<int64_t>(arch::grid_dim_x()) * kAqRowsPerBlock;
  // Workgroup-uniform loops: every lane of a wave reaches every bpermute.
  for (int64_t g = arch::block_id_y(); g < groups; g += arch::grid_dim_y()) {
    const int64_t col = g * kQuantBlock + sub * 8;
    const int64_t left = p.k - col;
    const int n = left >= 8 ? 8 : left > 0 ? static_cast<int>(left) : 0;
    for (int64_t r0 = static_cast<int64_t>(arch::block_id_x()) * kAqRowsPerBlock; r0 < p.rows; r0 += row_step) {
      const int64_t r = r0 + tid / kAqLanesPerGroup;
      const bool valid = r < p.rows;
      const int nv = valid ? n : 0;
      const uint8_t* src = static_cast<const uint8_t*>(p.x);
      if (nv > 0) src += (aq_row_offset(p, static_cast<uint32_t>(r)) + col * p.x_stride_k) * kElem;

      uint32_t bits[8];  // the 8 elements as fp32 bit patterns (0 where absent)
      if (nv == 8 && p.x_stride_k == 1 && (reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
        if constexpr (kElem == 2) {
          const arch::u32x4 w = arch::global_load(reinterpret_cast<const arch::u32x4*>(src));
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            bits[2 * i] = aq_bits(AqElem<D>::f32(w[i] & 0xFFFFu));
            bits[2 * i + 1] = aq_bits(AqElem<D>::f32(w[i] >> 16));
          }
        } else {
          const arch::u32x4 lo = arch::global_load(reinterpret_cast<const arch::u32x4*>(src));
          const arch::u32x4 hi = arch::global_load(reinterpret_cast<const arch::u32x4*>(src + 16));
#pragma unroll
          for (int i = 0; i < 4; ++i) bits[i] = lo[i], bits[4 + i] = hi[i];
        }
      } else {
        const Bits* e = reinterpret_cast<const Bits*>(src);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          bits[i] = i < nv ? aq_bits(AqElem<D>::f32(arch::global_load(e))) : 0u;
          e += p.x_stride_k;  // one stride in a register, not eight multiples of it
        }
      }

      float scale = static_scale;
      if (p.mode == ActScaleMode::kDynamic) {
        uint32_t amax = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t a = bits[i] & 0x7FFFFFFFu;
          amax = a > amax ? a : amax;
        }
#pragma unroll
        for (int offset = kAqLanesPerGroup / 2; offset > 0; offset /= 2) {
          const uint32_t other = static_cast<uint32_t>(arch::shfl(static_cast<int>(amax), lane ^ offset));
          amax = other > amax ? other : amax;
        }
        scale = aq_scale_from_quotient(amax, aq_float(amax) / aq_fp8_max(fnuz));
      }
      if (valid && sub == 0) arch::global_store(p.scale + g * p.scale_ld + r, scale);
      if (nv == 0) continue;

      uint32_t codes[2] = {0u, 0u};  // 8 codes, little-endian
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float x = aq_float(bits[i]);
        codes[i / 4] |= static_cast<uint32_t>(aq_encode(x / scale, aq_quotient_sign(x, scale), fnuz)) << (8 * (i % 4));
      }
      uint8_t* dst = p.q + r * p.k + col;
      if (nv == 8 && (reinterpret_cast<uintptr_t>(dst) & 7u) == 0) {
        arch::u32x2 packed;
        packed[0] = codes[0];
        packed[1] = codes[1];
        arch::global_store(reinterpret_cast<arch::u32x2*>(dst), packed);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          if (i < nv) arch::global_store(dst + i, static_cast<uint8_t>(codes[i / 4] >> (8 * (i % 4))));
      }
    }
  }
}

}  // namespace fp8gemm::rocm
