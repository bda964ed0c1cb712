// HIP launcher of the gfx942 activation quantization: the __global__ wrappers around the per-lane body
// of act_quant_rocm_kernel.h (one per input dtype) and the launch on a stream.
#include <hip/hip_runtime.h>

#include "act_quant_rocm.h"
#include "act_quant_rocm_kernel.h"

namespace fp8gemm::rocm {

template <ActDtype D>
__global__ __attribute__((amdgpu_flat_work_group_size(kAqThreads, kAqThreads))) void act_quant_kernel(
    ActQuantProblem p) {
  act_quant_body<D>(p);
}

template __global__ void act_quant_kernel<ActDtype::kBFloat16>(ActQuantProblem);
template __global__ void act_quant_kernel<ActDtype::kFloat16>(ActQuantProblem);
template __global__ void act_quant_kernel<ActDtype::kFloat32>(ActQuantProblem);

hipError_t act_quant(const ActQuantProblem& p, hipStream_t stream) {
  if (!act_quant_valid(p)) return hipErrorInvalidValue;
  const AqGrid g = act_quant_grid(p);
  const dim3 grid(g.x, g.y), block(kAqThreads);
  // Clear a launch error left by someone else so it is not reported as ours.
  (void)hipGetLastError();
  switch (p.x_dtype) {
    case ActDtype::kBFloat16:
      hipLaunchKernelGGL(act_quant_kernel<ActDtype::kBFloat16>, grid, block, 0, stream, p);
      break;
    case ActDtype::kFloat16:
      hipLaunchKernelGGL(act_quant_kernel<ActDtype::kFloat16>, grid, block, 0, stream, p);
      break;
    default:
      hipLaunchKernelGGL(act_quant_kernel<ActDtype::kFloat32>, grid, block, 0, stream, p);
      break;
  }
  return hipGetLastError();
}

}  // namespace fp8gemm::rocm
