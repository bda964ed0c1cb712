// Ping-pong 64x128x128: the two consumer warpgroups work on different tiles, so one's epilogue
// and scale promotion overlap the other's tensor-core work. Persistent scheduler.
#include "sm90_blockwise_variant.cuh"
FP8GEMM_SM90_DEFINE_VARIANT(pingpong64x128, 64, 128, 1, true, false, false)
