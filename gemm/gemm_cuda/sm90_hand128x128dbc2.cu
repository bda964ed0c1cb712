// Hand-written 128x128, double-buffered; CTA pairs along M each load half of the shared B tile and multicast it.
// Data-parallel and stream-K builds (KernelArgs::decomposition picks).
#include "sm90_hand_kernel.cuh"
FP8GEMM_SM90_HAND_VARIANT(hand128x128dbc2, 128, 2, true, 2)
