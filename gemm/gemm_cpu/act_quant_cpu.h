// Exact CPU backend of the activation quantization (fp8_act_quant): the arithmetic of act_quant.h,
// element by element, so every result is bit-identical to the definition there.
#pragma once

#include "act_quant.h"

namespace fp8gemm {
namespace cpu {

// Requires rows, k >= 1 and valid pointers (the torch binding validates and handles empty problems).
// Spreads blocks of rows over at::get_num_threads() threads (cpu_workers.h).
void act_quant(const ActQuantProblem& problem);

}  // namespace cpu
}  // namespace fp8gemm
