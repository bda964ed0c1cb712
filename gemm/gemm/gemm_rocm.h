// Host interface of the gfx942 (MI300X) FP8 block-scaled GEMM. Torch-free: raw pointers, sizes,
// element strides and a HIP stream. Called from the torch binding's ROCm path.
#pragma once

#include <hip/hip_runtime_api.h>

#include <cstddef>

#include "gemm_problem.h"

namespace fp8gemm::rocm {

// Bytes of scratch the call needs (K-major / e4m3fnuz copies of a or b when they cannot be read in
// place, split-K partial sums); 0 if none. Pure host arithmetic. It depends on the strides, the
// format and the 16-byte alignment of the a/b pointers, so pass the same problem to gemm().
size_t workspace_bytes(const GemmProblem& p);

// Enqueue the GEMM on `stream` (all passes, no host synchronisation). `workspace` has at least
// workspace_bytes(p) bytes, 256-byte aligned. Never aborts: returns hipErrorInvalidValue for
// arguments it cannot handle (sizes < 1 or beyond the kernels' 32-bit index range, null pointers,
// a missing workspace), otherwise the first launch error, or hipSuccess.
// The stream-K tile tickets in the workspace are zero again when the GEMM kernel ends (the last
// arrival on a tile wraps its counter). tickets_zero: the caller vouches that they are zero now (it
// keeps this workspace, for this plan, from an earlier call on the same stream), so the zeroing
// memset is skipped; with a freshly allocated workspace leave it false.
hipError_t gemm(const GemmProblem& p, void* workspace, size_t workspace_bytes, hipStream_t stream,
                bool tickets_zero = false);

}  // namespace fp8gemm::rocm
