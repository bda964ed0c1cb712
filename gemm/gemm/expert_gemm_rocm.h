// gfx942 (MI300X) backend of the MoE expert GEMMs (include/expert_gemm.h): torch-free launcher.
// Host-includable (only the HIP runtime API and expert_gemm.h).
#pragma once

#include <hip/hip_runtime_api.h>

#include <cstddef>

#include "expert_gemm.h"

namespace fp8gemm::rocm {

// Bytes of device workspace expert_gemm() needs for `p` (0: a problem expert_gemm() refuses). Depends only
// on p's sizes, strides, routing kind, format and pointer alignment, never on the routing's values (so it
// is safe under graph capture).
size_t expert_workspace_bytes(const ExpertGemmProblem& p);

// Enqueues the whole computation on `stream` without any host synchronisation (capturable in a HIP graph:
// the launches do not depend on the routing's values). `workspace` must hold >= expert_workspace_bytes(p)
// bytes, 256-byte aligned. Never aborts: hipErrorInvalidValue for a problem the caller should have
// rejected (sizes < 1 or beyond the kernels' 32-bit index range, null pointers, a missing workspace),
// otherwise the first launch error, or hipSuccess.
hipError_t expert_gemm(const ExpertGemmProblem& p, void* workspace, size_t workspace_bytes, hipStream_t stream);

}  // namespace fp8gemm::rocm
