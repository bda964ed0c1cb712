// HIP launcher of the gfx942 MoE expert GEMMs (expert_gemm_rocm.h): __global__ wrappers around the
// routing bodies of expert_gemm_rocm_kernels.h, the pack body and the expert mode of the main GEMM body
// (gemm_rocm_kernels.h), and execution of the pass plan of expert_gemm_rocm_plan.h on a stream.
#include <hip/hip_runtime.h>

#include "expert_gemm_rocm.h"
#include "expert_gemm_rocm_kernels.h"
#include "expert_gemm_rocm_plan.h"
#include "gemm_rocm_kernels.h"

namespace fp8gemm::rocm {

// The tile kernels of the expert plan (make_expert_plan picks one of these two).
template <GemmKernelId Id>
__global__ __attribute__((amdgpu_flat_work_group_size(KernelCfg<Id>::kThreads, KernelCfg<Id>::kThreads),
                          amdgpu_waves_per_eu(KernelCfg<Id>::kWavesPerSimd))) void expert_tile_kernel(ExpertTileArgs args) {
  expert_tile_body<KernelCfg<Id>>(args);
}

template __global__ void expert_tile_kernel<GemmKernelId::kT64x64_W2x2_M16>(ExpertTileArgs);
template __global__ void expert_tile_kernel<GemmKernelId::kT128x128_W2x2_M32>(ExpertTileArgs);

#define FP8GEMM_ROUTE_KERNEL(name)                                                                       \
  __global__ __attribute__((amdgpu_flat_work_group_size(kRouteThreads, kRouteThreads))) void name##_kernel( \
      RouteArgs args) {                                                                                 \
    name##_body(args);                                                                                  \
  }
FP8GEMM_ROUTE_KERNEL(grouped_segments)
FP8GEMM_ROUTE_KERNEL(batched_count)
FP8GEMM_ROUTE_KERNEL(batched_segments)
FP8GEMM_ROUTE_KERNEL(batched_gather)
#undef FP8GEMM_ROUTE_KERNEL

__global__ __launch_bounds__(kPackThreads) void expert_pack_kernel(PackArgs args) { pack_body(args); }

size_t expert_workspace_bytes(const ExpertGemmProblem& p) { return expert_plan_workspace_bytes(p); }

namespace {

hipError_t launch_pass(const ExpertPass& pass, hipStream_t stream) {
  const dim3 grid(pass.grid[0], pass.grid[1], pass.grid[2]);
  const dim3 block(pass.block_threads);
  switch (pass.kind) {
    case ExpertPassKind::kZero:
      return hipMemsetAsync(pass.zero.dst, 0, pass.zero.bytes, stream);
    case ExpertPassKind::kGroupedSegments:
      hipLaunchKernelGGL(grouped_segments_kernel, grid, block, pass.lds_bytes, stream, pass.route);
      break;
    case ExpertPassKind::kBatchedCount:
      hipLaunchKernelGGL(batched_count_kernel, grid, block, pass.lds_bytes, stream, pass.route);
      break;
    case ExpertPassKind::kBatchedSegments:
      hipLaunchKernelGGL(batched_segments_kernel, grid, block, pass.lds_bytes, stream, pass.route);
      break;
    case ExpertPassKind::kBatchedGather:
      hipLaunchKernelGGL(batched_gather_kernel, grid, block, pass.lds_bytes, stream, pass.route);
      break;
    case ExpertPassKind::kPack:
      for (int64_t i = 0; i < pass.repeat; ++i) {
        PackArgs args = pass.pack;
        args.src += i * pass.src_step;
        args.dst += i * pass.dst_step;
        hipLaunchKernelGGL(expert_pack_kernel, grid, block, pass.lds_bytes, stream, args);
        const hipError_t err = hipGetLastError();
        if (err != hipSuccess) return err;
      }
      break;
    case ExpertPassKind::kTiles:
      if (pass.kernel == GemmKernelId::kT64x64_W2x2_M16)
        hipLaunchKernelGGL(expert_tile_kernel<GemmKernelId::kT64x64_W2x2_M16>, grid, block, pass.lds_bytes, stream,
                           pass.tiles);
      else if (pass.kernel == GemmKernelId::kT128x128_W2x2_M32)
        hipLaunchKernelGGL(expert_tile_kernel<GemmKernelId::kT128x128_W2x2_M32>, grid, block, pass.lds_bytes, stream,
                           pass.tiles);
      else
        return hipErrorInvalidValue;
      break;
    default:
      return hipErrorInvalidValue;
  }
  return hipGetLastError();
}

}  // namespace

hipError_t expert_gemm(const ExpertGemmProblem& p, void* workspace, size_t workspace_bytes, hipStream_t stream) {
  const ExpertPlan plan = make_expert_plan(p, workspace, workspace_bytes, /*sizing_only=*/false);
  if (plan.status != PlanStatus::kOk) return hipErrorInvalidValue;
  // Clear a launch error left by someone else so it is not reported as ours.
  (void)hipGetLastError();
  for (int i = 0; i < plan.num_passes; ++i) {
    const hipError_t err = launch_pass(plan.passes[i], stream);
    if (err != hipSuccess) return err;
  }
  return hipSuccess;
}

}  // namespace fp8gemm::rocm
