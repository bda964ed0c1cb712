// The gfx942 MoE expert GEMM call as data (include/expert_gemm.h): its passes, their grids and argument
// blocks, and the workspace layout. Plain host C++: the HIP launcher (expert_launcher.hip) and the CPU
// SIMT emulator execute the same plan. Everything depends on the problem's sizes, strides, format and
// pointer alignment only, never on the routing's values (no host synchronisation, graph-capturable).
//
//   matmul_grouped: [pack a] [pack b] segments (offsets -> segments, zeros past the last end), tiles
//   matmul_batched: zero counts, count, segments, gather (a rows and scales into expert order, zeros
//                   into the rows of no expert), [pack b], tiles
// tiles: the expert mode of the main GEMM pass (gemm_rocm_kernels.h, ExpertTileArgs), one workgroup per
// (expert M block, N block), K-major e4m3fnuz operands: a read in place when it can be (matmul_grouped,
// e4m3fnuz, 16-byte rows), else packed / gathered; b read in place per expert when it can be, else packed
// (e4m3fn operands are always converted, and the product's factor 4 folded into the scales).
#pragma once

#include <cstddef>
#include <cstdint>

#include "expert_gemm.h"
#include "expert_gemm_rocm_kernels.h"
#include "fp8_numerics.h"
#include "gemm_rocm_args.h"
#include "gemm_rocm_config.h"
#include "gemm_rocm_plan.h"

namespace fp8gemm::rocm {

enum class ExpertPassKind : int32_t {
  kZero = 0,             // memset (the per-expert counts)
  kGroupedSegments = 1,  // grouped_segments_body
  kBatchedCount = 2,     // batched_count_body
  kBatchedSegments = 3,  // batched_segments_body
  kBatchedGather = 4,    // batched_gather_body
  kPack = 5,             // pack_body, `repeat` times with src / dst moved by the steps each time
  kTiles = 6,            // expert_tile_body<kernel>
};

struct ExpertPass {
  ExpertPassKind kind;
  uint32_t grid[3];
  uint32_t block_threads;
  uint32_t lds_bytes;
  RouteArgs route;       // routing passes
  PackArgs pack;         // kPack
  int64_t repeat;        // kPack: launches
  int64_t src_step, dst_step;  // kPack: bytes between consecutive launches' src / dst
  GemmKernelId kernel;   // kTiles
  ExpertTileArgs tiles;  // kTiles
  ZeroArgs zero;         // kZero
};

struct ExpertPlan {
  PlanStatus status = PlanStatus::kBadShape;
  GemmKernelId kernel = GemmKernelId::kT128x128_W2x2_M32;
  bool pack_a = false, pack_b = false;  // an operand goes through the pack pass
  size_t workspace_bytes = 0;
  int num_passes = 0;
  ExpertPass passes[7] = {};
};

namespace detail {

inline bool expert_shape_ok(const ExpertGemmProblem& p) {
  if (p.s < 1 || p.n < 1 || p.k < 1 || p.experts < 1) return false;
  if (p.s > kMaxDim || p.n > kMaxDim || p.k > kMaxDim || p.experts > kMaxDim) return false;
  return (p.k + kBlockK - 1) / kBlockK <= 65535;  // the pack pass's grid y
}

}  // namespace detail

// Builds the plan; with workspace == nullptr (sizing_only) only the sizes are filled in.
inline ExpertPlan make_expert_plan(const ExpertGemmProblem& p, void* workspace, size_t workspace_size,
                                   bool sizing_only) {
  ExpertPlan plan;
  if (!detail::expert_shape_ok(p)) return plan;
  if (p.format != Fp8Format::kE4M3FNUZ && p.format != Fp8Format::kE4M3FN) {
    plan.status = PlanStatus::kBadFormat;
    return plan;
  }
  const bool batched = p.routing == ExpertRouting::kPerRowIds;
  if (!batched && p.routing != ExpertRouting::kSortedOffsets) return plan;
  if (!sizing_only && (!p.a || !p.b || !p.a_scale || !p.b_scale || !p.out || (batched ? !p.ids : !p.offsets))) {
    plan.status = PlanStatus::kNullPointer;
    return plan;
  }
  const bool fn = p.format == Fp8Format::kE4M3FN;
  const int64_t k_blocks = p.k_blocks(), k_pad = k_blocks * kBlockK;

  // Experts of few rows (decode, small batches) waste less of a 64-row tile.
  plan.kernel = p.s <= 64 * p.experts ? GemmKernelId::kT64x64_W2x2_M16 : GemmKernelId::kT128x128_W2x2_M32;
  const GemmKernelShape& ks = kernel_shape(plan.kernel);
  // M blocks of all experts together: each expert with rows adds at most one partial block.
  const int64_t blocks_bound = ceil_div(p.s, ks.block_m) + (p.experts < p.s ? p.experts : p.s);
  const int64_t tiles_n = ceil_div(p.n, ks.block_n);
  if (blocks_bound * tiles_n > INT32_MAX || 3 * p.experts + 1 > INT32_MAX) return plan;

  // b in place: e4m3fnuz, every expert's (n, k) a K-major operand the main pass can read.
  const bool b_direct = !fn && detail::direct_ok(p.b, p.n, p.b_stride_n, p.b_stride_k, p.k) &&
                        (p.experts == 1 || p.b_stride_e % 16 == 0);
  const bool a_direct = !batched && !fn && detail::direct_ok(p.a, p.s, p.a_stride_s, 1, p.k);
  plan.pack_b = !b_direct;
  plan.pack_a = !batched && !a_direct;
  // The experts' b as one pack of experts * n rows when they are evenly spaced, else one pack per expert.
  const bool b_stacked = p.experts == 1 || (p.b_stride_e == p.n * p.b_stride_n && p.experts * p.n <= kMaxDim);

  // Workspace: [segments][counts][rank][row_map][a copy][a_scale copy][b copy].
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align_up(off + bytes, kWorkspaceAlign);
    return at;
  };
  const size_t seg_off = take(static_cast<size_t>(3 * p.experts + 1) * sizeof(int32_t));
  size_t counts_off = 0, rank_off = 0, row_map_off = 0, sfa_off = 0, a_off = 0, b_off = 0;
  if (batched) {
    counts_off = take(static_cast<size_t>(p.experts) * sizeof(uint32_t));
    rank_off = take(static_cast<size_t>(p.s) * sizeof(int32_t));
    row_map_off = take(static_cast<size_t>(p.s) * sizeof(int32_t));
    sfa_off = take(static_cast<size_t>(p.s * k_blocks) * sizeof(float));
  }
  if (batched || plan.pack_a) a_off = take(static_cast<size_t>(p.s * k_pad));
  if (plan.pack_b) b_off = take(static_cast<size_t>(p.experts * p.n * k_pad));
  plan.workspace_bytes = off;
  if (sizing_only) {
    plan.status = PlanStatus::kOk;
    return plan;
  }
  if (workspace == nullptr || workspace_size < off || !detail::aligned(workspace, kWorkspaceAlign)) {
    plan.status = PlanStatus::kNoWorkspace;
    return plan;
  }
  uint8_t* const ws = static_cast<uint8_t*>(workspace);

  RouteArgs r{};
  r.s = static_cast<int32_t>(p.s);
  r.n = static_cast<int32_t>(p.n);
  r.k = static_cast<int32_t>(p.k);
  r.experts = static_cast<int32_t>(p.experts);
  r.bm = ks.block_m;
  r.convert_e4m3fn = fn ? 1 : 0;
  r.ids = p.ids;
  r.ids_stride = p.ids_stride;
  r.ids_dtype = p.ids_dtype;
  r.offsets = p.offsets;
  r.offsets_stride = p.offsets_stride;
  r.a = p.a;
  r.a_stride_s = p.a_stride_s;
  r.a_scale = p.a_scale;
  r.a_scale_stride_s = p.a_scale_stride_s;
  r.a_scale_stride_kb = p.a_scale_stride_kb;
  r.out = p.out;
  r.out_stride_s = p.out_stride_s;
  r.seg = reinterpret_cast<int32_t*>(ws + seg_off);
  if (batched) {
    r.counts = reinterpret_cast<uint32_t*>(ws + counts_off);
    r.rank = reinterpret_cast<int32_t*>(ws + rank_off);
    r.row_map = reinterpret_cast<int32_t*>(ws + row_map_off);
    r.a_sorted = ws + a_off;
    r.a_sorted_ld = k_pad;
    r.a_scale_sorted = reinterpret_cast<float*>(ws + sfa_off);
  }

  auto route_pass = [&](ExpertPassKind kind, int64_t grid, uint32_t lds) {
    ExpertPass& pass = plan.passes[plan.num_passes++];
    pass = ExpertPass{};
    pass.kind = kind;
    pass.grid[0] = static_cast<uint32_t>(grid < 1 ? 1 : grid);
    pass.grid[1] = pass.grid[2] = 1;
    pass.block_threads = kRouteThreads;
    pass.lds_bytes = lds;
    pass.route = r;
  };
  auto pack_pass = [&](const uint8_t* src, int64_t rows, int64_t stride_row, int64_t stride_k, uint8_t* dst,
                       int64_t repeat, int64_t src_step, int64_t dst_step) {
    ExpertPass& pass = plan.passes[plan.num_passes++];
    pass = ExpertPass{};
    const Pass pk = detail::make_pack_pass(src, rows, stride_row, stride_k, p.k, dst, k_pad, fn);
    pass.kind = ExpertPassKind::kPack;
    for (int i = 0; i < 3; ++i) pass.grid[i] = pk.grid[i];
    pass.block_threads = pk.block_threads;
    pass.lds_bytes = pk.lds_bytes;
    pass.pack = pk.pack;
    pass.repeat = repeat;
    pass.src_step = src_step;
    pass.dst_step = dst_step;
    // One mode for every launch: the vector modes need each launch's source aligned as the first one.
    if (repeat > 1 && ((src_step % 16 != 0 && pass.pack.mode == PackMode::kMnVector) ||
                       (src_step % 4 != 0 && pass.pack.mode == PackMode::kKVector)))
      pass.pack.mode = PackMode::kGather;
  };

  if (batched) {
    ExpertPass& zero = plan.passes[plan.num_passes++];
    zero = ExpertPass{};
    zero.kind = ExpertPassKind::kZero;
    zero.zero = ZeroArgs{r.counts, static_cast<size_t>(p.experts) * sizeof(uint32_t)};
    route_pass(ExpertPassKind::kBatchedCount, ceil_div(p.s, kRouteThreads), 0);
    route_pass(ExpertPassKind::kBatchedSegments, 1, kRouteLdsBytes);
    const int64_t gather_grid = ceil_div(p.s, kRouteThreads / 64);
    route_pass(ExpertPassKind::kBatchedGather, gather_grid < 4096 ? gather_grid : 4096, 0);
  } else {
    if (plan.pack_a) pack_pass(p.a, p.s, p.a_stride_s, 1, ws + a_off, 1, 0, 0);
    const int64_t zero_grid = ceil_div(p.s, 16);
    route_pass(ExpertPassKind::kGroupedSegments, zero_grid < 1024 ? zero_grid : 1024, kRouteLdsBytes);
  }
  if (plan.pack_b) {
    if (b_stacked)
      pack_pass(p.b, p.experts * p.n, p.b_stride_n, p.b_stride_k, ws + b_off, 1, 0, 0);
    else
      pack_pass(p.b, p.n, p.b_stride_n, p.b_stride_k, ws + b_off, p.experts, p.b_stride_e, p.n * k_pad);
  }

  ExpertPass& tiles = plan.passes[plan.num_passes++];
  tiles = ExpertPass{};
  tiles.kind = ExpertPassKind::kTiles;
  tiles.kernel = plan.kernel;
  tiles.grid[0] = static_cast<uint32_t>(blocks_bound * tiles_n);
  tiles.grid[1] = tiles.grid[2] = 1;
  tiles.block_threads = static_cast<uint32_t>(ks.threads());
  tiles.lds_bytes = static_cast<uint32_t>(ks.lds_bytes());
  GemmArgs& g = tiles.tiles.base;
  if (batched) {
    g.a = r.a_sorted;
    g.lda = k_pad;
    g.a_scale = r.a_scale_sorted;
    g.a_scale_stride_m = k_blocks;
    g.a_scale_stride_kb = 1;
  } else {
    g.a = plan.pack_a ? ws + a_off : p.a;
    g.lda = plan.pack_a ? k_pad : p.a_stride_s;
    g.a_scale = p.a_scale;
    g.a_scale_stride_m = p.a_scale_stride_s;
    g.a_scale_stride_kb = p.a_scale_stride_kb;
  }
  g.b = plan.pack_b ? ws + b_off : p.b;
  g.ldb = plan.pack_b ? k_pad : p.b_stride_n;
  g.b_scale = p.b_scale;
  g.b_scale_stride_nb = p.b_scale_stride_nb;
  g.b_scale_stride_kb = p.b_scale_stride_kb;
  g.scale_factor = fn ? kE4m3fnProductFactor : 1.0f;
  g.m = static_cast<int32_t>(p.s);
  g.n = static_cast<int32_t>(p.n);
  g.k_limit = static_cast<int32_t>((p.k + 15) / 16 * 16);
  g.k_blocks = static_cast<int32_t>(k_blocks);
  g.tiles_m = static_cast<int32_t>(blocks_bound);
  g.tiles_n = static_cast<int32_t>(tiles_n);
  g.out = p.out;
  g.out_stride_m = p.out_stride_s;
  g.out_stride_n = 1;
  g.k = static_cast<int32_t>(p.k);
  g.out_vector_ok = p.n % 8 == 0 && (p.s == 1 || p.out_stride_s % 8 == 0) && detail::aligned(p.out, 16) ? 1 : 0;
  ExpertExtra& x = tiles.tiles.expert;
  x.segments = r.seg;
  x.row_map = batched ? r.row_map : nullptr;
  x.b_stride_e = plan.pack_b ? p.n * k_pad : p.b_stride_e;
  x.b_scale_stride_e = p.b_scale_stride_e;
  x.experts = static_cast<int32_t>(p.experts);

  plan.status = PlanStatus::kOk;
  return plan;
}

inline size_t expert_plan_workspace_bytes(const ExpertGemmProblem& p) {
  const ExpertPlan plan = make_expert_plan(p, nullptr, 0, /*sizing_only=*/true);
  return plan.status == PlanStatus::kOk ? plan.workspace_bytes : 0;
}

}  // namespace fp8gemm::rocm
