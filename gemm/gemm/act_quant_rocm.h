// Host interface of the gfx942 (MI300X) activation quantization (fp8_act_quant). Torch-free: the
// problem of act_quant.h (raw pointers, sizes, element strides) and a HIP stream.
#pragma once

#include <hip/hip_runtime_api.h>

#include "act_quant.h"

namespace fp8gemm::rocm {

// Enqueues the quantization on `stream` as one kernel launch (act_quant_rocm_kernel.h). Never aborts:
// hipErrorInvalidValue for a problem the caller should have rejected (act_quant_valid), otherwise the
// launch error, or hipSuccess.
hipError_t act_quant(const ActQuantProblem& p, hipStream_t stream);

}  // namespace fp8gemm::rocm
