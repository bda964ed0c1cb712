// Hopper (sm_90a) backend of the FP8 block-scaled GEMM: torch-free launcher.
// Host-includable from a .cpp compiled by g++ (only the CUDA runtime API and gemm_problem.h).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "gemm_problem.h"

namespace fp8gemm::cuda {

// Bytes of device workspace gemm() needs for `p` (0 if none). Depends only on p's sizes,
// strides, dtype and pointer alignment (and the current device's SM count, for Stream-K).
size_t workspace_bytes(const GemmProblem& p);

// Enqueues the whole computation on `stream`. `workspace` must hold >= workspace_bytes(p) bytes,
// 256-byte aligned (torch's caching allocator). Returns cudaErrorInvalidValue for a problem
// the caller should have rejected (sizes < 1, null pointers, unknown format, small workspace)
// and never aborts.
//
// after_producer: the kernel enqueued last on `stream` is the producer of a and a_scale (e.g.
// act_quant(), which triggers its dependents early). The GEMM kernel is then launched as its
// programmatic dependent: its launch and prologue overlap the producer's tail, and it waits
// (griddepcontrol.wait) for the producer's completion before reading a or a_scale (the tile kernel's
// first stages of b, which the producer does not write, are requested before the wait). Where the launcher
// runs its own preparation pass first, that pass is the GEMM's producer instead and starts after the
// caller's kernel completes. Only the hand-written tile and decode kernels overlap; CUTLASS kernels
// ignore the attribute. GEMM_CUDA_PDL=0 turns every programmatic launch off.
//
// producer_zeroed (with after_producer): that producer also cleared workspace_zero_range(p) of this
// workspace, which gemm() otherwise clears with a memset that keeps the GEMM kernel from overlapping it.
cudaError_t gemm(const GemmProblem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                 bool after_producer = false, bool producer_zeroed = false);

// The part of gemm()'s workspace that must be zero when its GEMM kernel starts (the flags of tiles split by
// K) where a producer kernel of a / a_scale may clear it instead of gemm() (no preparation pass runs in
// between): offset and bytes, multiples of 256. Empty where the GEMM needs no zeroed workspace or runs a
// preparation pass first. Depends on what workspace_bytes() depends on.
struct WorkspaceRange {
  size_t offset = 0, bytes = 0;
};
WorkspaceRange workspace_zero_range(const GemmProblem& p);

// SMs of the current device (132, an H100 / H200, where it cannot be read), cached per device: the launch
// paths of the GEMM and of the activation quantization size their grids by it on every call.
int device_sm_count();

}  // namespace fp8gemm::cuda
