// Exact CPU backend of the MoE expert GEMMs (include/expert_gemm.h), built on the dense CPU GEMM.
//
// Every computed row goes through fp8gemm::cpu::gemm with the rows of one expert as a dense problem,
// so each output element has exactly the arithmetic of gemm_cpu.h: bit-identical to gemm() of the
// same rows against the same expert, whatever the routing, thread count or segment sizes.
//   kSortedOffsets: one dense problem per expert, over its row segment in place (offsets clamped as
//     the header says; the binding has already refused bad values).
//   kPerRowIds: rows are gathered by expert (a counting sort on the host), computed per expert into a
//     scratch block and scattered back.
// Rows that belong to no expert are written with zeros.
#pragma once

#include "expert_gemm.h"

namespace fp8gemm {
namespace cpu {

// Requires valid pointers and strides for every row (the torch binding validates); any of s, n, k,
// experts may be 0.
void expert_gemm(const ExpertGemmProblem& problem);

}  // namespace cpu
}  // namespace fp8gemm
