// 128x128 tile (two math warpgroups) with a double-buffered temporary accumulator: the wgmmas of K
// block kb+1 run while block kb is promoted.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile128x128, 128, 2, true)
