// 64x64 tile (one math warpgroup), double-buffered: M of 64-128 rows with N of a few thousand, where
// 64x64 tiles reach a full wave without splitting K.
#include "sm90_tile_kernel.cuh"
FP8GEMM_SM90_TILE_KERNEL(tile64x64, 64, 1, true)
