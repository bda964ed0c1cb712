// Host (g++, no HIP) checks of the gfx942 dispatch table and pass plan, run by test_rocm_isa.py.
//
//   rocm_dispatch_check check            self-checks; prints failures, exit 1 if any
//   rocm_dispatch_check kernels          JSON: every kGemmKernels entry (the ISA test's source of truth)
//                                        and the size of its kernel argument (GemmArgs)
//   rocm_dispatch_check select M N K...  one JSON line per (M, N, K): chosen kernel, workgroups,
//                                        sk_workgroups (GemmConfig), tuned?
//   rocm_dispatch_check numerics         every fp8 byte: e4m3fn->fnuz byte, decoded fnuz/fn values;
//                                        then bf16_rne of each hex float bit pattern read from stdin
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fp8_numerics.h"
#include "gemm_rocm_config.h"
#include "gemm_rocm_plan.h"

using namespace fp8gemm;
using namespace fp8gemm::rocm;

static int failures = 0;
#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      ++failures;                                                         \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
      std::printf(__VA_ARGS__);                                           \
      std::printf("\n");                                                  \
    }                                                                     \
  } while (0)

// A problem with fake (never dereferenced) but suitably aligned pointers.
static GemmProblem problem(int64_t m, int64_t n, int64_t k, bool a_k_major, bool b_k_major, Fp8Format fmt,
                           uintptr_t misalign = 0) {
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a = reinterpret_cast<const uint8_t*>(uintptr_t{1} << 20) + misalign;
  p.b = reinterpret_cast<const uint8_t*>(uintptr_t{1} << 30);
  p.a_stride_m = a_k_major ? k : 1, p.a_stride_k = a_k_major ? 1 : m;
  p.b_stride_n = b_k_major ? k : 1, p.b_stride_k = b_k_major ? 1 : n;
  p.a_scale = reinterpret_cast<const float*>(uintptr_t{1} << 34);
  p.a_scale_stride_m = 1, p.a_scale_stride_kb = m;
  p.b_scale = reinterpret_cast<const float*>(uintptr_t{1} << 35);
  p.b_scale_stride_nb = 1, p.b_scale_stride_kb = p.n_blocks();
  p.out = reinterpret_cast<uint16_t*>(uintptr_t{1} << 36);
  p.out_stride_m = n, p.out_stride_n = 1;
  p.format = fmt;
  return p;
}

static int count_kind(const Plan& plan, PassKind kind) {
  int c = 0;
  for (int i = 0; i < plan.num_passes; ++i) c += plan.passes[i].kind == kind;
  return c;
}

// The GEMM pass (the last one of every plan).
static const Pass& gemm_pass(const Plan& plan) { return plan.passes[plan.num_passes - 1]; }

// The stream-K schedule of a GEMM pass covers every (tile, K block) once: stream-K runs over the
// last sk_tiles tiles, whole tiles v, v + W, ... of the others; slot indices (stream-K tile +
// workgroup) of the shared tiles' pieces distinct and inside the workspace's slots.
static void check_schedule(const GemmArgs& g, int64_t slots, const char* what) {
  const int64_t tiles = int64_t{g.tiles_m} * g.tiles_n, kb = g.k_blocks;
  const int64_t wgs = g.workgroups > 0 ? g.workgroups : tiles;
  std::vector<int> seen(static_cast<size_t>(tiles * kb), 0);
  std::vector<int> contributors(static_cast<size_t>(g.sk_tiles), 0);
  std::vector<int> slot_used(static_cast<size_t>(g.sk_tiles + g.sk_workgroups), 0);
  const int64_t dp = tiles - g.sk_tiles, iters = int64_t{g.sk_tiles} * kb;
  CHECK(g.sk_tiles == 0 || iters * g.sk_workgroups <= kMaxStreamProduct, "%s: 32-bit stream-K", what);
  for (int64_t v = 0; v < wgs; ++v) {
    if (v < g.sk_workgroups) {
      const int64_t b = stream_begin<int64_t>(v, iters, g.sk_workgroups), e = stream_begin<int64_t>(v + 1, iters, g.sk_workgroups);
      CHECK(b < e, "%s: empty run", what);
      for (int64_t x = b; x < e; ++x) ++seen[static_cast<size_t>((dp + x / kb) * kb + x % kb)];
      for (int64_t t = b / kb; t <= (e - 1) / kb; ++t) ++contributors[static_cast<size_t>(t)];
      CHECK(stream_owner<int64_t>(b, iters, g.sk_workgroups) == v && stream_owner<int64_t>(e - 1, iters, g.sk_workgroups) == v,
            "%s: stream_owner", what);
    }
    for (int64_t t = v; t < dp; t += wgs)
      for (int64_t x = 0; x < kb; ++x) ++seen[static_cast<size_t>(t * kb + x)];
  }
  for (int c : seen) CHECK(c == 1, "%s: an iteration covered %d times", what, c);
  for (int64_t v = 0; v < g.sk_workgroups; ++v) {
    const int64_t b = stream_begin<int64_t>(v, iters, g.sk_workgroups), e = stream_begin<int64_t>(v + 1, iters, g.sk_workgroups);
    for (int64_t t = b / kb; t <= (e - 1) / kb; ++t)
      if (contributors[static_cast<size_t>(t)] > 1) {
        CHECK(t + v < slots, "%s: slot %lld past the %lld slots", what, (long long)(t + v), (long long)slots);
        CHECK(++slot_used[static_cast<size_t>(t + v)] == 1, "%s: slot %lld used twice", what, (long long)(t + v));
      }
  }
  const bool shared = std::any_of(contributors.begin(), contributors.end(), [](int c) { return c > 1; });
  CHECK(shared == (g.tile_counters != nullptr && g.partial != nullptr), "%s: counters/slots iff a tile is shared", what);
}

static uintptr_t ws_end(void* ws, size_t bytes) { return reinterpret_cast<uintptr_t>(ws) + bytes; }

static void check_plans() {
  void* const ws = reinterpret_cast<void*>(uintptr_t{1} << 40);  // 256-aligned fake workspace
  const size_t big = size_t{1} << 40;

  // K-major, aligned, e4m3fnuz, tuned shape with one workgroup per tile: one pass, no workspace.
  {
    GemmProblem p = problem(1024, 7168, 2048, true, true, Fp8Format::kE4M3FNUZ);
    const Plan plan = make_plan(p, nullptr, 0, false);
    CHECK(plan.status == PlanStatus::kOk, "status %d", int(plan.status));
    CHECK(plan.tuned && plan.num_passes == 1 && plan.passes[0].kind == PassKind::kGemm, "passes %d", plan.num_passes);
    CHECK(plan.workspace_bytes == 0 && plan_workspace_bytes(p) == 0, "ws %zu", plan.workspace_bytes);
    const Pass& g = plan.passes[0];
    const GemmKernelShape& ks = kernel_shape(g.gemm_kernel);
    CHECK(g.grid[0] == uint32_t((1024 / ks.block_m) * (7168 / ks.block_n)) && g.grid[2] == 1, "grid %u", g.grid[0]);
    CHECK(g.gemm.workgroups == 0 && g.gemm.sk_tiles == 0 && g.gemm.tile_counters == nullptr, "one per tile");
    CHECK(g.block_threads == uint32_t(ks.threads()) && g.lds_bytes == uint32_t(ks.lds_bytes()), "block/lds");
    CHECK(g.gemm.lda == 2048 && g.gemm.ldb == 2048 && g.gemm.scale_factor == 1.0f, "ld/scale");
    CHECK(g.gemm.out_vector_ok == 1, "row-major aligned out: vector epilogue");
    GemmProblem q = p;
    q.out_stride_m = 1, q.out_stride_n = 1024;  // column-major out: per-element epilogue
    CHECK(make_plan(q, nullptr, 0, false).passes[0].gemm.out_vector_ok == 0, "column-major out");
    q = p;
    q.out = reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(p.out) + 2);
    CHECK(make_plan(q, nullptr, 0, false).passes[0].gemm.out_vector_ok == 0, "misaligned out");
  }
  // The challenge layout (MN-major a and b, M and N multiples of 16): read in place, transposed in
  // registers; one pass, no workspace.
  {
    GemmProblem p = problem(6144, 7168, 2048, false, false, Fp8Format::kE4M3FNUZ);
    const Plan plan = make_plan(p, nullptr, 0, false);
    CHECK(plan.status == PlanStatus::kOk && plan.num_passes == 1 && plan.workspace_bytes == 0, "passes %d ws %zu",
          plan.num_passes, plan.workspace_bytes);
    CHECK(plan.a_mn_direct && plan.b_mn_direct && !plan.pack_a && !plan.pack_b, "MN direct");
    const GemmArgs& g = plan.passes[0].gemm;
    CHECK(g.a_mn_major == 1 && g.b_mn_major == 1 && g.lda == 6144 && g.ldb == 7168 && g.k == 2048, "MN args");
  }
  // MN-major with M % 16 != 0: both packed (the kernel reads both
  // operands in one layout), two pack passes then the GEMM; workspace checks.
  {
    GemmProblem p = problem(100, 576, 7168, false, false, Fp8Format::kE4M3FNUZ);
    p.a_stride_k = 112;  // rows padded to 16 bytes: still the vector pack path
    const size_t need = plan_workspace_bytes(p);
    CHECK(need >= size_t(100 + 576) * 7168, "ws %zu", need);
    const Plan plan = make_plan(p, ws, need, false);
    CHECK(plan.status == PlanStatus::kOk && plan.num_passes >= 3, "passes %d", plan.num_passes);
    CHECK(plan.pack_a && plan.pack_b && !plan.a_mn_direct && !plan.b_mn_direct, "packed");
    CHECK(plan.passes[0].kind == PassKind::kPack && plan.passes[0].pack.mode == PackMode::kMnVector, "pack a");
    CHECK(plan.passes[1].kind == PassKind::kPack && plan.passes[1].pack.mode == PackMode::kMnVector, "pack b");
    CHECK(gemm_pass(plan).gemm.lda == 7168 && gemm_pass(plan).gemm.ldb == 7168, "packed ld");
    CHECK(gemm_pass(plan).gemm.a_mn_major == 0 && gemm_pass(plan).gemm.b_mn_major == 0, "packed is K-major");
    CHECK(make_plan(p, ws, need - 1, false).status == PlanStatus::kNoWorkspace, "short workspace accepted");
    CHECK(make_plan(p, nullptr, need, false).status == PlanStatus::kNoWorkspace, "null workspace accepted");
    CHECK(make_plan(p, static_cast<uint8_t*>(ws) + 16, need, false).status == PlanStatus::kNoWorkspace,
          "misaligned workspace accepted");
  }
  // Mixed layouts: the K-major operand is read in place, the MN-major one is packed.
  {
    GemmProblem p = problem(1024, 4608, 7168, true, false, Fp8Format::kE4M3FNUZ);
    const Plan plan = make_plan(p, ws, big, false);
    CHECK(!plan.pack_a && plan.pack_b && !plan.a_mn_direct && !plan.b_mn_direct, "mixed");
    CHECK(count_kind(plan, PassKind::kPack) == 1 && gemm_pass(plan).kind == PassKind::kGemm, "mixed passes");
  }
  // Work decompositions: every (tile, K block) once, shared tiles' slots distinct, the zero pass
  // (tickets) right before the GEMM pass and inside the workspace. Tuned split-K-like (every tile
  // shared), tuned stream-K with whole tiles after the stream-K runs, the generic split-K, and
  // overrides with odd sizes.
  {
    struct Case {
      int64_t m, n, k;
      const GemmConfig* config;
    };
    const GemmConfig odd1{GemmKernelId::kT128x64_W2x1x2_M32, 7, 0}, odd2{GemmKernelId::kT64x64_W2x2_M16, 50, 9},
        odd3{GemmKernelId::kT256x128_W4x2_M32, 5, 3}, odd4{GemmKernelId::kT128x128_W2x2_M32, 3, 0};
    const Case cases[] = {{1024, 576, 7168, nullptr}, {1024, 3072, 1536, nullptr}, {6144, 4608, 7168, nullptr},
                          {64, 1536, 7168, nullptr},  {300, 200, 1000, &odd1},     {130, 700, 650, &odd2},
                          {600, 300, 3000, &odd3},    {256, 256, 384, &odd4}};
    for (const Case& c : cases) {
      GemmProblem p = problem(c.m, c.n, c.k, true, true, Fp8Format::kE4M3FNUZ);
      const size_t need = plan_workspace_bytes(p, c.config);
      const Plan plan = make_plan(p, ws, need, false, c.config);
      char what[96];
      std::snprintf(what, sizeof what, "%lldx%lldx%lld", (long long)c.m, (long long)c.n, (long long)c.k);
      CHECK(plan.status == PlanStatus::kOk && gemm_pass(plan).kind == PassKind::kGemm, "%s status", what);
      const GemmArgs& g = gemm_pass(plan).gemm;
      const GemmKernelShape& ks = kernel_shape(plan.config.kernel);
      const int64_t slot_bytes = int64_t{ks.block_m} * ks.block_n * 4;
      const int64_t slots = g.partial ? static_cast<int64_t>(ws_end(ws, need) - reinterpret_cast<uintptr_t>(g.partial)) / slot_bytes : 0;
      check_schedule(g, slots, what);
      CHECK(gemm_pass(plan).grid[0] == uint32_t(g.workgroups > 0 ? g.workgroups : int64_t{g.tiles_m} * g.tiles_n), "%s grid", what);
      CHECK(g.out_vector_ok == (c.n % 8 == 0 ? 1 : 0), "%s: bf16 vector epilogue with shared tiles too", what);
      if (g.tile_counters) {
        const Pass& z = plan.passes[plan.num_passes - 2];
        CHECK(z.kind == PassKind::kZero && z.zero.dst == g.tile_counters && z.zero.bytes == size_t(g.sk_tiles) * 4, "%s zero", what);
        CHECK(reinterpret_cast<uintptr_t>(g.tile_counters) + z.zero.bytes <= reinterpret_cast<uintptr_t>(g.partial), "%s layout", what);
      } else {
        CHECK(count_kind(plan, PassKind::kZero) == 0, "%s: zero pass without shared tiles", what);
      }
    }
    GemmProblem p = problem(1024, 576, 7168, true, true, Fp8Format::kE4M3FNUZ);
    const Plan plan = make_plan(p, ws, plan_workspace_bytes(p), false);
    CHECK(plan.config.workgroups == 280 && gemm_pass(plan).gemm.sk_tiles == 40 && gemm_pass(plan).gemm.sk_workgroups == 280,
          "1024x576x7168: 40 tiles in 7 runs each");
    CHECK(plan_workspace_bytes(p) >= size_t(40 + 280) * 128 * 128 * 4 + 40 * 4, "slots %zu", plan_workspace_bytes(p));
    GemmProblem q = problem(6144, 7168, 2304, false, false, Fp8Format::kE4M3FNUZ);
    const Plan plan_q = make_plan(q, ws, plan_workspace_bytes(q), false);
    CHECK(gemm_pass(plan_q).gemm.sk_tiles == 128 && gemm_pass(plan_q).gemm.sk_workgroups == 256, "6144x7168x2304 hybrid");
  }
  // e4m3fn: both operands go through the pack pass, which converts them to e4m3fnuz; the product
  // factor 4 is folded into the scale. e4m3fnuz operands read in place keep the factor 1.
  {
    GemmProblem p = problem(1024, 4608, 7168, true, true, Fp8Format::kE4M3FN);
    const Plan plan = make_plan(p, ws, big, false);
    CHECK(plan.status == PlanStatus::kOk && plan.pack_a && plan.pack_b && count_kind(plan, PassKind::kPack) == 2,
          "fn K-major packed");
    CHECK(plan.passes[0].pack.convert_e4m3fn == 1 && plan.passes[1].pack.convert_e4m3fn == 1, "fn convert flags");
    CHECK(gemm_pass(plan).gemm.scale_factor == 4.0f, "fn factor %g", double(gemm_pass(plan).gemm.scale_factor));
    GemmProblem q = problem(1024, 4608, 7168, false, false, Fp8Format::kE4M3FN);
    const Plan plan_q = make_plan(q, ws, big, false);
    CHECK(plan_q.pack_a && plan_q.pack_b && !plan_q.a_mn_direct && gemm_pass(plan_q).gemm.a_mn_major == 0,
          "fn MN-major packed");
    GemmProblem r = problem(64, 64, 128, true, true, Fp8Format::kE4M3FNUZ);
    const Plan plan_r = make_plan(r, ws, big, false);
    CHECK(!plan_r.pack_a && gemm_pass(plan_r).gemm.scale_factor == 1.0f, "fnuz in place, factor 1");
  }
  // Buffer-offset range: K-major rows so long that a 256-row tile spans more than 2 GiB, and
  // MN-major k rows so long that a 128-wide K block does, are packed; overlapping MN-major k rows
  // (stride_k < rows) too.
  {
    GemmProblem p = problem(512, 512, 16, true, true, Fp8Format::kE4M3FNUZ);
    p.a_stride_m = int64_t{1} << 24;  // 255 rows * 16 MiB > 2 GiB
    const Plan plan = make_plan(p, ws, big, false);
    CHECK(plan.pack_a && !plan.pack_b, "long K-major rows packed");
    GemmProblem q = problem(1 << 24, 512, 128, false, false, Fp8Format::kE4M3FNUZ);
    q.a_stride_k = (int64_t{1} << 24) + 16;  // 128 k rows > 2 GiB
    const Plan plan_q = make_plan(q, nullptr, 0, true);
    CHECK(plan_q.pack_a && plan_q.pack_b, "long MN-major k rows packed");
    GemmProblem r = problem(512, 512, 256, false, false, Fp8Format::kE4M3FNUZ);
    r.a_stride_k = 256;  // k rows overlap
    const Plan plan_r = make_plan(r, ws, big, false);
    CHECK(plan_r.pack_a && plan_r.pack_b, "overlapping MN-major rows packed");
  }
  // K tail (K % 16 != 0), misaligned a, odd strides: repacked, K padded to 128 with zeros.
  {
    GemmProblem p = problem(100, 70, 300, true, true, Fp8Format::kE4M3FNUZ);
    const Plan plan = make_plan(p, ws, big, false);
    CHECK(plan.status == PlanStatus::kOk && plan.pack_a && plan.pack_b, "K tail not packed");
    CHECK(gemm_pass(plan).gemm.lda == 384 && gemm_pass(plan).gemm.k_limit == 304, "lda %lld k_limit %d",
          (long long)gemm_pass(plan).gemm.lda, gemm_pass(plan).gemm.k_limit);
    GemmProblem q = problem(128, 128, 256, true, true, Fp8Format::kE4M3FNUZ, 8);
    const Plan plan_q = make_plan(q, ws, big, false);
    CHECK(plan_q.pack_a && !plan_q.pack_b, "misaligned a must be packed, b not");
    GemmProblem r = problem(96, 64, 256, true, true, Fp8Format::kE4M3FNUZ);
    r.a_stride_m = 257;  // K-major but rows not 16-byte aligned
    r.a_stride_k = 1;
    const Plan plan_r = make_plan(r, ws, big, false);
    CHECK(plan_r.pack_a && plan_r.passes[0].pack.mode == PackMode::kGather, "odd stride -> gather");
  }
  // Bad arguments are refused, never crash.
  {
    GemmProblem p = problem(0, 64, 128, true, true, Fp8Format::kE4M3FNUZ);
    CHECK(make_plan(p, ws, big, false).status == PlanStatus::kBadShape, "m=0");
    p = problem(64, 64, 128, true, true, Fp8Format::kE4M3FNUZ);
    p.format = static_cast<Fp8Format>(7);
    CHECK(make_plan(p, ws, big, false).status == PlanStatus::kBadFormat, "format 7");
    p = problem(64, 64, 128, true, true, Fp8Format::kE4M3FNUZ);
    p.out = nullptr;
    CHECK(make_plan(p, ws, big, false).status == PlanStatus::kNullPointer, "null out");
    p = problem(64, 64, int64_t{128} * 70000, true, true, Fp8Format::kE4M3FNUZ);
    CHECK(make_plan(p, ws, big, false).status == PlanStatus::kBadShape, "K beyond grid y");
  }
}

static void check_tables() {
  CHECK(tuned_keys_unique(kTunedShapes), "duplicate tuned key");
  CHECK(kernel_table_consistent(), "kernel table");
  for (const auto& e : kTunedShapes) {
    CHECK(static_cast<int>(e.config.kernel) >= 0 && static_cast<int>(e.config.kernel) < kNumGemmKernels, "kernel id");
    CHECK(e.config.workgroups >= 0 && e.config.sk_workgroups >= 0 && e.config.sk_workgroups <= e.config.workgroups,
          "workgroups");
    const GemmConfig* hit = find_tuned(kTunedShapes, unpack_m(e.key), unpack_n(e.key), unpack_k(e.key));
    CHECK(hit == &e.config, "entry not found by its own shape");
  }
  // The generic path answers every shape with a valid configuration (never fails).
  const int64_t dims[] = {1, 2, 15, 16, 17, 63, 64, 65, 96, 127, 128, 129, 500, 576, 1000, 1040, 4096, 6144, 8192, 20000};
  for (int64_t m : dims)
    for (int64_t n : dims)
      for (int64_t k : {int64_t{1}, int64_t{100}, int64_t{128}, int64_t{7168}, int64_t{50000}}) {
        const GemmConfig c = select_config(m, n, k);
        if (is_tuned_shape(m, n, k)) continue;  // checked above
        const int64_t tiles = tile_count(kernel_shape(c.kernel), m, n);
        CHECK(static_cast<int>(c.kernel) >= 0 && static_cast<int>(c.kernel) < kNumGemmKernels && c.sk_workgroups == 0 &&
                  (c.workgroups == 0 || (c.workgroups % tiles == 0 && c.workgroups / tiles >= 2 &&
                                         c.workgroups / tiles <= kMaxSplitK)),
              "m %lld n %lld k %lld", (long long)m, (long long)n, (long long)k);
      }
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "check") {
    check_tables();
    check_plans();
    std::printf("%d failures\n", failures);
    return failures ? 1 : 0;
  }
  if (mode == "kernels") {
    std::printf("[");
    for (int i = 0; i < kNumGemmKernels; ++i) {
      const GemmKernelShape& s = kGemmKernels[i];
      std::printf("%s{\"id\": %d, \"name\": \"%s\", \"block_m\": %d, \"block_n\": %d, \"waves_m\": %d, \"waves_n\": %d, "
                  "\"waves_k\": %d, \"mfma\": %d, \"threads\": %d, \"lds_bytes\": %d, \"waves_per_simd\": %d, "
                  "\"args_bytes\": %zu}",
                  i ? ", " : "", static_cast<int>(s.id), s.name, s.block_m, s.block_n, s.waves_m, s.waves_n, s.waves_k,
                  s.mfma, s.threads(), s.lds_bytes(), s.waves_per_simd, sizeof(GemmArgs));
    }
    std::printf("]\n");
    return 0;
  }
  if (mode == "select") {
    for (int i = 2; i + 2 < argc; i += 3) {
      const int64_t m = std::atoll(argv[i]), n = std::atoll(argv[i + 1]), k = std::atoll(argv[i + 2]);
      const GemmConfig c = select_config(m, n, k);
      std::printf("{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"kernel\": %d, \"workgroups\": %d, \"sk_workgroups\": %d, "
                  "\"tuned\": %s}\n",
                  (long long)m, (long long)n, (long long)k, static_cast<int>(c.kernel), c.workgroups, c.sk_workgroups,
                  is_tuned_shape(m, n, k) ? "true" : "false");
    }
    return 0;
  }
  if (mode == "numerics") {
    for (int b = 0; b < 256; ++b) {
      const uint8_t u = static_cast<uint8_t>(b);
      // %a prints exact binary values; nan prints as "nan"/"-nan".
      std::printf("%d %d %a %a\n", b, e4m3fn_to_e4m3fnuz(u), double(decode_e4m3fnuz(u)), double(decode_e4m3fn(u)));
    }
    unsigned bits;
    while (std::scanf("%x", &bits) == 1) std::printf("%04x\n", f32_to_bf16_rne(bits_f32(bits)));
    return 0;
  }
  std::fprintf(stderr, "usage: %s check|kernels|select M N K...|numerics\n", argv[0]);
  return 2;
}
