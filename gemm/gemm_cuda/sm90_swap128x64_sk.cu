// Swap-AB cooperative 128x64x128 with Stream-K for small M (M <= 64): the caller's N fills the
// 128-row wgmma side and the few rows of M sit in the 64-wide N side.
#include "sm90_blockwise_variant.cuh"
FP8GEMM_SM90_DEFINE_VARIANT(swap128x64_sk, 128, 64, 1, false, true, true)
