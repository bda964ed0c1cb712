// Kernel argument blocks of the gfx942 GEMM passes. Plain host C++ PODs (raw pointers, sizes,
// element strides) passed by value to the kernels; shared by the HIP launcher and the emulator.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8gemm::rocm {

// Pack pass: one operand (a or b) -> K-major e4m3fnuz copy in the workspace, rows of `dst_ld`
// bytes (a multiple of 128), zero-filled for k in [k, dst_ld). Any source strides.
enum class PackMode : int32_t {
  kMnVector = 0,  // source rows contiguous (stride_row == 1), 16-byte aligned: dwordx4 loads + byte transpose
  kKVector = 1,   // source K-contiguous (stride_k == 1), 4-byte aligned: dword loads along k
  kGather = 2,    // anything else: byte gathers (slow, always correct)
};

struct PackArgs {
  const uint8_t* src;
  int64_t stride_row, stride_k;  // elements (bytes)
  int32_t rows, k;               // logical rows (M or N) and K
  uint8_t* dst;
  int64_t dst_ld;
  PackMode mode;
  int32_t convert_e4m3fn;  // 1: map e4m3fn bytes to e4m3fnuz (see fp8_numerics.h)
};

// Main pass. Each operand is read either K-major (rows of lda/ldb bytes, 16-byte aligned, valid k
// in [0, k_limit), k_limit a multiple of 16; bytes at k >= K inside the limit are zero) or
// MN-major (see a_mn_major). Bytes are e4m3fnuz (e4m3fn operands arrive packed and converted).
// The plan keeps every byte the kernel addresses inside one tile's K block below 2 GiB from the
// block's first byte (buffer-load offsets are 32-bit).
struct GemmArgs {
  const uint8_t* a;
  int64_t lda;
  const uint8_t* b;
  int64_t ldb;
  const float* a_scale;
  int64_t a_scale_stride_m, a_scale_stride_kb;
  const float* b_scale;
  int64_t b_scale_stride_nb, b_scale_stride_kb;
  float scale_factor;  // 1, or 4 for e4m3fn inputs converted by the pack pass (fp8_numerics.h)
  int32_t m, n, k_limit;
  int32_t k_blocks;        // ceil(K / 128)
  int32_t tiles_m, tiles_n;
  uint16_t* out;
  int64_t out_stride_m, out_stride_n;
  // Work decomposition. workgroups == 0: one workgroup per tile over all K blocks (grid = tiles).
  // Else grid = workgroups = W: workgroup v first takes its run of the stream-K tiles (the last
  // sk_tiles tiles: their tile-major (tile, K block) iterations are dealt in equal runs,
  // stream_begin below, to workgroups 0..sk_workgroups-1), then whole tiles v, v + W, ... of the
  // others. A stream-K tile covered by several workgroups: each writes its fp32 sums to partial
  // slot (stream-K tile + workgroup) and takes a ticket from tile_counters[stream-K tile] (zero at the
  // start: the plan's zero pass, or the previous call's last arrivals); the last of them adds the
  // others' slots, stores bf16 and leaves the counter at 0.
  int32_t workgroups;
  int32_t sk_tiles, sk_workgroups;
  uint32_t* tile_counters;  // one per stream-K tile (only when some tile is shared)
  float* partial;           // slots of block_m * block_n floats in the lane order of the accumulators
  // 1: the operand is read in place MN-major (rows contiguous; lda / ldb is then the byte stride
  // between consecutive k) and transposed in registers on the way to LDS.
  int32_t a_mn_major, b_mn_major;
  int32_t k;  // logical K (MN-major operands mask k rows >= k)
  // 1: out row-contiguous, 16-byte aligned rows and n % 8 == 0: the epilogue writes four bf16
  // columns per 8-byte store.
  int32_t out_vector_ok;
};

// Expert (grouped) mode of the main pass (the MoE expert GEMMs, expert_gemm_rocm.h). `base` describes
// the operands as one GEMM over the rows of a (m = rows, K-major, e4m3fnuz) and one expert's b (n rows);
// the grid is tiles_m x tiles_n workgroups, one tile each (workgroups = 0, no stream-K), where tiles_m
// bounds the M blocks of all experts together. Workgroup (block, tile_n) finds its expert e by binary
// search over the exclusive prefix of the experts' block counts, then multiplies rows [start + block'
// * block_m, end) of a (its expert's segment) by b + e * b_stride_e with b_scale + e * b_scale_stride_e;
// rows past the segment are neither read nor stored. Workgroups past the last block return at once.
struct ExpertExtra {
  const int32_t* segments;  // starts [0, E), ends [E, 2E), block prefix [2E, 3E] (3E: all blocks)
  const int32_t* row_map;   // output row of each row of a (null: the same row)
  int64_t b_stride_e;       // bytes between the experts' b in the operand the pass reads
  int64_t b_scale_stride_e;
  int32_t experts;
  int32_t reserved;
};

struct ExpertTileArgs {
  GemmArgs base;  // first: the pass re-reads it as the kernel argument's leading bytes
  ExpertExtra expert;
};

// Stream-K runs, shared by the kernel and the host plan: workgroup v of W (after the XCD remapping
// of gemm_rocm_kernels.h) covers iterations [stream_begin(v), stream_begin(v + 1)) of `iters`
// tile-major (tile, K block) iterations; every run is non-empty when W <= iters. stream_owner(x)
// is the workgroup whose run holds iteration x. The plan keeps iters * W < 2^31, so the kernel
// does this in 32-bit unsigned arithmetic.
template <class I>
constexpr I stream_begin(I v, I iters, I wgs) {
  return v * iters / wgs;
}
template <class I>
constexpr I stream_owner(I x, I iters, I wgs) {
  return ((x + 1) * wgs - 1) / iters;
}
constexpr int64_t kMaxStreamProduct = (int64_t{1} << 31) - 1;  // iters * W of the stream-K runs

// Zero pass: `bytes` zero bytes at `dst` (hipMemsetAsync), before the GEMM pass that uses them.
struct ZeroArgs {
  void* dst;
  size_t bytes;
};

constexpr int kPackTile = 128;      // pack pass: 128 rows x 128 k per workgroup
constexpr int kPackThreads = 256;
constexpr int kPackLdsBytes = kPackTile * kPackTile;

}  // namespace fp8gemm::rocm
