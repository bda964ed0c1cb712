// Hand-written 64x128 tile (one math warpgroup), double-buffered: twice the tiles of 128x128 for small M x N.
// Data-parallel and stream-K builds (KernelArgs::decomposition picks).
#include "sm90_hand_kernel.cuh"
FP8GEMM_SM90_HAND_VARIANT(hand64x128db, 128, 1, true, 1)
