// Plain-C++ contract between the launcher (gemm_cuda.cu) and the translation units that each
// instantiate one CUTLASS sm90 blockwise-FP8 kernel. Keeping CUTLASS out of the launcher lets the
// kernel variants compile in parallel and keeps the launcher's compile fast.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace fp8gemm::cuda::sm90 {

// Up to this many rows the tile kernels also read an a_scale that TMA cannot (a K-block stride of 1-3 floats,
// or a base that is not 16-byte aligned: a (1, kb) or (2, kb) tensor) in place, one 4-byte copy per row and
// K block, instead of the launcher copying it into a TMA layout first (one kernel more).
constexpr int kTileScaleCopyMaxRows = 16;

// TMA (and the launchers' vectorised copies) need 16-byte aligned base addresses.
inline bool aligned16(const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; }

// An a_scale that TMA reads: a 16-byte aligned base and K-block stride (ld in floats).
inline bool sfa_tma_readable(const float* sfa, int64_t ld) { return ld % 4 == 0 && aligned16(sfa); }

// How a Stream-K-capable kernel splits its work (mirrors CUTLASS's DecompositionMode).
enum class Decomposition : int32_t { kDataParallel = 0, kSplitK = 1, kStreamK = 2, kHeuristic = 3 };

// One GEMM as the kernels see it: both operands K-major fp8 e4m3fn (fp16 for the exact-accumulation
// kernel), 16-byte aligned rows.
//   d[m, n] = bf16( alpha * sum_kb sfa[m, kb] * sfb[n / 128, kb] * sum_k a[m, k] * b[n, k] )
struct KernelArgs {
  int32_t m = 0, n = 0, k = 0;
  const void* a = nullptr;      // (m, k), row stride lda elements
  int64_t lda = 0;
  const void* b = nullptr;      // (n, k), row stride ldb
  int64_t ldb = 0;
  // sfa = per-row scales, MN-major: sfa[m + kb * sfa_ld], sfa_rows >= m rows. The tile kernels read it by
  // TMA (16-byte aligned, sfa_ld % 4 == 0), or, up to kTileScaleCopyMaxRows rows, with any sfa_ld.
  // sfb = per-128x128 scales, K-major: sfb[nb * sfb_ld + kb], sfb_rows 128-row blocks.
  const float* sfa = nullptr;
  int32_t sfa_ld = 0, sfa_rows = 0;
  const float* sfb = nullptr;
  int32_t sfb_ld = 0, sfb_rows = 0;
  void* d = nullptr;            // bf16, row-major (m, n) with row stride ldd
  int64_t ldd = 0;
  float alpha = 1.0f;
  // Scheduling (ignored by kernels that are not Stream-K capable).
  Decomposition decomposition = Decomposition::kDataParallel;
  int32_t splits = 1;
  int32_t group = 1;  // rasterisation: M blocks per group (CUTLASS: its swizzle size)
  int32_t sm_count = 0;         // 0: ask the device
  // Programmatic dependent launch (tile kernels only; CUTLASS's ignore it): the kernel may be
  // scheduled while the stream's previous kernel -- the launcher's own preparation pass, or the caller's
  // producer of a / a_scale (gemm_cuda.h: after_producer) -- finishes, and waits for it
  // (griddepcontrol.wait) before reading what it wrote.
  bool overlap_previous = false;
  // With overlap_previous: b is not written by that previous kernel (it produced a / a_scale only), so
  // the kernel starts loading its first B stages before the wait.
  bool b_before_wait = false;
  // The first zeroed_bytes() bytes of the workspace are zero already (the caller's producer cleared them):
  // no memset before the kernel, which then may overlap that producer.
  bool workspace_zeroed = false;
};

// Stream-K plan of the tile kernels (sm90_tile_kernel.cuh, plan_split), shared with the
// launcher's heuristic: with `items` work items on `slots` co-resident CTAs and `kb` K blocks per item,
// only the partial last wave is split when each CTA's share of it is long (>= max(8, kb / 4) K blocks,
// so that the fixup, one fp32 partial tile per contributor, stays small against it); the whole items
// then run first with data-parallel locality and the split items' operands are a fraction of A.
// Otherwise one full wave is split as well, so that no piece is a sliver.
inline bool stream_k_partial_wave_only(int64_t items, int64_t slots, int64_t kb) {
  const int64_t full = items / slots, rem = items % slots;
  return full >= 1 && rem > 0 && rem * kb >= slots * (kb / 4 > 8 ? kb / 4 : 8);
}

// Split-K tail, tried before the stream-K plans: when whole waves come first and the partial last
// wave fills at most half of the slots, each of its items is cut into `splits` pieces at the same K
// offsets (the returned count; 0 = does not apply), at most one piece per slot and at least 8 K
// blocks each. Unlike stream-K ranges, pieces that run at the same time start at the same K offset,
// so they share operand blocks in L2: all-split stream-K on 1024x1536x7168 runs its K blocks at
// 0.52 us against 0.38 us data-parallel (H200, per-CTA traces).
inline int64_t split_k_tail_splits(int64_t items, int64_t slots, int64_t kb) {
  const int64_t full = items / slots, rem = items % slots;
  if (full < 1 || rem == 0 || rem * 2 > slots) return 0;
  int64_t s = slots / rem;
  if (s > kb / 8) s = kb / 8;
  if (s < 2) return 0;
  const int64_t len = (kb + s - 1) / s;
  return (kb + len - 1) / len;  // no empty piece
}

// Each kernel exposes the same entry points: zeroed_bytes is the start of its workspace that must be zero
// when it starts (run() clears it first unless KernelArgs::workspace_zeroed).
#define FP8GEMM_SM90_DECLARE_KERNEL(name)                                               \
  size_t name##_workspace_bytes(const KernelArgs& args);                                \
  size_t name##_zeroed_bytes(const KernelArgs& args);                                   \
  bool name##_can_implement(const KernelArgs& args);                                    \
  cudaError_t name##_run(const KernelArgs& args, void* workspace, size_t workspace_bytes, \
                         cudaStream_t stream);

// CUTLASS cooperative 128x128x128 with its stream-K scheduler (data-parallel, split-K or stream-K
// chosen per call): fp8 operands, and fp16 operands for the exact-accumulation path.
FP8GEMM_SM90_DECLARE_KERNEL(cutlass128x128)
FP8GEMM_SM90_DECLARE_KERNEL(cutlass128x128_f16)
// Hand-written kernels (sm90_tile_kernel.cuh): persistent, TMA, wgmma, promotion per 128-K block;
// decomposition kDataParallel, kStreamK or kSplitK (workspace only when tiles are split).
FP8GEMM_SM90_DECLARE_KERNEL(tile128x128)
FP8GEMM_SM90_DECLARE_KERNEL(tile64x128)
FP8GEMM_SM90_DECLARE_KERNEL(tile128x192)
FP8GEMM_SM90_DECLARE_KERNEL(tile128x64)
FP8GEMM_SM90_DECLARE_KERNEL(tile192x128)
FP8GEMM_SM90_DECLARE_KERNEL(tile192x144)
FP8GEMM_SM90_DECLARE_KERNEL(tile256x128)
FP8GEMM_SM90_DECLARE_KERNEL(tile64x64)
FP8GEMM_SM90_DECLARE_KERNEL(tile64x32)
FP8GEMM_SM90_DECLARE_KERNEL(tile64x48)
FP8GEMM_SM90_DECLARE_KERNEL(tile64x96)
FP8GEMM_SM90_DECLARE_KERNEL(tile128x96)

#undef FP8GEMM_SM90_DECLARE_KERNEL

// One MoE expert GEMM as the tile kernels see it (sm90_expert_tiles.cu): `base` with m = the rows of a,
// n = the rows of one expert (a multiple of 8), b = the experts' stacked (experts * n, k) matrix, sfb = the
// first expert's (sfb_rows, kb) scales and d = the (m, n) output; decomposition and splits are ignored.
struct ExpertArgs {
  KernelArgs base;
  int32_t experts = 0;
  int64_t sfb_expert_stride = 0;      // elements from one expert's scales to the next's
  const int32_t* segments = nullptr;  // device: start rows [0, E), end rows [E, 2E), block prefix [2E, 3E]
  const int32_t* row_map = nullptr;   // device: row of d for each row of a, or nullptr (the same row)
};
bool expert_tiles_can_implement(const ExpertArgs& args);
// BM = 64 and BM = 128 rows per tile (128 columns, double-buffered): the first for experts of few rows.
cudaError_t expert_tile64x128_run(const ExpertArgs& args, cudaStream_t stream);
cudaError_t expert_tile128x128_run(const ExpertArgs& args, cudaStream_t stream);
// The 128-row tiles run by CTA pairs sharing their A block (TMA multicast).
cudaError_t expert_tile128x128_pair_run(const ExpertArgs& args, cudaStream_t stream);

}  // namespace fp8gemm::cuda::sm90
