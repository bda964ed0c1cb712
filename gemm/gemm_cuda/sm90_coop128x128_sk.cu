// Cooperative 128x128x128, cluster 1x1, Stream-K scheduler: the general path and the few-tile
// shapes (split-K / stream-K chosen per call by the launcher).
#include "sm90_blockwise_variant.cuh"
FP8GEMM_SM90_DEFINE_VARIANT(coop128x128_sk, 128, 128, 1, false, true, false)
