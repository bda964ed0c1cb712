// Exact CPU backend of the FP8 block-scaled GEMM (torch-free apart from ATen's thread pool).
//
// Arithmetic, per output element (m, n), in this order:
//   for each 128-wide K block kb (the last one may be shorter):
//     partial = 0.0f; for k in block, increasing: partial += decode(a[m,k]) * decode(b[n,k])
//       (each product is exact in fp32, so fused or not gives the same bits)
//     s   = a_scale[m,kb] * b_scale[n/128,kb]            (fp32, rounded)
//     acc = fma(s, partial, acc)                         (fp32, one rounding)
//   out[m,n] = bf16 round-to-nearest-even(acc); NaN stays NaN.
// The result is bit-identical across thread counts, tile sizes and SIMD paths.
#pragma once

#include "gemm_problem.h"

namespace fp8gemm {
namespace cpu {

// The fp32 value of every fp8 byte, decoded exactly; NaN patterns decode to a quiet NaN.
const float* fp8_decode_table(Fp8Format format);

// Requires m, n, k >= 1 and valid pointers/strides (the torch binding validates and handles
// empty problems itself). Spreads output tiles over at::get_num_threads() threads: torch's
// inter-op pool (at::launch) and the calling thread.
void gemm(const GemmProblem& problem);

}  // namespace cpu
}  // namespace fp8gemm
