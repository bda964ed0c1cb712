// Exact-accumulation path: cooperative 128x128x128 on fp16 operands (every fp8 value converted
// exactly by the launcher), fp16 wgmma with fp32 accumulation, the same per-128-block promotion
// with the two scales. Stream-K scheduler.
#include "sm90_blockwise_variant.cuh"
FP8GEMM_SM90_DEFINE_VARIANT(f16coop128x128_sk, 128, 128, 1, false, true, false, true)
