// Hand-written 128x128 tile (two math warpgroups), double-buffered temporary accumulator: the wgmmas of K block kb+1 run while block kb is promoted.
// Data-parallel and stream-K builds (KernelArgs::decomposition picks).
#include "sm90_hand_kernel.cuh"
FP8GEMM_SM90_HAND_VARIANT(hand128x128db, 128, 2, true, 1)
