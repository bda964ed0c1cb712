// CUDA backend of the activation quantization (fp8_act_quant): torch-free launcher.
// Host-includable from a .cpp compiled by g++ (only the CUDA runtime API and act_quant.h).
#pragma once

#include <cuda_runtime_api.h>

#include "act_quant.h"

namespace fp8gemm::cuda {

// Enqueues the quantization of `p` (act_quant.h) on `stream` as one kernel launch. The kernel's grid fits
// on the GPU at once, and each CTA executes griddepcontrol.launch_dependents once its first loads are
// issued, so a kernel launched next as its programmatic dependent (gemm() with after_producer) is
// scheduled while it runs. Returns cudaErrorInvalidValue for a problem the caller should have rejected
// (rows or k < 1, rows > INT32_MAX, more than 2^32 - 1 groups, null pointers, row_dims outside
// 1..kActRowDims, unknown format or mode) and never aborts.
//
// zero / zero_bytes: the launch also clears these bytes (4-byte aligned, a multiple of 4; e.g. the GEMM's
// workspace_zero_range, so that no memset stands between this kernel and the GEMM as its dependent).
cudaError_t act_quant(const ActQuantProblem& p, cudaStream_t stream, void* zero = nullptr, size_t zero_bytes = 0);

}  // namespace fp8gemm::cuda
