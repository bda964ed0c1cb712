// Runs the gfx942 MoE expert GEMM's own device code (gemm/gemm/expert_gemm_rocm_kernels.h and the expert
// mode of gemm/gemm/gemm_rocm_kernels.h) on the CPU SIMT emulator, through the same pass plan the HIP
// launcher executes (gemm/gemm/expert_gemm_rocm_plan.h).
//
//   g++ -std=c++20 -O2 -DFP8GEMM_SIMT_EMULATION -Igemm/tests/emulation -Igemm/include -Igemm/gemm
//       gfx942_expert_driver.cpp -pthread -o gfx942_expert_driver
//   gfx942_expert_driver DIR
//
// DIR/problem.txt holds `key value` lines: s n k experts format (0 fnuz, 1 fn) routing (0 ids, 1 offsets)
// ids_dtype (IndexDtype) and, per tensor a, a_scale, b, b_scale, out, ids / offsets: <name>_storage
// (elements), <name>_offset (elements before the view's first one, poisoned) and <name>_stride0.. (as
// many as the view has dimensions). Inputs are DIR/<name>.bin (storage bytes); the output storage is
// written to DIR/out.bin (poisoned with 0xffff, a bf16 NaN, before the call). Element sizes: a, b 1;
// a_scale, b_scale 4; out 2; offsets 4; ids the IndexDtype's. One JSON line on stdout: the plan's passes,
// the tile kernel, and the emulator's counters. Exit 0 ok, 2 emulated kernel fault, 1 bad input.
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "driver_io.h"
#include "expert_gemm_rocm_kernels.h"
#include "expert_gemm_rocm_plan.h"
#include "gemm_rocm_kernels.h"
#include "gfx942_arch.h"

namespace simt = fp8gemm::simt;
using namespace fp8gemm;
using namespace fp8gemm::rocm;

namespace {

using simt::driver::need;
using simt::driver::read_file;
using simt::driver::read_problem;
using simt::driver::write_file;

struct Tensor {
  uint8_t* base = nullptr;
  uint8_t* data = nullptr;
  int64_t stride[3] = {0, 0, 0};
  size_t bytes = 0;
};

Tensor make_tensor(const std::map<std::string, int64_t>& kv, const std::string& dir, const std::string& name,
                   size_t elem, int dims, bool input) {
  Tensor t;
  const int64_t storage = need(kv, name + "_storage"), offset = need(kv, name + "_offset");
  for (int d = 0; d < dims; ++d) t.stride[d] = need(kv, name + "_stride" + std::to_string(d));
  t.bytes = static_cast<size_t>(storage + offset) * elem;
  t.base = static_cast<uint8_t*>(simt::device_alloc(t.bytes ? t.bytes : 1, name, /*writable=*/!input, 0xff));
  t.data = t.base + offset * elem;
  if (input) {
    const std::vector<uint8_t> bytes = read_file(dir + "/" + name + ".bin");
    if (bytes.size() != static_cast<size_t>(storage) * elem)
      throw std::runtime_error(name + ".bin has " + std::to_string(bytes.size()) + " bytes, expected " +
                               std::to_string(storage * static_cast<int64_t>(elem)));
    std::memcpy(t.data, bytes.data(), bytes.size());
  }
  return t;
}

size_t index_size(IndexDtype d) {
  switch (d) {
    case IndexDtype::kInt8:
    case IndexDtype::kUInt8: return 1;
    case IndexDtype::kInt16: return 2;
    case IndexDtype::kInt32: return 4;
    default: return 8;
  }
}

const char* pass_name(ExpertPassKind k) {
  switch (k) {
    case ExpertPassKind::kZero: return "zero";
    case ExpertPassKind::kGroupedSegments: return "grouped_segments";
    case ExpertPassKind::kBatchedCount: return "batched_count";
    case ExpertPassKind::kBatchedSegments: return "batched_segments";
    case ExpertPassKind::kBatchedGather: return "batched_gather";
    case ExpertPassKind::kPack: return "pack";
    default: return "tiles";
  }
}

int run(const std::string& dir) {
  const auto kv = read_problem(dir + "/problem.txt");
  ExpertGemmProblem p;
  p.s = need(kv, "s");
  p.n = need(kv, "n");
  p.k = need(kv, "k");
  p.experts = need(kv, "experts");
  p.format = static_cast<Fp8Format>(need(kv, "format"));
  p.routing = static_cast<ExpertRouting>(need(kv, "routing"));
  Tensor a = make_tensor(kv, dir, "a", 1, 2, true), as = make_tensor(kv, dir, "a_scale", 4, 2, true);
  Tensor b = make_tensor(kv, dir, "b", 1, 3, true), bs = make_tensor(kv, dir, "b_scale", 4, 3, true);
  Tensor out = make_tensor(kv, dir, "out", 2, 1, false);
  p.a = a.data;
  p.a_stride_s = a.stride[0];
  if (a.stride[1] != 1) throw std::runtime_error("a must be K-contiguous");
  p.a_scale = reinterpret_cast<const float*>(as.data);
  p.a_scale_stride_s = as.stride[0];
  p.a_scale_stride_kb = as.stride[1];
  p.b = b.data;
  p.b_stride_e = b.stride[0];
  p.b_stride_n = b.stride[1];
  p.b_stride_k = b.stride[2];
  p.b_scale = reinterpret_cast<const float*>(bs.data);
  p.b_scale_stride_e = bs.stride[0];
  p.b_scale_stride_nb = bs.stride[1];
  p.b_scale_stride_kb = bs.stride[2];
  p.out = reinterpret_cast<uint16_t*>(out.data);
  p.out_stride_s = out.stride[0];
  Tensor routing;
  if (p.routing == ExpertRouting::kPerRowIds) {
    p.ids_dtype = static_cast<IndexDtype>(need(kv, "ids_dtype"));
    routing = make_tensor(kv, dir, "ids", index_size(p.ids_dtype), 1, true);
    p.ids = routing.data;
    p.ids_stride = routing.stride[0];
  } else {
    routing = make_tensor(kv, dir, "offsets", 4, 1, true);
    p.offsets = reinterpret_cast<const int32_t*>(routing.data);
    p.offsets_stride = routing.stride[0];
  }

  const size_t ws_bytes = expert_plan_workspace_bytes(p);
  if (ws_bytes == 0) throw std::runtime_error("the plan refuses the problem");
  // Poisoned (0xff bytes): a workspace byte read before it is written shows.
  void* ws = simt::device_alloc(ws_bytes, "workspace", true, 0xff);
  const ExpertPlan plan = make_expert_plan(p, ws, ws_bytes, /*sizing_only=*/false);
  if (plan.status != PlanStatus::kOk) {
    std::fprintf(stderr, "make_expert_plan refused the problem: status %d\n", static_cast<int>(plan.status));
    return 1;
  }

  std::ostringstream passes;
  for (int i = 0; i < plan.num_passes; ++i) {
    const ExpertPass& pass = plan.passes[i];
    passes << (i ? ", " : "") << "{\"kernel\": \"" << pass_name(pass.kind) << "\", \"grid\": " << pass.grid[0];
    if (pass.kind == ExpertPassKind::kPack) passes << ", \"repeat\": " << pass.repeat << ", \"mode\": " << int(pass.pack.mode);
    passes << "}";
    const simt::Dim3 grid{pass.grid[0], pass.grid[1], pass.grid[2]};
    const int threads = static_cast<int>(pass.block_threads);
    const char* name = pass_name(pass.kind);
    switch (pass.kind) {
      case ExpertPassKind::kZero: std::memset(pass.zero.dst, 0, pass.zero.bytes); break;
      case ExpertPassKind::kGroupedSegments:
        simt::launch(grid, threads, pass.lds_bytes, [](const RouteArgs& r) { grouped_segments_body(r); }, pass.route, name);
        break;
      case ExpertPassKind::kBatchedCount:
        simt::launch(grid, threads, pass.lds_bytes, [](const RouteArgs& r) { batched_count_body(r); }, pass.route, name);
        break;
      case ExpertPassKind::kBatchedSegments:
        simt::launch(grid, threads, pass.lds_bytes, [](const RouteArgs& r) { batched_segments_body(r); }, pass.route, name);
        break;
      case ExpertPassKind::kBatchedGather:
        simt::launch(grid, threads, pass.lds_bytes, [](const RouteArgs& r) { batched_gather_body(r); }, pass.route, name);
        break;
      case ExpertPassKind::kPack:
        for (int64_t i = 0; i < pass.repeat; ++i) {
          PackArgs pk = pass.pack;
          pk.src += i * pass.src_step;
          pk.dst += i * pass.dst_step;
          simt::launch(grid, threads, pass.lds_bytes, [](const PackArgs& args) { pack_body(args); }, pk, name);
        }
        break;
      case ExpertPassKind::kTiles: {
        const bool known = visit_gemm_kernel(pass.kernel, [&](auto cfg) {
          using Cfg = decltype(cfg);
          if (threads != Cfg::kThreads || static_cast<int>(pass.lds_bytes) != Cfg::kLdsBytes)
            throw std::runtime_error("plan's launch geometry disagrees with the kernel configuration");
          if constexpr (Cfg::kShape.id == GemmKernelId::kT64x64_W2x2_M16 || Cfg::kShape.id == GemmKernelId::kT128x128_W2x2_M32)
            simt::launch(grid, threads, pass.lds_bytes, [](const ExpertTileArgs& x) { expert_tile_body<Cfg>(x); },
                         pass.tiles, name);
          else
            throw std::runtime_error("the expert plan names a kernel the launcher does not instantiate");
        });
        if (!known) throw std::runtime_error("plan names an unknown GEMM kernel");
        break;
      }
    }
  }
  write_file(dir + "/out.bin", out.data, out.bytes - (out.data - out.base));
  const GemmKernelShape& ks = kernel_shape(plan.kernel);
  auto& st = simt::stats();
  std::printf("{\"kernel\": \"%s\", \"block_m\": %d, \"block_n\": %d, \"pack_a\": %s, \"pack_b\": %s, "
              "\"workspace_bytes\": %zu, \"passes\": [%s], \"mfma16\": %llu, \"mfma32\": %llu, \"workgroups\": %llu}\n",
              ks.name, ks.block_m, ks.block_n, plan.pack_a ? "true" : "false", plan.pack_b ? "true" : "false",
              plan.workspace_bytes, passes.str().c_str(), static_cast<unsigned long long>(st.mfma16.load()),
              static_cast<unsigned long long>(st.mfma32.load()), static_cast<unsigned long long>(st.workgroups.load()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return simt::driver::dir_main(argc, argv, run); }
