// Hopper (sm_90a) backend of the MoE expert GEMMs (include/expert_gemm.h): torch-free launcher.
// Host-includable from a .cpp compiled by g++ (only the CUDA runtime API and expert_gemm.h).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "expert_gemm.h"

namespace fp8gemm::cuda {

// Bytes of device workspace expert_gemm() needs for `p` (0 if none). Depends only on p's sizes, strides,
// routing kind and pointer alignment, never on the routing's values (so it is safe under CUDA-graph capture).
size_t expert_workspace_bytes(const ExpertGemmProblem& p);

// Enqueues the whole computation on `stream` without any host synchronisation (capturable in a CUDA graph:
// the launches do not depend on the routing's values). `workspace` must hold >= expert_workspace_bytes(p)
// bytes, 256-byte aligned. after_producer: the kernel enqueued last on `stream` produced a / a_scale (the
// activation quantization); the first kernel may then start as its programmatic dependent.
// Returns cudaErrorInvalidValue for a problem the caller should have rejected and never aborts.
cudaError_t expert_gemm(const ExpertGemmProblem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                        bool after_producer = false);

}  // namespace fp8gemm::cuda
