// CUDA backend of the activation quantization (fp8_act_quant): torch-free launcher.
// Host-includable from a .cpp compiled by g++ (only the CUDA runtime API and act_quant.h).
#pragma once

#include <cuda_runtime_api.h>

#include "act_quant.h"

namespace fp8gemm::cuda {

// Enqueues the quantization of `p` (act_quant.h) on `stream` as one kernel launch. The kernel executes
// griddepcontrol.launch_dependents once each CTA has loaded its last groups, so a kernel launched next
// as its programmatic dependent (gemm() with after_producer) starts while it drains. Returns
// cudaErrorInvalidValue for a problem the caller should have rejected (rows or k < 1, rows >
// INT32_MAX, null pointers, row_dims outside 1..kActRowDims, unknown format or mode) and never aborts.
cudaError_t act_quant(const ActQuantProblem& p, cudaStream_t stream);

}  // namespace fp8gemm::cuda
