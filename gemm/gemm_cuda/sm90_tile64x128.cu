// 64x128 tile (one math warpgroup), double-buffered: twice the tiles of 128x128 for a small M x N.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile64x128, 128, 1, true)
