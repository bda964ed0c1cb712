// Exact-accumulation path: the CUTLASS cooperative 128x128 kernel on fp16 operands (every fp8 value
// converted exactly by the launcher), fp16 wgmma with fp32 accumulation, the same promotion per
// 128-wide K block with the two scales.
#include "sm90_cutlass_kernel.cuh"
FP8GEMM_SM90_CUTLASS_KERNEL(cutlass128x128_f16, true)
