// The preparation pass for the challenge (MN-major) layout, alone: the current single launch
// (gemm/gemm_cuda/prepare_kernels.cuh) against the passes it replaced (session 6: one byte-transpose
// launch per operand plus a scale-copy launch; extracted from git by build_probes.sh into
// prep_old_kernels.cuh). For each of the 18 benchmark shapes: a (M, K) strides (1, M), b (N, K) strides
// (1, N) -> K-major copies; b_scale (N/128, K/128) strides (1, N/128) -> K-contiguous. Checks the two
// give the same bytes (fn, and fnuz with its NaN mapping and +-240 flag), then times both (median of
// 20 launches, L2 flushed before each) and reports the new pass's traffic / time.
#include "probe_common.h"
#include "prepare_kernels.cuh"
#include "prep_old_kernels.cuh"

#include <cstring>

namespace {
using namespace fp8gemm::cuda;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Case {
  int m, n, k;
};

struct Outputs {
  uint8_t *a, *b;
  float* sfb;
  int* flag;
};

cudaError_t run_new(const probe::Buffers& B, const Case& c, const Outputs& o, bool fnuz) {
  prep::PrepareArgs p;
  p.k = c.k, p.k_pad = c.k, p.fnuz = fnuz, p.flag = o.flag;
  const uint8_t* src[2] = {B.a, B.b};
  const int rows[2] = {c.m, c.n};
  uint8_t* dst[2] = {o.a, o.b};
  int ctas = 0;
  for (int i = 0; i < 2; ++i) {
    prep::OperandJob& j = p.op[p.n_ops++];
    j.src = src[i], j.rows = rows[i], j.s_row = 1, j.s_k = rows[i], j.dst = dst[i];
    j.tiles_k = int(cdiv(c.k, prep::kTileK)), j.tiles = j.tiles_k * int(cdiv(rows[i], prep::kTileRows));
    ctas += j.tiles;
  }
  const int64_t nb = cdiv(c.n, 128), kb = cdiv(c.k, 128);
  prep::ScaleJob& s = p.scale[p.n_scales++];
  s.src = B.sfb, s.rows = nb, s.cols = kb, s.s_r = 1, s.s_c = nb, s.dst = o.sfb, s.rows_pad = nb, s.dst_col_major = false;
  p.scale_ctas = int(std::max<int64_t>(1, std::min<int64_t>(cdiv(nb * kb, 256), 132 * 8)));
  ctas += p.scale_ctas;
  prep::prepare_kernel<false><<<ctas, prep::kThreads>>>(p);
  return cudaGetLastError();
}

cudaError_t run_old(const probe::Buffers& B, const Case& c, const Outputs& o, bool fnuz) {
  const uint8_t* src[2] = {B.a, B.b};
  const int rows[2] = {c.m, c.n};
  uint8_t* dst[2] = {o.a, o.b};
  for (int i = 0; i < 2; ++i) {
    dim3 grid(unsigned(cdiv(c.k, old_prep::kTK)), unsigned(cdiv(rows[i], old_prep::kTR)));
    old_prep::convert_operand_kernel<false><<<grid, 256>>>(src[i], rows[i], c.k, 1, rows[i], dst[i], c.k, fnuz, o.flag);
  }
  const int64_t nb = cdiv(c.n, 128), kb = cdiv(c.k, 128);
  const int grid = int(std::max<int64_t>(1, std::min<int64_t>(cdiv(nb * kb, 256), 132 * 8)));
  old_prep::copy_scales_kernel<<<grid, 256>>>(B.sfb, nb, kb, 1, nb, o.sfb, nb, kb, false);
  return cudaGetLastError();
}

bool same(const Outputs& x, const Outputs& y, const Case& c) {
  const size_t na = size_t(c.m) * c.k, nbt = size_t(c.n) * c.k, ns = size_t(cdiv(c.n, 128) * cdiv(c.k, 128));
  std::vector<uint8_t> h0(std::max(na, nbt)), h1(std::max(na, nbt));
  std::vector<float> s0(ns), s1(ns);
  int f0 = 0, f1 = 0;
  cudaMemcpy(h0.data(), x.a, na, cudaMemcpyDeviceToHost);
  cudaMemcpy(h1.data(), y.a, na, cudaMemcpyDeviceToHost);
  bool ok = std::memcmp(h0.data(), h1.data(), na) == 0;
  cudaMemcpy(h0.data(), x.b, nbt, cudaMemcpyDeviceToHost);
  cudaMemcpy(h1.data(), y.b, nbt, cudaMemcpyDeviceToHost);
  ok = ok && std::memcmp(h0.data(), h1.data(), nbt) == 0;
  cudaMemcpy(s0.data(), x.sfb, ns * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(s1.data(), y.sfb, ns * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&f0, x.flag, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&f1, y.flag, 4, cudaMemcpyDeviceToHost);
  return ok && std::memcmp(s0.data(), s1.data(), ns * 4) == 0 && f0 == f1;
}

}  // namespace

int main() {
  const Case cases[] = {{1024, 1536, 7168}, {1024, 3072, 1536}, {1024, 576, 7168}, {1024, 7168, 256},
                        {1024, 7168, 2048}, {1024, 4608, 7168}, {1024, 7168, 2304}, {1024, 512, 7168},
                        {1024, 4096, 512},  {6144, 1536, 7168}, {6144, 3072, 1536}, {6144, 576, 7168},
                        {6144, 7168, 256},  {6144, 7168, 2048}, {6144, 4608, 7168}, {6144, 7168, 2304},
                        {6144, 512, 7168},  {6144, 4096, 512}};
  const size_t max_el = size_t(6144) * 7168;
  probe::Buffers B(max_el);
  // Plant fnuz specials (0x80 NaN, 0x7f / 0xff +-240) so the fnuz comparison covers the mapping and flag.
  cudaMemset(B.a + 12345, 0x80, 1);
  cudaMemset(B.b + 777, 0xff, 1);
  Outputs o[2];
  for (auto& x : o) {
    cudaMalloc(&x.a, max_el);
    cudaMalloc(&x.b, max_el);
    cudaMalloc(&x.sfb, 1 << 20);
    cudaMalloc(&x.flag, 4);
  }
  printf("%-18s %10s %10s %8s %12s  %s\n", "M x N x K", "old us", "new us", "old/new", "new GB/s", "bytes equal (fn, fnuz)");
  bool all_ok = true;
  for (const Case& c : cases) {
    bool eq[2];
    for (int fnuz = 0; fnuz < 2; ++fnuz) {
      for (auto& x : o) {
        cudaMemset(x.a, 0xab, max_el);
        cudaMemset(x.b, 0xab, max_el);
        cudaMemset(x.flag, 0, 4);
      }
      run_old(B, c, o[0], fnuz);
      run_new(B, c, o[1], fnuz);
      cudaDeviceSynchronize();
      eq[fnuz] = same(o[0], o[1], c);
      all_ok = all_ok && eq[fnuz];
    }
    const double t_old = probe::median_us(B, [&] { return run_old(B, c, o[0], false); });
    const double t_new = probe::median_us(B, [&] { return run_new(B, c, o[1], false); });
    const double bytes = 2.0 * (double(c.m) + c.n) * c.k + 8.0 * cdiv(c.n, 128) * cdiv(c.k, 128);
    printf("%5dx%5dx%5d  %10.1f %10.1f %8.2f %12.0f  %s, %s\n", c.m, c.n, c.k, t_old, t_new, t_old / t_new,
           bytes / t_new * 1e-3, eq[0] ? "yes" : "NO", eq[1] ? "yes" : "NO");
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("%s (%s)\n", all_ok ? "all outputs equal" : "MISMATCH", cudaGetErrorString(err));
  return all_ok && err == cudaSuccess ? 0 : 1;
}
