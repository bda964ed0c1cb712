// Cooperative 128x128x128, cluster 2x1 along M (each B tile is multicast to both CTAs of the
// pair, halving B's L2 traffic), persistent data-parallel scheduler: large shapes.
#include "sm90_blockwise_variant.cuh"
FP8GEMM_SM90_DEFINE_VARIANT(coop128x128_c2, 128, 128, 2, false, false, false)
