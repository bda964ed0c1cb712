// 64x96 tile (one math warpgroup), double-buffered: 512x1536 is 8 x 16 = 128 tiles, one wave over the
// whole K. Tiles straddle a b_scale block boundary at a multiple of 32 columns.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile64x96, 96, 1, true)
