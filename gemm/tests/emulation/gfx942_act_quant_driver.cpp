// Runs the gfx942 activation quantization's own device code (gemm/gemm/act_quant_rocm_kernel.h) on the
// CPU SIMT emulator, with the launch geometry the HIP launcher uses (act_quant_grid).
//
//   g++ -std=c++20 -O2 -DFP8GEMM_SIMT_EMULATION -Igemm/tests/emulation -Igemm/include -Igemm/gemm
//       gfx942_act_quant_driver.cpp -pthread -o gfx942_act_quant_driver
//   gfx942_act_quant_driver DIR
//
// DIR/problem.txt holds `key value` lines: rows k dtype (0 fp32, 1 bf16, 2 fp16) format (0 e4m3fnuz,
// 1 e4m3fn) mode (0 dynamic, 1 static scale read from device memory, 2 static scale as an argument)
// static_bits (the static scale's fp32 bits), row_dims, row_size0..3 and row_stride0..3 (row_size0
// innermost), x_stride_k, x_storage (elements of DIR/x.bin, the storage of x), x_view (the element of
// the storage where the view starts), x_pad (poison elements placed before the storage, so the storage
// can start unaligned), scale_ld; optionally grid_x / grid_y,
// which replace the launch grid (smaller grids make the kernel's loops take several trips). The fp8
// codes (rows x k) go to DIR/q.bin and the scale buffer (groups x scale_ld fp32, poisoned with 0xff
// where nothing is written) to DIR/scale.bin. One JSON line on stdout: the grid and the emulator's
// counters. Exit 0 ok, 2 emulated kernel fault, 1 bad input.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "act_quant_rocm_kernel.h"
#include "driver_io.h"
#include "gfx942_arch.h"

namespace simt = fp8gemm::simt;
using namespace fp8gemm;
using namespace fp8gemm::rocm;

namespace {

using simt::driver::need;
using simt::driver::read_file;
using simt::driver::read_problem;
using simt::driver::write_file;

int run(const std::string& dir) {
  const auto kv = read_problem(dir + "/problem.txt");
  ActQuantProblem p;
  p.rows = need(kv, "rows");
  p.k = need(kv, "k");
  p.x_dtype = static_cast<ActDtype>(need(kv, "dtype"));
  p.format = static_cast<Fp8Format>(need(kv, "format"));
  p.mode = static_cast<ActScaleMode>(need(kv, "mode"));
  p.row_dims = static_cast<int32_t>(need(kv, "row_dims"));
  for (int d = 0; d < kActRowDims; ++d) {
    p.row_size[d] = need(kv, "row_size" + std::to_string(d));
    p.row_stride[d] = need(kv, "row_stride" + std::to_string(d));
  }
  p.x_stride_k = need(kv, "x_stride_k");
  p.scale_ld = need(kv, "scale_ld");
  const uint32_t static_bits = static_cast<uint32_t>(need(kv, "static_bits"));
  p.static_scale_value = aq_float(static_bits);

  const size_t elem = p.x_dtype == ActDtype::kFloat32 ? 4 : 2;
  const int64_t storage = need(kv, "x_storage"), pad = need(kv, "x_pad"), view = need(kv, "x_view");
  const std::vector<uint8_t> xbytes = read_file(dir + "/x.bin");
  if (xbytes.size() != static_cast<size_t>(storage) * elem)
    throw std::runtime_error("x.bin has " + std::to_string(xbytes.size()) + " bytes, expected " +
                             std::to_string(storage * static_cast<int64_t>(elem)));
  uint8_t* x = static_cast<uint8_t*>(simt::device_alloc((pad + storage) * elem, "x", /*writable=*/false, 0xff));
  std::memcpy(x + pad * elem, xbytes.data(), xbytes.size());
  p.x = x + (pad + view) * elem;

  const size_t q_bytes = static_cast<size_t>(p.rows * p.k);
  const size_t scale_bytes = static_cast<size_t>(p.groups() * p.scale_ld) * sizeof(float);
  p.q = static_cast<uint8_t*>(simt::device_alloc(q_bytes, "q", true, 0xff));
  p.scale = static_cast<float*>(simt::device_alloc(scale_bytes, "scale", true, 0xff));
  float* static_scale = static_cast<float*>(simt::device_alloc(sizeof(float), "activation_scale", false, 0xff));
  std::memcpy(static_scale, &static_bits, sizeof(float));
  p.static_scale = static_scale;

  if (!act_quant_valid(p)) {
    std::fprintf(stderr, "act_quant_valid refused the problem\n");
    return 1;
  }
  AqGrid grid = act_quant_grid(p);
  if (kv.count("grid_x")) grid.x = static_cast<uint32_t>(need(kv, "grid_x"));
  if (kv.count("grid_y")) grid.y = static_cast<uint32_t>(need(kv, "grid_y"));
  const char* name = p.x_dtype == ActDtype::kFloat32    ? "act_quant<fp32>"
                     : p.x_dtype == ActDtype::kBFloat16 ? "act_quant<bf16>"
                                                        : "act_quant<fp16>";
  const simt::Dim3 dims{grid.x, grid.y, 1};
  switch (p.x_dtype) {
    case ActDtype::kFloat32:
      simt::launch(dims, kAqThreads, 0, [](const ActQuantProblem& a) { act_quant_body<ActDtype::kFloat32>(a); }, p, name);
      break;
    case ActDtype::kBFloat16:
      simt::launch(dims, kAqThreads, 0, [](const ActQuantProblem& a) { act_quant_body<ActDtype::kBFloat16>(a); }, p, name);
      break;
    default:
      simt::launch(dims, kAqThreads, 0, [](const ActQuantProblem& a) { act_quant_body<ActDtype::kFloat16>(a); }, p, name);
      break;
  }
  write_file(dir + "/q.bin", p.q, q_bytes);
  write_file(dir + "/scale.bin", p.scale, scale_bytes);
  auto& st = simt::stats();
  std::printf(
      "{\"grid\": [%u, %u], \"threads\": %d, \"workgroups\": %llu, \"shfl\": %llu, \"global_loads_16_bytes\": %llu, "
      "\"global_stores_8_bytes\": %llu, \"global_bytes_read\": %llu}\n",
      grid.x, grid.y, kAqThreads, static_cast<unsigned long long>(st.workgroups.load()),
      static_cast<unsigned long long>(st.shfl.load()), static_cast<unsigned long long>(st.global_loads_16_bytes.load()),
      static_cast<unsigned long long>(st.global_stores_8_bytes.load()),
      static_cast<unsigned long long>(st.global_bytes_read.load()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return simt::driver::dir_main(argc, argv, run); }
