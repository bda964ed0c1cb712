// The gfx942 GEMM call as data: which passes run (pack a, pack b, zeroing of the stream-K tile
// counters, GEMM), with
// their grids, workgroup sizes, LDS bytes and argument blocks, plus the workspace layout. Plain
// host C++: the HIP launcher (gemm_launcher.hip) and the CPU SIMT emulator execute the same plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <climits>

#include "gemm_problem.h"
#include "gemm_rocm_args.h"
#include "gemm_rocm_config.h"
#include "fp8_numerics.h"

namespace fp8gemm::rocm {

enum class PassKind : int32_t { kPack = 0, kGemm = 1, kZero = 2 };

struct Pass {
  PassKind kind;
  GemmKernelId gemm_kernel;  // kGemm only
  uint32_t grid[3];          // workgroups in x, y, z
  uint32_t block_threads;
  uint32_t lds_bytes;        // dynamic LDS
  PackArgs pack;             // kPack
  GemmArgs gemm;             // kGemm
  ZeroArgs zero;             // kZero (a memset: no grid, no kernel of ours)
};

enum class PlanStatus : int32_t {
  kOk = 0,
  kBadShape,        // m, n or k < 1, or beyond the 32-bit index range the kernels use
  kNullPointer,     // a, b, a_scale, b_scale or out is null
  kBadFormat,       // unknown Fp8Format
  kNoWorkspace,     // workspace needed but null / too small (make_plan with a workspace only)
};

struct Plan {
  PlanStatus status = PlanStatus::kBadShape;
  GemmConfig config{GemmKernelId::kT128x128_W2x2_M32, 0, 0};  // as executed (normalised by make_plan)
  bool tuned = false;       // config came from kTunedShapes
  bool pack_a = false, pack_b = false;            // operand goes through a pack pass
  bool a_mn_direct = false, b_mn_direct = false;  // operand read in place MN-major
  size_t workspace_bytes = 0;
  int num_passes = 0;
  Pass passes[4] = {};
};

constexpr size_t kWorkspaceAlign = 256;
constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Largest M, N, K the kernels index with 32-bit ints (row * 128 tiles etc. stay < 2^31).
constexpr int64_t kMaxDim = (int64_t{1} << 30);

// In-place reads go through buffer loads with 32-bit offsets from a K block's first byte: a K-major
// tile spans (rows - 1) * ld + K bytes (rows <= the tallest tile), an MN-major K block 128 * ld.
constexpr int64_t kMaxBufferSpan = int64_t{1} << 31;
constexpr int64_t kMaxTileRows = 256;

constexpr bool tiles_within_buffer_span() {
  for (const GemmKernelShape& s : kGemmKernels)
    if (s.block_m > kMaxTileRows || s.block_n > kMaxTileRows) return false;
  return true;
}
static_assert(tiles_within_buffer_span(), "a kernel tile is taller than the in-place span check assumes");

namespace detail {

inline bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Can the main kernel read this operand in place? e4m3fnuz, K-major rows, 16-byte aligned dwordx4
// loads, whole 16-byte chunks (K % 16 == 0), a tile within the buffer-offset range.
inline bool direct_ok(const uint8_t* base, int64_t rows, int64_t stride_row, int64_t stride_k, int64_t k) {
  if (k % 16 != 0) return false;
  if (stride_k != 1 || !aligned(base, 16)) return false;
  if (rows == 1) return true;
  return stride_row % 16 == 0 && (kMaxTileRows - 1) * stride_row + k <= kMaxBufferSpan;
}

// Can the main kernel read this operand in place MN-major (transposing in registers)? Rows
// contiguous, 16-byte aligned k rows that do not overlap, whole 16-row groups (no partial row group
// at the M/N tail), a K block within the buffer-offset range.
inline bool direct_mn_ok(const uint8_t* base, int64_t rows, int64_t stride_row, int64_t stride_k) {
  return stride_row == 1 && rows % 16 == 0 && stride_k % 16 == 0 && stride_k >= rows &&
         kBlockK * stride_k <= kMaxBufferSpan && aligned(base, 16);
}

inline PackMode pack_mode(const uint8_t* base, int64_t rows, int64_t stride_row, int64_t stride_k) {
  if (stride_row == 1 && stride_k % 16 == 0 && aligned(base, 16)) return PackMode::kMnVector;
  if (stride_k == 1 && (rows == 1 || stride_row % 4 == 0) && aligned(base, 4)) return PackMode::kKVector;
  return PackMode::kGather;
}

inline Pass make_pack_pass(const uint8_t* src, int64_t rows, int64_t stride_row, int64_t stride_k, int64_t k,
                           uint8_t* dst, int64_t dst_ld, bool convert_fn) {
  Pass pass{};
  pass.kind = PassKind::kPack;
  pass.grid[0] = static_cast<uint32_t>(ceil_div(rows, kPackTile));
  pass.grid[1] = static_cast<uint32_t>(dst_ld / kPackTile);
  pass.grid[2] = 1;
  pass.block_threads = kPackThreads;
  pass.lds_bytes = kPackLdsBytes;
  pass.pack = PackArgs{src,
                       stride_row,
                       stride_k,
                       static_cast<int32_t>(rows),
                       static_cast<int32_t>(k),
                       dst,
                       dst_ld,
                       pack_mode(src, rows, stride_row, stride_k),
                       convert_fn ? 1 : 0};
  return pass;
}

}  // namespace detail

// Builds the plan. With workspace == nullptr only the sizes are filled in (status may still be
// kOk: that is how workspace_bytes() asks); with a workspace, its size is checked.
// `config_override` (tests only: the launcher never passes one) replaces select_config's choice.
inline Plan make_plan(const GemmProblem& p, void* workspace, size_t workspace_size, bool sizing_only,
                      const GemmConfig* config_override = nullptr) {
  Plan plan;
  if (p.m < 1 || p.n < 1 || p.k < 1 || p.m > kMaxDim || p.n > kMaxDim || p.k > kMaxDim) {
    plan.status = PlanStatus::kBadShape;
    return plan;
  }
  if (p.format != Fp8Format::kE4M3FNUZ && p.format != Fp8Format::kE4M3FN) {
    plan.status = PlanStatus::kBadFormat;
    return plan;
  }
  if (!sizing_only && (!p.a || !p.b || !p.a_scale || !p.b_scale || !p.out)) {
    plan.status = PlanStatus::kNullPointer;
    return plan;
  }
  const bool fn = p.format == Fp8Format::kE4M3FN;
  const int64_t k_blocks = p.k_blocks();
  const int64_t k_pad = k_blocks * kBlockK;

  plan.tuned = config_override == nullptr && is_tuned_shape(p.m, p.n, p.k);
  plan.config = config_override ? *config_override : select_config(p.m, p.n, p.k);
  if (static_cast<int>(plan.config.kernel) < 0 || static_cast<int>(plan.config.kernel) >= kNumGemmKernels) {
    plan.status = PlanStatus::kBadShape;
    return plan;
  }
  const GemmKernelShape& ks = kernel_shape(plan.config.kernel);
  // Grid limits: the GEMM's tile count is a 32-bit int in the kernel, the pack pass puts K tiles
  // on grid y (at most 65535 on AMD).
  const int64_t tile_total = ceil_div(p.m, ks.block_m) * ceil_div(p.n, ks.block_n);
  if (tile_total > INT32_MAX || k_blocks > 65535) {
    plan.status = PlanStatus::kBadShape;
    return plan;
  }

  // Work decomposition (GemmConfig): W workgroups; the tiles past the last whole wave of W are
  // stream-K tiles, dealt in runs to sk_workgroups of them (at most one per iteration, and
  // iterations x sk_workgroups within the kernel's 32-bit arithmetic); W = tiles, or no stream-K
  // tile to share, needs nothing but the grid.
  int64_t wgs = plan.config.workgroups < 0 ? 0 : plan.config.workgroups;
  if (wgs > tile_total * k_blocks) wgs = tile_total * k_blocks;
  int64_t sk_tiles = 0, sk_wgs = 0;
  if (wgs > 0 && wgs != tile_total) {
    sk_tiles = wgs < tile_total ? tile_total % wgs : tile_total;
    sk_wgs = plan.config.sk_workgroups > 0 && plan.config.sk_workgroups < wgs ? plan.config.sk_workgroups : wgs;
    if (sk_wgs > sk_tiles * k_blocks) sk_wgs = sk_tiles * k_blocks;
    if (sk_tiles * k_blocks * sk_wgs > kMaxStreamProduct) sk_wgs = kMaxStreamProduct / (sk_tiles * k_blocks);
    if (sk_tiles > 0 && sk_wgs < 1) wgs = sk_tiles = sk_wgs = 0;  // beyond 32 bits: one workgroup per tile
  }
  if (wgs == tile_total) wgs = 0;
  if (sk_tiles == 0) sk_wgs = 0;
  plan.config.workgroups = static_cast<int32_t>(wgs);
  plan.config.sk_workgroups = static_cast<int32_t>(sk_wgs);
  // shared: a stream-K tile is covered by more than one workgroup (counters, slots, zero pass).
  bool shared = false;
  for (int64_t v = 1; v < sk_wgs && !shared; ++v) shared = stream_begin(v, sk_tiles * k_blocks, sk_wgs) % k_blocks != 0;

  // Per operand: K-major in place, else MN-major in place, else a pack pass into the workspace.
  // e4m3fn operands always take the pack pass, which converts them (the GEMM reads e4m3fnuz only).
  const bool a_k_direct = !fn && detail::direct_ok(p.a, p.m, p.a_stride_m, p.a_stride_k, p.k);
  const bool b_k_direct = !fn && detail::direct_ok(p.b, p.n, p.b_stride_n, p.b_stride_k, p.k);
  // The kernel reads both operands in the same layout; MN-major in place needs both eligible.
  const bool mn_direct = !fn && !a_k_direct && !b_k_direct &&
                         detail::direct_mn_ok(p.a, p.m, p.a_stride_m, p.a_stride_k) &&
                         detail::direct_mn_ok(p.b, p.n, p.b_stride_n, p.b_stride_k);
  plan.a_mn_direct = plan.b_mn_direct = mn_direct;
  plan.pack_a = !a_k_direct && !mn_direct;
  plan.pack_b = !b_k_direct && !mn_direct;

  // Workspace: [packed a: m x k_pad][packed b: n x k_pad][tile counters][partial slots].
  size_t off = 0;
  const size_t a_off = off;
  if (plan.pack_a) off = align_up(off + static_cast<size_t>(p.m * k_pad), kWorkspaceAlign);
  const size_t b_off = off;
  if (plan.pack_b) off = align_up(off + static_cast<size_t>(p.n * k_pad), kWorkspaceAlign);
  const size_t counters_off = off;
  const size_t counters_bytes = shared ? static_cast<size_t>(sk_tiles) * sizeof(uint32_t) : 0;
  off = align_up(off + counters_bytes, kWorkspaceAlign);
  const size_t partial_off = off;
  if (shared)  // slots sk + c < sk_tiles + sk_workgroups
    off = align_up(off + static_cast<size_t>((sk_tiles + sk_wgs) * ks.block_m * ks.block_n) * sizeof(float),
                   kWorkspaceAlign);
  plan.workspace_bytes = off;
  if (sizing_only) {
    plan.status = PlanStatus::kOk;
    return plan;
  }
  if (off > 0 && (workspace == nullptr || workspace_size < off || !detail::aligned(workspace, kWorkspaceAlign))) {
    plan.status = PlanStatus::kNoWorkspace;
    return plan;
  }
  uint8_t* ws = static_cast<uint8_t*>(workspace);

  // Where the GEMM pass reads one operand (`rows` x K) and its leading dimension: the packed copy,
  // the MN-major original (leading dimension = K stride), or the K-major original.
  struct Operand {
    const uint8_t* data;
    int64_t ld;
  };
  auto operand = [&](const uint8_t* x, int64_t rows, int64_t stride_row, int64_t stride_k, bool pack, bool mn_direct,
                     uint8_t* packed) -> Operand {
    if (pack) {
      plan.passes[plan.num_passes++] = detail::make_pack_pass(x, rows, stride_row, stride_k, p.k, packed, k_pad, fn);
      return {packed, k_pad};
    }
    if (mn_direct) return {x, stride_k};
    return {x, rows == 1 ? 0 : stride_row};  // a single row: the stride is never used
  };
  const Operand a = operand(p.a, p.m, p.a_stride_m, p.a_stride_k, plan.pack_a, plan.a_mn_direct, ws + a_off);
  const Operand b = operand(p.b, p.n, p.b_stride_n, p.b_stride_k, plan.pack_b, plan.b_mn_direct, ws + b_off);

  if (shared) {
    Pass zero{};
    zero.kind = PassKind::kZero;
    zero.zero = ZeroArgs{ws + counters_off, counters_bytes};
    plan.passes[plan.num_passes++] = zero;
  }

  Pass gemm{};
  gemm.kind = PassKind::kGemm;
  gemm.gemm_kernel = plan.config.kernel;
  const int64_t tiles_m = ceil_div(p.m, ks.block_m), tiles_n = ceil_div(p.n, ks.block_n);
  gemm.grid[0] = static_cast<uint32_t>(wgs > 0 ? wgs : tile_total);
  gemm.grid[1] = 1;
  gemm.grid[2] = 1;
  gemm.block_threads = static_cast<uint32_t>(ks.threads());
  gemm.lds_bytes = static_cast<uint32_t>(ks.lds_bytes());
  uint32_t* counters = shared ? reinterpret_cast<uint32_t*>(ws + counters_off) : nullptr;
  float* partial = shared ? reinterpret_cast<float*>(ws + partial_off) : nullptr;
  gemm.gemm = GemmArgs{a.data,
                       a.ld,
                       b.data,
                       b.ld,
                       p.a_scale,
                       p.a_scale_stride_m,
                       p.a_scale_stride_kb,
                       p.b_scale,
                       p.b_scale_stride_nb,
                       p.b_scale_stride_kb,
                       fn ? kE4m3fnProductFactor : 1.0f,
                       static_cast<int32_t>(p.m),
                       static_cast<int32_t>(p.n),
                       static_cast<int32_t>((p.k + 15) / 16 * 16),
                       static_cast<int32_t>(k_blocks),
                       static_cast<int32_t>(tiles_m),
                       static_cast<int32_t>(tiles_n),
                       p.out,
                       p.out_stride_m,
                       p.out_stride_n,
                       static_cast<int32_t>(wgs),
                       static_cast<int32_t>(sk_tiles),
                       static_cast<int32_t>(sk_wgs),
                       counters,
                       partial,
                       plan.a_mn_direct ? 1 : 0,
                       plan.b_mn_direct ? 1 : 0,
                       static_cast<int32_t>(p.k),
                       (p.out_stride_n == 1 && p.n % 8 == 0 && (p.m == 1 || p.out_stride_m % 8 == 0) &&
                        detail::aligned(p.out, 16))
                           ? 1
                           : 0};
  plan.passes[plan.num_passes++] = gemm;

  plan.status = PlanStatus::kOk;
  return plan;
}

inline size_t plan_workspace_bytes(const GemmProblem& p, const GemmConfig* config_override = nullptr) {
  const Plan plan = make_plan(p, nullptr, 0, /*sizing_only=*/true, config_override);
  return plan.status == PlanStatus::kOk ? plan.workspace_bytes : 0;
}

}  // namespace fp8gemm::rocm
