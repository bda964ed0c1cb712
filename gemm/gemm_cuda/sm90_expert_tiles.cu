// The MoE expert GEMM's tile kernels: the hand-written tile kernel walking the experts' row segments
// (Cfg::kGrouped), 64 or 128 rows by 128 columns, double-buffered.
#include "sm90_tile_kernel.cuh"

namespace fp8gemm::cuda::sm90 {

using ExpertTile64x128 = tile::Cfg<128, 1, true, false, true>;
using ExpertTile128x128 = tile::Cfg<128, 2, true, false, true>;
using ExpertTile128x128Pair = tile::Cfg<128, 2, true, false, true, 2>;

bool expert_tiles_can_implement(const ExpertArgs& e) {
  return tile::can_implement<ExpertTile64x128>(e.base) && e.base.n % 8 == 0 && e.experts >= 1;
}
cudaError_t expert_tile64x128_run(const ExpertArgs& e, cudaStream_t stream) {
  return tile::run_experts<ExpertTile64x128>(e, stream);
}
cudaError_t expert_tile128x128_run(const ExpertArgs& e, cudaStream_t stream) {
  return tile::run_experts<ExpertTile128x128>(e, stream);
}
cudaError_t expert_tile128x128_pair_run(const ExpertArgs& e, cudaStream_t stream) {
  return tile::run_experts<ExpertTile128x128Pair>(e, stream);
}

}  // namespace fp8gemm::cuda::sm90
