// Torch binding of the FP8 block-scaled GEMM: one validation for every device, then the backend
// of the tensors' device (CPU: exact multithreaded; CUDA sm_90a; ROCm gfx942).
//
// Empty problems never reach a backend: M == 0 or N == 0 leaves the empty out untouched, and
// K == 0 writes zeros (the empty sum), with scales of shape (M, 0) and (ceil(N/128), 0).
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include <string>

#include "gemm_problem.h"
#include "registration.h"
#include "torch_binding.h"

#ifdef CPU_KERNEL
#include "../gemm_cpu/gemm_cpu.h"
#endif

#if defined(CUDA_KERNEL)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "../gemm_cuda/gemm_cuda.h"
#elif defined(ROCM_KERNEL)
// ROCm torch compiles this (non-hipified) file against its HIP "masquerading as CUDA" headers.
// Not compiled on our machines (no ROCm torch here): keep in step with the CUDA branch by reading.
#include <ATen/hip/impl/HIPGuardImplMasqueradingAsCUDA.h>
#include <ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h>
#include <hip/hip_runtime_api.h>

#include "../gemm/gemm_rocm.h"
#endif

namespace {

using fp8gemm::kQuantBlock;

// Python spellings, since that is what users type.
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat8_e4m3fnuz: return "torch.float8_e4m3fnuz";
    case at::kFloat8_e4m3fn: return "torch.float8_e4m3fn";
    case at::kFloat8_e5m2: return "torch.float8_e5m2";
    case at::kFloat8_e5m2fnuz: return "torch.float8_e5m2fnuz";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kHalf: return "torch.float16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    default: return std::string("torch.") + c10::toString(t);
  }
}

// Messages are built from strings only (numbers through std::to_string, devices through .str()):
// streaming an integer into c10::str's ostringstream crashed on the H200 image, whose libstdc++ is
// older than the headers the extension was compiled with, and an error path must never crash.
std::string shape_str(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

// ceil(x / 128) without the overflow of x + 127 near INT64_MAX (a huge K must not print a negative size).
int64_t ceil_blocks(int64_t x) { return x / kQuantBlock + (x % kQuantBlock != 0); }

void check_2d(const at::Tensor& t, const char* name, const char* logical) {
  // A None passed for a Tensor argument arrives as an undefined tensor.
  TORCH_CHECK_TYPE(t.defined(), "gemm: ", name, " must be a torch.Tensor, got None");
  TORCH_CHECK(t.dim() == 2, "gemm: ", name, " must be a 2-D tensor of logical shape ", logical, ", got a ",
              std::to_string(t.dim()), "-D tensor of shape ", shape_str(t.sizes()));
}

// Shapes are judged against the scales. When they disagree, see whether transposing a and/or b
// (the seed tutorial hands over the physical (K, M) / (K, N) tensors) would make a, b and the
// scales agree. out is left out: the Python wrapper may have allocated it from the wrong shapes.
std::string transpose_hint(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                           const at::Tensor& b_scale) {
  for (int choice = 1; choice < 4; ++choice) {  // 1: a.T, 2: b.T, 3: both
    const bool ta = choice & 1, tb = choice & 2;
    const int64_t m = a.size(ta ? 1 : 0), k = a.size(ta ? 0 : 1);
    const int64_t n = b.size(tb ? 1 : 0), kb_ = b.size(tb ? 0 : 1);
    const bool consistent = k == kb_ && a_scale.size(0) == m && a_scale.size(1) == ceil_blocks(k) &&
                            b_scale.size(0) == ceil_blocks(n) && b_scale.size(1) == ceil_blocks(k);
    if (consistent) {
      const char* what = ta && tb ? "a and b look like the physical (K, M) and (K, N) tensors of the seed tutorial; "
                                    "pass a.T and b.T"
                         : ta     ? "a looks like a physical (K, M) tensor (the seed tutorial's layout); pass a.T"
                                  : "b looks like a physical (K, N) tensor (the seed tutorial's layout); pass b.T";
      return std::string(" (hint: ") + what + ", transposed views that cost no copy; any strides are accepted)";
    }
  }
  return "";
}

// The half-open byte range [first, last + 1) that a tensor's elements occupy (torch strides are never
// negative). Two tensors whose ranges are disjoint cannot share an element; ranges that intersect
// are refused even where the elements interleave without touching: that is not worth proving.
struct ByteRange {
  uintptr_t begin, end;
};

ByteRange byte_range(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  return {begin, begin + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(t.element_size()))};
}

void check_no_overlap(const at::Tensor& out, const at::Tensor& input, const char* name) {
  if (out.numel() == 0 || input.numel() == 0) return;
  const ByteRange o = byte_range(out), i = byte_range(input);
  TORCH_CHECK(o.end <= i.begin || i.end <= o.begin, "gemm: out must not overlap ", name,
              " in memory (the bytes they span intersect)");
}

// True when the strides alone show that no two elements share memory: the dimensions of extent > 1,
// ordered by stride, each step past everything the smaller ones span. Anything else (an expand()ed
// tensor, rows that interleave) is refused, whether or not two elements really collide.
bool strides_do_not_self_overlap(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dimensions with size > 1
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t span = 0;  // the largest element offset reachable with the dimensions so far
  for (const auto& [stride, size] : dims) {
    if (stride <= span) return false;
    span += stride * (size - 1);
  }
  return true;
}

// Every check of every device, in the order of _validate.check_inputs (same messages). Throws
// c10::TypeError (Python TypeError) for a missing tensor, c10::Error (RuntimeError) for the rest.
void check_inputs(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                  const at::Tensor& b_scale) {
  check_2d(a, "a", "(M, K)");
  check_2d(b, "b", "(N, K)");
  check_2d(a_scale, "a_scale", "(M, ceil(K/128))");
  check_2d(b_scale, "b_scale", "(ceil(N/128), ceil(K/128))");
  check_2d(out, "out", "(M, N)");

  const auto a_type = a.scalar_type();
  TORCH_CHECK(a_type == at::kFloat8_e4m3fnuz || a_type == at::kFloat8_e4m3fn,
              "gemm: a must be torch.float8_e4m3fnuz or torch.float8_e4m3fn, got ", dtype_name(a_type));
  TORCH_CHECK(b.scalar_type() == a_type, "gemm: b must have the same dtype as a (", dtype_name(a_type), "), got ",
              dtype_name(b.scalar_type()), "; mixing fp8 kinds is not supported, convert one of them");
  TORCH_CHECK(a_scale.scalar_type() == at::kFloat, "gemm: a_scale must be torch.float32, got ",
              dtype_name(a_scale.scalar_type()));
  TORCH_CHECK(b_scale.scalar_type() == at::kFloat, "gemm: b_scale must be torch.float32, got ",
              dtype_name(b_scale.scalar_type()));
  TORCH_CHECK(out.scalar_type() == at::kBFloat16, "gemm: out must be torch.bfloat16, got ",
              dtype_name(out.scalar_type()));

  const at::Device device = a.device();
  const std::pair<const at::Tensor*, const char*> others[] = {
      {&b, "b"}, {&a_scale, "a_scale"}, {&b_scale, "b_scale"}, {&out, "out"}};
  for (const auto& [tensor, name] : others)
    TORCH_CHECK(tensor->device() == device, "gemm: all tensors must be on the same device; a is on ", device.str(),
                " but ", name, " is on ", tensor->device().str());

  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  TORCH_CHECK(b.size(1) == k, "gemm: a (M, K) and b (N, K) must have the same K, got a of shape ",
              shape_str(a.sizes()), " (K = ", std::to_string(k), ") and b of shape ", shape_str(b.sizes()),
              " (K = ", std::to_string(b.size(1)), ")",
              transpose_hint(a, b, a_scale, b_scale));
  const int64_t kb = ceil_blocks(k), nb = ceil_blocks(n);
  TORCH_CHECK(a_scale.size(0) == m && a_scale.size(1) == kb,
              "gemm: a_scale must have shape (M, ceil(K/128)) = ", shape_str({m, kb}), " for a of shape ",
              shape_str(a.sizes()), ", got ", shape_str(a_scale.sizes()), transpose_hint(a, b, a_scale, b_scale));
  TORCH_CHECK(b_scale.size(0) == nb && b_scale.size(1) == kb,
              "gemm: b_scale must have shape (ceil(N/128), ceil(K/128)) = ", shape_str({nb, kb}), " for b of shape ",
              shape_str(b.sizes()), ", got ", shape_str(b_scale.sizes()), transpose_hint(a, b, a_scale, b_scale));
  TORCH_CHECK(out.size(0) == m && out.size(1) == n, "gemm: out must have shape (M, N) = ", shape_str({m, n}),
              ", got ", shape_str(out.sizes()), transpose_hint(a, b, a_scale, b_scale));

  TORCH_CHECK(!(out.requires_grad() && at::GradMode::is_enabled()),
              "gemm: out must not require grad: the op writes into it in place and has no backward "
              "(pass out.detach(), or call it under torch.no_grad())");
  TORCH_CHECK(strides_do_not_self_overlap(out), "gemm: out must not overlap itself, got strides ",
              shape_str(out.strides()), " for shape ", shape_str(out.sizes()),
              ": two elements may share memory (e.g. an expand()ed tensor)");
  check_no_overlap(out, a, "a");
  check_no_overlap(out, b, "b");
  check_no_overlap(out, a_scale, "a_scale");
  check_no_overlap(out, b_scale, "b_scale");
}

fp8gemm::GemmProblem make_problem(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                                  const at::Tensor& b_scale) {
  fp8gemm::GemmProblem p;
  p.m = a.size(0);
  p.n = b.size(0);
  p.k = a.size(1);
  p.a = static_cast<const uint8_t*>(a.const_data_ptr());
  p.a_stride_m = a.stride(0);
  p.a_stride_k = a.stride(1);
  p.b = static_cast<const uint8_t*>(b.const_data_ptr());
  p.b_stride_n = b.stride(0);
  p.b_stride_k = b.stride(1);
  p.a_scale = a_scale.const_data_ptr<float>();
  p.a_scale_stride_m = a_scale.stride(0);
  p.a_scale_stride_kb = a_scale.stride(1);
  p.b_scale = b_scale.const_data_ptr<float>();
  p.b_scale_stride_nb = b_scale.stride(0);
  p.b_scale_stride_kb = b_scale.stride(1);
  p.out = static_cast<uint16_t*>(out.data_ptr());
  p.out_stride_m = out.stride(0);
  p.out_stride_n = out.stride(1);
  p.format = a.scalar_type() == at::kFloat8_e4m3fn ? fp8gemm::Fp8Format::kE4M3FN : fp8gemm::Fp8Format::kE4M3FNUZ;
  return p;
}

std::string shape_of(const fp8gemm::GemmProblem& p) {
  return "M=" + std::to_string(p.m) + ", N=" + std::to_string(p.n) + ", K=" + std::to_string(p.k);
}

#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
void run_gpu(at::Tensor& out, const fp8gemm::GemmProblem& problem) {
#if defined(CUDA_KERNEL)
  const c10::cuda::OptionalCUDAGuard guard(out.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(out.device().index()).stream();
  const size_t bytes = fp8gemm::cuda::workspace_bytes(problem);
#else
  const c10::hip::OptionalHIPGuardMasqueradingAsCUDA guard(out.device());
  const hipStream_t stream = c10::hip::getCurrentHIPStreamMasqueradingAsCUDA(out.device().index()).stream();
  const size_t bytes = fp8gemm::rocm::workspace_bytes(problem);
#endif
  // From the caching allocator, on the current stream, sized for this call; released (stream-ordered)
  // when this function returns.
  at::Tensor workspace;
  void* workspace_ptr = nullptr;
  if (bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(bytes)}, out.options().dtype(at::kByte));
    workspace_ptr = workspace.data_ptr();
  }
#if defined(CUDA_KERNEL)
  const cudaError_t err = fp8gemm::cuda::gemm(problem, workspace_ptr, bytes, stream);
  TORCH_CHECK(err == cudaSuccess, "gemm: CUDA backend failed (", shape_of(problem), "): ", cudaGetErrorString(err));
#else
  const hipError_t err = fp8gemm::rocm::gemm(problem, workspace_ptr, bytes, stream);
  TORCH_CHECK(err == hipSuccess, "gemm: ROCm backend failed (", shape_of(problem), "): ", hipGetErrorString(err));
#endif
}
#endif

}  // namespace

void gemm(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
          const at::Tensor& b_scale) {
  check_inputs(out, a, b, a_scale, b_scale);
  if (out.numel() == 0) return;  // M == 0 or N == 0
  if (a.size(1) == 0) {          // K == 0: every output is an empty sum
    out.zero_();
    return;
  }
  fp8gemm::GemmProblem problem = make_problem(out, a, b, a_scale, b_scale);
  const at::DeviceType device = out.device().type();
  if (device == at::kCPU) {
#ifdef CPU_KERNEL
    fp8gemm::cpu::gemm(problem);
    return;
#endif
  } else if (device == at::kCUDA) {  // ROCm torch also reports its GPUs as "cuda"
#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
    run_gpu(out, problem);
    return;
#endif
  }
  TORCH_CHECK(false, "gemm: this build of the kernel has no backend for device ", out.device().str(), " (",
              shape_of(problem), ")");
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("gemm(Tensor! out, Tensor a, Tensor b, Tensor a_scale, Tensor b_scale) -> ()");
#ifdef CPU_KERNEL
  ops.impl("gemm", c10::DispatchKey::CPU, &gemm);
#endif
#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  ops.impl("gemm", c10::DispatchKey::CUDA, &gemm);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
