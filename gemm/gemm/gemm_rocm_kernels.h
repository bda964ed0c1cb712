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
//     all e4m3fnuz (e4m3fn operands are converted by the pack pass);
//   * global loads are buffer loads: rows past M/N and k past K read as zeros through the buffer
//     range or an out-of-range offset, with no branch; the per-lane offsets are loop-invariant and
//     the per-step base moves in scalar registers;
//   * K-major A and B tiles in LDS, 128-byte rows whose 16-byte chunks are XOR-swizzled by
//     row % 8: the 8 lanes of each ds_read_b128 / ds_write_b128 phase hit all 32 banks once, and
//     without padding a 128x128 tile takes exactly 32 KiB (2 workgroups per CU);
//   * software pipeline: the next K block's global loads are issued into registers before the
//     MFMAs of the current block, then written to LDS after a barrier (register double buffering
//     with one LDS buffer, which is what keeps 2 workgroups per CU);
//   * the MFMAs compute the transposed product (B fragment as the instruction's A operand), so an
//     accumulator column is an output row: each lane needs the a_scale of kSubM rows only, loaded
//     straight from memory, and b_scale is one vector load (all lanes the same address) per K block;
//   * per K block the MFMAs accumulate into a zeroed fp32 partial, then one multiply-add per output
//     folds it into the fp32 accumulator with a_scale[row] * b_scale;
//   * with waves_k > 1, that many waves share each output sub-tile, each multiplying its own slice of
//     every K block (bigger wave tiles: fewer LDS bytes per MFMA); their accumulators are summed
//     through LDS before the epilogue;
//   * work decomposition: one workgroup per output tile, or stream-K (GemmArgs::workgroups): each
//     workgroup takes an equal contiguous run of the (tile, K block) iterations; a tile shared by
//     several workgroups is finished in the kernel by the last of them to arrive (an atomic ticket
//     per tile), which sums the others' fp32 partial slots in a fixed order and writes bf16. No
//     separate reduction pass. The last arrival wraps its tile's ticket back to 0, so the tickets are
//     zero after the call; the plan's zero pass (a memset) clears them in a fresh workspace.
#pragma once

#include <cstdint>
#include <type_traits>

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
  static constexpr int kWavesK = kShape.waves_k;
  static constexpr int kWaveK = kShape.wave_k();  // K bytes of each block one wave multiplies
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
    case GemmKernelId::kT128x64_W2x1x2_M32: f(KernelCfg<GemmKernelId::kT128x64_W2x1x2_M32>{}); return true;
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

// Workgroup id -> virtual id. Consecutive workgroup ids are dealt round-robin to the 8 XCDs of an
// MI300X; remap so each XCD gets a contiguous range of virtual ids (tiles, or stream-K runs of
// neighbouring tiles), which share its L2.
FP8GEMM_DEVICE int xcd_remap(int wg, int count) {
  constexpr int kXcds = 8;
  return count % kXcds == 0 ? (wg % kXcds) * (count / kXcds) + wg / kXcds : wg;
}

// Tile index -> (tile_m, tile_n), walked in groups of 4 tile rows so neighbours share A rows and
// B columns.
FP8GEMM_DEVICE void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  constexpr int kGroupM = 4;
  const int per_group = kGroupM * tiles_n;
  const int group = t / per_group;
  const int first_m = group * kGroupM;
  const int group_rows = (tiles_m - first_m) < kGroupM ? (tiles_m - first_m) : kGroupM;
  const int in_group = t - group * per_group;
  tm = first_m + in_group % group_rows;
  tn = in_group / group_rows;
}

// 4x4 byte transpose: x[q] holds k = q for 4 consecutive rows (byte j = row j); returns y[j]
// holding k = 0..3 of row j (byte q = k q). Eight byte permutes: first interleave k pairs
// (t01l = r0k0 r0k1 r1k0 r1k1, ...), then pick each row's four bytes.
FP8GEMM_DEVICE void transpose_4x4_bytes(const uint32_t x[4], uint32_t y[4]) {
  // perm(hi, lo, sel): byte i of the result is byte sel_i of the 8-byte value hi:lo.
  const uint32_t t01l = arch::perm(x[1], x[0], 0x05010400u);  // x0.b0 x1.b0 x0.b1 x1.b1
  const uint32_t t01h = arch::perm(x[1], x[0], 0x07030602u);  // x0.b2 x1.b2 x0.b3 x1.b3
  const uint32_t t23l = arch::perm(x[3], x[2], 0x05010400u);
  const uint32_t t23h = arch::perm(x[3], x[2], 0x07030602u);
  y[0] = arch::perm(t23l, t01l, 0x05040100u);  // t01l.b0 t01l.b1 t23l.b0 t23l.b1
  y[1] = arch::perm(t23l, t01l, 0x07060302u);
  y[2] = arch::perm(t23h, t01h, 0x05040100u);
  y[3] = arch::perm(t23h, t01h, 0x07060302u);
}

FP8GEMM_DEVICE uint32_t clamp_bytes(int64_t bytes) {
  return bytes <= 0 ? 0u : bytes >= int64_t{arch::kBufferMaxBytes} ? arch::kBufferMaxBytes : static_cast<uint32_t>(bytes);
}

// One operand's share of the global -> LDS copy of a kRows x 128 (K) tile, staged in registers
// so the loads of the next K block overlap the MFMAs of the current one.
//   K-major source (row stride `ld`): thread-chunk c = tid + i * kThreads is row c / 8, 16-byte
//     column c % 8: eight consecutive threads read one 128-byte row (dwordx4 each).
//   MN-major source (rows contiguous, `ld` = bytes between consecutive k): thread (mg = tid / 32,
//     kq = tid % 32) reads k = 4kq..4kq+3 of rows [mg * kMnRows, +kMnRows) as 4 dwordx4 (or
//     dwordx2) loads, transposes 4x4 byte blocks in registers and writes each row's 4 k bytes with
//     ds_write_b32. The 32 kq of a half-wave cover all 8 chunks x 4 dwords of a row's swizzle
//     pattern, so those writes are conflict-free too. Needs whole kMnRows-row groups (the plan
//     only picks it when rows % 16 == 0) and 16-byte aligned k rows.
// Bounds without branches: each lane's offsets (from the K block's origin) are computed once, with
// kBufferOob for rows past the operand; the buffer of a K block ends where its valid bytes end (the
// last valid k row, MN-major; the last valid row's last valid chunk, K-major), and a K-major chunk
// past k_valid takes kBufferOob (one select per load).
// LDS layout either way: row r at r * 128, 16-byte chunk c stored at chunk c ^ (r % 8).
template <int kRows, int kThreads, bool kMn>
struct TileStager {
  static constexpr int kChunks = kRows * (kBlockK / 16) / kThreads;  // 16-byte pieces per thread
  static constexpr int kRowStep = kThreads / 8;                      // K-major: rows between pieces
  static constexpr int kMnRows = 4 * kChunks;                        // MN-major: rows per thread
  static constexpr int kQPerWord = 4 / kChunks;                      // MN-major: k rows per stage vector
  static constexpr int kLoads = kMn ? 4 : kChunks;                   // buffer loads per K block
  static_assert(kChunks == 2 || kChunks == 4, "stager supports 2 or 4 pieces per thread");
  static_assert(kRowStep % 8 == 0, "pieces of one thread share the swizzle key");
  static_assert(kRows / kMnRows * 32 == kThreads, "MN-major thread mapping");

  arch::BufferRsrc cur;   // based at the next K block's first byte (advanced by `step` after each load)
  uint32_t step;          // bytes between the first bytes of consecutive K blocks (< 2^32: the plan keeps a
                          // K block's bytes within 2 GiB of its first byte)
  uint32_t range_full;    // buffer bytes of a whole K block
  uint32_t range_last;    // buffer bytes of the last K block (K tail: rows or chunks past K read zeros)
  int k_left;             // K-major: k_valid - k0 of the next K block
  int row;                // K-major: tile row of piece 0; MN-major: first of this thread's rows
  int kofs;               // k offset (inside the K block) of this thread's first byte / k row
  uint32_t off[kLoads];   // per load, from the K block's origin; kBufferOob when out of range
  arch::u32x4 stage[kChunks];

  // The tile at row0 of an operand with rows_total rows, loads from K block kb_first on; kbs K blocks.
  // The 64-bit arithmetic is done here, once per tile: per K block, load() only adds `step` to the
  // base and picks one of two precomputed ranges (no descriptor rebuild, no 64-bit multiply).
  FP8GEMM_DEVICE void init(const uint8_t* base, int64_t ld, int row0, int rows_total, int k_valid, int kbs,
                           int kb_first, int tid) {
    const int rows_left = rows_total - row0;  // >= 1: the tile exists
    const int k_last = (kbs - 1) * kBlockK;
    if constexpr (!kMn) {
      row = tid / 8;
      kofs = (tid % 8) * 16;
      const int64_t tail = static_cast<int64_t>((rows_left < kRows ? rows_left : kRows) - 1) * ld;
      step = kBlockK;
      cur = arch::make_buffer(base + static_cast<int64_t>(row0) * ld + static_cast<int64_t>(kb_first) * kBlockK, 0);
      range_full = clamp_bytes(tail + kBlockK);
      range_last = clamp_bytes(tail + (k_valid - k_last));
      k_left = k_valid - kb_first * kBlockK;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int r = row + i * kRowStep;
        off[i] = r < rows_left ? static_cast<uint32_t>(static_cast<int64_t>(r) * ld + kofs) : arch::kBufferOob;
      }
    } else {
      row = (tid / 32) * kMnRows;
      kofs = 4 * (tid % 32);
      step = static_cast<uint32_t>(kBlockK * ld);
      cur = arch::make_buffer(base + row0 + static_cast<int64_t>(kb_first) * kBlockK * ld, 0);
      range_full = clamp_bytes(kBlockK * ld);
      range_last = clamp_bytes(static_cast<int64_t>(k_valid - k_last) * ld);
      k_left = 0;
      const bool rows_ok = row + kMnRows <= rows_left;  // whole row groups only (plan: rows % 16 == 0)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        off[q] = rows_ok ? static_cast<uint32_t>(static_cast<int64_t>(kofs + q) * ld + row) : arch::kBufferOob;
    }
  }

  // Loads the next K block (the last one of the operand when `last`) into `stage`.
  FP8GEMM_DEVICE void load(bool last) {
    const arch::BufferRsrc rsrc = arch::buffer_with_range(cur, last ? range_last : range_full);
    cur = arch::buffer_advance(cur, step);
    if constexpr (!kMn) {
      const bool k_ok = kofs < k_left;
      k_left -= kBlockK;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) stage[i] = arch::buffer_load<arch::u32x4>(rsrc, k_ok ? off[i] : arch::kBufferOob);
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if constexpr (kChunks == 4) {
          stage[q] = arch::buffer_load<arch::u32x4>(rsrc, off[q]);
        } else {
          const arch::u32x2 v = arch::buffer_load<arch::u32x2>(rsrc, off[q]);
          stage[q / kQPerWord][2 * (q % kQPerWord)] = v[0];
          stage[q / kQPerWord][2 * (q % kQPerWord) + 1] = v[1];
        }
      }
    }
  }

  FP8GEMM_DEVICE void store(uint8_t* tile) const {
    if constexpr (!kMn) {
      const int off0 = row * kBlockK + ((kofs / 16) ^ (row % 8)) * 16;
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
        arch::lds_store(reinterpret_cast<arch::u32x4*>(tile + off0 + i * kRowStep * kBlockK), stage[i]);
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

// bf16 of four fp32 values, packed little-endian (element 0 in the low half of word 0).
FP8GEMM_DEVICE arch::u32x2 pack_bf16x4(float a, float b, float c, float d) {
  arch::u32x2 v;
  v[0] = uint32_t{f32_to_bf16_rne(a)} | (uint32_t{f32_to_bf16_rne(b)} << 16);
  v[1] = uint32_t{f32_to_bf16_rne(c)} | (uint32_t{f32_to_bf16_rne(d)} << 16);
  return v;
}

// Writes the tile's sums (wave_k == 0 waves) as bf16: accumulator item r of MFMA tile (i, j) is
// output (m_lane + i * kMfma, n_lane(j, r)), where for 32x32 tiles n = 8 (r / 4) + 4 (lane / 32) +
// r % 4 and for 16x16 tiles n = 4 (lane / 16) + r (the MFMA result layout, transposed): items
// 4q..4q+3 are four consecutive columns.
// Rows at or past m_end are not stored; row m goes to output row row_of(m).
template <class Cfg, class Acc, int kSubM, int kSubN, class RowOf>
FP8GEMM_DEVICE void store_tile(const GemmArgs& g, const Acc (&acc)[kSubM][kSubN], int m_lane, int n_wave, int m_end,
                               RowOf row_of) {
  constexpr int kMfma = Cfg::kMfma;
  constexpr int kItems = MfmaTraits<kMfma>::kItems;
  constexpr int kQuads = kItems / 4;
  auto n_of = [&](int j, int q) { return n_wave + j * kMfma + 8 * q; };
  if (g.out_vector_ok) {
    // Row-contiguous, 8-byte aligned bf16 rows with n % 8 == 0: four columns are all in or all out
    // and go out as one 8-byte store.
#pragma unroll
    for (int i = 0; i < kSubM; ++i) {
      const int m = m_lane + i * kMfma;
      if (m >= m_end) continue;
      uint16_t* const out_row = g.out + static_cast<int64_t>(row_of(m)) * g.out_stride_m;
#pragma unroll
      for (int j = 0; j < kSubN; ++j)
#pragma unroll
        for (int q = 0; q < kQuads; ++q) {
          const int n = n_of(j, q);
          if (n < g.n)
            arch::global_store(reinterpret_cast<arch::u32x2*>(out_row + n),
                               pack_bf16x4(acc[i][j][4 * q], acc[i][j][4 * q + 1], acc[i][j][4 * q + 2],
                                           acc[i][j][4 * q + 3]));
        }
    }
    return;
  }
  // Any other output: one bf16 per element, arbitrary strides.
#pragma unroll
  for (int i = 0; i < kSubM; ++i) {
    const int m = m_lane + i * kMfma;
    if (m >= m_end) continue;
    const int64_t out_m = row_of(m);
#pragma unroll
    for (int j = 0; j < kSubN; ++j)
#pragma unroll
      for (int r = 0; r < kItems; ++r) {
        const int n = n_of(j, r / 4) + r % 4;
        if (n < g.n)
          arch::global_store(g.out + out_m * g.out_stride_m + static_cast<int64_t>(n) * g.out_stride_n,
                             f32_to_bf16_rne(acc[i][j][r]));
      }
  }
}

FP8GEMM_DEVICE const GemmArgs& base_args(const GemmArgs& g) { return g; }
FP8GEMM_DEVICE const GemmArgs& base_args(const ExpertTileArgs& x) { return x.base; }

// KArg: the kernel's argument, GemmArgs (one GEMM) or ExpertTileArgs (expert mode, ExpertExtra).
template <class Cfg, bool kMn, class KArg = GemmArgs>
FP8GEMM_DEVICE void gemm_main(const GemmArgs& g) {
  constexpr bool kExpert = std::is_same_v<KArg, ExpertTileArgs>;
  using Traits = MfmaTraits<Cfg::kMfma>;
  using Acc = typename Traits::Acc;
  constexpr int kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kThreads = Cfg::kThreads, kMfma = Cfg::kMfma;
  constexpr int kRow = kBlockK;                        // LDS bytes per tile row (swizzled, no pad)
  constexpr int kSubM = Cfg::kWaveTileM / kMfma;       // MFMA tiles per wave along M
  constexpr int kSubN = Cfg::kWaveTileN / kMfma;
  constexpr int kLaneGroups = 64 / kMfma;              // lanes sharing a row, each with its own K range
  constexpr int kLaneK = Cfg::kWaveK / kLaneGroups;    // contiguous K bytes per lane per K block
  constexpr int kReads = kLaneK / 16;                  // ds_read_b128 per fragment row per K block
  constexpr int kItems = Traits::kItems;
  constexpr int kQuads = kItems / 4;                   // groups of 4 consecutive output columns
  constexpr int kTileWaves = Cfg::kWavesM * Cfg::kWavesN;  // waves with distinct output sub-tiles
  // A partial slot holds the tile's sums in the lane order of the wave_k == 0 waves' accumulators:
  // f32x4 number ((wave_mn * kSubM + i) * kSubN + j) * kQuads + q of every lane, lane-major, so each
  // store and load of a wave is 1 KiB of consecutive bytes.
  constexpr int kWaveSlotFloats = kSubM * kSubN * kQuads * 64 * 4;
  static_assert(kTileWaves * kWaveSlotFloats == kBM * kBN, "a slot is one tile of fp32");

  uint8_t* const lds = arch::lds_base();
  uint8_t* const lds_a = lds;
  uint8_t* const lds_b = lds + kBM * kRow;

  const int tid = arch::thread_id();
  const int lane = arch::lane_id();
  const int wave = arch::wave_id();
  const int wave_k = wave / kTileWaves, wave_mn = wave % kTileWaves;
  const int wave_m = wave_mn / Cfg::kWavesN, wave_n = wave_mn % Cfg::kWavesN;

  // This workgroup's work: first its run of the stream-K tiles (the last sk_tiles tiles, whose
  // tile-major (tile, K block) iterations are dealt in equal runs to workgroups 0..sk_workgroups-1:
  // from K block kb_first of stream-K tile sk_first to K block kb_last (exclusive) of sk_last),
  // then whole tiles v, v + W, v + 2W, ... of the others. One workgroup per tile: just tile v.
  const int kbs = g.k_blocks;
  const int tiles = g.tiles_m * g.tiles_n;
  const int wgs = g.workgroups > 0 ? g.workgroups : tiles;
  const int v = xcd_remap(arch::block_id_x(), wgs);
  const int dp_tiles = tiles - g.sk_tiles;
  // In 32 bits: the plan keeps sk_tiles * k_blocks * sk_workgroups < 2^31.
  const uint32_t sk_iters = static_cast<uint32_t>(g.sk_tiles) * static_cast<uint32_t>(kbs);
  int sk_first = 0, sk_last = -1, kb_first = 0, kb_last = 0;
  if (v < g.sk_workgroups) {
    const uint32_t b = stream_begin<uint32_t>(v, sk_iters, g.sk_workgroups);
    const uint32_t e = stream_begin<uint32_t>(v + 1, sk_iters, g.sk_workgroups);
    sk_first = static_cast<int>(b / kbs);
    sk_last = static_cast<int>((e - 1) / kbs);
    kb_first = static_cast<int>(b) - sk_first * kbs;
    kb_last = static_cast<int>(e) - sk_last * kbs;
  }
  const int n_sk = sk_last - sk_first + 1;
  const int n_dp = v < dp_tiles ? (dp_tiles - v + wgs - 1) / wgs : 0;

  // ---- this lane's MFMA fragment rows --------------------------------------------------------
  const int frag_row = lane % kMfma;  // A row / B column inside one MFMA tile
  // First 16-byte K chunk of this lane: its wave's K share, then its lane group's part of it.
  const int frag_chunk = wave_k * (Cfg::kWaveK / 16) + (lane / kMfma) * (kLaneK / 16);
  // Tile origins and MFMA strides are multiples of 8 rows, so every fragment row has the swizzle
  // key frag_row % 8.
  const int swizzle = frag_row % 8;
  const int a_frag_base = (wave_m * Cfg::kWaveTileM + frag_row) * kRow;
  const int b_frag_base = (wave_n * Cfg::kWaveTileN + frag_row) * kRow;
  static_assert(Cfg::kWaveTileM % 8 == 0 && Cfg::kWaveTileN % 8 == 0 && kMfma % 8 == 0, "swizzle key");

  // Stream-K tiles first, and of those the first and the last of the run (the only ones it can
  // share) first: the hand-off of a shared tile then happens while its workgroups still have other
  // tiles to work on, wherever they have any.
  const int n_tiles = n_sk + n_dp;
  for (int seg = 0; seg < n_tiles; ++seg) {
    // The kernel argument again, so that its fields are not held in registers across the K loop.
    const KArg karg = arch::kernel_arg<KArg>();
    const GemmArgs& gs = base_args(karg);
    int tile = v + (seg - n_sk) * wgs, sk = -1, kb_begin = 0, kb_end = kbs;
    if (seg < n_sk) {
      sk = seg == 0 ? sk_first : seg == 1 ? sk_last : sk_first + seg - 1;
      tile = dp_tiles + sk;
      kb_begin = sk == sk_first ? kb_first : 0;
      kb_end = sk == sk_last ? kb_last : kbs;
    }
    int tile_m, tile_n, m0, m_end = gs.m;
    const uint8_t* b_base = gs.b;
    const float* b_scale_base = gs.b_scale;
    [[maybe_unused]] const int32_t* row_map = nullptr;
    if constexpr (kExpert) {
      // Expert mode: tile = block * tiles_n + tile_n; the block's expert is the last whose block prefix
      // is <= block (experts without rows share their successor's prefix).
      const ExpertExtra& x = karg.expert;
      tile_n = tile % gs.tiles_n;
      const int block = tile / gs.tiles_n;
      const int32_t* const prefix = x.segments + 2 * x.experts;
      if (block >= arch::global_load(prefix + x.experts)) continue;  // uniform: past the last block
      int lo = 0, hi = x.experts - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (arch::global_load(prefix + mid) <= block)
          lo = mid;
        else
          hi = mid - 1;
      }
      tile_m = block - arch::global_load(prefix + lo);
      m0 = arch::global_load(x.segments + lo) + tile_m * kBM;
      m_end = arch::global_load(x.segments + x.experts + lo);
      b_base += static_cast<int64_t>(lo) * x.b_stride_e;
      b_scale_base += static_cast<int64_t>(lo) * x.b_scale_stride_e;
      row_map = x.row_map;
    } else {
      tile_coords(tile, gs.tiles_m, gs.tiles_n, tile_m, tile_n);
      m0 = tile_m * kBM;
    }
    const int n0 = tile_n * kBN;

    // ---- global -> register staging of the A and B tiles --------------------------------------
    TileStager<kBM, kThreads, kMn> stage_a;
    TileStager<kBN, kThreads, kMn> stage_b;
    stage_a.init(gs.a, gs.lda, m0, m_end, kMn ? gs.k : gs.k_limit, kbs, kb_begin, tid);
    stage_b.init(b_base, gs.ldb, n0, gs.n, kMn ? gs.k : gs.k_limit, kbs, kb_begin, tid);

    // The accumulator column of this lane in every MFMA tile is output row m_lane + i * kMfma.
    const int m_lane = m0 + wave_m * Cfg::kWaveTileM + lane % kMfma;
    // a_scale of those rows (rows past M read row M - 1's: their outputs are never stored).
    const float* a_scale_src[kSubM];
#pragma unroll
    for (int i = 0; i < kSubM; ++i) {
      const int r = m_lane + i * kMfma < m_end ? m_lane + i * kMfma : m_end - 1;
      a_scale_src[i] = gs.a_scale + static_cast<int64_t>(r) * gs.a_scale_stride_m;
    }
    const float* const b_scale_col = b_scale_base + static_cast<int64_t>(n0 / 128) * gs.b_scale_stride_nb;
    float a_scale_stage[kSubM], b_scale_stage;

    auto load_stage = [&](int kb) {
      stage_a.load(kb == kbs - 1);
      stage_b.load(kb == kbs - 1);
#pragma unroll
      for (int i = 0; i < kSubM; ++i)
        a_scale_stage[i] = arch::global_load(a_scale_src[i] + static_cast<int64_t>(kb) * gs.a_scale_stride_kb);
      // A vector load (every lane the same address): it is counted by vmcnt, so the lgkmcnt wait
      // in front of the first MFMA waits for the LDS fragments only, not for a scalar round trip.
      b_scale_stage = arch::global_load(b_scale_col + static_cast<int64_t>(kb) * gs.b_scale_stride_kb);
    };

    Acc acc[kSubM][kSubN];
#pragma unroll
    for (int i = 0; i < kSubM; ++i)
#pragma unroll
      for (int j = 0; j < kSubN; ++j)
#pragma unroll
        for (int r = 0; r < kItems; ++r) acc[i][j][r] = 0.0f;

    load_stage(kb_begin);
    if constexpr (kMn)
      FP8GEMM_ISA_NOTE("main loop mn-major");
    else
      FP8GEMM_ISA_NOTE("main loop k-major");
    for (int kb = kb_begin; kb < kb_end; ++kb) {
      stage_a.store(lds_a);
      stage_b.store(lds_b);
      const float b_scale_now = b_scale_stage * gs.scale_factor;
      float scale[kSubM];
#pragma unroll
      for (int i = 0; i < kSubM; ++i) scale[i] = a_scale_stage[i] * b_scale_now;
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
        for (int i = 0; i < kSubM; ++i) {
          af[i] = arch::lds_load(reinterpret_cast<const arch::u32x4*>(lds_a + a_frag_base + i * kMfma * kRow + chunk_off));
          arch::keep(af[i]);
        }
#pragma unroll
        for (int j = 0; j < kSubN; ++j) {
          bf[j] = arch::lds_load(reinterpret_cast<const arch::u32x4*>(lds_b + b_frag_base + j * kMfma * kRow + chunk_off));
          arch::keep(bf[j]);
        }
        // The 16 bytes give two MFMA K steps; A and B use the same K order, so the dot product is the
        // same whichever 8 K values an MFMA step takes. B's fragment is the instruction's A operand:
        // the result is the transposed tile (accumulator row = output column).
#pragma unroll
        for (int i = 0; i < kSubM; ++i)
#pragma unroll
          for (int j = 0; j < kSubN; ++j) part[i][j] = Traits::mfma(lo64(bf[j]), lo64(af[i]), part[i][j]);
#pragma unroll
        for (int i = 0; i < kSubM; ++i)
#pragma unroll
          for (int j = 0; j < kSubN; ++j) part[i][j] = Traits::mfma(hi64(bf[j]), hi64(af[i]), part[i][j]);
      }

      // One scale multiply-add per output per K block: every item of sub-tile row i is output row
      // m_lane + i * kMfma, so one scale per i.
#pragma unroll
      for (int i = 0; i < kSubM; ++i)
#pragma unroll
        for (int j = 0; j < kSubN; ++j) acc[i][j] += part[i][j] * scale[i];  // vector op: packed fp32 FMAs
      arch::barrier();  // every wave is done with this K block's LDS before it is overwritten
    }

    // ---- epilogue ----------------------------------------------------------------------------
    const KArg karg_e = arch::kernel_arg<KArg>();
    const GemmArgs& ge = base_args(karg_e);
    if constexpr (Cfg::kWavesK > 1) {
      // Sum the K shares: waves with wave_k > 0 park their accumulators in LDS (lane-major 16-byte
      // slots, conflict-free), the wave_k == 0 wave of the same sub-tile adds them up. The K loop
      // ended with a barrier, so the tile LDS is free.
      constexpr int kSlots = kSubM * kSubN * kItems / 4;  // f32x4 per lane
      constexpr int kRegion = kSlots * 64 * 16;           // bytes per parked wave
      static_assert((Cfg::kWavesK - 1) * kTileWaves * kRegion <= Cfg::kLdsBytes, "reduction fits the LDS");
      if (wave_k > 0) {
        uint8_t* const region = lds + ((wave_k - 1) * kTileWaves + wave_mn) * kRegion + lane * 16;
#pragma unroll
        for (int i = 0; i < kSubM; ++i)
#pragma unroll
          for (int j = 0; j < kSubN; ++j)
#pragma unroll
            for (int q = 0; q < kItems / 4; ++q) {
              const arch::f32x4 x = {acc[i][j][4 * q], acc[i][j][4 * q + 1], acc[i][j][4 * q + 2], acc[i][j][4 * q + 3]};
              arch::lds_store(reinterpret_cast<arch::f32x4*>(region + ((i * kSubN + j) * (kItems / 4) + q) * 64 * 16), x);
            }
      }
      arch::barrier();
      if (wave_k == 0) {
#pragma unroll
        for (int w = 1; w < Cfg::kWavesK; ++w) {
          const uint8_t* const region = lds + ((w - 1) * kTileWaves + wave_mn) * kRegion + lane * 16;
#pragma unroll
          for (int i = 0; i < kSubM; ++i)
#pragma unroll
            for (int j = 0; j < kSubN; ++j)
#pragma unroll
              for (int q = 0; q < kItems / 4; ++q) {
                const arch::f32x4 x = arch::lds_load(
                    reinterpret_cast<const arch::f32x4*>(region + ((i * kSubN + j) * (kItems / 4) + q) * 64 * 16));
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][4 * q + e] += x[e];
              }
        }
      }
    }
    // From here the wave_k == 0 waves hold the sums of this workgroup's K blocks of the tile.
    bool finish = kb_begin == 0 && kb_end == kbs;  // the whole tile is this workgroup's
    if constexpr (!kExpert) {  // expert mode: no stream-K, every tile is whole
      if (!finish) {
        // Shared (stream-K) tile: workgroups c_lo..c_hi cover its K blocks. Each parks its sums in a
        // partial slot and takes a ticket; the last one adds the others' slots to its own sums in
        // workgroup order (the same additions whichever arrives last) and stores the bf16 tile.
        const uint32_t sk_it0 = static_cast<uint32_t>(sk) * static_cast<uint32_t>(kbs);
        const int c_lo = static_cast<int>(stream_owner<uint32_t>(sk_it0, sk_iters, ge.sk_workgroups));
        const int c_hi = static_cast<int>(stream_owner<uint32_t>(sk_it0 + kbs - 1, sk_iters, ge.sk_workgroups));
        // Slot sk + c: (tile, workgroup) pairs of the runs, in iteration order, never share it.
        auto slot_of = [&](int c) {
          return ge.partial + (static_cast<int64_t>(sk + c) * kTileWaves + wave_mn) * kWaveSlotFloats + lane * 4;
        };
        if (wave_k == 0) {
          float* const mine = slot_of(v);
  #pragma unroll
          for (int i = 0; i < kSubM; ++i)
  #pragma unroll
            for (int j = 0; j < kSubN; ++j)
  #pragma unroll
              for (int q = 0; q < kQuads; ++q) {
                const arch::f32x4 x = {acc[i][j][4 * q], acc[i][j][4 * q + 1], acc[i][j][4 * q + 2], acc[i][j][4 * q + 3]};
                arch::global_store(reinterpret_cast<arch::f32x4*>(mine + ((i * kSubN + j) * kQuads + q) * 256), x);
              }
        }
        arch::fence_release_agent();  // the slot is visible at agent scope before the ticket is taken
        arch::barrier();
        uint32_t* const ticket = reinterpret_cast<uint32_t*>(lds);
        // The counter wraps to 0 on the last arrival (global_atomic_inc): it is zero again after the
        // call, so a caller that keeps the workspace needs no zeroing before the next one.
        if (tid == 0) arch::lds_store(ticket, arch::atomic_inc_agent(ge.tile_counters + sk, static_cast<uint32_t>(c_hi - c_lo)));
        arch::barrier();
        finish = arch::lds_load(ticket) == static_cast<uint32_t>(c_hi - c_lo);
        if (finish) {
          arch::fence_acquire_agent();  // the other slots, released before their tickets
          if (wave_k == 0) {
            // Every contribution in workgroup order, its own from registers: the same additions
            // whichever workgroup arrives last. One MFMA tile at a time (few live registers).
  #pragma unroll
            for (int i = 0; i < kSubM; ++i)
  #pragma unroll
              for (int j = 0; j < kSubN; ++j) {
                Acc total;
                for (int c = c_lo; c <= c_hi; ++c) {
                  const float* const src = slot_of(c) + (i * kSubN + j) * kQuads * 256;
  #pragma unroll
                  for (int q = 0; q < kQuads; ++q) {
                    arch::f32x4 x;
                    if (c == v)
                      x = arch::f32x4{acc[i][j][4 * q], acc[i][j][4 * q + 1], acc[i][j][4 * q + 2], acc[i][j][4 * q + 3]};
                    else
                      x = arch::global_load(reinterpret_cast<const arch::f32x4*>(src + q * 256));
  #pragma unroll
                    for (int e = 0; e < 4; ++e) total[4 * q + e] = c == c_lo ? x[e] : total[4 * q + e] + x[e];
                  }
                }
                acc[i][j] = total;
              }
          }
        }
      }
    }
    if (finish && wave_k == 0) {
      const int n_wave = n0 + wave_n * Cfg::kWaveTileN + 4 * (lane / kMfma);
      if constexpr (kExpert) {
        if (row_map != nullptr)
          store_tile<Cfg>(ge, acc, m_lane, n_wave, m_end, [&](int m) { return arch::global_load(row_map + m); });
        else
          store_tile<Cfg>(ge, acc, m_lane, n_wave, m_end, [](int m) { return m; });
      } else {
        store_tile<Cfg>(ge, acc, m_lane, n_wave, ge.m, [](int m) { return m; });
      }
    }
    if (seg + 1 < n_tiles) arch::barrier();  // the K-share slots and the ticket in LDS are read before the next copy
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

// Expert mode of the main pass (ExpertTileArgs): K-major operands only (the expert plan packs or
// gathers them into that layout).
template <class Cfg>
FP8GEMM_DEVICE void expert_tile_body(const ExpertTileArgs& x) {
  detail::gemm_main<Cfg, false, ExpertTileArgs>(x.base);
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

}  // namespace fp8gemm::rocm
