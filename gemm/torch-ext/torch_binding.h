#pragma once

// Only ATen and the op-registration API: torch/torch.h would pull in pybind11, which does not build
// under the Python limited API (abi3) that kernel-builder and tools/kbuild compile with.
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

// gemm(Tensor! out, Tensor a, Tensor b, Tensor a_scale, Tensor b_scale) -> ()
// Validates every argument (same checks for every device), then runs the backend of out's device.
void gemm(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
          const at::Tensor& b_scale);

// fp8_act_quant(Tensor x, int block_size, ScalarType dtype, Tensor? activation_scale,
//               float? activation_scale_value) -> (Tensor, Tensor)
// x (..., K) bf16/fp16/fp32 -> (q (..., K) fp8 `dtype`, scale (..., ceil(K/128)) float32 stored M-contiguous).
// A static per-tensor scale comes as a one-element tensor or as a float (at most one of the two).
std::tuple<at::Tensor, at::Tensor> fp8_act_quant(const at::Tensor& x, int64_t block_size, at::ScalarType dtype,
                                                 const std::optional<at::Tensor>& activation_scale,
                                                 std::optional<double> activation_scale_value);

// matmul_2d(Tensor a, Tensor b, Tensor b_scale, int[] block_size, ScalarType? output_dtype,
//           Tensor? activation_scale, float? activation_scale_value) -> Tensor
// fp8_act_quant(a) with b's fp8 kind, then the block-scaled GEMM against b (N, K) / b_scale; (..., N) in
// output_dtype (default a's dtype).
at::Tensor matmul_2d(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale, at::IntArrayRef block_size,
                     std::optional<at::ScalarType> output_dtype, const std::optional<at::Tensor>& activation_scale,
                     std::optional<double> activation_scale_value);

// matmul_batched(Tensor a, Tensor b, Tensor b_scale, Tensor expert_ids, int[] block_size,
//                ScalarType? output_dtype) -> Tensor
// MoE experts, one expert per row: a (S, K) raw activations quantized as fp8_act_quant, b (E, N, K) fp8,
// b_scale (E, ceil(N/128), ceil(K/128)) float32 or float8_e8m0fnu, expert_ids (S,) any integer dtype.
// Row s of the (S, N) result is a[s] against expert expert_ids[s]; rows whose id is outside [0, E) are zeros.
at::Tensor matmul_batched(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale,
                          const at::Tensor& expert_ids, at::IntArrayRef block_size,
                          std::optional<at::ScalarType> output_dtype);

// matmul_grouped(Tensor a, Tensor b, Tensor b_scale, Tensor offsets, Tensor tokens_per_expert, int[] block_size,
//                ScalarType? output_dtype) -> Tensor
// MoE experts over rows sorted by expert: offsets (E,) int32 inclusive row ends, tokens_per_expert (E,) their
// differences (values checked on the CPU only; a GPU clamps bad offsets). Rows past offsets[E - 1] are zeros.
at::Tensor matmul_grouped(const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_scale,
                          const at::Tensor& offsets, const at::Tensor& tokens_per_expert, at::IntArrayRef block_size,
                          std::optional<at::ScalarType> output_dtype);
