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
