// 256x128 tile: two math warpgroups of two 64-row slices each (Cfg::kSlices), one temporary accumulator
// per warpgroup; each promotes one slice while the other warpgroup's wgmmas run. 3 stages (64 KiB of
// epilogue panels). A 256x128 tile moves 1/256 + 1/128 bytes of operands per MAC against 1/192 + 1/128
// for 192x128 and 2/128 for 128x128, and spreads each tile's set-up and epilogue over twice the work of
// 128x128.
#include "sm90_tile_kernel.cuh"

namespace fp8gemm::cuda::sm90 {
using tile256x128_dp = tile::Cfg<128, 2, false, false, false, 1, 2>;
using tile256x128_sk = tile::Cfg<128, 2, false, true, false, 1, 2>;
}  // namespace fp8gemm::cuda::sm90
FP8GEMM_SM90_TILE_ENTRIES(tile256x128)
