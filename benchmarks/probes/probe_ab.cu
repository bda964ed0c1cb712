// Probe: same-run A/B of the hand-written kernel against an earlier version of itself. ab_old_kernel.cuh
// (written by build_probes.sh from git: `git show $AB_BASE_REV:gemm/gemm_cuda/sm90_hand_kernel.cuh`, its
// namespace renamed to hand_old) and the current kernel are timed in alternating order, 3 rounds of 20
// cold-L2 launches each, data-parallel, on the benchmark shapes that use each tile; every pair of outputs
// must be bit-identical (a change that only moves work between instructions keeps the fp32 sums' order).
#include "ab_old_kernel.cuh"
#include "probe_common.h"
#include "sm90_hand_kernel.cuh"

#include <cstring>

using namespace fp8gemm::cuda::sm90;

template <class CNew, class COld>
void ab(const char* name, const probe::Buffers& B, int m, int n, int k, int rounds = 3) {
  const auto a_new = probe::gemm_args<KernelArgs>(B, m, n, k, B.d, Decomposition::kDataParallel);
  const auto a_old = probe::gemm_args<KernelArgs>(B, m, n, k, B.d2, Decomposition::kDataParallel);
  std::vector<double> t_new, t_old;
  for (int r = 0; r < rounds; ++r) {
    auto run_new = [&] { t_new.push_back(probe::median_us(B, [&] { return hand::run<CNew>(a_new, B.ws, B.ws_bytes, 0); }, 3)); };
    auto run_old = [&] { t_old.push_back(probe::median_us(B, [&] { return hand_old::run<COld>(a_old, B.ws, B.ws_bytes, 0); }, 3)); };
    if (r % 2 == 0) run_new(), run_old();
    else run_old(), run_new();
  }
  const size_t bytes = size_t(m) * n * 2;
  std::vector<uint8_t> h1(bytes), h2(bytes);
  cudaMemcpy(h1.data(), B.d, bytes, cudaMemcpyDeviceToHost);
  cudaMemcpy(h2.data(), B.d2, bytes, cudaMemcpyDeviceToHost);
  const bool same = std::memcmp(h1.data(), h2.data(), bytes) == 0;
  std::sort(t_new.begin(), t_new.end());
  std::sort(t_old.begin(), t_old.end());
  const double mn = t_new[t_new.size() / 2], mo = t_old[t_old.size() / 2];
  printf("%-14s %5dx%5dx%5d  new %8.1f us  old %8.1f us  old/new %.3f  outputs %s  (new", name, m, n, k, mn, mo, mo / mn,
         same ? "identical" : "DIFFER");
  for (double t : t_new) printf(" %.1f", t);
  printf("; old");
  for (double t : t_old) printf(" %.1f", t);
  printf(")\n");
  fflush(stdout);
}

int main() {
  probe::Buffers B(size_t(6144) * 7168);
  struct S { int m, n, k; };
  const S s128[] = {{6144, 4608, 7168}, {1024, 1536, 7168}, {1024, 7168, 2048}, {1024, 7168, 2304}, {1024, 4096, 512}};
  const S s192x128[] = {{6144, 1536, 7168}, {6144, 512, 7168}, {6144, 7168, 256}, {6144, 4096, 512}, {6144, 3072, 1536},
                        {6144, 7168, 2048}, {6144, 7168, 2304}, {6144, 4608, 7168}};
  const S s128x192[] = {{1024, 3072, 1536}};
  const S s192x144[] = {{6144, 576, 7168}};
  const S s64[] = {{1024, 576, 7168}, {1024, 512, 7168}};
  for (const S& s : s128) ab<hand::Cfg<128, 2, true>, hand_old::Cfg<128, 2, true>>("128x128 db", B, s.m, s.n, s.k);
  for (const S& s : s192x128) ab<hand::Cfg<128, 3, false>, hand_old::Cfg<128, 3, false>>("192x128", B, s.m, s.n, s.k);
  for (const S& s : s128x192) ab<hand::Cfg<192, 2, false>, hand_old::Cfg<192, 2, false>>("128x192", B, s.m, s.n, s.k);
  for (const S& s : s192x144) ab<hand::Cfg<144, 3, false>, hand_old::Cfg<144, 3, false>>("192x144", B, s.m, s.n, s.k);
  for (const S& s : s64) ab<hand::Cfg<64, 2, true>, hand_old::Cfg<64, 2, true>>("128x64 db", B, s.m, s.n, s.k);
  const cudaError_t e = cudaDeviceSynchronize();
  printf("done: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
