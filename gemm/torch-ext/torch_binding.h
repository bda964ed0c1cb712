#pragma once

// Only ATen and the op-registration API: torch/torch.h would pull in pybind11, which does not build
// under the Python limited API (abi3) that kernel-builder and tools/kbuild compile with.
#include <ATen/core/Tensor.h>

// gemm(Tensor! out, Tensor a, Tensor b, Tensor a_scale, Tensor b_scale) -> ()
// Validates every argument (same checks for every device), then runs the backend of out's device.
void gemm(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
          const at::Tensor& b_scale);
