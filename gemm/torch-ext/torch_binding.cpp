// Torch binding of the FP8 block-scaled GEMM and of the fine-grained FP8 entry points (fp8_act_quant,
// matmul_2d): one validation for every device, then the backend of the tensors' device (CPU: exact
// multithreaded; CUDA sm_90a; ROCm gfx942).
//
// Empty problems never reach a backend: M == 0 or N == 0 leaves the empty out untouched, and
// K == 0 writes zeros (the empty sum), with scales of shape (M, 0) and (ceil(N/128), 0).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <string>

#include "act_quant.h"
#include "expert_gemm.h"
#include "gemm_problem.h"
#include "registration.h"
#include "torch_binding.h"

#ifdef CPU_KERNEL
#include "../gemm_cpu/act_quant_cpu.h"
#include "../gemm_cpu/expert_gemm_cpu.h"
#include "../gemm_cpu/gemm_cpu.h"
#endif

#if defined(CUDA_KERNEL)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "../gemm_cuda/act_quant_cuda.h"
#include "../gemm_cuda/expert_gemm_cuda.h"
#include "../gemm_cuda/gemm_cuda.h"
#elif defined(ROCM_KERNEL)
// ROCm torch compiles this (non-hipified) file against its HIP "masquerading as CUDA" headers.
// Not compiled on our machines (no ROCm torch here): keep in step with the CUDA branch by reading.
#include <ATen/hip/impl/HIPGuardImplMasqueradingAsCUDA.h>
#include <ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h>
#include <hip/hip_runtime_api.h>

#include "../gemm/act_quant_rocm.h"
#include "../gemm/expert_gemm_rocm.h"
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
    case at::kFloat8_e8m0fnu: return "torch.float8_e8m0fnu";
    case at::kUInt16: return "torch.uint16";
    case at::kUInt32: return "torch.uint32";
    case at::kUInt64: return "torch.uint64";
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

// For a 0-D scale: per-tensor scaling is not a mode of its own; an expand()ed view of it is.
std::string scale_hint(const at::Tensor& t, const std::string& name, const std::string& logical) {
  if (t.dim() != 0 || (name.find("scale") == std::string::npos && name != "Bs")) return "";
  return " (hint: per-tensor scaling is not supported as such; pass the one scale as a block scale of logical shape " +
         logical + ", e.g. " + name + ".expand" + logical + ", a view that costs no copy)";
}

// The largest K of the GEMMs (_validate.MAX_K): at most 2^14 K blocks, so the fp32 sum over the blocks
// errs by at most 2^-10 of the sum of the terms' magnitudes, and within the CUDA kernels' 21-bit dimensions.
constexpr int64_t kMaxK = (int64_t{1} << 21) - 1;

void check_k(const char* op, int64_t k, const std::string& what) {
  TORCH_CHECK(k <= kMaxK, op, ": K must be at most ", std::to_string(kMaxK),
              " (2^21 - 1: the longest sum every backend accumulates faithfully in fp32 and indexes), got K = ",
              std::to_string(k), " (", what, "); split K into several calls and add their outputs");
}

void check_2d(const at::Tensor& t, const char* name, const char* logical) {
  // A None passed for a Tensor argument arrives as an undefined tensor.
  TORCH_CHECK_TYPE(t.defined(), "gemm: ", name, " must be a torch.Tensor, got None");
  TORCH_CHECK(t.dim() == 2, "gemm: ", name, " must be a 2-D tensor of logical shape ", logical, ", got a ",
              std::to_string(t.dim()), "-D tensor of shape ", shape_str(t.sizes()), scale_hint(t, name, logical));
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

// Scales are float32, or UE8M0 (torch.float8_e8m0fnu: the value 2^(code - 127), code 255 NaN), which the
// binding converts to float32 on the scales' device before any backend reads them. The conversion is a
// torch op on the current stream (no host synchronisation) and exact for every code: each power of two
// 2^-127 .. 2^127 is a float32 (2^-127 a subnormal), and 255 becomes NaN.
bool is_scale_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kFloat8_e8m0fnu; }

at::Tensor float32_scales(const at::Tensor& scale) {
  return scale.scalar_type() == at::kFloat8_e8m0fnu ? scale.to(at::kFloat) : scale;
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
  TORCH_CHECK(is_scale_dtype(a_scale.scalar_type()), "gemm: a_scale must be torch.float32 or torch.float8_e8m0fnu, got ",
              dtype_name(a_scale.scalar_type()));
  TORCH_CHECK(is_scale_dtype(b_scale.scalar_type()), "gemm: b_scale must be torch.float32 or torch.float8_e8m0fnu, got ",
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
  check_k("gemm", k, "a of shape " + shape_str(a.sizes()));
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
// after_producer: the kernel enqueued just before on the current stream produced a / a_scale (CUDA: the
// GEMM starts as its programmatic dependent; ROCm: plain stream order). workspace: allocated by the
// caller (CUDA: workspace_bytes(problem) bytes), else here; producer_zeroed: that producer cleared its
// workspace_zero_range (CUDA).
void run_gpu(at::Tensor& out, const fp8gemm::GemmProblem& problem, bool after_producer = false,
             at::Tensor workspace = {}, bool producer_zeroed = false) {
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
  void* workspace_ptr = nullptr;
  if (bytes > 0) {
    if (!workspace.defined()) workspace = at::empty({static_cast<int64_t>(bytes)}, out.options().dtype(at::kByte));
    TORCH_CHECK(workspace.numel() >= static_cast<int64_t>(bytes), "gemm: workspace too small");
    workspace_ptr = workspace.data_ptr();
  }
#if defined(CUDA_KERNEL)
  const cudaError_t err = fp8gemm::cuda::gemm(problem, workspace_ptr, bytes, stream, after_producer, producer_zeroed);
  TORCH_CHECK(err == cudaSuccess, "gemm: CUDA backend failed (", shape_of(problem), "): ", cudaGetErrorString(err));
#else
  (void)after_producer;
  (void)producer_zeroed;
  const hipError_t err = fp8gemm::rocm::gemm(problem, workspace_ptr, bytes, stream);
  TORCH_CHECK(err == hipSuccess, "gemm: ROCm backend failed (", shape_of(problem), "): ", hipGetErrorString(err));
#endif
}
#endif

// ------------------------------------------------------------------------------------------------
// fp8_act_quant and matmul_2d: the checks of _validate.check_act_quant / check_matmul_2d, in the same
// order and with the same messages.

constexpr int64_t kMaxActRows = INT32_MAX;

bool is_activation_dtype(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf || t == at::kFloat; }
bool is_fp8_dtype(at::ScalarType t) { return t == at::kFloat8_e4m3fn || t == at::kFloat8_e4m3fnuz; }

int64_t leading_rows(const at::Tensor& x) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return rows;
}

void check_activations(const char* op, const at::Tensor& x, const char* name) {
  TORCH_CHECK_TYPE(x.defined(), op, ": ", name, " must be a torch.Tensor, got None");
  TORCH_CHECK(x.dim() >= 1, op, ": ", name,
              " must have at least one dimension (logical shape (..., K)), got a 0-D tensor");
  TORCH_CHECK(is_activation_dtype(x.scalar_type()), op, ": ", name,
              " must be torch.bfloat16, torch.float16 or torch.float32, got ", dtype_name(x.scalar_type()));
  const int64_t rows = leading_rows(x);
  TORCH_CHECK(rows <= kMaxActRows, op, ": ", name, " of shape ", shape_str(x.sizes()), " has ", std::to_string(rows),
              " rows (the product of its leading sizes); at most ", std::to_string(kMaxActRows), " are supported");
}

void check_activation_scale(const char* op, const std::optional<at::Tensor>& scale, std::optional<double> value,
                            const at::Tensor& x, const char* name) {
  if (!scale.has_value() || !scale->defined()) return;
  TORCH_CHECK(!value.has_value(), op,
              ": activation_scale_value must be None when activation_scale is a tensor (pass one of them)");
  TORCH_CHECK(scale->scalar_type() == at::kFloat, op, ": activation_scale must be torch.float32, got ",
              dtype_name(scale->scalar_type()));
  TORCH_CHECK(scale->numel() == 1, op,
              ": activation_scale must have exactly one element (a per-tensor scale), got shape ",
              shape_str(scale->sizes()));
  TORCH_CHECK(scale->device() == x.device(), op, ": all tensors must be on the same device; ", name, " is on ",
              x.device().str(), " but activation_scale is on ", scale->device().str());
}

void check_act_quant(const at::Tensor& x, int64_t block_size, at::ScalarType dtype,
                     const std::optional<at::Tensor>& activation_scale, std::optional<double> activation_scale_value) {
  check_activations("fp8_act_quant", x, "x");
  TORCH_CHECK(block_size == kQuantBlock, "fp8_act_quant: block_size must be ", std::to_string(kQuantBlock),
              " (the only group width the kernels implement), got ", std::to_string(block_size));
  TORCH_CHECK(is_fp8_dtype(dtype), "fp8_act_quant: dtype must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got ",
              dtype_name(dtype));
  check_activation_scale("fp8_act_quant", activation_scale, activation_scale_value, x, "x");
}

// block_size and output_dtype of matmul_2d and the expert GEMMs.
void check_blocking_and_output(const char* op, at::IntArrayRef block_size, std::optional<at::ScalarType> output_dtype) {
  TORCH_CHECK(block_size.size() == 2 && block_size[0] == kQuantBlock && block_size[1] == kQuantBlock, op,
              ": block_size must be [128, 128] (128x128 weight blocks with 1x128 activation groups, the only blocking "
              "the kernels implement), got ",
              shape_str(block_size));
  TORCH_CHECK(!output_dtype.has_value() || is_activation_dtype(*output_dtype), op,
              ": output_dtype must be None, torch.bfloat16, torch.float16 or torch.float32, got ",
              dtype_name(output_dtype.value_or(at::kFloat)));
}

void check_matmul_2d(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale, at::IntArrayRef block_size,
                     std::optional<at::ScalarType> output_dtype, const std::optional<at::Tensor>& activation_scale,
                     std::optional<double> activation_scale_value) {
  const char* op = "matmul_2d";
  const std::pair<const at::Tensor*, const char*> tensors[] = {{&a, "A"}, {&b, "B"}, {&b_scale, "Bs"}};
  for (const auto& [t, name] : tensors) TORCH_CHECK_TYPE(t->defined(), op, ": ", name, " must be a torch.Tensor, got None");
  check_activations(op, a, "A");
  TORCH_CHECK(b.dim() == 2, op, ": B must be a 2-D tensor of logical shape (N, K), got a ", std::to_string(b.dim()),
              "-D tensor of shape ", shape_str(b.sizes()));
  TORCH_CHECK(is_fp8_dtype(b.scalar_type()), op, ": B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got ",
              dtype_name(b.scalar_type()));
  TORCH_CHECK(b_scale.dim() == 2, op, ": Bs must be a 2-D tensor of logical shape (ceil(N/128), ceil(K/128)), got a ",
              std::to_string(b_scale.dim()), "-D tensor of shape ", shape_str(b_scale.sizes()),
              scale_hint(b_scale, "Bs", "(ceil(N/128), ceil(K/128))"));
  TORCH_CHECK(is_scale_dtype(b_scale.scalar_type()), op, ": Bs must be torch.float32 or torch.float8_e8m0fnu, got ",
              dtype_name(b_scale.scalar_type()));
  check_blocking_and_output(op, block_size, output_dtype);
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&b, "B"}, {&b_scale, "Bs"}})
    TORCH_CHECK(t->device() == a.device(), op, ": all tensors must be on the same device; A is on ", a.device().str(),
                " but ", name, " is on ", t->device().str());
  const int64_t k = a.size(-1), n = b.size(0);
  TORCH_CHECK(b.size(1) == k, op, ": A (..., K) and B (N, K) must have the same K, got A of shape ",
              shape_str(a.sizes()), " (K = ", std::to_string(k), ") and B of shape ", shape_str(b.sizes()), " (K = ",
              std::to_string(b.size(1)), ")");
  check_k(op, k, "A of shape " + shape_str(a.sizes()));
  const int64_t nb = ceil_blocks(n), kb = ceil_blocks(k);
  TORCH_CHECK(b_scale.size(0) == nb && b_scale.size(1) == kb, op,
              ": Bs must have shape (ceil(N/128), ceil(K/128)) = ", shape_str({nb, kb}), " for B of shape ",
              shape_str(b.sizes()), ", got ", shape_str(b_scale.sizes()));
  check_activation_scale(op, activation_scale, activation_scale_value, a, "A");
}

// fp8_act_quant's outputs (_validate.quantized_layout): q (..., K) contiguous, and the scales of logical
// shape (..., G) stored M-contiguous, element (r, g) of the flattened rows at r + g * ceil4(M).
struct Quantized {
  at::Tensor q, scale;
  int64_t rows = 0, ld = 0;
};

Quantized allocate_quantized(const at::Tensor& x, at::ScalarType dtype) {
  Quantized out;
  const int64_t lead = x.dim() - 1;
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end() - 1), strides(lead + 1);
  int64_t rows = 1;
  for (int64_t d = lead - 1; d >= 0; --d) {
    strides[d] = rows;
    rows *= sizes[d];
  }
  out.rows = rows;
  out.ld = (rows + 3) / 4 * 4;
  sizes.push_back(ceil_blocks(x.size(-1)));
  strides[lead] = out.ld;
  out.q = at::empty(x.sizes(), x.options().dtype(dtype));
  out.scale = at::empty_strided(sizes, strides, x.options().dtype(at::kFloat));
  return out;
}

// The leading dimensions of x as a mixed radix (innermost first): size-1 dimensions dropped, neighbours
// that step by one stride merged. False when more than kActRowDims remain.
bool row_layout(const at::Tensor& x, fp8gemm::ActQuantProblem& p) {
  int32_t dims = 0;
  int64_t size[fp8gemm::kActRowDims], stride[fp8gemm::kActRowDims];
  for (int64_t d = x.dim() - 2; d >= 0; --d) {
    const int64_t s = x.size(d), st = x.stride(d);
    if (s == 1) continue;
    if (dims > 0 && st == stride[dims - 1] * size[dims - 1]) {
      size[dims - 1] *= s;
      continue;
    }
    if (dims == fp8gemm::kActRowDims) return false;
    size[dims] = s;
    stride[dims] = st;
    ++dims;
  }
  p.row_dims = std::max<int32_t>(dims, 1);
  for (int32_t d = 0; d < fp8gemm::kActRowDims; ++d) {
    p.row_size[d] = d < dims ? size[d] : 1;
    p.row_stride[d] = d < dims ? stride[d] : 0;
  }
  return true;
}

// Quantizes x (rows >= 1, K >= 1) into `out` on x's device, on the current stream. CUDA: the launch also
// clears zero_bytes at `zero` (act_quant_cuda.h).
void run_act_quant(const at::Tensor& x_in, Quantized& out, const std::optional<at::Tensor>& activation_scale,
                   std::optional<double> activation_scale_value, void* zero = nullptr, size_t zero_bytes = 0) {
  (void)zero, (void)zero_bytes;  // CUDA only
  fp8gemm::ActQuantProblem p;
  at::Tensor x = x_in;
  if (!row_layout(x, p)) {  // more than kActRowDims leading dimensions that no stride merges
    x = x.contiguous();
    row_layout(x, p);
  }
  p.rows = out.rows;
  p.k = x.size(-1);
  p.x = x.const_data_ptr();
  p.x_dtype = x.scalar_type() == at::kFloat   ? fp8gemm::ActDtype::kFloat32
              : x.scalar_type() == at::kHalf ? fp8gemm::ActDtype::kFloat16
                                             : fp8gemm::ActDtype::kBFloat16;
  p.x_stride_k = x.stride(-1);
  p.q = static_cast<uint8_t*>(out.q.data_ptr());
  p.scale = out.scale.data_ptr<float>();
  p.scale_ld = out.ld;
  p.format = out.q.scalar_type() == at::kFloat8_e4m3fn ? fp8gemm::Fp8Format::kE4M3FN : fp8gemm::Fp8Format::kE4M3FNUZ;
  if (activation_scale.has_value() && activation_scale->defined()) {
    p.mode = fp8gemm::ActScaleMode::kStaticTensor;
    p.static_scale = activation_scale->const_data_ptr<float>();
  } else if (activation_scale_value.has_value()) {
    p.mode = fp8gemm::ActScaleMode::kStaticValue;
    p.static_scale_value = static_cast<float>(*activation_scale_value);
  }
  const std::string shape = "rows=" + std::to_string(p.rows) + ", K=" + std::to_string(p.k);
  const at::DeviceType device = x.device().type();
  if (device == at::kCPU) {
#ifdef CPU_KERNEL
    fp8gemm::cpu::act_quant(p);
    return;
#endif
  } else if (device == at::kCUDA) {
#if defined(CUDA_KERNEL)
    const c10::cuda::OptionalCUDAGuard guard(x.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
    const cudaError_t err = fp8gemm::cuda::act_quant(p, stream, zero, zero_bytes);
    TORCH_CHECK(err == cudaSuccess, "fp8_act_quant: CUDA backend failed (", shape, "): ", cudaGetErrorString(err));
    return;
#elif defined(ROCM_KERNEL)
    const c10::hip::OptionalHIPGuardMasqueradingAsCUDA guard(x.device());
    const hipStream_t stream = c10::hip::getCurrentHIPStreamMasqueradingAsCUDA(x.device().index()).stream();
    const hipError_t err = fp8gemm::rocm::act_quant(p, stream);
    TORCH_CHECK(err == hipSuccess, "fp8_act_quant: ROCm backend failed (", shape, "): ", hipGetErrorString(err));
    return;
#endif
  }
  TORCH_CHECK(false, "fp8_act_quant: this build of the kernel has no backend for device ", x.device().str(), " (",
              shape, ")");
}

}  // namespace

void gemm(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale_in,
          const at::Tensor& b_scale_in) {
  check_inputs(out, a, b, a_scale_in, b_scale_in);
  // Kept alive until the backend has been enqueued: make_problem takes raw pointers.
  const at::Tensor a_scale = float32_scales(a_scale_in), b_scale = float32_scales(b_scale_in);
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

std::tuple<at::Tensor, at::Tensor> fp8_act_quant(const at::Tensor& x, int64_t block_size, at::ScalarType dtype,
                                                 const std::optional<at::Tensor>& activation_scale,
                                                 std::optional<double> activation_scale_value) {
  check_act_quant(x, block_size, dtype, activation_scale, activation_scale_value);
  Quantized out = allocate_quantized(x, dtype);
  if (out.rows > 0 && x.size(-1) > 0) run_act_quant(x, out, activation_scale, activation_scale_value);
  return {out.q, out.scale};
}

at::Tensor matmul_2d(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale_in, at::IntArrayRef block_size,
                     std::optional<at::ScalarType> output_dtype, const std::optional<at::Tensor>& activation_scale,
                     std::optional<double> activation_scale_value) {
  check_matmul_2d(a, b, b_scale_in, block_size, output_dtype, activation_scale, activation_scale_value);
  const at::Tensor b_scale = float32_scales(b_scale_in);
  const at::ScalarType out_dtype = output_dtype.value_or(a.scalar_type());
  const int64_t k = a.size(-1), n = b.size(0);
  std::vector<int64_t> out_sizes(a.sizes().begin(), a.sizes().end() - 1);
  out_sizes.push_back(n);
  const int64_t rows = leading_rows(a);
  if (rows == 0 || n == 0) return at::empty(out_sizes, a.options().dtype(out_dtype));
  if (k == 0) return at::zeros(out_sizes, a.options().dtype(out_dtype));  // every output is an empty sum

  Quantized qa = allocate_quantized(a, b.scalar_type());
  at::Tensor out = at::empty({rows, n}, a.options().dtype(at::kBFloat16));
  fp8gemm::GemmProblem p;
  p.m = rows;
  p.n = n;
  p.k = k;
  p.a = static_cast<const uint8_t*>(qa.q.const_data_ptr());
  p.a_stride_m = k;
  p.a_stride_k = 1;
  p.b = static_cast<const uint8_t*>(b.const_data_ptr());
  p.b_stride_n = b.stride(0);
  p.b_stride_k = b.stride(1);
  p.a_scale = qa.scale.const_data_ptr<float>();
  p.a_scale_stride_m = 1;
  p.a_scale_stride_kb = qa.ld;
  p.b_scale = b_scale.const_data_ptr<float>();
  p.b_scale_stride_nb = b_scale.stride(0);
  p.b_scale_stride_kb = b_scale.stride(1);
  p.out = static_cast<uint16_t*>(out.data_ptr());
  p.out_stride_m = n;
  p.out_stride_n = 1;
  p.format = b.scalar_type() == at::kFloat8_e4m3fn ? fp8gemm::Fp8Format::kE4M3FN : fp8gemm::Fp8Format::kE4M3FNUZ;
  if (out.device().type() == at::kCPU) {
    run_act_quant(a, qa, activation_scale, activation_scale_value);
#ifdef CPU_KERNEL
    fp8gemm::cpu::gemm(p);
#endif
  } else {
#if defined(CUDA_KERNEL)
    // The GEMM's workspace first: the quantization kernel also clears the part of it the GEMM kernel needs
    // zeroed, so that no memset stands between the two and the GEMM starts as its programmatic dependent.
    const c10::cuda::OptionalCUDAGuard guard(out.device());
    const size_t bytes = fp8gemm::cuda::workspace_bytes(p);
    at::Tensor workspace;
    if (bytes > 0) workspace = at::empty({static_cast<int64_t>(bytes)}, out.options().dtype(at::kByte));
    const fp8gemm::cuda::WorkspaceRange zero = fp8gemm::cuda::workspace_zero_range(p);
    void* zero_ptr = zero.bytes > 0 ? static_cast<uint8_t*>(workspace.data_ptr()) + zero.offset : nullptr;
    run_act_quant(a, qa, activation_scale, activation_scale_value, zero_ptr, zero.bytes);
    run_gpu(out, p, /*after_producer=*/true, workspace, /*producer_zeroed=*/zero.bytes > 0);
#else
    run_act_quant(a, qa, activation_scale, activation_scale_value);  // ROCm, or the error of a build without one
#if defined(ROCM_KERNEL)
    run_gpu(out, p, /*after_producer=*/true);  // the quantization is the stream's previous kernel
#endif
#endif
  }
  if (out_dtype != at::kBFloat16) out = out.to(out_dtype);
  return out.view(out_sizes);
}

// ------------------------------------------------------------------------------------------------
// MoE expert GEMMs (matmul_batched, matmul_grouped): the checks of _validate.check_matmul_batched /
// check_matmul_grouped, in the same order and with the same messages.

namespace {

bool is_index_dtype(at::ScalarType t) {
  return t == at::kChar || t == at::kByte || t == at::kShort || t == at::kInt || t == at::kLong;
}

bool is_count_dtype(at::ScalarType t) { return is_index_dtype(t) || t == at::kFloat || t == at::kDouble; }

void check_dims(const char* op, const at::Tensor& t, const char* name, int64_t dims, const char* logical) {
  TORCH_CHECK(t.dim() == dims, op, ": ", name, " must be a ", std::to_string(dims), "-D tensor of logical shape ",
              logical, ", got a ", std::to_string(t.dim()), "-D tensor of shape ", shape_str(t.sizes()));
}

void check_same_length(const char* op, const at::Tensor& t, const char* name, const char* logical, int64_t expected,
                       const char* source, const at::Tensor& source_tensor) {
  TORCH_CHECK(t.size(0) == expected, op, ": ", name, " must have shape ", logical, " = ", shape_str({expected}),
              " for ", source, " of shape ", shape_str(source_tensor.sizes()), ", got ", shape_str(t.sizes()));
}

// A, B, Bs, block_size and output_dtype: the checks both ops share, before their routing tensors.
void check_expert_operands(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale,
                           at::IntArrayRef block_size, std::optional<at::ScalarType> output_dtype) {
  check_dims(op, a, "A", 2, "(S, K)");
  TORCH_CHECK(is_activation_dtype(a.scalar_type()), op, ": A must be torch.bfloat16, torch.float16 or torch.float32, got ",
              dtype_name(a.scalar_type()));
  TORCH_CHECK(a.size(0) <= kMaxActRows, op, ": A of shape ", shape_str(a.sizes()), " has ", std::to_string(a.size(0)),
              " rows; at most ", std::to_string(kMaxActRows), " are supported");
  check_dims(op, b, "B", 3, "(E, N, K)");
  TORCH_CHECK(is_fp8_dtype(b.scalar_type()), op, ": B must be torch.float8_e4m3fn or torch.float8_e4m3fnuz, got ",
              dtype_name(b.scalar_type()));
  check_dims(op, b_scale, "Bs", 3, "(E, ceil(N/128), ceil(K/128))");
  TORCH_CHECK(is_scale_dtype(b_scale.scalar_type()), op, ": Bs must be torch.float32 or torch.float8_e8m0fnu, got ",
              dtype_name(b_scale.scalar_type()));
  check_blocking_and_output(op, block_size, output_dtype);
}

void check_expert_shapes(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale) {
  const int64_t k = a.size(1), e = b.size(0), n = b.size(1);
  TORCH_CHECK(b.size(2) == k, op, ": A (S, K) and B (E, N, K) must have the same K, got A of shape ",
              shape_str(a.sizes()), " (K = ", std::to_string(k), ") and B of shape ", shape_str(b.sizes()), " (K = ",
              std::to_string(b.size(2)), ")");
  check_k(op, k, "A of shape " + shape_str(a.sizes()));
  const int64_t nb = ceil_blocks(n), kb = ceil_blocks(k);
  TORCH_CHECK(b_scale.size(0) == e && b_scale.size(1) == nb && b_scale.size(2) == kb, op,
              ": Bs must have shape (E, ceil(N/128), ceil(K/128)) = ", shape_str({e, nb, kb}), " for B of shape ",
              shape_str(b.sizes()), ", got ", shape_str(b_scale.sizes()));
}

void check_same_device(const char* op, const at::Tensor& a,
                       std::initializer_list<std::pair<const at::Tensor*, const char*>> others) {
  for (const auto& [t, name] : others)
    TORCH_CHECK(t->device() == a.device(), op, ": all tensors must be on the same device; A is on ", a.device().str(),
                " but ", name, " is on ", t->device().str());
}

void check_defined(const char* op, std::initializer_list<std::pair<const at::Tensor*, const char*>> tensors) {
  for (const auto& [t, name] : tensors) TORCH_CHECK_TYPE(t->defined(), op, ": ", name, " must be a torch.Tensor, got None");
}

void check_matmul_batched(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale,
                          const at::Tensor& expert_ids, at::IntArrayRef block_size,
                          std::optional<at::ScalarType> output_dtype) {
  const char* op = "matmul_batched";
  check_defined(op, {{&a, "A"}, {&b, "B"}, {&b_scale, "Bs"}, {&expert_ids, "expert_ids"}});
  check_expert_operands(op, a, b, b_scale, block_size, output_dtype);
  check_dims(op, expert_ids, "expert_ids", 1, "(S,)");
  TORCH_CHECK(is_index_dtype(expert_ids.scalar_type()), op,
              ": expert_ids must be an integer tensor (torch.int8, torch.uint8, torch.int16, torch.int32 or "
              "torch.int64), got ",
              dtype_name(expert_ids.scalar_type()));
  check_same_device(op, a, {{&b, "B"}, {&b_scale, "Bs"}, {&expert_ids, "expert_ids"}});
  check_expert_shapes(op, a, b, b_scale);
  check_same_length(op, expert_ids, "expert_ids", "(S,)", a.size(0), "A", a);
}

void check_matmul_grouped(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale, const at::Tensor& offsets,
                          const at::Tensor& tokens_per_expert, at::IntArrayRef block_size,
                          std::optional<at::ScalarType> output_dtype) {
  const char* op = "matmul_grouped";
  check_defined(op, {{&a, "A"}, {&b, "B"}, {&b_scale, "Bs"}, {&offsets, "offsets"},
                     {&tokens_per_expert, "tokens_per_expert"}});
  check_expert_operands(op, a, b, b_scale, block_size, output_dtype);
  check_dims(op, offsets, "offsets", 1, "(E,)");
  TORCH_CHECK(offsets.scalar_type() == at::kInt, op, ": offsets must be torch.int32, got ",
              dtype_name(offsets.scalar_type()));
  check_dims(op, tokens_per_expert, "tokens_per_expert", 1, "(E,)");
  TORCH_CHECK(is_count_dtype(tokens_per_expert.scalar_type()), op,
              ": tokens_per_expert must be an integer tensor, torch.float32 or torch.float64, got ",
              dtype_name(tokens_per_expert.scalar_type()));
  check_same_device(op, a,
                    {{&b, "B"}, {&b_scale, "Bs"}, {&offsets, "offsets"}, {&tokens_per_expert, "tokens_per_expert"}});
  check_expert_shapes(op, a, b, b_scale);
  check_same_length(op, offsets, "offsets", "(E,)", b.size(0), "B", b);
  check_same_length(op, tokens_per_expert, "tokens_per_expert", "(E,)", b.size(0), "B", b);
}

std::string count_str(double v) {
  if (std::isnan(v)) return "nan";
  if (std::fabs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<int64_t>(v));  // no UB cast
  return std::to_string(v);
}

// CPU only (reading them on a GPU would cost a host synchronisation): the values of offsets and
// tokens_per_expert.
void check_grouped_values(const at::Tensor& offsets, const at::Tensor& tokens_per_expert, int64_t s) {
  const char* op = "matmul_grouped";
  const int32_t* off = offsets.const_data_ptr<int32_t>();
  const int64_t stride = offsets.stride(0);
  const at::Tensor counts = tokens_per_expert.to(at::kDouble);
  const double* count = counts.const_data_ptr<double>();
  const int64_t count_stride = counts.stride(0);
  int64_t previous = 0;
  for (int64_t e = 0; e < offsets.size(0); ++e) {
    const int64_t end = off[e * stride];
    TORCH_CHECK(end >= 0 && end <= s, op, ": offsets[", std::to_string(e), "] = ", std::to_string(end),
                " is outside [0, S] = [0, ", std::to_string(s), "] (offsets are inclusive row ends of A's rows)");
    TORCH_CHECK(end >= previous, op, ": offsets must be non-decreasing, got offsets[", std::to_string(e), "] = ",
                std::to_string(end), " < offsets[", std::to_string(e - 1), "] = ", std::to_string(previous));
    const double c = count[e * count_stride];
    TORCH_CHECK(c == static_cast<double>(end - previous), op, ": tokens_per_expert[", std::to_string(e), "] = ",
                count_str(c), " does not match ",
                e == 0 ? std::string("offsets[0] = ") + std::to_string(end)
                       : "offsets[" + std::to_string(e) + "] - offsets[" + std::to_string(e - 1) +
                             "] = " + std::to_string(end - previous));
    previous = end;
  }
}

fp8gemm::IndexDtype index_dtype(at::ScalarType t) {
  switch (t) {
    case at::kChar: return fp8gemm::IndexDtype::kInt8;
    case at::kByte: return fp8gemm::IndexDtype::kUInt8;
    case at::kShort: return fp8gemm::IndexDtype::kInt16;
    case at::kInt: return fp8gemm::IndexDtype::kInt32;
    default: return fp8gemm::IndexDtype::kInt64;
  }
}

// Quantizes A, then runs the expert GEMM of `p` (routing already filled in) into a new (S, N) tensor.
at::Tensor run_expert_gemm(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale_in,
                           std::optional<at::ScalarType> output_dtype, fp8gemm::ExpertGemmProblem& p) {
  const at::ScalarType out_dtype = output_dtype.value_or(a.scalar_type());
  const int64_t s = a.size(0), k = a.size(1), e = b.size(0), n = b.size(1);
  if (s == 0 || n == 0) return at::empty({s, n}, a.options().dtype(out_dtype));
  // Empty sums, or no expert any row could be routed to.
  if (k == 0 || e == 0) return at::zeros({s, n}, a.options().dtype(out_dtype));

  const at::Tensor b_scale = float32_scales(b_scale_in);
  Quantized qa = allocate_quantized(a, b.scalar_type());
  at::Tensor out = at::empty({s, n}, a.options().dtype(at::kBFloat16));
  p.s = s;
  p.n = n;
  p.k = k;
  p.experts = e;
  p.a = static_cast<const uint8_t*>(qa.q.const_data_ptr());
  p.a_stride_s = k;
  p.a_scale = qa.scale.const_data_ptr<float>();
  p.a_scale_stride_s = 1;
  p.a_scale_stride_kb = qa.ld;
  p.b = static_cast<const uint8_t*>(b.const_data_ptr());
  p.b_stride_e = b.stride(0);
  p.b_stride_n = b.stride(1);
  p.b_stride_k = b.stride(2);
  p.b_scale = b_scale.const_data_ptr<float>();
  p.b_scale_stride_e = b_scale.stride(0);
  p.b_scale_stride_nb = b_scale.stride(1);
  p.b_scale_stride_kb = b_scale.stride(2);
  p.out = static_cast<uint16_t*>(out.data_ptr());
  p.out_stride_s = n;
  p.format = b.scalar_type() == at::kFloat8_e4m3fn ? fp8gemm::Fp8Format::kE4M3FN : fp8gemm::Fp8Format::kE4M3FNUZ;
  const std::string shape = "S=" + std::to_string(s) + ", N=" + std::to_string(n) + ", K=" + std::to_string(k) +
                            ", E=" + std::to_string(e);

  const at::DeviceType device = a.device().type();
  if (device == at::kCPU) {
#ifdef CPU_KERNEL
    run_act_quant(a, qa, std::nullopt, std::nullopt);
    fp8gemm::cpu::expert_gemm(p);
    return out_dtype == at::kBFloat16 ? out : out.to(out_dtype);
#endif
  } else if (device == at::kCUDA) {
#if defined(CUDA_KERNEL)
    const c10::cuda::OptionalCUDAGuard guard(a.device());
    const size_t bytes = fp8gemm::cuda::expert_workspace_bytes(p);
    at::Tensor workspace;  // from the caching allocator, sized for this call
    if (bytes > 0) workspace = at::empty({static_cast<int64_t>(bytes)}, a.options().dtype(at::kByte));
    run_act_quant(a, qa, std::nullopt, std::nullopt);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
    const cudaError_t err = fp8gemm::cuda::expert_gemm(p, bytes > 0 ? workspace.data_ptr() : nullptr, bytes, stream,
                                                       /*after_producer=*/true);
    TORCH_CHECK(err == cudaSuccess, op, ": CUDA backend failed (", shape, "): ", cudaGetErrorString(err));
    return out_dtype == at::kBFloat16 ? out : out.to(out_dtype);
#elif defined(ROCM_KERNEL)
    const c10::hip::OptionalHIPGuardMasqueradingAsCUDA guard(a.device());
    const size_t bytes = fp8gemm::rocm::expert_workspace_bytes(p);
    TORCH_CHECK(bytes > 0, op, ": the gfx942 backend cannot take this problem (", shape,
                "): a size is beyond its 32-bit index range");
    // From the caching allocator, on the current stream, sized for this call.
    at::Tensor workspace = at::empty({static_cast<int64_t>(bytes)}, a.options().dtype(at::kByte));
    run_act_quant(a, qa, std::nullopt, std::nullopt);
    const hipStream_t stream = c10::hip::getCurrentHIPStreamMasqueradingAsCUDA(a.device().index()).stream();
    const hipError_t err = fp8gemm::rocm::expert_gemm(p, workspace.data_ptr(), bytes, stream);
    TORCH_CHECK(err == hipSuccess, op, ": ROCm backend failed (", shape, "): ", hipGetErrorString(err));
    return out_dtype == at::kBFloat16 ? out : out.to(out_dtype);
#endif
  }
  TORCH_CHECK(false, op, ": this build of the kernel has no backend for device ", a.device().str(), " (", shape, ")");
  return out;
}

}  // namespace

at::Tensor matmul_batched(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale,
                          const at::Tensor& expert_ids, at::IntArrayRef block_size,
                          std::optional<at::ScalarType> output_dtype) {
  check_matmul_batched(a, b, b_scale, expert_ids, block_size, output_dtype);
  fp8gemm::ExpertGemmProblem p;
  p.routing = fp8gemm::ExpertRouting::kPerRowIds;
  p.ids = expert_ids.const_data_ptr();
  p.ids_stride = expert_ids.stride(0);
  p.ids_dtype = index_dtype(expert_ids.scalar_type());
  return run_expert_gemm("matmul_batched", a, b, b_scale, output_dtype, p);
}

at::Tensor matmul_grouped(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale,
                          const at::Tensor& offsets, const at::Tensor& tokens_per_expert, at::IntArrayRef block_size,
                          std::optional<at::ScalarType> output_dtype) {
  check_matmul_grouped(a, b, b_scale, offsets, tokens_per_expert, block_size, output_dtype);
  if (a.device().is_cpu()) check_grouped_values(offsets, tokens_per_expert, a.size(0));
  fp8gemm::ExpertGemmProblem p;
  p.routing = fp8gemm::ExpertRouting::kSortedOffsets;
  p.offsets = offsets.const_data_ptr<int32_t>();
  p.offsets_stride = offsets.stride(0);
  return run_expert_gemm("matmul_grouped", a, b, b_scale, output_dtype, p);
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("gemm(Tensor! out, Tensor a, Tensor b, Tensor a_scale, Tensor b_scale) -> ()");
  ops.def(
      "fp8_act_quant(Tensor x, int block_size, ScalarType dtype, Tensor? activation_scale, "
      "float? activation_scale_value) -> (Tensor, Tensor)");
  ops.def(
      "matmul_2d(Tensor a, Tensor b, Tensor b_scale, int[] block_size, ScalarType? output_dtype, "
      "Tensor? activation_scale, float? activation_scale_value) -> Tensor");
  ops.def(
      "matmul_batched(Tensor a, Tensor b, Tensor b_scale, Tensor expert_ids, int[] block_size, "
      "ScalarType? output_dtype) -> Tensor");
  ops.def(
      "matmul_grouped(Tensor a, Tensor b, Tensor b_scale, Tensor offsets, Tensor tokens_per_expert, "
      "int[] block_size, ScalarType? output_dtype) -> Tensor");
#ifdef CPU_KERNEL
  ops.impl("gemm", c10::DispatchKey::CPU, &gemm);
  ops.impl("fp8_act_quant", c10::DispatchKey::CPU, &fp8_act_quant);
  ops.impl("matmul_2d", c10::DispatchKey::CPU, &matmul_2d);
  ops.impl("matmul_batched", c10::DispatchKey::CPU, &matmul_batched);
  ops.impl("matmul_grouped", c10::DispatchKey::CPU, &matmul_grouped);
#endif
#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  ops.impl("gemm", c10::DispatchKey::CUDA, &gemm);
  ops.impl("fp8_act_quant", c10::DispatchKey::CUDA, &fp8_act_quant);
  ops.impl("matmul_2d", c10::DispatchKey::CUDA, &matmul_2d);
  ops.impl("matmul_batched", c10::DispatchKey::CUDA, &matmul_batched);
  ops.impl("matmul_grouped", c10::DispatchKey::CUDA, &matmul_grouped);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
