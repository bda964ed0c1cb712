// Kernel configurations of the sm90 backend and the shape-keyed tuning table's entry type.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "gemm_problem.h"

namespace fp8gemm::cuda {

// The kernels the launcher can run. The tile kernels are sm90_tile_kernel.cuh, one .cu per tile shape;
// the CUTLASS ones sm90_cutlass_kernel.cuh; decode is sm90_decode.cu.
enum class Sm90Kernel : int32_t {
  kCutlass128x128 = 0,     // CUTLASS cooperative 128x128, stream-K scheduler
  kCutlass128x128F16 = 1,  // the same on fp16 operands: the exact-accumulation path
  kTile128x128 = 2,
  kTile64x128 = 3,
  kTile128x192 = 4,
  kTile128x64 = 5,
  kTile192x128 = 6,
  kTile192x144 = 7,
  kDecode = 8,  // M <= 64: weight rows on the wgmma's M side, K split across a cluster
  kTile64x64 = 9,
  kTile64x32 = 10,
  kTile256x128 = 11,
  kTile64x48 = 12,
  kTile64x96 = 13,
  kTile128x96 = 14,
};
constexpr int kSm90KernelCount = 15;

// How a kernel splits its work. The tile and CUTLASS kernels: data-parallel tiles, split-K (`splits`
// equal K ranges per tile) or stream-K. The decode kernel: `splits` CTAs per weight tile along K
// (0, or any count outside 1-8: its cost model chooses).
enum class Sm90Split : int32_t { kDataParallel = 0, kSplitK = 1, kStreamK = 2, kHeuristic = 3 };

struct Sm90Config {
  Sm90Kernel kernel = Sm90Kernel::kTile128x128;
  Sm90Split split = Sm90Split::kDataParallel;
  int32_t splits = 1;
  // Tile kernels: rasterisation group (M blocks per group, 1-64). Decode: weight rows per CTA (64 or
  // 128; anything else lets its cost model choose).
  int32_t group = 8;
};

// The name GEMM_CUDA_CONFIG and the benchmarks use for a kernel ("tile128x128", "decode", ...).
const char* kernel_name(Sm90Kernel k);

// The configuration gemm() uses for p: GEMM_CUDA_CONFIG when set and valid (a tuning tool, see
// docs/cuda_sm90.md), the fp16 exact-accumulation kernel under GEMM_CUDA_EXACT_ACCUMULATION=1, the tuned
// table entry when (M, N, K) is in it, else the generic rules.
Sm90Config choose_config(const GemmProblem& p);

// The generic rules alone (no tuned table, no environment override): what a shape outside the table
// gets. Exposed for the dispatch self-test (gemm/tests/sm90_dispatch_selftest.cu).
Sm90Config choose_generic_config(const GemmProblem& p);

// Same as workspace_bytes()/gemm() but with an explicit configuration (tuning sweeps, tests).
size_t workspace_bytes_with(const GemmProblem& p, const Sm90Config& cfg);
cudaError_t gemm_with(const GemmProblem& p, const Sm90Config& cfg, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream, bool after_producer = false, bool producer_zeroed = false);

// Exact CUDA-core path (fp32 per-block dot products, then the two scales): what the e4m3fnuz
// fallback runs when an input holds +-240. Exposed for tests.
cudaError_t gemm_exact_reference(const GemmProblem& p, cudaStream_t stream);

}  // namespace fp8gemm::cuda
