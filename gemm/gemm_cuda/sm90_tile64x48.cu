// 64x48 tile (one math warpgroup), double-buffered: a few hundred rows against a weight of a few
// thousand rows and a long K, where 48-column tiles make about one wave without a K split (256x1536:
// 4 x 32 = 128 tiles). Tiles straddle a b_scale block boundary at a multiple of 16 columns.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile64x48, 48, 1, true)
