// 128x96 tile (two math warpgroups), double-buffered: 1024x1536 is 8 x 16 = 128 tiles, one wave over the
// whole K. Tiles straddle a b_scale block boundary at a multiple of 32 columns.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile128x96, 96, 2, true)
