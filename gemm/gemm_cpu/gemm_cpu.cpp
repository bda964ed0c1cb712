// Exact, multithreaded CPU backend (see gemm_cpu.h for the arithmetic order).
//
// Structure: the output is cut into MC x NC tiles that at::get_num_threads() workers claim one at a
// time (run_on_workers, cpu_workers.h: torch's inter-op thread pool plus the calling thread). A worker
// owns an fp32 accumulator for its tile and walks K one 128-wide quantisation block at a time: it
// decodes that block of a (MC x 128) and b (128 x NC) into fp32 panels through a 256-entry table, runs
// a 6 x 16 register-blocked micro-kernel per panel pair to get the block's unscaled partial sums, and
// folds them into the accumulator with one scale multiply. Nothing is allocated per call beyond a few
// hundred KiB per thread, whatever M, N and K are.
//
// The micro-kernel vectorises across n (16 columns), never across k, so every output element
// sums its products in plain increasing-k order and no -ffast-math-style reassociation is needed.
#include "gemm_cpu.h"
#include "cpu_workers.h"
#include "fma_f32.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define FP8GEMM_HAVE_AVX2_PATH 1
#endif

namespace fp8gemm {
namespace cpu {
namespace {

constexpr int64_t kMR = 6;   // micro-tile rows (broadcast a values)
constexpr int64_t kNR = 16;  // micro-tile columns (two 8-float vectors); 128 % kNR == 0
constexpr int64_t kKB = kQuantBlock;

struct DecodeTables {
  float fnuz[256];
  float fn[256];
  DecodeTables() {
    const float qnan = std::numeric_limits<float>::quiet_NaN();
    for (int byte = 0; byte < 256; ++byte) {
      const int sign = byte >> 7, exponent = (byte >> 3) & 0xF, mantissa = byte & 0x7;
      // e4m3: normal = 2^(e - bias) * (1 + m/8); subnormal (e == 0) = 2^(1 - bias) * (m/8).
      auto decode = [&](int bias) {
        const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), 1 - bias - 3)
                                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - bias - 3);
        return sign ? -magnitude : magnitude;
      };
      // fnuz: bias 8, the only special pattern is 0x80 (NaN; there is no -0 and no inf).
      fnuz[byte] = byte == 0x80 ? qnan : decode(8);
      // fn (OCP): bias 7, S.1111.111 is NaN, 0x80 is -0, no inf.
      fn[byte] = (byte & 0x7F) == 0x7F ? qnan : decode(7);
    }
  }
};

const DecodeTables& tables() {
  static const DecodeTables t;  // thread-safe one-time init
  return t;
}

// fp32 -> bf16 bits, round to nearest even; NaN becomes torch's canonical quiet NaN (0x7FC0).
inline uint16_t to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // overflow past the largest finite rounds to inf, as RNE must
  return static_cast<uint16_t>(bits >> 16);
}

inline int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

// Decode rows [m0, m0 + mc) x columns [k0, k0 + kc) of an fp8 matrix (any strides) into panels of
// `width` rows: dst[(panel * kc + k) * width + i] = value(row m0 + panel*width + i, column k0 + k).
// Rows at or beyond `rows` are zero-filled so the micro-kernel never needs a row tail.
void pack_panels(const uint8_t* src, int64_t stride_row, int64_t stride_k, int64_t rows, int64_t m0, int64_t mc,
                 int64_t k0, int64_t kc, int64_t width, const float* lut, float* dst) {
  const int64_t panels = ceil_div(mc, width);
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = dst + p * kc * width;
    for (int64_t i = 0; i < width; ++i) {
      const int64_t row = m0 + p * width + i;
      if (row >= m0 + mc || row >= rows) {
        for (int64_t k = 0; k < kc; ++k) panel[k * width + i] = 0.0f;
      } else if (stride_k == 1) {  // K-contiguous source: read along k
        const uint8_t* s = src + row * stride_row + k0;
        for (int64_t k = 0; k < kc; ++k) panel[k * width + i] = lut[s[k]];
      } else {
        const uint8_t* s = src + row * stride_row + k0 * stride_k;
        for (int64_t k = 0; k < kc; ++k) panel[k * width + i] = lut[s[k * stride_k]];
      }
    }
  }
}

// MN-contiguous source (the challenge layout): read `width` adjacent rows per k instead.
void pack_panels_row_contiguous(const uint8_t* src, int64_t stride_k, int64_t rows, int64_t m0, int64_t mc,
                                int64_t k0, int64_t kc, int64_t width, const float* lut, float* dst) {
  const int64_t panels = ceil_div(mc, width);
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = dst + p * kc * width;
    const int64_t first = m0 + p * width;
    const int64_t valid = std::max<int64_t>(0, std::min({width, m0 + mc - first, rows - first}));
    for (int64_t k = 0; k < kc; ++k) {
      const uint8_t* s = src + first + (k0 + k) * stride_k;
      float* d = panel + k * width;
      for (int64_t i = 0; i < valid; ++i) d[i] = lut[s[i]];
      for (int64_t i = valid; i < width; ++i) d[i] = 0.0f;
    }
  }
}

void pack(const uint8_t* src, int64_t stride_row, int64_t stride_k, int64_t rows, int64_t m0, int64_t mc, int64_t k0,
          int64_t kc, int64_t width, const float* lut, float* dst) {
  if (stride_row == 1 && stride_k != 1)
    pack_panels_row_contiguous(src, stride_k, rows, m0, mc, k0, kc, width, lut, dst);
  else
    pack_panels(src, stride_row, stride_k, rows, m0, mc, k0, kc, width, lut, dst);
}

// One K block for a whole tile: for every (6-row, 16-column) panel pair, the block's partial sums
// p = sum_k a*b, then c = fma(scale_row[i] * scale_col, p, c).
//   ap: mpanels x [kc][6], bp: npanels x [kc][16], c: tile accumulator with leading dimension ldc,
//   row_scale[i] = a_scale of tile row i, panel_scale[q] = b_scale of column panel q.
struct BlockArgs {
  const float* ap;
  const float* bp;
  int64_t kc;
  int64_t mpanels, npanels;
  const float* row_scale;
  const float* panel_scale;
  float* c;
  int64_t ldc;
};

// Portable path (aarch64, x86 without AVX2/FMA): GCC/Clang 128-bit vector extensions (NEON / SSE2).
// A 16-column panel is done as two 8-column halves so the 6 x 2 accumulators, two b vectors and
// the broadcast fit in 16 vector registers without spilling.
typedef float vec4 __attribute__((vector_size(16)));

void block_generic(const BlockArgs& args) {
  for (int64_t q = 0; q < args.npanels; ++q) {
    const float* bp = args.bp + q * args.kc * kNR;
    for (int64_t p = 0; p < args.mpanels; ++p) {
      const float* ap = args.ap + p * args.kc * kMR;
      for (int64_t half = 0; half < kNR; half += 8) {
        vec4 acc[kMR][2];
        for (int64_t i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = vec4{};
        for (int64_t k = 0; k < args.kc; ++k) {
          vec4 b0, b1;
          std::memcpy(&b0, bp + k * kNR + half, sizeof(b0));
          std::memcpy(&b1, bp + k * kNR + half + 4, sizeof(b1));
          for (int64_t i = 0; i < kMR; ++i) {
            const float a = ap[k * kMR + i];
            acc[i][0] += a * b0;  // products are exact in fp32: contraction to fma cannot change bits
            acc[i][1] += a * b1;
          }
        }
        for (int64_t i = 0; i < kMR; ++i) {
          const float s = args.row_scale[p * kMR + i] * args.panel_scale[q];
          float* c = args.c + (p * kMR + i) * args.ldc + q * kNR + half;
          for (int64_t j = 0; j < 4; ++j) c[j] = fma_f32(s, acc[i][0][j], c[j]);
          for (int64_t j = 0; j < 4; ++j) c[4 + j] = fma_f32(s, acc[i][1][j], c[4 + j]);
        }
      }
    }
  }
}

#ifdef FP8GEMM_HAVE_AVX2_PATH
// Same arithmetic with AVX2/FMA intrinsics: 12 accumulators + 2 b vectors + 1 broadcast = 15 ymm.
__attribute__((target("avx2,fma"))) void block_avx2(const BlockArgs& args) {
  for (int64_t q = 0; q < args.npanels; ++q) {
    const float* bp = args.bp + q * args.kc * kNR;
    for (int64_t p = 0; p < args.mpanels; ++p) {
      const float* ap = args.ap + p * args.kc * kMR;
      __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
             c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
             c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
             c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
      for (int64_t k = 0; k < args.kc; ++k) {
        const __m256 b0 = _mm256_loadu_ps(bp + k * kNR);
        const __m256 b1 = _mm256_loadu_ps(bp + k * kNR + 8);
        const float* a = ap + k * kMR;
        __m256 av = _mm256_broadcast_ss(a + 0);
        c00 = _mm256_fmadd_ps(av, b0, c00);
        c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(a + 1);
        c10 = _mm256_fmadd_ps(av, b0, c10);
        c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(a + 2);
        c20 = _mm256_fmadd_ps(av, b0, c20);
        c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(a + 3);
        c30 = _mm256_fmadd_ps(av, b0, c30);
        c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(a + 4);
        c40 = _mm256_fmadd_ps(av, b0, c40);
        c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(a + 5);
        c50 = _mm256_fmadd_ps(av, b0, c50);
        c51 = _mm256_fmadd_ps(av, b1, c51);
      }
      const __m256 partial[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
      for (int64_t i = 0; i < kMR; ++i) {
        const __m256 s = _mm256_set1_ps(args.row_scale[p * kMR + i] * args.panel_scale[q]);
        float* c = args.c + (p * kMR + i) * args.ldc + q * kNR;
        _mm256_storeu_ps(c, _mm256_fmadd_ps(s, partial[i][0], _mm256_loadu_ps(c)));
        _mm256_storeu_ps(c + 8, _mm256_fmadd_ps(s, partial[i][1], _mm256_loadu_ps(c + 8)));
      }
    }
  }
}

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

using BlockFn = void (*)(const BlockArgs&);

// FP8GEMM_CPU_GENERIC=1 forces the portable path (tests use it to check both paths agree bit for bit).
BlockFn pick_block_fn() {
  const char* force_generic = std::getenv("FP8GEMM_CPU_GENERIC");
  if (force_generic && force_generic[0] == '1') return block_generic;
#ifdef FP8GEMM_HAVE_AVX2_PATH
  if (cpu_has_avx2_fma()) return block_avx2;
#endif
  return block_generic;
}

struct TileShape {
  int64_t mc, nc;
};

// Tiles big enough to reuse each decoded panel many times, small enough that the packed block of a
// (mc x 128 fp32) sits in L1/L2 and there are several tiles per thread for load balance.
TileShape choose_tiles(int64_t m, int64_t n, int threads) {
  TileShape t{std::min<int64_t>(96, ceil_div(m, kMR) * kMR), std::min<int64_t>(256, ceil_div(n, kNR) * kNR)};
  const int64_t wanted = 4 * static_cast<int64_t>(std::max(threads, 1));
  auto count = [&] { return ceil_div(m, t.mc) * ceil_div(n, t.nc); };
  while (count() < wanted && t.nc > 64) t.nc = std::max<int64_t>(64, ceil_div(t.nc / 2, kNR) * kNR);
  while (count() < wanted && t.mc > 24) t.mc = std::max<int64_t>(24, ceil_div(t.mc / 2, kMR) * kMR);
  return t;
}

}  // namespace

const float* fp8_decode_table(Fp8Format format) {
  return format == Fp8Format::kE4M3FN ? tables().fn : tables().fnuz;
}

void gemm(const GemmProblem& pr) {
  if (pr.m <= 0 || pr.n <= 0 || pr.k <= 0) return;  // the binding handles empty problems
  const float* lut = fp8_decode_table(pr.format);
  const BlockFn block_fn = pick_block_fn();
  const TileShape tiles = choose_tiles(pr.m, pr.n, at::get_num_threads());
  const int64_t tiles_m = ceil_div(pr.m, tiles.mc), tiles_n = ceil_div(pr.n, tiles.nc);
  const int64_t k_blocks = pr.k_blocks();
  const int64_t mc_pad = ceil_div(tiles.mc, kMR) * kMR, nc_pad = ceil_div(tiles.nc, kNR) * kNR;

  run_on_workers(tiles_m * tiles_n, [&](const auto& claim) {
    // Per-thread scratch, reused for every tile this thread claims.
    std::vector<float> a_panels(mc_pad * kKB), b_panels(nc_pad * kKB), acc(mc_pad * nc_pad);
    std::vector<float> row_scale(mc_pad), panel_scale(nc_pad / kNR);
    for (int64_t tile; claim(tile);) {
      // m varies fastest: tiles claimed one after another decode the same columns of b (cache-warm).
      const int64_t m0 = (tile % tiles_m) * tiles.mc, n0 = (tile / tiles_m) * tiles.nc;
      const int64_t mc = std::min(tiles.mc, pr.m - m0), nc = std::min(tiles.nc, pr.n - n0);
      const int64_t mpanels = ceil_div(mc, kMR), npanels = ceil_div(nc, kNR);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const int64_t k0 = kb * kKB, kc = std::min(kKB, pr.k - k0);
        pack(pr.a, pr.a_stride_m, pr.a_stride_k, pr.m, m0, mc, k0, kc, kMR, lut, a_panels.data());
        pack(pr.b, pr.b_stride_n, pr.b_stride_k, pr.n, n0, nc, k0, kc, kNR, lut, b_panels.data());
        for (int64_t i = 0; i < mpanels * kMR; ++i)
          row_scale[i] = i < mc ? pr.a_scale[(m0 + i) * pr.a_scale_stride_m + kb * pr.a_scale_stride_kb] : 0.0f;
        for (int64_t q = 0; q < npanels; ++q)  // a 16-column panel never straddles a 128-row b_scale block
          panel_scale[q] = pr.b_scale[((n0 + q * kNR) / kQuantBlock) * pr.b_scale_stride_nb + kb * pr.b_scale_stride_kb];
        block_fn(BlockArgs{a_panels.data(), b_panels.data(), kc, mpanels, npanels, row_scale.data(),
                           panel_scale.data(), acc.data(), nc_pad});
      }
      for (int64_t i = 0; i < mc; ++i) {
        uint16_t* out_row = pr.out + (m0 + i) * pr.out_stride_m + n0 * pr.out_stride_n;
        const float* acc_row = acc.data() + i * nc_pad;
        if (pr.out_stride_n == 1) {
          for (int64_t j = 0; j < nc; ++j) out_row[j] = to_bf16_bits(acc_row[j]);
        } else {
          for (int64_t j = 0; j < nc; ++j) out_row[j * pr.out_stride_n] = to_bf16_bits(acc_row[j]);
        }
      }
    }
  });
}

}  // namespace cpu
}  // namespace fp8gemm
