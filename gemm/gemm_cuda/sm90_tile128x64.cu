// 128x64 tile, double-buffered: many tiles for a small N.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile128x64, 64, 2, true)
