// Hand-written 128x192 tile, one temporary accumulator (two would not fit in registers): fewer, larger tiles.
// Data-parallel and stream-K builds (KernelArgs::decomposition picks).
#include "sm90_hand_kernel.cuh"
FP8GEMM_SM90_HAND_VARIANT(hand128x192, 192, 2, false, 1)
