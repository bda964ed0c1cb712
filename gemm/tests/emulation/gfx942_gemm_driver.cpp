// Runs the gfx942 GEMM's own device code (gemm/gemm/gemm_rocm_kernels.h) on the CPU SIMT emulator,
// through the same pass plan the HIP launcher executes (gemm/gemm/gemm_rocm_plan.h).
//
//   g++ -std=c++20 -O2 -DFP8GEMM_SIMT_EMULATION -Igemm/tests/emulation -Igemm/include -Igemm/gemm
//       gfx942_gemm_driver.cpp -pthread -o gfx942_gemm_driver
//   gfx942_gemm_driver DIR
//   gfx942_gemm_driver --plan DIR        (the plan for DIR/problem.txt, JSON; nothing runs, no .bin read)
//   gfx942_gemm_driver --select M N K    (configuration the dispatch picks, JSON; nothing runs)
//   gfx942_gemm_driver --kernels         (every compiled GEMM kernel configuration, JSON list)
//
// DIR/problem.txt holds `key value` lines: m n k format (0 fnuz, 1 fn) and, for each tensor
// a, b, a_scale, b_scale, out: <name>_storage (elements), <name>_offset (elements before the
// first one), <name>_stride0, <name>_stride1; optionally `kernel <GemmKernelId>` with either
// `split_k <s>` (tiles x s workgroups; 1: one per tile) or `workgroups <W>` (and optionally
// `sk_workgroups <Wsk>`: GemmConfig), which replace the dispatch's choice (make_plan's test-only
// override); optionally the order in which
// the GEMM pass starts its workgroups (which one arrives last at a shared tile): `wg_rotate <r>`
// (linear ids r, r+1, ..., wrapping) or `wg_shuffle <seed>` (a seeded random permutation).
// Inputs are DIR/<name>.bin (storage bytes); the output storage is written to DIR/out.bin. One
// JSON line on stdout describes the plan executed (per pass: kernel, grid, and for the GEMM pass
// its main loop, K blocks, workgroups (0: one per tile), stream-K tiles and workgroups, tiles,
// whether a run spans tiles, the longest run of K blocks of one tile in one workgroup, whether
// tiles are shared, and the epilogue; for a pack pass its load mode; for the zero pass its bytes),
// the emulator's counters and, per shared tile, the workgroups that took its ticket in order.
// Exit 0 ok, 2 emulated kernel fault, 1 bad input / plan refusal.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "driver_io.h"
#include "gfx942_arch.h"
#include "gemm_rocm_kernels.h"
#include "gemm_rocm_plan.h"

// A build for a few tests may compile only some instantiations (bit i: GemmKernelId i).
#if !defined(FP8GEMM_EMU_KERNELS)
#define FP8GEMM_EMU_KERNELS 0xffffffffu
#endif

namespace simt = fp8gemm::simt;
using namespace fp8gemm;
using namespace fp8gemm::rocm;

namespace {

using simt::driver::need;
using simt::driver::read_file;
using simt::driver::read_problem;
using simt::driver::write_file;

// A registered device buffer holding `offset` poison elements then the storage file's bytes.
struct Tensor {
  uint8_t* base = nullptr;  // start of the registered allocation
  uint8_t* data = nullptr;  // element 0 of the view
  int64_t s0 = 0, s1 = 0;
  size_t bytes = 0;
};

Tensor make_tensor(const std::map<std::string, int64_t>& kv, const std::string& dir, const std::string& name,
                   size_t elem, bool input, bool load = true) {
  Tensor t;
  const int64_t storage = need(kv, name + "_storage"), offset = need(kv, name + "_offset");
  t.s0 = need(kv, name + "_stride0");
  t.s1 = need(kv, name + "_stride1");
  t.bytes = static_cast<size_t>(storage + offset) * elem;
  t.base = static_cast<uint8_t*>(simt::device_alloc(t.bytes, name, /*writable=*/!input, 0xff));
  t.data = t.base + offset * elem;
  if (input && load) {
    const std::vector<uint8_t> bytes = read_file(dir + "/" + name + ".bin");
    if (bytes.size() != static_cast<size_t>(storage) * elem)
      throw std::runtime_error(name + ".bin has " + std::to_string(bytes.size()) + " bytes, expected " +
                               std::to_string(storage * static_cast<int64_t>(elem)));
    std::memcpy(t.data, bytes.data(), bytes.size());
  }
  return t;
}

const char* pass_name(const Pass& pass) {
  switch (pass.kind) {
    case PassKind::kPack: return "pack_body";
    case PassKind::kZero: return "zero";
    default: return kernel_shape(pass.gemm_kernel).name;
  }
}

const char* epilogue_name(const GemmArgs& g) { return g.out_vector_ok ? "vector" : "strided"; }

// Does some workgroup's stream-K run cover more than one tile?
bool runs_span_tiles(const GemmArgs& g) {
  const int64_t iters = int64_t{g.sk_tiles} * g.k_blocks;
  for (int64_t v = 0; v < g.sk_workgroups; ++v)
    if (stream_begin<int64_t>(v, iters, g.sk_workgroups) / g.k_blocks !=
        (stream_begin<int64_t>(v + 1, iters, g.sk_workgroups) - 1) / g.k_blocks)
      return true;
  return false;
}

// The longest run of K blocks of one tile inside one workgroup (the main loop's trip count).
int64_t longest_tile_run(const GemmArgs& g) {
  if (g.sk_workgroups == 0 || g.sk_tiles < int64_t{g.tiles_m} * g.tiles_n) return g.k_blocks;  // a whole tile
  const int64_t iters = int64_t{g.sk_tiles} * g.k_blocks;
  int64_t best = 0;
  for (int64_t v = 0; v < g.sk_workgroups; ++v) {
    const int64_t b = stream_begin<int64_t>(v, iters, g.sk_workgroups), e = stream_begin<int64_t>(v + 1, iters, g.sk_workgroups);
    for (int64_t t = b / g.k_blocks; t <= (e - 1) / g.k_blocks; ++t)
      best = std::max(best, std::min(e, (t + 1) * g.k_blocks) - std::max(b, t * g.k_blocks));
  }
  return best;
}

const char* pack_mode_name(PackMode m) {
  switch (m) {
    case PackMode::kMnVector: return "mn_vector";
    case PackMode::kKVector: return "k_vector";
    default: return "gather";
  }
}

std::string pass_json(const Pass& pass) {
  std::ostringstream o;
  o << "{\"kernel\": \"" << pass_name(pass) << "\", \"grid\": [" << pass.grid[0] << ", " << pass.grid[1] << ", "
    << pass.grid[2] << "], \"threads\": " << pass.block_threads << ", \"lds_bytes\": " << pass.lds_bytes;
  if (pass.kind == PassKind::kGemm)
    o << ", \"loop\": \"" << (pass.gemm.a_mn_major ? "mn_major" : "k_major") << "\", \"k_blocks\": " << pass.gemm.k_blocks
      << ", \"workgroups\": " << pass.gemm.workgroups << ", \"sk_tiles\": " << pass.gemm.sk_tiles
      << ", \"sk_workgroups\": " << pass.gemm.sk_workgroups << ", \"tiles\": " << int64_t{pass.gemm.tiles_m} * pass.gemm.tiles_n
      << ", \"runs_span_tiles\": " << (runs_span_tiles(pass.gemm) ? "true" : "false")
      << ", \"longest_tile_run\": " << longest_tile_run(pass.gemm)
      << ", \"shared_tiles\": " << (pass.gemm.tile_counters != nullptr ? "true" : "false") << ", \"epilogue\": \""
      << epilogue_name(pass.gemm) << "\"";
  if (pass.kind == PassKind::kPack) o << ", \"mode\": \"" << pack_mode_name(pass.pack.mode) << "\"";
  if (pass.kind == PassKind::kZero) o << ", \"bytes\": " << pass.zero.bytes;
  o << "}";
  return o.str();
}

int run(const std::string& dir, bool plan_only) {
  const auto kv = read_problem(dir + "/problem.txt");
  GemmProblem p;
  p.m = need(kv, "m");
  p.n = need(kv, "n");
  p.k = need(kv, "k");
  p.format = static_cast<Fp8Format>(need(kv, "format"));
  GemmConfig forced{};
  const GemmConfig* override_config = nullptr;
  if (kv.count("kernel")) {
    const auto id = static_cast<GemmKernelId>(need(kv, "kernel"));
    if (static_cast<int>(id) < 0 || static_cast<int>(id) >= kNumGemmKernels) throw std::runtime_error("bad kernel id");
    int64_t wgs = 0, sk_wgs = kv.count("sk_workgroups") ? need(kv, "sk_workgroups") : 0;
    if (kv.count("workgroups")) {
      wgs = need(kv, "workgroups");
    } else {
      const int64_t split = need(kv, "split_k");
      wgs = split > 1 ? tile_count(kernel_shape(id), p.m, p.n) * split : 0;
    }
    forced = GemmConfig{id, static_cast<int32_t>(wgs), static_cast<int32_t>(sk_wgs)};
    override_config = &forced;
  }
  const bool load = !plan_only;
  Tensor a = make_tensor(kv, dir, "a", 1, true, load), b = make_tensor(kv, dir, "b", 1, true, load);
  Tensor as = make_tensor(kv, dir, "a_scale", 4, true, load), bs = make_tensor(kv, dir, "b_scale", 4, true, load);
  Tensor out = make_tensor(kv, dir, "out", 2, false);  // poisoned: 0xffff is a bf16 NaN
  p.a = a.data;
  p.a_stride_m = a.s0;
  p.a_stride_k = a.s1;
  p.b = b.data;
  p.b_stride_n = b.s0;
  p.b_stride_k = b.s1;
  p.a_scale = reinterpret_cast<const float*>(as.data);
  p.a_scale_stride_m = as.s0;
  p.a_scale_stride_kb = as.s1;
  p.b_scale = reinterpret_cast<const float*>(bs.data);
  p.b_scale_stride_nb = bs.s0;
  p.b_scale_stride_kb = bs.s1;
  p.out = reinterpret_cast<uint16_t*>(out.data);
  p.out_stride_m = out.s0;
  p.out_stride_n = out.s1;

  const size_t ws_bytes = plan_workspace_bytes(p, override_config);
  // Poisoned with 0xff bytes (fp32 NaN) so a partial sum that is read but never written shows.
  void* ws = ws_bytes ? simt::device_alloc(ws_bytes, "workspace", true, 0xff) : nullptr;
  const Plan plan = make_plan(p, ws, ws_bytes, /*sizing_only=*/false, override_config);
  if (plan.status != PlanStatus::kOk) {
    std::fprintf(stderr, "make_plan refused the problem: status %d\n", static_cast<int>(plan.status));
    return 1;
  }

  std::ostringstream passes;
  for (int i = 0; i < plan.num_passes; ++i) passes << (i ? ", " : "") << pass_json(plan.passes[i]);
  if (plan_only) {
    const GemmKernelShape& ks = kernel_shape(plan.config.kernel);
    std::printf("{\"tuned\": %s, \"kernel\": \"%s\", \"config_workgroups\": %d, \"config_sk_workgroups\": %d, "
                "\"passes\": [%s]}\n",
                plan.tuned ? "true" : "false", ks.name, plan.config.workgroups, plan.config.sk_workgroups,
                passes.str().c_str());
    return 0;
  }

  // The passes; with skip_zero, all but the ticket zeroing (a caller that keeps its workspace).
  auto run_passes = [&](bool skip_zero) {
  for (int i = 0; i < plan.num_passes; ++i) {
    const Pass& pass = plan.passes[i];
    if (skip_zero && pass.kind == PassKind::kZero) continue;
    const simt::Dim3 grid{pass.grid[0], pass.grid[1], pass.grid[2]};
    std::vector<int64_t> order;  // GEMM pass: the workgroup start order asked for (empty: linear)
    const int64_t n_wg = int64_t{pass.grid[0]} * pass.grid[1] * pass.grid[2];
    if (pass.kind == PassKind::kGemm && (kv.count("wg_rotate") || kv.count("wg_shuffle"))) {
      order.resize(static_cast<size_t>(n_wg));
      std::iota(order.begin(), order.end(), int64_t{0});
      if (kv.count("wg_rotate"))
        std::rotate(order.begin(), order.begin() + (need(kv, "wg_rotate") % n_wg), order.end());
      else
        std::shuffle(order.begin(), order.end(), std::mt19937_64(static_cast<uint64_t>(need(kv, "wg_shuffle"))));
    }
    const int threads = static_cast<int>(pass.block_threads);
    switch (pass.kind) {
      case PassKind::kPack:
        simt::launch(grid, threads, pass.lds_bytes, [](const PackArgs& args) { pack_body(args); }, pass.pack,
                     pass_name(pass));
        break;
      case PassKind::kZero:  // hipMemsetAsync on the GPU: a host memset between two launches here
        std::memset(pass.zero.dst, 0, pass.zero.bytes);
        break;
      case PassKind::kGemm: {
        const bool known = visit_gemm_kernel(pass.gemm_kernel, [&](auto cfg) {
          using Cfg = decltype(cfg);
          if (static_cast<int>(pass.block_threads) != Cfg::kThreads || static_cast<int>(pass.lds_bytes) != Cfg::kLdsBytes)
            throw std::runtime_error("plan's launch geometry disagrees with the kernel configuration");
          if constexpr (((FP8GEMM_EMU_KERNELS >> static_cast<int>(Cfg::kShape.id)) & 1) != 0) {
            simt::options().workgroup_order = order;
            simt::launch(grid, threads, pass.lds_bytes, [](const GemmArgs& args) { gemm_body<Cfg>(args); }, pass.gemm,
                         pass_name(pass));
            simt::options().workgroup_order.clear();
          } else
            throw std::runtime_error(std::string("this driver was built without kernel ") + Cfg::kShape.name);
        });
        if (!known) throw std::runtime_error("plan names an unknown GEMM kernel");
        break;
      }
    }
  }
  };
  run_passes(false);
  // The stream-K tickets after the call: the last arrival on each tile wraps its counter to 0.
  int tickets_left = 0;
  for (int i = 0; i < plan.num_passes; ++i)
    if (plan.passes[i].kind == PassKind::kZero)
      for (size_t b = 0; b < plan.passes[i].zero.bytes; ++b)
        tickets_left += static_cast<const uint8_t*>(plan.passes[i].zero.dst)[b] != 0;
  // repeat=1: the same call again on the same workspace without zeroing the tickets, into a poisoned
  // output; it must give the same bytes.
  int repeat_identical = -1;
  if (kv.count("repeat") && need(kv, "repeat") != 0) {
    const size_t n = out.bytes - (out.data - out.base);
    std::vector<uint8_t> first(out.data, out.data + n);
    std::memset(out.data, 0xff, n);
    simt::atomic_history().clear();
    run_passes(true);
    repeat_identical = std::memcmp(first.data(), out.data, n) == 0;
  }

  write_file(dir + "/out.bin", out.data, out.bytes - (out.data - out.base));
  const GemmKernelShape& ks = kernel_shape(plan.config.kernel);
  auto& st = simt::stats();
  // Per stream-K tile ticket (in tile order): the workgroups that took it, in arrival order.
  std::ostringstream tickets;
  for (const auto& [addr, wgs] : simt::atomic_history()) {
    tickets << (tickets.tellp() > 0 ? ", [" : "[");
    for (size_t i = 0; i < wgs.size(); ++i) tickets << (i ? ", " : "") << wgs[i];
    tickets << "]";
    (void)addr;
  }
  std::printf(
      "{\"tuned\": %s, \"kernel\": \"%s\", \"block_m\": %d, \"block_n\": %d, \"mfma\": %d, \"config_workgroups\": %d, \"config_sk_workgroups\": %d, "
      "\"pack_a\": %s, \"pack_b\": %s, \"workspace_bytes\": %zu, \"passes\": [%s], \"mfma16\": %llu, "
      "\"mfma32\": %llu, \"barriers\": %llu, \"workgroups\": %llu, \"atomics\": %llu, \"lds_bytes_read\": %llu, "
      "\"global_bytes_read\": %llu, \"tickets\": [%s], \"tickets_left\": %d, \"repeat_identical\": %d}\n",
      plan.tuned ? "true" : "false", ks.name, ks.block_m, ks.block_n, ks.mfma, plan.config.workgroups,
      plan.config.sk_workgroups,
      plan.pack_a ? "true" : "false", plan.pack_b ? "true" : "false", plan.workspace_bytes, passes.str().c_str(),
      static_cast<unsigned long long>(st.mfma16.load()), static_cast<unsigned long long>(st.mfma32.load()),
      static_cast<unsigned long long>(st.barriers.load()), static_cast<unsigned long long>(st.workgroups.load()),
      static_cast<unsigned long long>(st.atomics.load()),
      static_cast<unsigned long long>(st.lds_bytes_read.load()),
      static_cast<unsigned long long>(st.global_bytes_read.load()), tickets.str().c_str(), tickets_left,
      repeat_identical);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return simt::driver::run_main([&] {
    if (argc == 5 && std::string(argv[1]) == "--select") {
      const int64_t m = std::atoll(argv[2]), n = std::atoll(argv[3]), k = std::atoll(argv[4]);
      const GemmConfig c = select_config(m, n, k);
      std::printf("{\"tuned\": %s, \"kernel\": \"%s\", \"config_workgroups\": %d, \"config_sk_workgroups\": %d}\n",
                  is_tuned_shape(m, n, k) ? "true" : "false", kernel_shape(c.kernel).name, c.workgroups, c.sk_workgroups);
      return 0;
    }
    if (argc == 2 && std::string(argv[1]) == "--kernels") {
      std::printf("[");
      for (int i = 0; i < kNumGemmKernels; ++i) std::printf("%s\"%s\"", i ? ", " : "", kGemmKernels[i].name);
      std::printf("]\n");
      return 0;
    }
    if (argc == 3 && std::string(argv[1]) == "--plan") return run(argv[2], /*plan_only=*/true);
    if (argc != 2) {
      std::fprintf(stderr, "usage: %s DIR | --plan DIR | --select M N K | --kernels\n", argv[0]);
      return 1;
    }
    return run(argv[1], /*plan_only=*/false);
  });
}
