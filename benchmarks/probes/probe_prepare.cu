// The preparation pass alone (gemm/gemm_cuda/prepare_kernels.cuh, one launch) against the passes it
// replaced (session 6: one convert launch per operand, 128x64 tiles, plus a scale-copy launch; extracted
// from git by build_probes.sh into prep_old_kernels.cuh), on the 18 benchmark shapes. Four sources:
//   MN   challenge layout: a (M, K) strides (1, M), b (N, K) strides (1, N), fp8 e4m3fn out, with the
//        b_scale copy -- the transpose path;
//   KH   K-major (ld = K) -> fp16, the exact-accumulation variant's operands -- the K-contiguous copies;
//   KF   K-major e4m3fnuz (ld = K) -> e4m3fn bytes -- the K-contiguous copies;
//   K4   K-major e4m3fnuz with ld = K + 4 (rows only 4-byte aligned) -- the K-contiguous copies with
//        4-byte loads (session 6: its word path).
// The K-contiguous copies are timed at 128, 64 and 32 rows per CTA, and with the launcher's rule
// (kmajor_copy_rows). Every new output is compared byte for byte (operands, scales, fnuz flag) with the
// old one, for fn and fnuz sources where the mode allows; times are medians of 20 launches with the L2
// flushed before each. GB/s = bytes read + written / the rule's (MN: the new) time.
#include "probe_common.h"
#include "prepare_kernels.cuh"
#include "prep_old_kernels.cuh"

#include <cstring>
#include <string>

namespace {
using namespace fp8gemm::cuda;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int kSms = 132;

struct Case {
  int m, n, k;
};

enum class Mode { MN, KH, KF, K4 };
const char* mode_name(Mode m) { return m == Mode::MN ? "MN" : m == Mode::KH ? "KH" : m == Mode::KF ? "KF" : "K4"; }

struct Outputs {
  uint8_t *a, *b;  // fp8 (1 byte) or fp16 (2 bytes) per element
  float* sfb;
  int* flag;
};

struct Src {
  int64_t rows, s_row, s_k;
};
Src source(Mode mode, int rows, int k) {
  if (mode == Mode::MN) return {rows, 1, rows};
  return {rows, mode == Mode::K4 ? k + 4 : k, 1};
}
bool to_half(Mode mode) { return mode == Mode::KH; }

// The pass's arguments for one case and its CTA count; rows_per_cta: 128 / 64 / 32, or 0 for the
// launcher's rule.
prep::PrepareArgs make_args(const probe::Buffers& B, const Case& c, const Outputs& o, Mode mode, bool fnuz,
                            int rows_per_cta, int& ctas) {
  prep::PrepareArgs p;
  p.k = c.k, p.k_pad = c.k, p.fnuz = fnuz, p.flag = o.flag;
  const uint8_t* src[2] = {B.a, B.b};
  const int rows[2] = {c.m, c.n};
  uint8_t* dst[2] = {o.a, o.b};
  for (int i = 0; i < 2; ++i) {
    prep::OperandJob& j = p.op[p.n_ops++];
    const Src s = source(mode, rows[i], c.k);
    j.src = src[i], j.rows = s.rows, j.s_row = s.s_row, j.s_k = s.s_k, j.dst = dst[i];
  }
  ctas = prep::tile_operand_jobs(p, kSms, to_half(mode), rows_per_cta);
  if (mode == Mode::MN) {
    const int64_t nb = cdiv(c.n, 128), kb = cdiv(c.k, 128);
    prep::ScaleJob& s = p.scale[p.n_scales++];
    s.src = B.sfb, s.rows = nb, s.cols = kb, s.s_r = 1, s.s_c = nb, s.dst = o.sfb, s.rows_pad = nb, s.dst_col_major = false;
    p.scale_ctas = int(std::max<int64_t>(1, std::min<int64_t>(cdiv(nb * kb, 256), kSms * 8)));
    ctas += p.scale_ctas;
  }
  return p;
}

cudaError_t run_new(const probe::Buffers& B, const Case& c, const Outputs& o, Mode mode, bool fnuz, int rows_per_cta) {
  int ctas = 0;
  const prep::PrepareArgs p = make_args(B, c, o, mode, fnuz, rows_per_cta, ctas);
  if (to_half(mode))
    prep::prepare_kernel<true><<<ctas, prep::kThreads>>>(p);
  else
    prep::prepare_kernel<false><<<ctas, prep::kThreads>>>(p);
  return cudaGetLastError();
}

cudaError_t run_old(const probe::Buffers& B, const Case& c, const Outputs& o, Mode mode, bool fnuz) {
  const uint8_t* src[2] = {B.a, B.b};
  const int rows[2] = {c.m, c.n};
  uint8_t* dst[2] = {o.a, o.b};
  for (int i = 0; i < 2; ++i) {
    const Src s = source(mode, rows[i], c.k);
    dim3 grid(unsigned(cdiv(c.k, old_prep::kTK)), unsigned(cdiv(rows[i], old_prep::kTR)));
    if (to_half(mode))
      old_prep::convert_operand_kernel<true><<<grid, 256>>>(src[i], s.rows, c.k, s.s_row, s.s_k, dst[i], c.k, fnuz, o.flag);
    else
      old_prep::convert_operand_kernel<false><<<grid, 256>>>(src[i], s.rows, c.k, s.s_row, s.s_k, dst[i], c.k, fnuz, o.flag);
  }
  if (mode == Mode::MN) {
    const int64_t nb = cdiv(c.n, 128), kb = cdiv(c.k, 128);
    const int grid = int(std::max<int64_t>(1, std::min<int64_t>(cdiv(nb * kb, 256), kSms * 8)));
    old_prep::copy_scales_kernel<<<grid, 256>>>(B.sfb, nb, kb, 1, nb, o.sfb, nb, kb, false);
  }
  return cudaGetLastError();
}

bool same(const Outputs& x, const Outputs& y, const Case& c, Mode mode) {
  const size_t el = to_half(mode) ? 2 : 1;
  const size_t na = el * c.m * c.k, nbt = el * c.n * c.k, ns = size_t(cdiv(c.n, 128) * cdiv(c.k, 128));
  std::vector<uint8_t> h0(std::max(na, nbt)), h1(std::max(na, nbt));
  std::vector<float> s0(ns), s1(ns);
  int f0 = 0, f1 = 0;
  cudaMemcpy(h0.data(), x.a, na, cudaMemcpyDeviceToHost);
  cudaMemcpy(h1.data(), y.a, na, cudaMemcpyDeviceToHost);
  bool ok = std::memcmp(h0.data(), h1.data(), na) == 0;
  cudaMemcpy(h0.data(), x.b, nbt, cudaMemcpyDeviceToHost);
  cudaMemcpy(h1.data(), y.b, nbt, cudaMemcpyDeviceToHost);
  ok = ok && std::memcmp(h0.data(), h1.data(), nbt) == 0;
  if (mode == Mode::MN) {
    cudaMemcpy(s0.data(), x.sfb, ns * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(s1.data(), y.sfb, ns * 4, cudaMemcpyDeviceToHost);
    ok = ok && std::memcmp(s0.data(), s1.data(), ns * 4) == 0;
  }
  cudaMemcpy(&f0, x.flag, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&f1, y.flag, 4, cudaMemcpyDeviceToHost);
  return ok && f0 == f1;
}

}  // namespace

int main() {
  const Case cases[] = {{1024, 1536, 7168}, {1024, 3072, 1536}, {1024, 576, 7168}, {1024, 7168, 256},
                        {1024, 7168, 2048}, {1024, 4608, 7168}, {1024, 7168, 2304}, {1024, 512, 7168},
                        {1024, 4096, 512},  {6144, 1536, 7168}, {6144, 3072, 1536}, {6144, 576, 7168},
                        {6144, 7168, 256},  {6144, 7168, 2048}, {6144, 4608, 7168}, {6144, 7168, 2304},
                        {6144, 512, 7168},  {6144, 4096, 512}};
  const size_t max_el = size_t(6144) * 7168;
  probe::Buffers B(max_el + size_t(7168) * 4);  // K4: rows of K + 4 bytes
  // Plant fnuz specials (0x80 NaN, 0x7f / 0xff +-240) so the fnuz comparison covers the mapping and flag.
  cudaMemset(B.a + 12345, 0x80, 1);
  cudaMemset(B.b + 777, 0xff, 1);
  Outputs o[2];
  for (auto& x : o) {
    cudaMalloc(&x.a, 2 * max_el);
    cudaMalloc(&x.b, 2 * max_el);
    cudaMalloc(&x.sfb, 1 << 20);
    cudaMalloc(&x.flag, 4);
  }
  bool all_ok = true;
  for (Mode mode : {Mode::MN, Mode::KH, Mode::KF, Mode::K4}) {
    const bool kcopy = mode != Mode::MN;
    printf("\n[%s] %-16s %8s %8s", mode_name(mode), "M x N x K", "old us", kcopy ? "rule us" : "new us");
    if (kcopy) printf(" %5s %8s %8s %8s", "rows", "128 us", "64 us", "32 us");
    printf(" %8s %9s  %s\n", "old/new", "GB/s", "bytes equal (fn, fnuz)");
    for (const Case& c : cases) {
      // Byte equality against the old pass, for the rule's tiling and (K-contiguous) each fixed one.
      bool eq[2] = {true, true};
      for (int fnuz = 0; fnuz < 2; ++fnuz) {
        if ((mode == Mode::KF || mode == Mode::K4) && !fnuz) continue;  // fn K-major needs no fp8 pass
        for (int rows : {0, 128, 64, 32}) {
          if (!kcopy && rows != 0) continue;
          for (auto& x : o) {
            cudaMemset(x.a, 0xab, 2 * max_el);
            cudaMemset(x.b, 0xab, 2 * max_el);
            cudaMemset(x.flag, 0, 4);
          }
          run_old(B, c, o[0], mode, fnuz);
          run_new(B, c, o[1], mode, fnuz, rows);
          cudaDeviceSynchronize();
          eq[fnuz] = eq[fnuz] && same(o[0], o[1], c, mode);
        }
        all_ok = all_ok && eq[fnuz];
      }
      const bool fz = mode == Mode::KF || mode == Mode::K4;
      const double t_old = probe::median_us(B, [&] { return run_old(B, c, o[0], mode, fz); });
      const double t_new = probe::median_us(B, [&] { return run_new(B, c, o[1], mode, fz, 0); });
      const double in = (double(c.m) + c.n) * c.k, out = in * (to_half(mode) ? 2 : 1);
      const double bytes = in + out + (mode == Mode::MN ? 8.0 * cdiv(c.n, 128) * cdiv(c.k, 128) : 0.0);
      printf("[%s] %5dx%5dx%5d %8.1f %8.1f", mode_name(mode), c.m, c.n, c.k, t_old, t_new);
      if (kcopy) {
        int ctas = 0;
        printf(" %5d", make_args(B, c, o[1], mode, fz, 0, ctas).op[0].tile_rows);  // the rule's rows
        for (int rows : {128, 64, 32}) printf(" %8.1f", probe::median_us(B, [&] { return run_new(B, c, o[1], mode, fz, rows); }));
      }
      const std::string eqs = std::string(eq[0] ? "yes" : "NO") + ", " + (eq[1] ? "yes" : "NO");
      printf(" %8.2f %9.0f  %s\n", t_old / t_new, bytes / t_new * 1e-3,
             (mode == Mode::KF || mode == Mode::K4) ? ("-, " + std::string(eq[1] ? "yes" : "NO")).c_str() : eqs.c_str());
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  printf("\n%s (%s)\n", all_ok ? "all outputs equal" : "MISMATCH", cudaGetErrorString(err));
  return all_ok && err == cudaSuccess ? 0 : 1;
}
