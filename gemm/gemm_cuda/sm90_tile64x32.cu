// 64x32 tile (one math warpgroup), double-buffered, 16 stages: small-M problems whose N gives a wave of
// 64x32 tiles, each streaming its 32 weight rows over the whole K (no K split to reduce).
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile64x32, 32, 1, true)
