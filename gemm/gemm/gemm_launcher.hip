// HIP launcher of the gfx942 FP8 block-scaled GEMM: __global__ wrappers around the per-lane
// bodies of gemm_rocm_kernels.h, and execution of the pass plan of gemm_rocm_plan.h on a stream.
#include <hip/hip_runtime.h>

#include "gemm_rocm.h"
#include "gemm_rocm_kernels.h"
#include "gemm_rocm_plan.h"

namespace fp8gemm::rocm {

// One wrapper per kGemmKernels entry. The workgroup size and the occupancy target (waves per SIMD,
// so VGPR+AGPR <= 512 / target) are given to the compiler with clang's AMDGPU attributes, whose
// meaning is the same in every ROCm version (two-argument __launch_bounds__ changed meaning).
template <GemmKernelId Id>
__global__ __attribute__((amdgpu_flat_work_group_size(KernelCfg<Id>::kThreads, KernelCfg<Id>::kThreads),
                          amdgpu_waves_per_eu(KernelCfg<Id>::kWavesPerSimd))) void gemm_kernel(GemmArgs args) {
  gemm_body<KernelCfg<Id>>(args);
}

__global__ __launch_bounds__(kPackThreads) void pack_kernel(PackArgs args) { pack_body(args); }

// Every tuned/generic configuration is instantiated here (the ISA test checks each of them).
template __global__ void gemm_kernel<GemmKernelId::kT64x64_W2x2_M16>(GemmArgs);
template __global__ void gemm_kernel<GemmKernelId::kT128x64_W2x1x2_M32>(GemmArgs);
template __global__ void gemm_kernel<GemmKernelId::kT128x128_W2x2_M32>(GemmArgs);
template __global__ void gemm_kernel<GemmKernelId::kT256x128_W4x2_M32>(GemmArgs);

size_t workspace_bytes(const GemmProblem& p) { return plan_workspace_bytes(p); }

namespace {

hipError_t launch_pass(const Pass& pass, hipStream_t stream) {
  const dim3 grid(pass.grid[0], pass.grid[1], pass.grid[2]);
  const dim3 block(pass.block_threads);
  switch (pass.kind) {
    case PassKind::kPack:
      hipLaunchKernelGGL(pack_kernel, grid, block, pass.lds_bytes, stream, pass.pack);
      break;
    case PassKind::kZero:
      // The stream-K tile tickets: a workspace fresh from the caller's allocator holds anything, so
      // they are zeroed before the GEMM pass that counts on them (stream order).
      return hipMemsetAsync(pass.zero.dst, 0, pass.zero.bytes, stream);
    case PassKind::kGemm: {
      const bool known = visit_gemm_kernel(pass.gemm_kernel, [&](auto cfg) {
        using Cfg = decltype(cfg);
        constexpr GemmKernelId id = Cfg::kShape.id;
        hipLaunchKernelGGL(gemm_kernel<id>, grid, block, pass.lds_bytes, stream, pass.gemm);
      });
      if (!known) return hipErrorInvalidValue;
      break;
    }
    default:
      return hipErrorInvalidValue;
  }
  return hipGetLastError();
}

}  // namespace

hipError_t gemm(const GemmProblem& p, void* workspace, size_t workspace_size, hipStream_t stream, bool tickets_zero) {
  const Plan plan = make_plan(p, workspace, workspace_size, /*sizing_only=*/false);
  if (plan.status != PlanStatus::kOk) return hipErrorInvalidValue;
  // Clear a launch error left by someone else so it is not reported as ours.
  (void)hipGetLastError();
  for (int i = 0; i < plan.num_passes; ++i) {
    if (tickets_zero && plan.passes[i].kind == PassKind::kZero) continue;
    const hipError_t err = launch_pass(plan.passes[i], stream);
    if (err != hipSuccess) return err;
  }
  return hipSuccess;
}

}  // namespace fp8gemm::rocm
