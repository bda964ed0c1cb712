// Hand-written 192x144 tile: three math warpgroups like 192x128, 144 columns (an N that 576 divides).
// Made for N = 576 with a long K: 6144x576 is 32 x 4 = 128 tiles, one wave on 132 SMs; with 128x128
// tiles it is 48 x 5 = 240 (the last N tile half empty), two waves of 1.185x the work each. Tiles
// straddle a b_scale block boundary at any multiple of 16 columns. Data-parallel and stream-K builds.
#include "sm90_hand_kernel.cuh"
FP8GEMM_SM90_HAND_VARIANT(hand192x144, 144, 3, false, 1)
