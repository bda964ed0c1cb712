// 192x128 tile: three math warpgroups (64 rows each, 160 registers), one temporary accumulator each;
// the tensor cores stay busy with the other two while one promotes. A 192x128 tile moves
// 1/192 + 1/128 bytes of operands per MAC against 2/128 for 128x128.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile192x128, 128, 3, false)
