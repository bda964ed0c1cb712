// 128x192 tile, one temporary accumulator (two do not fit in the registers): fewer, larger tiles.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile128x192, 192, 2, false)
