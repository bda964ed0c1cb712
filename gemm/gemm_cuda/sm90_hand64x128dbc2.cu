// Hand-written 64x128, double-buffered, B multicast to CTA pairs along M.
// Data-parallel and stream-K builds (KernelArgs::decomposition picks).
#include "sm90_hand_kernel.cuh"
FP8GEMM_SM90_HAND_VARIANT(hand64x128dbc2, 128, 1, true, 2)
