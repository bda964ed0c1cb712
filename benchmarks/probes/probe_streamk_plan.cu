// Probe: the stream-K plan of the hand-written 128x128 kernel (sm90_kernel_args.h,
// stream_k_partial_wave_only) against its data-parallel build and against forcing either plan, on the
// 18 benchmark shapes plus a few others; the 2-CTA cluster build for reference. Checks that the
// stream-K output equals the data-parallel one up to the order of the fp32 additions (bf16 ulps).
// Built on skplan_kernel.cuh from patch_kernel.py; results: gemm_h200_probes/streamk_plan.txt.
#include <cmath>
#include <cstring>

#include "probe_common.h"
#include "skplan_kernel.cuh"

using namespace fp8gemm::cuda::sm90;

static void compare(const char* what, const void* x, const void* y, size_t n) {
  std::vector<uint16_t> hx(n), hy(n);
  cudaMemcpy(hx.data(), x, n * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost);
  size_t diff = 0;
  double max_rel = 0;
  for (size_t i = 0; i < n; ++i) {
    if (hx[i] == hy[i]) continue;
    ++diff;
    const uint32_t ux = uint32_t(hx[i]) << 16, uy = uint32_t(hy[i]) << 16;
    float fx, fy;
    memcpy(&fx, &ux, 4), memcpy(&fy, &uy, 4);
    max_rel = std::max(max_rel, std::fabs(double(fx) - fy) / std::max(1e-3, std::fabs(double(fy))));
  }
  printf("    check %-26s differing %zu / %zu, max rel %.2e\n", what, diff, n, max_rel);
}

int main() {
  probe::Buffers B(size_t(8192) * 8192);
  using DP = hand::Cfg<128, 2, true>;
  using SK = hand::Cfg<128, 2, true, 1, true>;
  using C2 = hand::Cfg<128, 2, true, 2>;
  const auto kDP = Decomposition::kDataParallel, kSK = Decomposition::kStreamK;
  struct Shape { int m, n, k; };
  const Shape shapes[] = {{1024, 1536, 7168}, {1024, 3072, 1536}, {1024, 576, 7168}, {1024, 7168, 256},
                          {1024, 7168, 2048}, {1024, 4608, 7168}, {1024, 7168, 2304}, {1024, 512, 7168},
                          {1024, 4096, 512},  {6144, 1536, 7168}, {6144, 3072, 1536}, {6144, 576, 7168},
                          {6144, 7168, 256},  {6144, 7168, 2048}, {6144, 4608, 7168}, {6144, 7168, 2304},
                          {6144, 512, 7168},  {6144, 4096, 512},  {8192, 8192, 8192}, {1000, 1000, 1008},
                          {77, 4000, 640}};
  printf("c2 max active clusters: %d\n", hand::max_active_clusters<C2>(probe::gemm_args<KernelArgs>(B, 128, 128, 128, B.d, kDP)));
  for (const Shape s : shapes) {
    const int m = s.m, n = s.n, k = s.k;
    auto run = [&](bool split, int mode, void* d) {
      g_sk_mode = mode;
      const auto a = probe::gemm_args<KernelArgs>(B, m, n, k, d, split ? kSK : kDP);
      return split ? hand::run<SK>(a, B.ws, B.ws_bytes, 0) : hand::run<DP>(a, B.ws, B.ws_bytes, 0);
    };
    const double dp = probe::median_us(B, [&] { return run(false, 0, B.d); });
    const double sk1 = probe::median_us(B, [&] { return run(true, 1, B.d); });
    const double sk2 = probe::median_us(B, [&] { return run(true, 2, B.d); });
    const double sk0 = probe::median_us(B, [&] { return run(true, 0, B.d); });
    const double dp2 = probe::median_us(B, [&] { return run(false, 0, B.d); });
    const double c2 = probe::median_us(B, [&] {
      return hand::run<C2>(probe::gemm_args<KernelArgs>(B, m, n, k, B.d, kDP), B.ws, B.ws_bytes, 0);
    });
    printf("%5dx%5dx%5d  dp %7.1f / %7.1f | sk partial-only %7.1f +wave %7.1f rule %7.1f | c2 %7.1f\n", m, n, k, dp,
           dp2, sk1, sk2, sk0, c2);
    const size_t ne = size_t(m) * n;
    cudaMemset(B.d, 0xAB, ne * 2);
    cudaMemset(B.d2, 0xCD, ne * 2);
    run(false, 0, B.d);
    run(true, 1, B.d2);
    cudaDeviceSynchronize();
    compare("sk partial-only vs dp", B.d2, B.d, ne);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) printf("ERROR %s\n", cudaGetErrorString(e));
    fflush(stdout);
  }
  return 0;
}
