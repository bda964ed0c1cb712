// Probe: per-CTA timeline of the hand-written kernel (globaltimer stamps per piece of work, see
// patch_kernel.py "trace"), one file per (configuration, shape) under argv[1]; summarise with
// trace_summary.py. The globaltimer ticks in steps of ~0.26 us on the H200: single intervals below
// ~0.5 us are not resolved. Results: benchmarks/results/gemm_h200_probes/trace_*.
#include <string>

#include "probe_common.h"
#include "trace_kernel.cuh"

using namespace fp8gemm::cuda::sm90;

static const char* g_out_dir = ".";

template <class C>
void trace(const probe::Buffers& B, unsigned long long* tr, const char* name, int m, int n, int k,
           Decomposition dec = Decomposition::kDataParallel, int splits = 1) {
  const auto a = probe::gemm_args<KernelArgs>(B, m, n, k, B.d, dec, splits);
  const size_t bytes = size_t(132) * 128 * 8 * 8;
  // The last of the timed launches leaves its records (each launch rewrites them; zeroed before each).
  const double us = probe::median_us(B, [&] {
    cudaMemsetAsync(tr, 0, bytes);
    return hand::run<C>(a, B.ws, B.ws_bytes, 0);
  }, 2, 10);
  std::vector<unsigned long long> h(bytes / 8);
  cudaMemcpy(h.data(), tr, bytes, cudaMemcpyDeviceToHost);
  const std::string fn = std::string(g_out_dir) + "/" + name + "_" + std::to_string(m) + "x" + std::to_string(n) +
                         "x" + std::to_string(k) + ".txt";
  FILE* f = fopen(fn.c_str(), "w");
  fprintf(f, "# %s %dx%dx%d median_us %.2f (timed with the memset of the trace buffer)\n", name, m, n, k, us);
  for (int c = 0; c < 132; ++c)
    for (int r = 0; r < 128; ++r) {
      const unsigned long long* x = &h[(size_t(c) * 128 + r) * 8];
      if (r == 127) {
        fprintf(f, "MARK %d %llu %llu %llu %llu %llu %llu %llu %llu\n", c, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
      } else if (x[1] != 0) {
        fprintf(f, "%d %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", c, x[0] & 0xffffffffull, (x[0] >> 32) & 0xffff,
                x[0] >> 48, x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
      }
    }
  fclose(f);
  printf("%-10s %5dx%5dx%5d median %.1f us\n", name, m, n, k, us);
  fflush(stdout);
}

// usage: probe_trace OUT_DIR [session4]
int main(int argc, char** argv) {
  if (argc > 1) g_out_dir = argv[1];
  probe::Buffers B(size_t(8192) * 8192);
  unsigned long long* tr = nullptr;
  cudaMalloc(&tr, size_t(132) * 128 * 64);
  cudaMemcpyToSymbol(hand::g_trace, &tr, sizeof(tr));
  using DP = hand::Cfg<128, 2, true>;
  using SK = hand::Cfg<128, 2, true, 1, true>;
  using W192 = hand::Cfg<192, 2, false>;
  using M192 = hand::Cfg<128, 3, false>;
  const auto kSK = Decomposition::kStreamK;
  if (argc > 2 && std::string(argv[2]) == "session4") {
    // Why stream-K over every SM loses to data-parallel on few-tile long-K shapes.
    trace<DP>(B, tr, "db_dp", 1024, 1536, 7168);
    trace<SK>(B, tr, "db_sk", 1024, 1536, 7168, kSK);
    trace<DP>(B, tr, "db_dp", 1024, 4608, 7168);
    trace<SK>(B, tr, "db_sk", 1024, 4608, 7168, kSK);
    trace<M192>(B, tr, "m192_dp", 6144, 512, 7168);
    return 0;
  }
  trace<DP>(B, tr, "db_dp", 6144, 512, 7168);
  trace<SK>(B, tr, "db_sk", 6144, 512, 7168, kSK);
  trace<DP>(B, tr, "db_dp", 6144, 576, 7168);
  trace<SK>(B, tr, "db_sk", 6144, 576, 7168, kSK);
  trace<DP>(B, tr, "db_dp", 6144, 1536, 7168);
  trace<SK>(B, tr, "db_sk", 6144, 1536, 7168, kSK);
  trace<DP>(B, tr, "db_dp", 1024, 4096, 512);
  trace<DP>(B, tr, "db_dp", 1024, 3072, 1536);
  trace<W192>(B, tr, "w192_dp", 1024, 3072, 1536);
  trace<DP>(B, tr, "db_dp", 6144, 4608, 7168);
  trace<SK>(B, tr, "db_sk", 6144, 4608, 7168, kSK);
  trace<DP>(B, tr, "db_dp", 6144, 7168, 2304);
  return 0;
}
