// 64x16 tile (one math warpgroup), double-buffered, 16 stages: the narrowest, for a small-M problem whose
// N is too short for a wave of 64x32 tiles (2112 = 132 x 16).
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile64x16, 16, 1, true)
