// Emulated gfx942 fp8 MFMA instructions, computed from the operand bytes with the instructions'
// lane layouts. The layouts are the closed forms of AMD's matrix instruction calculator
// (`-d` output) for v_mfma_f32_32x32x16_fp8_fp8 and v_mfma_f32_16x16x32_fp8_fp8, built here at
// compile time; the tests compare the compiled tables with an independent Python transcription of
// the same formulas and, where the calculator's own output is available, entry by entry with it.
//
// Numerics: operands decode as e4m3fnuz (bias 8, max 240, 0x80 = NaN, no -0). For each result
// element the K products are exact in double (an fp8 x fp8 product has 8 significant bits and
// the 32 products of one instruction span < 2^42), summed exactly, added to the fp32 C element
// and rounded once to fp32. The hardware's internal adder order is not public; where results can
// differ is the last bit of a sum whose exact value is not representable in fp32. Accumulation
// across instructions (over K steps, the scale multiply) follows the kernel's own code.
//
// FP8GEMM_SIMT_MFMA_PERMUTE (negative tests only) compiles a deliberately wrong, still one-to-one
// layout: 1 = swap items 0 and 1 of every lane's A operand (A's k order no longer matches B's),
// 2 = swap the D rows of lanes 0 and 1's first result item, 3 = swap lanes 0 and 1's A slots,
// 4 = swap lanes 0 and 17's B slots.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "simt_runtime.h"

#if !defined(FP8GEMM_SIMT_MFMA_PERMUTE)
#define FP8GEMM_SIMT_MFMA_PERMUTE 0
#endif

namespace fp8gemm::simt {

// Where each (lane, item) of an instruction's operands and result lives in the M x K, K x N and
// M x N matrices. Item i of A/B is byte i of the lane's 64-bit operand (byte 0 = v0[7:0]); item r
// of D is the lane's r-th fp32 result register (C uses the same layout).
struct MfmaLayout {
  const char* instruction;
  int permuted;  // FP8GEMM_SIMT_MFMA_PERMUTE it was built with (0: the real layout)
  int M, N, K, d_items;
  signed char a_row[64][8], a_k[64][8], b_k[64][8], b_col[64][8];
  signed char d_row[64][16], d_col[64][16];
};

namespace layouts {

template <class T>
constexpr void swap_values(T& a, T& b) {
  const T t = a;
  a = b;
  b = t;
}

template <class Row>
constexpr void swap_rows(Row& a, Row& b) {
  for (int i = 0; i < static_cast<int>(sizeof(Row) / sizeof(a[0])); ++i) swap_values(a[i], b[i]);
}

// mn = 32: v_mfma_f32_32x32x16_fp8_fp8; mn = 16: v_mfma_f32_16x16x32_fp8_fp8. With g = lane / mn:
//   A: row = lane % mn, k = 8 g + item;  B: k = 8 g + item, col = lane % mn;
//   D (32x32): row = 8 (r / 4) + 4 g + r % 4;  D (16x16): row = 4 g + r;  col = lane % mn.
constexpr MfmaLayout closed_form(int mn, int permute) {
  MfmaLayout t{};
  t.instruction = mn == 32 ? "v_mfma_f32_32x32x16_fp8_fp8" : "v_mfma_f32_16x16x32_fp8_fp8";
  t.permuted = permute;
  t.M = t.N = mn;
  t.K = 64 * 8 / mn;
  t.d_items = mn * mn / 64;
  for (int l = 0; l < 64; ++l) {
    const int g = l / mn;
    for (int i = 0; i < 8; ++i) {
      t.a_row[l][i] = static_cast<signed char>(l % mn);
      t.a_k[l][i] = static_cast<signed char>(8 * g + i);
      t.b_k[l][i] = static_cast<signed char>(8 * g + i);
      t.b_col[l][i] = static_cast<signed char>(l % mn);
    }
    for (int r = 0; r < 16; ++r) {
      const bool used = r < t.d_items;
      const int row = mn == 32 ? 8 * (r / 4) + 4 * g + r % 4 : 4 * g + r;
      t.d_row[l][r] = static_cast<signed char>(used ? row : 0);
      t.d_col[l][r] = static_cast<signed char>(used ? l % mn : 0);
    }
  }
  if (permute == 1) {
    for (int l = 0; l < 64; ++l) {
      swap_values(t.a_row[l][0], t.a_row[l][1]);
      swap_values(t.a_k[l][0], t.a_k[l][1]);
    }
  } else if (permute == 2) {
    swap_values(t.d_row[0][0], t.d_row[1][0]);
    swap_values(t.d_col[0][0], t.d_col[1][0]);
  } else if (permute == 3) {
    swap_rows(t.a_row[0], t.a_row[1]);
    swap_rows(t.a_k[0], t.a_k[1]);
  } else if (permute == 4) {
    swap_rows(t.b_k[0], t.b_k[17]);
    swap_rows(t.b_col[0], t.b_col[17]);
  }
  return t;
}

}  // namespace layouts

inline constexpr MfmaLayout kMfma16x16x32 = layouts::closed_form(16, FP8GEMM_SIMT_MFMA_PERMUTE);
inline constexpr MfmaLayout kMfma32x32x16 = layouts::closed_form(32, FP8GEMM_SIMT_MFMA_PERMUTE);

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

static_assert(layout_is_bijective(kMfma16x16x32), "16x16x32 lane table is not a bijection");
static_assert(layout_is_bijective(kMfma32x32x16), "32x32x16 lane table is not a bijection");
static_assert(kMfma16x16x32.M == 16 && kMfma16x16x32.N == 16 && kMfma16x16x32.K == 32 && kMfma16x16x32.d_items == 4);
static_assert(kMfma32x32x16.M == 32 && kMfma32x32x16.N == 32 && kMfma32x32x16.K == 16 && kMfma32x32x16.d_items == 16);

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
