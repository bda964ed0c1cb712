// Probe: how fast could the hand-written kernel's pipeline go? Times the real kernel (128x128 double
// buffered, 128x128 single buffered, 128x192, 128x128 2-CTA cluster) against copies with no promotion
// (wgmmas accumulate into one fp32 accumulator over all of K: a per-tensor-scaled GEMM's work) and with
// no promotion and no TMA loads, for 128x128 / 128x192 / 128x256 tiles. Built on ceiling_kernel.cuh
// from patch_kernel.py; results: benchmarks/results/gemm_h200_probes/ceiling.txt.
#include "ceiling_kernel.cuh"
#include "probe_common.h"

using namespace fp8gemm::cuda::sm90;

template <class C>
void bench(const char* name, const probe::Buffers& B, int m, int n, int k) {
  const auto a = probe::gemm_args<KernelArgs>(B, m, n, k, B.d, Decomposition::kDataParallel);
  const double us = probe::median_us(B, [&] { return hand::run<C>(a, B.ws, B.ws_bytes, 0); }, 3);
  printf("%-28s %5dx%5dx%5d  %8.1f us  %7.0f TFLOP/s\n", name, m, n, k, us, 2.0 * m * n * k / us / 1e6);
  fflush(stdout);
}

int main() {
  probe::Buffers B(size_t(8192) * 16384);
  struct Shape { int m, n, k; };
  for (const Shape s : {Shape{8192, 8192, 8192}, Shape{6144, 4608, 7168}, Shape{6144, 7168, 2048}}) {
    bench<hand::Cfg<128, 2, true, 1, false, 0>>("128x128 db (real)", B, s.m, s.n, s.k);
    bench<hand::Cfg<128, 2, false, 1, false, 0>>("128x128 single (real)", B, s.m, s.n, s.k);
    bench<hand::Cfg<192, 2, false, 1, false, 0>>("128x192 single (real)", B, s.m, s.n, s.k);
    bench<hand::Cfg<128, 2, true, 1, false, 1>>("128x128 nopromote", B, s.m, s.n, s.k);
    bench<hand::Cfg<192, 2, false, 1, false, 1>>("128x192 nopromote", B, s.m, s.n, s.k);
    bench<hand::Cfg<256, 2, false, 1, false, 1>>("128x256 nopromote", B, s.m, s.n, s.k);
    bench<hand::Cfg<128, 2, true, 1, false, 2>>("128x128 nopromote noTMA", B, s.m, s.n, s.k);
    bench<hand::Cfg<256, 2, false, 1, false, 2>>("128x256 nopromote noTMA", B, s.m, s.n, s.k);
    bench<hand::Cfg<128, 2, true, 2, false, 0>>("128x128 db c2 (real)", B, s.m, s.n, s.k);
  }
  return 0;
}
