// C ABI over the torch-free sm90 launcher, for benchmarks/gemm_h200.py when the torch extension is
// not built (ctypes). Not part of the extension.
#include <cstddef>
#include <cstdint>

#include "gemm_cuda.h"
#include "gemm_cuda_config.h"

using fp8gemm::GemmProblem;
using namespace fp8gemm::cuda;

namespace {
GemmProblem make_problem(const int64_t* d, const void* const* ptrs) {
  // d: m n k | a_sm a_sk | b_sn b_sk | as_m as_kb | bs_nb bs_kb | out_m out_n | format
  GemmProblem p;
  p.m = d[0]; p.n = d[1]; p.k = d[2];
  p.a = static_cast<const uint8_t*>(ptrs[0]); p.a_stride_m = d[3]; p.a_stride_k = d[4];
  p.b = static_cast<const uint8_t*>(ptrs[1]); p.b_stride_n = d[5]; p.b_stride_k = d[6];
  p.a_scale = static_cast<const float*>(ptrs[2]); p.a_scale_stride_m = d[7]; p.a_scale_stride_kb = d[8];
  p.b_scale = static_cast<const float*>(ptrs[3]); p.b_scale_stride_nb = d[9]; p.b_scale_stride_kb = d[10];
  p.out = static_cast<uint16_t*>(const_cast<void*>(ptrs[4])); p.out_stride_m = d[11]; p.out_stride_n = d[12];
  p.format = static_cast<fp8gemm::Fp8Format>(d[13]);
  return p;
}
Sm90Config make_config(const int32_t* c) {
  Sm90Config cfg;
  cfg.variant = static_cast<Sm90Variant>(c[0]);
  cfg.split = static_cast<Sm90Split>(c[1]);
  cfg.splits = c[2];
  cfg.max_swizzle = c[3];
  cfg.raster_along_n = c[4] != 0;
  return cfg;
}
}  // namespace

extern "C" {
// cfg == nullptr: the launcher's own choice (tuned table / heuristic).
size_t fp8gemm_capi_workspace(const int64_t* dims, const void* const* ptrs, const int32_t* cfg) {
  GemmProblem p = make_problem(dims, ptrs);
  return cfg ? workspace_bytes_with(p, make_config(cfg)) : workspace_bytes(p);
}
int fp8gemm_capi_run(const int64_t* dims, const void* const* ptrs, const int32_t* cfg, void* ws, size_t ws_bytes,
                     void* stream) {
  GemmProblem p = make_problem(dims, ptrs);
  auto s = static_cast<cudaStream_t>(stream);
  return static_cast<int>(cfg ? gemm_with(p, make_config(cfg), ws, ws_bytes, s) : gemm(p, ws, ws_bytes, s));
}
int fp8gemm_capi_exact(const int64_t* dims, const void* const* ptrs, void* stream) {
  return static_cast<int>(gemm_exact_reference(make_problem(dims, ptrs), static_cast<cudaStream_t>(stream)));
}
void fp8gemm_capi_choose(const int64_t* dims, const void* const* ptrs, int32_t* cfg_out) {
  Sm90Config c = choose_config(make_problem(dims, ptrs));
  cfg_out[0] = static_cast<int32_t>(c.variant); cfg_out[1] = static_cast<int32_t>(c.split);
  cfg_out[2] = c.splits; cfg_out[3] = c.max_swizzle; cfg_out[4] = c.raster_along_n ? 1 : 0;
}
}
