// Emulated gfx942 fp8 MFMA instructions, computed from the operand bytes with lane layouts that
// are generated from shared/amd_mfma/*.json (AMD's matrix instruction calculator output) by
// gemm/tests/emulation/gen_mfma_tables.py into simt_mfma_tables.generated.h (a build/test
// artefact, on the include path of the emulated build only).
//
// Numerics: operands decode as e4m3fnuz (bias 8, max 240, 0x80 = NaN, no -0). For each result
// element the K products are exact in double (an fp8 x fp8 product has 8 significant bits and
// the 32 products of one instruction span < 2^42), summed exactly, added to the fp32 C element
// and rounded once to fp32. The hardware's internal adder order is not public; where results can
// differ is the last bit of a sum whose exact value is not representable in fp32. Accumulation
// across instructions (over K steps, the scale multiply) follows the kernel's own code.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "simt_runtime.h"

#if !__has_include("simt_mfma_tables.generated.h")
#error "simt_mfma_tables.generated.h not found: run gemm/tests/emulation/gen_mfma_tables.py --out <dir>/simt_mfma_tables.generated.h and add -I<dir>"
#endif
#include "simt_mfma_tables.generated.h"

namespace fp8gemm::simt {

using MfmaLayout = generated::MfmaLayoutData;

// Each (row, k) of A, (k, col) of B and (row, col) of D appears in exactly one (lane, item) slot.
constexpr bool layout_is_bijective(const MfmaLayout& t) {
  bool a_seen[32][32] = {}, b_seen[32][32] = {}, d_seen[32][32] = {};
  for (int l = 0; l < 64; ++l) {
    for (int i = 0; i < 8; ++i) {
      const int ar = t.a_row[l][i], ak = t.a_k[l][i], bk = t.b_k[l][i], bc = t.b_col[l][i];
      if (ar < 0 || ar >= t.M || ak < 0 || ak >= t.K || bk < 0 || bk >= t.K || bc < 0 || bc >= t.N) return false;
      if (a_seen[ar][ak] || b_seen[bk][bc]) return false;
      a_seen[ar][ak] = b_seen[bk][bc] = true;
    }
    for (int i = 0; i < t.d_items; ++i) {
      const int dr = t.d_row[l][i], dc = t.d_col[l][i];
      if (dr < 0 || dr >= t.M || dc < 0 || dc >= t.N || d_seen[dr][dc]) return false;
      d_seen[dr][dc] = true;
    }
  }
  return 64 * 8 == t.M * t.K && 64 * 8 == t.K * t.N && 64 * t.d_items == t.M * t.N;
}

static_assert(layout_is_bijective(generated::kMfma16x16x32), "16x16x32 lane table is not a bijection");
static_assert(layout_is_bijective(generated::kMfma32x32x16), "32x32x16 lane table is not a bijection");
static_assert(generated::kMfma16x16x32.M == 16 && generated::kMfma16x16x32.N == 16 &&
              generated::kMfma16x16x32.K == 32 && generated::kMfma16x16x32.d_items == 4);
static_assert(generated::kMfma32x32x16.M == 32 && generated::kMfma32x32x16.N == 32 &&
              generated::kMfma32x32x16.K == 16 && generated::kMfma32x32x16.d_items == 16);

// e4m3fnuz, written from the format definition (independent of the kernels' own helpers).
inline double decode_fnuz_exact(uint8_t b) {
  if (b == 0x80) return std::nan("");
  const int e = (b >> 3) & 0xf, m = b & 7;
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -10) : std::ldexp(8.0 + m, e - 8 - 3);
  return (b & 0x80) ? -mag : mag;
}

struct Fnuz {
  double v[256];
  Fnuz() {
    for (int i = 0; i < 256; ++i) v[i] = decode_fnuz_exact(static_cast<uint8_t>(i));
  }
};
inline const Fnuz& fnuz_table() {
  static const Fnuz t;
  return t;
}

namespace detail {

// Computes every lane's D from every lane's (a, b, c) deposited in the wave's lanes. The operand
// matrices are rebuilt from the register bytes through the tables; B is kept transposed so each
// dot product runs over contiguous K. Four partial sums: the sum is exact in any order.
template <int M, int N, int K, int Items>
inline void mfma_compute(const MfmaLayout& t, Lane* lanes) {
  const Fnuz& f = fnuz_table();
  alignas(64) double A[M][K], Bt[N][K];
  for (int l = 0; l < 64; ++l) {
    const uint64_t a = lanes[l].op_a, b = lanes[l].op_b;
    for (int i = 0; i < 8; ++i) {
      // item i = byte i of the lane's 64-bit operand (v0 = low dword, byte 0 = v0[7:0]).
      A[t.a_row[l][i]][t.a_k[l][i]] = f.v[static_cast<uint8_t>(a >> (8 * i))];
      Bt[t.b_col[l][i]][t.b_k[l][i]] = f.v[static_cast<uint8_t>(b >> (8 * i))];
    }
  }
  static_assert(K % 4 == 0, "K");
  for (int l = 0; l < 64; ++l) {
    for (int i = 0; i < Items; ++i) {
      const double* x = A[t.d_row[l][i]];
      const double* y = Bt[t.d_col[l][i]];
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int k = 0; k < K; k += 4) {
        s0 += x[k] * y[k];
        s1 += x[k + 1] * y[k + 1];
        s2 += x[k + 2] * y[k + 2];
        s3 += x[k + 3] * y[k + 3];
      }
      lanes[l].op_d[i] = static_cast<float>(((s0 + s1) + (s2 + s3)) + static_cast<double>(lanes[l].op_c[i]));
    }
  }
}

template <class Vec, int N>
inline Vec mfma(const MfmaLayout& t, WaveOp op, uint64_t a, uint64_t b, const Vec& c, const std::source_location& site) {
  Lane& l = current_lane(op == WaveOp::kMfma16x16x32 ? "mfma_16x16x32_fp8" : "mfma_32x32x16_fp8");
  const Wave& w = l.wg->waves[static_cast<size_t>(l.wave)];
  if (w.n_lanes != kWaveSize)
    fault(std::string(wave_op_name(op)) + " in a wave of " + std::to_string(w.n_lanes) +
          " lanes: MFMA needs all 64 lanes (block_threads is not a multiple of 64)");
  l.op_a = a;
  l.op_b = b;
  for (int i = 0; i < N; ++i) l.op_c[i] = c[i];
  wave_collective(l, op, site, [&](Wave& wave) {
    Lane* wave_lanes = &(*l.wg->lanes)[static_cast<size_t>(wave.first_tid)];
    if (N == 4)
      mfma_compute<16, 16, 32, 4>(t, wave_lanes);
    else
      mfma_compute<32, 32, 16, 16>(t, wave_lanes);
    (op == WaveOp::kMfma16x16x32 ? stats().mfma16 : stats().mfma32).fetch_add(1, std::memory_order_relaxed);
  });
  Vec d = c;
  for (int i = 0; i < N; ++i) d[i] = l.op_d[i];
  return d;
}

}  // namespace detail
}  // namespace fp8gemm::simt
