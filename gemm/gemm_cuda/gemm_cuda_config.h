// Kernel configurations of the sm90 backend and the shape-keyed tuning table's entry type.
// Also used by the standalone harness (tools) to time every configuration of a shape.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "gemm_problem.h"

namespace fp8gemm::cuda {

enum class Sm90Variant : int32_t {
  kCoop128x128StreamK = 0,  // cooperative 128x128x128, Stream-K capable scheduler
  kCoop128x128Cluster2 = 1, // cooperative 128x128x128, 2x1 cluster (multicast), persistent
  kPingpong64x128 = 2,      // ping-pong 64x128x128, persistent
  kSwap128x64StreamK = 3,   // swap-AB (kernel M = caller N) 128x64x128, Stream-K capable
  // 4 was a swap-AB 128x192 variant: it spilled registers and lost every benchmark shape (dropped).
  // Exact-accumulation path: operands converted to fp16 (exact), fp16 wgmma with fp32 accumulation,
  // cooperative 128x128x128, Stream-K capable. Selected by GEMM_CUDA_EXACT_ACCUMULATION=1.
  kF16Coop128x128StreamK = 5,
  // Hand-written kernels (sm90_hand_kernel.cuh); Sm90Split kDataParallel or kStreamK.
  kHand128x128Db = 6,  // sm90_hand128x128db.cu
  kHand128x128DbC2 = 7,  // sm90_hand128x128dbc2.cu
  kHand64x128Db = 8,  // sm90_hand64x128db.cu
  kHand64x128DbC2 = 9,  // sm90_hand64x128dbc2.cu
  kHand128x192 = 10,  // sm90_hand128x192.cu
  kHand128x64Db = 11,  // sm90_hand128x64db.cu
  kHand192x128 = 12,  // sm90_hand192x128.cu (three math warpgroups)
  kHand192x144 = 13,  // sm90_hand192x144.cu (three math warpgroups)
  // 14 was a 128x96 double-buffered tile: 1-18 % slower than 128x128 on five M = 1024 shapes (compare c14; dropped).
};

// Mirrors sm90::Decomposition.
enum class Sm90Split : int32_t { kDataParallel = 0, kSplitK = 1, kStreamK = 2, kHeuristic = 3 };

struct Sm90Config {
  Sm90Variant variant = Sm90Variant::kCoop128x128StreamK;
  Sm90Split split = Sm90Split::kDataParallel;
  int32_t splits = 1;       // for kSplitK
  int32_t max_swizzle = 1;  // CTA rasterisation swizzle (1, 2, 4, 8)
  bool raster_along_n = false;
};

// The configuration gemm() would use for p: the tuned table entry when (M, N, K) is in it, else the
// generic heuristic; with the environment variable GEMM_CUDA_EXACT_ACCUMULATION=1 the fp16
// exact-accumulation variant (see docs/cuda_sm90.md, "Accuracy").
Sm90Config choose_config(const GemmProblem& p);

// The generic rules alone (no tuned table, no environment override): what a shape outside the table
// gets. Exposed for the dispatch self-test (gemm/tests/sm90_dispatch_selftest.cu).
Sm90Config choose_generic_config(const GemmProblem& p);

// Same as workspace_bytes()/gemm() but with an explicit configuration (for tuning sweeps).
size_t workspace_bytes_with(const GemmProblem& p, const Sm90Config& cfg);
cudaError_t gemm_with(const GemmProblem& p, const Sm90Config& cfg, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);

// Exact CUDA-core path (fp32 per-block dot products, then the two scales): what the e4m3fnuz
// fallback runs when an input holds +-240. Exposed for tests.
cudaError_t gemm_exact_reference(const GemmProblem& p, cudaStream_t stream);

}  // namespace fp8gemm::cuda
