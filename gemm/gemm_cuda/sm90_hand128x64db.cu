// Hand-written 128x64 tile, double-buffered: many tiles for small N.
// Data-parallel and stream-K builds (KernelArgs::decomposition picks).
#include "sm90_hand_kernel.cuh"
FP8GEMM_SM90_HAND_VARIANT(hand128x64db, 64, 2, true, 1)
