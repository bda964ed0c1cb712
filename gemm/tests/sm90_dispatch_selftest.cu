// Host-only checks of the sm90 backend's dispatch (gemm_cuda/gemm_cuda.cu) and work-split plans
// (gemm_cuda/sm90_kernel_args.h), built with nvcc together with gemm_cuda.cu and run without a GPU by
// test_sm90_dispatch.py. The kernels' entry points are stubs (nothing is launched); the decode kernel's
// plan (sm90_decode.h) is checked too. Prints
// "ok <check>" or "FAIL <check>: <details>"; the exit status is the number of failed checks.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gemm_cuda_config.h"
#include "sm90_decode.h"
#include "sm90_kernel_args.h"

namespace fp8gemm::cuda::sm90 {
#define STUB(name)                                                                                  \
  size_t name##_workspace_bytes(const KernelArgs&) { return 0; }                                    \
  size_t name##_zeroed_bytes(const KernelArgs&) { return 0; }                                       \
  bool name##_can_implement(const KernelArgs&) { return false; }                                    \
  cudaError_t name##_run(const KernelArgs&, void*, size_t, cudaStream_t) { return cudaErrorNotSupported; }
STUB(cutlass128x128)
STUB(cutlass128x128_f16)
STUB(tile128x128)
STUB(tile64x128)
STUB(tile128x192)
STUB(tile128x64)
STUB(tile192x128)
STUB(tile192x144)
STUB(tile256x128)
STUB(tile64x64)
STUB(tile64x32)
STUB(tile64x48)
STUB(tile64x96)
STUB(tile128x96)
#undef STUB
bool decode_can_implement(const DecodeArgs&) { return false; }
cudaError_t decode_run(const DecodeArgs&, cudaStream_t) { return cudaErrorNotSupported; }
}  // namespace fp8gemm::cuda::sm90

using fp8gemm::GemmProblem;
using fp8gemm::cuda::Sm90Kernel;
using fp8gemm::cuda::sm90::split_k_tail_splits;

namespace {

int failures = 0;

void report(const char* check, const std::string& err) {
  if (err.empty()) {
    std::printf("ok %s\n", check);
  } else {
    std::printf("FAIL %s: %s\n", check, err.c_str());
    ++failures;
  }
}

// a_scale as fp8_act_quant writes it: M-contiguous, a K-block stride of M rounded up to 4, 16-byte aligned
// (never dereferenced: the rules read only its address and strides).
GemmProblem problem(int64_t m, int64_t n, int64_t k) {
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a_scale = reinterpret_cast<const float*>(uintptr_t{1} << 12);
  p.a_scale_stride_m = 1, p.a_scale_stride_kb = (m + 3) / 4 * 4;
  return p;
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;
const std::vector<Shape> kBenchmarkShapes = {
    {1024, 1536, 7168}, {1024, 3072, 1536}, {1024, 576, 7168},  {1024, 7168, 256},  {1024, 7168, 2048},
    {1024, 4608, 7168}, {1024, 7168, 2304}, {1024, 512, 7168},  {1024, 4096, 512},  {6144, 1536, 7168},
    {6144, 3072, 1536}, {6144, 576, 7168},  {6144, 7168, 256},  {6144, 7168, 2048}, {6144, 4608, 7168},
    {6144, 7168, 2304}, {6144, 512, 7168},  {6144, 4096, 512}};

std::string name(const Shape& s) {
  return std::to_string(std::get<0>(s)) + "x" + std::to_string(std::get<1>(s)) + "x" + std::to_string(std::get<2>(s));
}

// The generic rules pick 192x128 (192x144, 256x128) on exactly the benchmark shapes whose tuned entry (the
// measured winner) is 192x128 (192x144, 256x128) -- the claim gemm_cuda.cu and docs/cuda_sm90.md make.
void generic_rule_matches_table_on(Sm90Kernel v, const char* tile, int expected, const char* check) {
  std::string err;
  int n = 0;
  for (const Shape& s : kBenchmarkShapes) {
    const GemmProblem p = problem(std::get<0>(s), std::get<1>(s), std::get<2>(s));
    const bool table = fp8gemm::cuda::choose_config(p).kernel == v;
    const bool generic = fp8gemm::cuda::choose_generic_config(p).kernel == v;
    n += table;
    if (table != generic)
      err += name(s) + (table ? " table " : " generic ") + tile + (table ? ", generic not; " : ", table not; ");
  }
  if (n != expected)
    err += "expected " + std::to_string(expected) + " tuned " + tile + " entries, found " + std::to_string(n);
  report(check, err);
}

// Shapes off the table: up to 16 rows, and up to 64 rows of a short weight, take the decode kernel; short-K tall shapes take 192x128 when its waves leave
// each CTA no more work; a shape that is one wave of 128x128 tiles does not.
void generic_rule_examples() {
  std::string err;
  auto expect = [&](int64_t m, int64_t n, int64_t k, Sm90Kernel v) {
    if (fp8gemm::cuda::choose_generic_config(problem(m, n, k)).kernel != v)
      err += std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " took variant " +
             std::to_string(static_cast<int>(fp8gemm::cuda::choose_generic_config(problem(m, n, k)).kernel)) + "; ";
  };
  expect(7, 4096, 7168, Sm90Kernel::kTile64x32);
  expect(16, 4096, 7168, Sm90Kernel::kTile64x32);
  expect(16, 1536, 7168, Sm90Kernel::kDecode);
  expect(32, 1536, 7168, Sm90Kernel::kDecode);
  expect(17, 4096, 300, Sm90Kernel::kTile64x64);
  expect(65, 4096, 7168, Sm90Kernel::kTile64x64);
  // 136 tiles of 64x64: more than one wave; the least loaded tile: 92 of 64x96 (160 bytes per K column).
  expect(65, 4352, 7168, Sm90Kernel::kTile64x96);
  // 48 x 56 tiles of 128x128 = 21 waves (42 row-slices per CTA), 32 x 56 of 192x128 = 14 waves (42),
  // K short: 192x128. At M = 6000 the 128x128 tiles need only 20 waves (40) and win.
  expect(6100, 7100, 300, Sm90Kernel::kTile192x128);
  // The same tie holds up to K = 2304 (18 K blocks, measured); beyond that the 128x128 kernel keeps it.
  expect(6100, 7100, 2304, Sm90Kernel::kTile192x128);
  expect(6100, 7100, 2432, Sm90Kernel::kTile128x128);
  expect(6000, 7100, 300, Sm90Kernel::kTile128x128);
  expect(1000, 2000, 4000, Sm90Kernel::kTile128x128);  // 128 tiles of 128x128: one wave
  // 192x144: 32 x 4 = 128 tiles, one wave (3.375 slices per CTA) against two waves of 128x128 (4); not
  // for a short K, nor where it saves less than 10 % (6144x512: 192x128 needs one wave of 3 slices).
  expect(6144, 576, 7168, Sm90Kernel::kTile192x144);
  expect(6144, 576, 1920, Sm90Kernel::kTile128x128);
  expect(6144, 512, 7168, Sm90Kernel::kTile192x128);
  report("generic_rule_examples", err);
}

// DeepGEMM's test shapes and other small-M shapes (off the table): the kernel and split the generic rule
// picks for each.
void generic_rule_on_deepgemm_shapes() {
  using SK = Sm90Kernel;
  using SS = fp8gemm::cuda::Sm90Split;
  struct Case {
    int64_t m, n, k;
    SK kernel;
    SS split;
  };
  const Case cases[] = {
      {64, 2112, 7168, SK::kTile64x32, SS::kDataParallel}, {64, 24576, 1536, SK::kTile64x64, SS::kDataParallel},
      {64, 32768, 512, SK::kTile64x64, SS::kDataParallel},  {64, 7168, 16384, SK::kTile64x64, SS::kDataParallel},
      {64, 36864, 7168, SK::kTile64x64, SS::kStreamK},     {32, 36864, 7168, SK::kTile64x64, SS::kStreamK},
      {1, 2112, 7168, SK::kTile64x32, SS::kDataParallel},  {16, 7168, 2048, SK::kTile64x64, SS::kDataParallel},
      {32, 2112, 7168, SK::kTile64x32, SS::kDataParallel}, {64, 1536, 7168, SK::kTile64x32, SS::kDataParallel},
      {64, 7168, 2048, SK::kTile64x64, SS::kDataParallel},  {64, 4096, 7168, SK::kTile64x32, SS::kDataParallel},
      {32, 4096, 7168, SK::kTile64x32, SS::kDataParallel},  {4, 7168, 2048, SK::kTile64x64, SS::kDataParallel},
      {2, 7168, 2048, SK::kTile64x64, SS::kDataParallel},  {8, 4096, 7168, SK::kTile64x32, SS::kDataParallel},
      {16, 4096, 7168, SK::kTile64x32, SS::kDataParallel}, {64, 1024, 7168, SK::kDecode, SS::kSplitK},
      {16, 7168, 16384, SK::kTile64x64, SS::kDataParallel}, {8, 1536, 7168, SK::kDecode, SS::kSplitK},
      {16, 32768, 512, SK::kDecode, SS::kSplitK},          {1, 36864, 7168, SK::kDecode, SS::kSplitK},
      {128, 2112, 7168, SK::kTile64x32, SS::kDataParallel}, {128, 24576, 1536, SK::kTile128x64, SS::kDataParallel},
      {128, 32768, 512, SK::kTile128x128, SS::kDataParallel},
      {128, 7168, 16384, SK::kTile128x64, SS::kDataParallel},
      {128, 4096, 7168, SK::kTile64x64, SS::kDataParallel}, {128, 7168, 2048, SK::kTile128x64, SS::kDataParallel},
      {128, 1536, 4096, SK::kTile64x32, SS::kDataParallel},
      {4096, 2112, 7168, SK::kTile192x128, SS::kDataParallel},
      {4096, 24576, 1536, SK::kTile256x128, SS::kDataParallel},
      {4096, 32768, 512, SK::kTile256x128, SS::kDataParallel},
      {4096, 4096, 7168, SK::kTile256x128, SS::kDataParallel},
      {4096, 7168, 2048, SK::kTile256x128, SS::kDataParallel},
      {4096, 7168, 16384, SK::kTile256x128, SS::kDataParallel},
      {4096, 36864, 7168, SK::kTile256x128, SS::kDataParallel},
      {2048, 4096, 7168, SK::kTile256x128, SS::kDataParallel},
      // 128x192 where it needs fewer row-slices per CTA than 128x128 (stream-K) and 192x128.
      {256, 36864, 7168, SK::kTile128x192, SS::kDataParallel},
      {1024, 3072, 1536, SK::kTile128x192, SS::kDataParallel},
      // Less than a wave of 128x128 tiles: the least loaded narrow tile where 128x64 tiles make at most one
      // wave; at most a quarter wave: 64x32 tiles where one wave of them fills more than half of the SMs,
      // else 64x64 tiles, stream-K where they fill at most half of the SMs, else the least loaded narrow tile.
      {512, 2112, 7168, SK::kTile128x64, SS::kDataParallel},
      {2048, 512, 7168, SK::kTile128x64, SS::kDataParallel},
      {256, 4096, 7168, SK::kTile128x64, SS::kDataParallel},
      {256, 1536, 7168, SK::kTile64x48, SS::kDataParallel},
      {512, 1536, 7168, SK::kTile64x96, SS::kDataParallel},
      {512, 576, 7168, SK::kTile64x48, SS::kDataParallel},
      {1024, 576, 7168, SK::kTile64x96, SS::kDataParallel},
      {1024, 512, 7168, SK::kTile64x64, SS::kDataParallel},
      {1024, 1536, 7168, SK::kTile128x96, SS::kDataParallel},
      {2048, 576, 7168, SK::kTile128x96, SS::kDataParallel},
      {256, 576, 7168, SK::kTile64x32, SS::kDataParallel},
      {512, 512, 7168, SK::kTile64x32, SS::kDataParallel},
      {384, 1024, 4096, SK::kTile64x48, SS::kDataParallel},
      {512, 4096, 7168, SK::kTile128x128, SS::kDataParallel},
  };
  std::string err;
  for (const Case& c : cases) {
    const fp8gemm::cuda::Sm90Config got = fp8gemm::cuda::choose_generic_config(problem(c.m, c.n, c.k));
    if (got.kernel != c.kernel || got.split != c.split)
      err += name({c.m, c.n, c.k}) + " took " + fp8gemm::cuda::kernel_name(got.kernel) + " split " +
             std::to_string(static_cast<int>(got.split)) + "; ";
  }
  // Tiles below 17 rows only where the tile kernel reads a_scale in place: a K-contiguous one (which it
  // would copy first) keeps the decode kernel.
  for (const Shape& s : {Shape{16, 7168, 2048}, Shape{16, 4096, 7168}}) {
    GemmProblem kmajor = problem(std::get<0>(s), std::get<1>(s), std::get<2>(s));
    kmajor.a_scale_stride_m = (kmajor.k + 127) / 128, kmajor.a_scale_stride_kb = 1;
    if (fp8gemm::cuda::choose_generic_config(kmajor).kernel != SK::kDecode) err += name(s) + " with a K-major a_scale; ";
  }
  // Up to 16 rows the tile kernels read in place an a_scale TMA cannot (copied by their producer): M-contiguous
  // with a K-block stride of M floats, a (1, kb) K-contiguous one, or one at a 4-byte aligned address. The
  // 64x64 rule takes those; the 64x32 rule only an a_scale TMA reads (the decode kernel was faster).
  for (const Case& c : {Case{1, 7168, 2048, SK::kTile64x64, SS::kDataParallel},
                        Case{2, 4096, 7168, SK::kDecode, SS::kSplitK},
                        Case{1, 2112, 7168, SK::kDecode, SS::kSplitK},
                        Case{3, 7168, 16384, SK::kTile64x64, SS::kDataParallel}}) {
    GemmProblem mn = problem(c.m, c.n, c.k);
    mn.a_scale_stride_kb = c.m;
    GemmProblem k1 = problem(1, c.n, c.k);
    k1.a_scale_stride_m = (c.k + 127) / 128, k1.a_scale_stride_kb = 1;
    GemmProblem off = problem(c.m, c.n, c.k);
    off.a_scale += 1;
    for (const GemmProblem& q : {mn, k1, off})
      if (fp8gemm::cuda::choose_generic_config(q).kernel != c.kernel)
        err += name({q.m, c.n, c.k}) + " with an a_scale TMA cannot read took " +
               fp8gemm::cuda::kernel_name(fp8gemm::cuda::choose_generic_config(q).kernel) + "; ";
  }
  report("generic_rule_on_deepgemm_shapes", err);
}

// The decode kernel's plan (sm90_decode.cu, decode_plan): on 132 SMs every plan has at most
// kDecodeMaxSplit CTAs per tile and no CTA without K blocks; a forced rows / split is kept.
void decode_plan_checks() {
  using fp8gemm::cuda::sm90::DecodeArgs;
  std::string err;
  for (int64_t n : {1, 100, 576, 1536, 2112, 4096, 7168, 24576, 32768, 36864})
    for (int64_t k : {16, 128, 512, 1536, 2048, 7168, 16384, 18432})
      for (int m : {1, 8, 16, 33, 64}) {
        DecodeArgs a;
        a.m = m, a.n = static_cast<int32_t>(n), a.k = static_cast<int32_t>(k), a.sm_count = 132;
        const DecodeArgs r = fp8gemm::cuda::sm90::decode_plan(a);
        const int64_t kb = (k + 127) / 128;
        const int64_t kb_per = (kb + r.k_split - 1) / r.k_split;
        const bool rows_ok = r.rows_per_cta == 64 || r.rows_per_cta == 128;
        const bool split_ok = r.k_split >= 1 && r.k_split <= fp8gemm::cuda::sm90::kDecodeMaxSplit &&
                              (r.k_split - 1) * kb_per < kb;
        if ((!rows_ok || !split_ok) && err.size() < 400)
          err += name({m, n, k}) + ": rows " + std::to_string(r.rows_per_cta) + " split " +
                 std::to_string(r.k_split) + "; ";
      }
  DecodeArgs forced;
  forced.m = 4, forced.n = 7168, forced.k = 7168, forced.sm_count = 132, forced.rows_per_cta = 64, forced.k_split = 3;
  const DecodeArgs f = fp8gemm::cuda::sm90::decode_plan(forced);
  if (f.rows_per_cta != 64 || f.k_split != 3) err += "forced rows / split not kept; ";
  report("decode_plan", err);
}

// split_k_tail_splits: the plan's invariants over a grid, and the benchmark cases it was measured on.
void split_k_tail() {
  std::string err;
  for (int64_t slots : {60, 66, 132})
    for (int64_t items = 1; items <= 3000; ++items)
      for (int64_t kb = 1; kb <= 80; ++kb) {
        const int64_t s = split_k_tail_splits(items, slots, kb);
        if (s == 0) continue;
        const int64_t full = items / slots, rem = items % slots, len = (kb + s - 1) / s;
        const bool bad = s < 2 || full < 1 || rem < 1 || 2 * rem > slots || rem * s > slots || len < 8 ||
                         (s - 1) * len >= kb;
        if (bad && err.size() < 300)
          err += "items " + std::to_string(items) + " slots " + std::to_string(slots) + " kb " + std::to_string(kb) +
                 " -> " + std::to_string(s) + "; ";
      }
  const std::tuple<int64_t, int64_t, int64_t, int64_t> cases[] = {
      {1728, 132, 56, 7},  // 6144x4608x7168, 128x128: 13 waves + 12 tiles in 7 pieces of 8 blocks
      {288, 132, 56, 5},   // 1024x4608x7168, 128x128
      {240, 132, 56, 0},   // 6144x576x7168, 128x128: the partial wave (108) is more than half
      {96, 132, 56, 0},    // 1024x1536x7168: no whole wave
      {2688, 132, 18, 2},  // 6144x7168x2304, 128x128
      {2688, 132, 12, 0},  // K = 1536: pieces would be shorter than 8 blocks
  };
  for (const auto& [items, slots, kb, want] : cases) {
    const int64_t got = split_k_tail_splits(items, slots, kb);
    if (got != want)
      err += "items " + std::to_string(items) + " kb " + std::to_string(kb) + ": " + std::to_string(got) +
             " splits, expected " + std::to_string(want) + "; ";
  }
  report("split_k_tail", err);
}

}  // namespace

int main() {
  generic_rule_matches_table_on(Sm90Kernel::kTile192x128, "192x128", 7, "generic_rule_matches_table_on_192x128");
  generic_rule_matches_table_on(Sm90Kernel::kTile256x128, "256x128", 4, "generic_rule_matches_table_on_256x128");
  generic_rule_matches_table_on(Sm90Kernel::kTile192x144, "192x144", 1, "generic_rule_matches_table_on_192x144");
  generic_rule_examples();
  generic_rule_on_deepgemm_shapes();
  decode_plan_checks();
  split_k_tail();
  return failures;
}
