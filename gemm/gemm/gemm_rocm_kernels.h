// Device bodies of the gfx942 FP8 block-scaled GEMM. Each body is a per-lane function template
// `xxx_body<Cfg>(args)` written only against gfx942_arch.h, so it compiles for the GPU (wrapped in
// a __global__ by gemm_launcher.hip) and for the CPU SIMT emulator (FP8GEMM_SIMT_EMULATION).
// No torch, no host-only assumptions.
//
// Main kernel (RadeonFlow family, K-major tiles):
//   * workgroup tile BM x BN, 128-wide K steps (== the scale block), 4 or 8 waves, each wave a
//     (BM/WM) x (BN/WN) sub-tile built from 32x32x16 or 16x16x32 fp8 MFMAs;
//   * operands read K-major (DeepSeek/vLLM layout) or MN-major (the AMD challenge layout, transposed
//     in registers on the way to LDS, see TileStager), or from a packed K-major copy (pack_body);
//   * K-major A and B tiles in LDS, 128-byte rows whose 16-byte chunks are XOR-swizzled by
//     row % 8: the 8 lanes of each ds_read_b128 / ds_write_b128 phase hit all 32 banks once, and
//     without padding a 128x128 tile takes exactly 32 KiB (2 workgroups per CU);
//   * software pipeline: the next K block's dwordx4 global loads are issued into registers before
//     the MFMAs of the current block, then written to LDS after a barrier (register double
//     buffering with one LDS buffer, which is what keeps 2 workgroups per CU);
//   * per K block the MFMAs accumulate into a zeroed fp32 partial, then one
//     (a_scale * b_scale) multiply-add folds it into the fp32 accumulator; each lane loads the
//     a_scale of one wave-tile row and the MFMA result rows fetch theirs with ds_bpermute (shfl),
//     so a_scale needs no LDS;
//   * split-K over blockIdx.z writes fp32 partials reduced by reduce_body.
#pragma once

#include <cstdint>

#include "gemm_rocm_args.h"
#include "gemm_rocm_config.h"
#include "gfx942_arch.h"

namespace fp8gemm::rocm {

// Compile-time view of one kGemmKernels entry.
template <GemmKernelId Id>
struct KernelCfg {
  static constexpr GemmKernelShape kShape = kernel_shape(Id);
  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kBlockN = kShape.block_n;
  static constexpr int kWavesM = kShape.waves_m;
  static constexpr int kWavesN = kShape.waves_n;
  static constexpr int kThreads = kShape.threads();
  static constexpr int kMfma = kShape.mfma;  // 16 or 32 (the MFMA's M == N)
  static constexpr int kWaveTileM = kShape.wave_tile_m();
  static constexpr int kWaveTileN = kShape.wave_tile_n();
  static constexpr int kLdsBytes = kShape.lds_bytes();
  static constexpr int kWavesPerSimd = kShape.waves_per_simd;
};

// Calls f(KernelCfg<id>{}) for a runtime kernel id (launcher and emulator share it).
template <class F>
inline bool visit_gemm_kernel(GemmKernelId id, F&& f) {
  switch (id) {
    case GemmKernelId::kT64x64_W2x2_M16: f(KernelCfg<GemmKernelId::kT64x64_W2x2_M16>{}); return true;
    case GemmKernelId::kT128x64_W2x2_M32: f(KernelCfg<GemmKernelId::kT128x64_W2x2_M32>{}); return true;
    case GemmKernelId::kT128x128_W2x2_M32: f(KernelCfg<GemmKernelId::kT128x128_W2x2_M32>{}); return true;
    case GemmKernelId::kT256x128_W4x2_M32: f(KernelCfg<GemmKernelId::kT256x128_W4x2_M32>{}); return true;
    default: return false;
  }
}

namespace detail {

// Accumulator fragment of one MFMA: 16 fp32 (32x32) or 4 fp32 (16x16) per lane.
template <int Mfma>
struct MfmaTraits;
template <>
struct MfmaTraits<32> {
  using Acc = arch::f32x16;
  static constexpr int kItems = 16;
  FP8GEMM_DEVICE static Acc mfma(uint64_t a, uint64_t b, Acc c) { return arch::mfma_32x32x16_fp8(a, b, c); }
};
template <>
struct MfmaTraits<16> {
  using Acc = arch::f32x4;
  static constexpr int kItems = 4;
  FP8GEMM_DEVICE static Acc mfma(uint64_t a, uint64_t b, Acc c) { return arch::mfma_16x16x32_fp8(a, b, c); }
};

FP8GEMM_DEVICE uint64_t lo64(const arch::u32x4& v) { return uint64_t{v[0]} | (uint64_t{v[1]} << 32); }
FP8GEMM_DEVICE uint64_t hi64(const arch::u32x4& v) { return uint64_t{v[2]} | (uint64_t{v[3]} << 32); }

// Workgroup -> (tile_m, tile_n). Consecutive workgroup ids are dealt round-robin to the 8 XCDs
// of an MI300X; remap so each XCD gets a contiguous range of tiles (shared L2), then walk that
// range in groups of 4 tile rows so neighbours share A rows and B columns.
FP8GEMM_DEVICE void tile_coords(int wg, int tiles_m, int tiles_n, int& tm, int& tn) {
  constexpr int kXcds = 8, kGroupM = 4;
  const int tiles = tiles_m * tiles_n;
  if (tiles % kXcds == 0) wg = (wg % kXcds) * (tiles / kXcds) + wg / kXcds;
  const int per_group = kGroupM * tiles_n;
  const int group = wg / per_group;
  const int first_m = group * kGroupM;
  const int group_rows = (tiles_m - first_m) < kGroupM ? (tiles_m - first_m) : kGroupM;
  const int in_group = wg - group * per_group;
  tm = first_m + in_group % group_rows;
  tn = in_group / group_rows;
}

// 4x4 byte transpose: x[q] holds k = q for 4 consecutive rows (byte j = row j); returns y[j]
// holding k = 0..3 of row j (byte q = k q).
FP8GEMM_DEVICE void transpose_4x4_bytes(const uint32_t x[4], uint32_t y[4]) {
  const uint32_t t0 = (x[0] & 0x00ff00ffu) | ((x[1] & 0x00ff00ffu) << 8);
  const uint32_t t1 = ((x[0] >> 8) & 0x00ff00ffu) | (x[1] & 0xff00ff00u);
  const uint32_t t2 = (x[2] & 0x00ff00ffu) | ((x[3] & 0x00ff00ffu) << 8);
  const uint32_t t3 = ((x[2] >> 8) & 0x00ff00ffu) | (x[3] & 0xff00ff00u);
  y[0] = (t0 & 0xffffu) | (t2 << 16);
  y[1] = (t1 & 0xffffu) | (t3 << 16);
  y[2] = (t0 >> 16) | (t2 & 0xffff0000u);
  y[3] = (t1 >> 16) | (t3 & 0xffff0000u);
}

// One operand's share of the global -> LDS copy of a kRows x 128 (K) tile, staged in registers
// so the loads of the next K block overlap the MFMAs of the current one.
//   K-major source (row stride `ld`): thread-chunk c = tid + i * kThreads is row c / 8, 16-byte
//     column c % 8: eight consecutive threads read one 128-byte row (dwordx4 each).
//   MN-major source (rows contiguous, `ld` = bytes between consecutive k): thread (mg = tid / 32,
//     kq = tid % 32) reads k = 4kq..4kq+3 of rows [mg * kMnRows, +kMnRows) as 4 dwordx4 (or
//     dwordx2) loads, transposes 4x4 byte blocks in registers and writes each row's 4 k bytes with
//     ds_write_b32. The 32 kq of a half-wave cover all 8 chunks x 4 dwords of a row's swizzle
//     pattern, so those writes are conflict-free too. Needs kRows-row blocks of whole kMnRows rows
//     (the plan only picks it when rows % 16 == 0) and 16-byte aligned rows.
// LDS layout either way: row r at r * 128, 16-byte chunk c stored at chunk c ^ (r % 8).
template <int kRows, int kThreads, bool kMn>
struct TileStager {
  static constexpr int kChunks = kRows * (kBlockK / 16) / kThreads;  // 16-byte pieces per thread
  static constexpr int kRowStep = kThreads / 8;                      // K-major: rows between pieces
  static constexpr int kMnRows = 4 * kChunks;                        // MN-major: rows per thread
  static constexpr int kQPerWord = 4 / kChunks;                      // MN-major: k rows per stage vector
  static_assert(kChunks == 2 || kChunks == 4, "stager supports 2 or 4 pieces per thread");
  static_assert(kRowStep % 8 == 0, "pieces of one thread share the swizzle key");
  static_assert(kRows / kMnRows * 32 == kThreads, "MN-major thread mapping");

  // One lane-dependent base pointer; the offsets of the other pieces and of the K blocks are
  // uniform (SGPRs), which keeps the VGPR budget of the 128x128 kernel at 2 waves per SIMD.
  const uint8_t* src;
  int64_t ld;
  int row;       // K-major: tile row of piece 0; MN-major: first of this thread's rows
  int kofs;      // k offset (inside the K block) of this thread's first byte / k row
  int rows_left; // valid rows of the operand from the tile's first row
  int k_valid;   // K-major: k_limit (multiple of 16); MN-major: logical K
  arch::u32x4 stage[kChunks];

  FP8GEMM_DEVICE void init(const uint8_t* base, int64_t ld_, int row0, int rows_total, int k_valid_, int tid) {
    ld = ld_;
    k_valid = k_valid_;
    rows_left = rows_total - row0;
    if constexpr (!kMn) {
      row = tid / 8;
      kofs = (tid % 8) * 16;
      src = base + static_cast<int64_t>(row0 + row) * ld + kofs;
    } else {
      row = (tid / 32) * kMnRows;
      kofs = 4 * (tid % 32);
      src = base + static_cast<int64_t>(kofs) * ld + row0 + row;
    }
  }

  FP8GEMM_DEVICE void load(int kb) {
    const int k0 = kb * kBlockK;
    const arch::u32x4 zero16 = {0u, 0u, 0u, 0u};
    if constexpr (!kMn) {
      const bool k_ok = k0 + kofs < k_valid;
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
        stage[i] = (k_ok && row + i * kRowStep < rows_left)
                       ? arch::global_load(reinterpret_cast<const arch::u32x4*>(
                             src + static_cast<int64_t>(i * kRowStep) * ld + k0))
                       : zero16;
    } else {
      const bool rows_ok = row + kMnRows <= rows_left;  // whole row groups only (plan: rows % 16 == 0)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const bool ok = rows_ok && k0 + kofs + q < k_valid;
        const uint8_t* p = src + static_cast<int64_t>(k0 + q) * ld;
        if constexpr (kChunks == 4) {
          stage[q] = ok ? arch::global_load(reinterpret_cast<const arch::u32x4*>(p)) : zero16;
        } else {
          const arch::u32x2 zero8 = {0u, 0u};
          const arch::u32x2 v = ok ? arch::global_load(reinterpret_cast<const arch::u32x2*>(p)) : zero8;
          stage[q / kQPerWord][2 * (q % kQPerWord)] = v[0];
          stage[q / kQPerWord][2 * (q % kQPerWord) + 1] = v[1];
        }
      }
    }
  }

  FP8GEMM_DEVICE void convert_e4m3fn() {
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
#pragma unroll
      for (int w = 0; w < 4; ++w) stage[i][w] = e4m3fn_to_e4m3fnuz_x4(stage[i][w]);
  }

  FP8GEMM_DEVICE void store(uint8_t* tile) const {
    if constexpr (!kMn) {
      const int off = row * kBlockK + ((kofs / 16) ^ (row % 8)) * 16;
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
        arch::lds_store(reinterpret_cast<arch::u32x4*>(tile + off + i * kRowStep * kBlockK), stage[i]);
    } else {
      // Word d of k row q is flat word q * kChunks + d; it holds rows 4d..4d+3 of this thread.
      const int chunk = kofs / 16, in_chunk = kofs % 16;
#pragma unroll
      for (int d = 0; d < kChunks; ++d) {
        uint32_t x[4], y[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) x[q] = stage[(q * kChunks + d) / 4][(q * kChunks + d) % 4];
        transpose_4x4_bytes(x, y);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int r = row + 4 * d + j;
          arch::lds_store(reinterpret_cast<uint32_t*>(tile + r * kBlockK + (chunk ^ (r % 8)) * 16 + in_chunk), y[j]);
        }
      }
    }
  }
};

}  // namespace detail

namespace detail {

template <class Cfg, bool kMn>
FP8GEMM_DEVICE void gemm_main(const GemmArgs& g) {
  using Traits = MfmaTraits<Cfg::kMfma>;
  using Acc = typename Traits::Acc;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kThreads = Cfg::kThreads, kMfma = Cfg::kMfma;
  constexpr int kRow = kBlockK;                        // LDS bytes per tile row (swizzled, no pad)
  constexpr int kSubM = Cfg::kWaveTileM / kMfma;       // MFMA tiles per wave along M
  constexpr int kSubN = Cfg::kWaveTileN / kMfma;
  constexpr int kLaneGroups = 64 / kMfma;              // lanes sharing a row, each with its own K range
  constexpr int kLaneK = kBlockK / kLaneGroups;        // contiguous K bytes per lane per K block
  constexpr int kReads = kLaneK / 16;                  // ds_read_b128 per fragment row per K block
  constexpr int kItems = Traits::kItems;

  uint8_t* const lds = arch::lds_base();
  uint8_t* const lds_a = lds;
  uint8_t* const lds_b = lds + kBM * kRow;

  const int tid = arch::thread_id();
  const int lane = arch::lane_id();
  const int wave = arch::wave_id();

  int tile_m, tile_n;
  tile_coords(arch::block_id_x(), g.tiles_m, g.tiles_n, tile_m, tile_n);
  const int m0 = tile_m * kBM, n0 = tile_n * kBN;
  const int split = arch::block_id_z();
  const int kb_begin = split * g.kb_per_split;
  const int kb_end = (kb_begin + g.kb_per_split) < g.k_blocks ? (kb_begin + g.kb_per_split) : g.k_blocks;

  // ---- global -> register staging of the A and B tiles ----------------------------------------
  TileStager<kBM, kThreads, kMn> stage_a;
  TileStager<kBN, kThreads, kMn> stage_b;
  stage_a.init(g.a, g.lda, m0, g.m, kMn ? g.k : g.k_limit, tid);
  stage_b.init(g.b, g.ldb, n0, g.n, kMn ? g.k : g.k_limit, tid);
  // a_scale: lane l of a wave loads the scale of row (l % wave tile rows) of its wave tile.
  const int wave_m = wave / Cfg::kWavesN, wave_n = wave % Cfg::kWavesN;
  const int scale_row = m0 + wave_m * Cfg::kWaveTileM + lane % Cfg::kWaveTileM;
  const bool scale_row_ok = scale_row < g.m;
  const float* a_scale_src = g.a_scale + static_cast<int64_t>(scale_row_ok ? scale_row : 0) * g.a_scale_stride_m;
  const float* b_scale_src = g.b_scale + static_cast<int64_t>(n0 / 128) * g.b_scale_stride_nb;
  float a_scale_stage = 0.0f, b_scale_stage = 0.0f;

  auto load_stage = [&](int kb) {
    stage_a.load(kb);
    stage_b.load(kb);
    const float a_scale_v = arch::global_load(scale_row_ok ? a_scale_src + static_cast<int64_t>(kb) * g.a_scale_stride_kb : g.a_scale);
    a_scale_stage = scale_row_ok ? a_scale_v : 0.0f;
    b_scale_stage = arch::global_load(b_scale_src + static_cast<int64_t>(kb) * g.b_scale_stride_kb);
  };

  // ---- this lane's MFMA fragment rows --------------------------------------------------------
  const int frag_row = lane % kMfma;                  // A row / B column inside one MFMA tile
  const int frag_chunk = (lane / kMfma) * (kLaneK / 16); // first 16-byte K chunk of this lane
  // Tile origins and MFMA strides are multiples of 8 rows, so every fragment row has the swizzle
  // key frag_row % 8.
  const int swizzle = frag_row % 8;
  const int a_frag_base = (wave_m * Cfg::kWaveTileM + frag_row) * kRow;
  const int b_frag_base = (wave_n * Cfg::kWaveTileN + frag_row) * kRow;
  static_assert(Cfg::kWaveTileM % 8 == 0 && Cfg::kWaveTileN % 8 == 0 && kMfma % 8 == 0, "swizzle key");
  // Accumulator item r of an MFMA tile sits at row 8*(r/4) + 4*(lane/kMfma) + r%4 (both shapes;
  // shared/amd_mfma/*.json D tables), column lane % kMfma.
  const int acc_row_lane = 4 * (lane / kMfma);

  Acc acc[kSubM][kSubN];
#pragma unroll
  for (int i = 0; i < kSubM; ++i)
#pragma unroll
    for (int j = 0; j < kSubN; ++j)
#pragma unroll
      for (int r = 0; r < kItems; ++r) acc[i][j][r] = 0.0f;

  load_stage(kb_begin);
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    if (g.convert_a_e4m3fn) stage_a.convert_e4m3fn();  // uniform; e4m3fn operands read in place
    if (g.convert_b_e4m3fn) stage_b.convert_e4m3fn();
    stage_a.store(lds_a);
    stage_b.store(lds_b);
    const float a_scale_mine = a_scale_stage;
    const float b_scale_now = b_scale_stage * g.scale_factor;
    arch::barrier();

    if (kb + 1 < kb_end) load_stage(kb + 1);  // in flight while the MFMAs below run

    Acc part[kSubM][kSubN];
#pragma unroll
    for (int i = 0; i < kSubM; ++i)
#pragma unroll
      for (int j = 0; j < kSubN; ++j)
#pragma unroll
        for (int r = 0; r < kItems; ++r) part[i][j][r] = 0.0f;

#pragma unroll
    for (int s = 0; s < kReads; ++s) {
      arch::u32x4 af[kSubM], bf[kSubN];
      const int chunk_off = ((frag_chunk + s) ^ swizzle) * 16;
#pragma unroll
      for (int i = 0; i < kSubM; ++i)
        af[i] = arch::lds_load(reinterpret_cast<const arch::u32x4*>(lds_a + a_frag_base + i * kMfma * kRow + chunk_off));
#pragma unroll
      for (int j = 0; j < kSubN; ++j)
        bf[j] = arch::lds_load(reinterpret_cast<const arch::u32x4*>(lds_b + b_frag_base + j * kMfma * kRow + chunk_off));
      // The 16 bytes give two MFMA K steps. A and B use the same K order, so the dot product is
      // the same whichever 8 K values an MFMA step takes.
#pragma unroll
      for (int i = 0; i < kSubM; ++i)
#pragma unroll
        for (int j = 0; j < kSubN; ++j) part[i][j] = Traits::mfma(lo64(af[i]), lo64(bf[j]), part[i][j]);
#pragma unroll
      for (int i = 0; i < kSubM; ++i)
#pragma unroll
        for (int j = 0; j < kSubN; ++j) part[i][j] = Traits::mfma(hi64(af[i]), hi64(bf[j]), part[i][j]);
    }

    // One scale multiply per output per K block: acc += part * (a_scale[row] * b_scale).
    // The lane-dependent part of the shfl source is made opaque so the compiler rebuilds the
    // kSubM * kItems source lanes here each iteration instead of keeping them all live.
    const int scale_lane_base = arch::opaque(acc_row_lane);
#pragma unroll
    for (int i = 0; i < kSubM; ++i) {
#pragma unroll
      for (int r = 0; r < kItems; ++r) {
        // Row (inside the wave tile) of accumulator item r; its a_scale sits in that lane.
        const int src_lane = i * kMfma + 8 * (r / 4) + scale_lane_base + (r % 4);
        const float a_scale_row = bits_f32(static_cast<uint32_t>(arch::shfl(static_cast<int>(f32_bits(a_scale_mine)), src_lane)));
        const float s = a_scale_row * b_scale_now;
#pragma unroll
        for (int j = 0; j < kSubN; ++j) acc[i][j][r] += part[i][j][r] * s;
      }
    }
    arch::barrier();  // every wave is done with this K block's LDS before it is overwritten
  }

  // ---- epilogue ------------------------------------------------------------------------------
  const int col_lane = lane % kMfma;
  if (g.out_vector_ok) {
    // bf16 through LDS so the global stores are 16-byte, row-contiguous (the MFMA result holds a
    // column fragment per lane). One MFMA row block (kMfma rows x wave tile columns) per round,
    // in a per-wave LDS region whose rows are padded by 16 bytes (the two lane halves, 4 rows
    // apart, then land on different banks). The K loop ended with a barrier: the tiles are free.
    constexpr int kStageRow = Cfg::kWaveTileN * 2 + 16;  // bytes
    constexpr int kStageBytes = kMfma * kStageRow;
    constexpr int kRowChunks = Cfg::kWaveTileN / 8;      // 16-byte chunks per staged row
    constexpr int kChunksPerLane = kMfma * kRowChunks / 64;
    static_assert(kStageBytes * (kThreads / 64) <= Cfg::kLdsBytes, "epilogue staging fits the tile LDS");
    static_assert(kMfma * kRowChunks % 64 == 0, "whole chunks per lane");
    uint8_t* const stage = lds + wave * kStageBytes;
#pragma unroll
    for (int i = 0; i < kSubM; ++i) {
#pragma unroll
      for (int r = 0; r < kItems; ++r) {
        const int row = 8 * (r / 4) + acc_row_lane + (r % 4);
#pragma unroll
        for (int j = 0; j < kSubN; ++j)
          arch::lds_store(reinterpret_cast<uint16_t*>(stage + row * kStageRow + (j * kMfma + col_lane) * 2),
                          f32_to_bf16_rne(acc[i][j][r]));
      }
      arch::barrier();
#pragma unroll
      for (int c = 0; c < kChunksPerLane; ++c) {
        const int chunk = c * 64 + lane, row = chunk / kRowChunks, col8 = chunk % kRowChunks;
        const arch::u32x4 v = arch::lds_load(reinterpret_cast<const arch::u32x4*>(stage + row * kStageRow + col8 * 16));
        const int out_row = m0 + wave_m * Cfg::kWaveTileM + i * kMfma + row;
        const int out_col = n0 + wave_n * Cfg::kWaveTileN + col8 * 8;
        if (out_row < g.m && out_col < g.n)  // n % 8 == 0: a chunk is all in or all out
          arch::global_store(reinterpret_cast<arch::u32x4*>(g.out + out_row * g.out_stride_m + out_col), v);
      }
      arch::barrier();  // the region is rewritten by the next row block
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kSubM; ++i) {
#pragma unroll
    for (int r = 0; r < kItems; ++r) {
      const int row = m0 + wave_m * Cfg::kWaveTileM + i * kMfma + 8 * (r / 4) + acc_row_lane + (r % 4);
      if (row >= g.m) continue;
#pragma unroll
      for (int j = 0; j < kSubN; ++j) {
        const int col = n0 + wave_n * Cfg::kWaveTileN + j * kMfma + col_lane;
        if (col >= g.n) continue;
        if (g.split_k == 1) {
          arch::global_store(g.out + row * g.out_stride_m + col * g.out_stride_n, f32_to_bf16_rne(acc[i][j][r]));
        } else {
          arch::global_store(g.partial + split * g.partial_split_stride + row * g.partial_ld + col, acc[i][j][r]);
        }
      }
    }
  }
}

}  // namespace detail

// The GEMM pass. Both operands K-major, or both MN-major (the plan never mixes them: it packs the
// odd one); the layout is a uniform branch here so each path gets its own register allocation.
template <class Cfg>
FP8GEMM_DEVICE void gemm_body(const GemmArgs& g) {
  if (g.a_mn_major)
    detail::gemm_main<Cfg, true>(g);
  else
    detail::gemm_main<Cfg, false>(g);
}

// ---- pack pass: one 128 x 128 (rows x k) tile of a or b -> K-major e4m3fnuz workspace ---------
namespace detail {

FP8GEMM_DEVICE uint32_t gather_4k(const PackArgs& p, int row, int k0) {
  uint32_t w = 0;
  if (row >= p.rows) return 0;
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (k0 + q < p.k)
      w |= uint32_t{arch::global_load(p.src + static_cast<int64_t>(row) * p.stride_row + static_cast<int64_t>(k0 + q) * p.stride_k)}
           << (8 * q);
  return w;
}

}  // namespace detail

FP8GEMM_DEVICE void pack_body(const PackArgs& p) {
  constexpr int kRowsPerThread = 16, kKPerThread = 4;
  constexpr int kRowGroups = kPackTile / kRowsPerThread;  // 8
  static_assert(kRowGroups * (kPackTile / kKPerThread) == kPackThreads, "pack thread mapping");
  uint8_t* const lds = arch::lds_base();
  const int tid = arch::thread_id();
  const int row_group = tid % kRowGroups, k_group = tid / kRowGroups;
  const int row0 = arch::block_id_x() * kPackTile + row_group * kRowsPerThread;
  const int k_tile0 = arch::block_id_y() * kPackTile;
  const int k0 = k_tile0 + k_group * kKPerThread;

  uint32_t w[kRowsPerThread];  // w[j]: k0..k0+3 of row row0 + j
  if (p.mode == PackMode::kMnVector && row0 + kRowsPerThread <= p.rows && k0 + kKPerThread <= p.k) {
    arch::u32x4 x[kKPerThread];
#pragma unroll
    for (int q = 0; q < kKPerThread; ++q)
      x[q] = arch::global_load(
          reinterpret_cast<const arch::u32x4*>(p.src + static_cast<int64_t>(k0 + q) * p.stride_k + row0));
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      const uint32_t col[4] = {x[0][d], x[1][d], x[2][d], x[3][d]};
      detail::transpose_4x4_bytes(col, w + 4 * d);
    }
  } else if (p.mode == PackMode::kKVector && k0 + kKPerThread <= p.k) {
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j)
      w[j] = row0 + j < p.rows ? arch::global_load(reinterpret_cast<const uint32_t*>(
                                     p.src + static_cast<int64_t>(row0 + j) * p.stride_row + k0))
                               : 0u;
  } else {
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) w[j] = detail::gather_4k(p, row0 + j, k0);
  }
  if (p.convert_e4m3fn) {
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) w[j] = e4m3fn_to_e4m3fnuz_x4(w[j]);
  }
  // LDS tile [row][k], 128-byte rows, 16-byte chunks XOR-swizzled by row/16 so the 8 row groups of
  // a store instruction land in different banks and a row still reads back as whole chunks.
  const int chunk = k_group / 4, in_chunk = (k_group % 4) * 4;
#pragma unroll
  for (int j = 0; j < kRowsPerThread; ++j) {
    const int r = row_group * kRowsPerThread + j;
    arch::lds_store(reinterpret_cast<uint32_t*>(lds + r * kPackTile + ((chunk ^ (r / 16 % 8)) * 16) + in_chunk), w[j]);
  }
  arch::barrier();
  constexpr int kOutChunks = kPackTile * kPackTile / 16 / kPackThreads;  // 4
#pragma unroll
  for (int i = 0; i < kOutChunks; ++i) {
    const int c = tid + i * kPackThreads, r = c / 8, cc = c % 8;
    const arch::u32x4 v =
        arch::lds_load(reinterpret_cast<const arch::u32x4*>(lds + r * kPackTile + ((cc ^ (r / 16 % 8)) * 16)));
    const int row = arch::block_id_x() * kPackTile + r;
    if (row < p.rows)
      arch::global_store(reinterpret_cast<arch::u32x4*>(p.dst + static_cast<int64_t>(row) * p.dst_ld + k_tile0 + cc * 16), v);
  }
}

// ---- split-K reduction: 4 consecutive columns of one row per thread --------------------------
FP8GEMM_DEVICE void reduce_body(const ReduceArgs& r) {
  const int64_t quads = (static_cast<int64_t>(r.n) + 3) / 4;
  const int64_t idx = static_cast<int64_t>(arch::block_id_x()) * kReduceThreads + arch::thread_id();
  if (idx >= quads * r.m) return;
  const int row = static_cast<int>(idx / quads);
  const int col0 = static_cast<int>(idx % quads) * 4;
  const float* src = r.partial + static_cast<int64_t>(row) * r.partial_ld + col0;
  arch::f32x4 sum = {0.0f, 0.0f, 0.0f, 0.0f};
  if (col0 + 4 <= r.n) {
    for (int s = 0; s < r.splits; ++s)  // partial_ld % 4 == 0 and the workspace is 256-byte aligned
      sum += arch::global_load(reinterpret_cast<const arch::f32x4*>(src + s * r.partial_split_stride));
  } else {  // N tail: only the columns the GEMM wrote
    for (int s = 0; s < r.splits; ++s)
      for (int c = 0; col0 + c < r.n; ++c) sum[c] += arch::global_load(src + s * r.partial_split_stride + c);
  }
  uint16_t* dst = r.out + static_cast<int64_t>(row) * r.out_stride_m;
#pragma unroll
  for (int c = 0; c < 4; ++c)
    if (col0 + c < r.n) arch::global_store(dst + static_cast<int64_t>(col0 + c) * r.out_stride_n, f32_to_bf16_rne(sum[c]));
}

}  // namespace fp8gemm::rocm
