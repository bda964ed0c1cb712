// 192x144 tile: three math warpgroups like 192x128 with 144 columns, an N that 576 divides: 6144x576
// is 32 x 4 = 128 tiles, one wave on 132 SMs, where 128x128 tiles need two waves (the last N tile half
// empty). Tiles straddle a b_scale block boundary at any multiple of 16 columns.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile192x144, 144, 3, false)
