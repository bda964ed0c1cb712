// Op registration and validation. Kernels know nothing of torch: this file checks tensors, picks the
// device's implementation and hands raw pointers to it.
#include "torch_binding.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>

#include "registration.h"

#ifdef CPU_KERNEL
#include "img2gray_cpu/img2gray_cpu.h"
#endif

#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
#include <c10/core/DeviceGuard.h>

#include "img2gray_cuda/img2gray_gpu.h"
#if defined(ROCM_KERNEL)
// This file is not hipified: take the HIP stream through torch's CUDA-masquerading API.
#include <ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h>
static void* current_stream(const at::Device&) {
  return c10::hip::getCurrentHIPStreamMasqueradingAsCUDA().stream();
}
#else
#include <ATen/cuda/CUDAContext.h>
static void* current_stream(const at::Device& device) {
  return at::cuda::getCurrentCUDAStream(device.index()).stream();
}
#endif
#endif

namespace {

// "torch.int8" rather than c10's "Char": the name users write.
std::string dtype_name(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

// Messages are built from strings only (numbers through std::to_string): streaming an integer into
// c10::str's ostringstream crashed on the H200 machine, where the extension's libstdc++ headers (gcc 13)
// are newer than the libstdc++ the process loads, and an error path must never crash.
// "[4, 5, 3]"
std::string shape_str(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

// The byte range [begin, end) that a tensor's elements span (torch strides are never negative).
std::pair<uintptr_t, uintptr_t> byte_range(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  return {begin, begin + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(t.element_size()))};
}

// Same checks, order and messages as img2gray/_validate.py (the Python API and the fake). Throws
// c10::TypeError (Python TypeError) for a missing tensor, c10::Error (RuntimeError) for the rest.
void check_arguments(const at::Tensor& out, const at::Tensor& image) {
  // A None passed for a Tensor argument arrives as an undefined tensor.
  TORCH_CHECK_TYPE(image.defined(), "img2gray: image must be a torch.Tensor, got None");
  TORCH_CHECK_TYPE(out.defined(), "img2gray: out must be a torch.Tensor, got None");
  TORCH_CHECK(image.scalar_type() == at::kByte, "img2gray: image must be torch.uint8, got ", dtype_name(image.scalar_type()));
  TORCH_CHECK(image.dim() >= 3, "img2gray: image must have shape (..., H, W, 3), got ", std::to_string(image.dim()),
              "-D shape ", shape_str(image.sizes()));
  const int64_t channels = image.size(-1);
  const std::string hint =
      image.size(-3) == 3 ? "; a channels-first (..., 3, H, W) image goes in as image.movedim(-3, -1), a view packed once"
      : channels == 4     ? "; for RGBA drop the alpha channel first: image[..., :3]"
                          : "";
  TORCH_CHECK(channels == 3, "img2gray: image must have 3 channels (RGB) in its last dimension, got ",
              std::to_string(channels),
              " (shape ", shape_str(image.sizes()), ")", hint);
  TORCH_CHECK(out.scalar_type() == at::kByte, "img2gray: out must be torch.uint8, got ", dtype_name(out.scalar_type()));
  const auto expected = image.sizes().slice(0, image.dim() - 1);
  TORCH_CHECK(out.sizes() == expected, "img2gray: out must have shape ", shape_str(expected), ", got ",
              shape_str(out.sizes()));
  TORCH_CHECK(out.device() == image.device(), "img2gray: out and image must be on the same device, got out on ",
              out.device().str(), " and image on ", image.device().str());
  TORCH_CHECK(out.is_contiguous(), "img2gray: out must be contiguous, got strides ", shape_str(out.strides()),
              " for shape ", shape_str(out.sizes()));
  // Sharing a buffer is fine; sharing bytes is not (ranges that merely interleave count as shared).
  if (out.numel() > 0 && image.numel() > 0) {
    const auto o = byte_range(out), i = byte_range(image);
    TORCH_CHECK(o.second <= i.first || i.second <= o.first,
                "img2gray: out must not overlap image in memory (the bytes they span intersect)");
  }
}

}  // namespace

void img2gray(at::Tensor& out, const at::Tensor& image) {
  check_arguments(out, image);
  if (out.numel() == 0) return;
  // Kernels read packed rows: a strided view (a crop, a channels-first permute) is packed once here.
  const at::Tensor rgb = image.contiguous();
  if (image.device().is_cpu()) {
#ifdef CPU_KERNEL
    grayscale::rgb_to_gray_cpu(rgb.const_data_ptr<uint8_t>(), out.mutable_data_ptr<uint8_t>(), out.numel());
    return;
#endif
  }
#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  if (image.device().is_cuda()) {
    const c10::DeviceGuard guard(image.device());
    const int64_t width = image.size(-2);
    const int64_t rows = out.numel() / width;
    const char* error = grayscale::rgb_to_gray_gpu(rgb.const_data_ptr<uint8_t>(), out.mutable_data_ptr<uint8_t>(),
                                                  rows, width, current_stream(image.device()));
    TORCH_CHECK(error == nullptr, "img2gray: kernel launch failed: ", error);
    return;
  }
#endif
  TORCH_CHECK(false, "img2gray: no implementation for device ", image.device().str(), " in this build");
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("img2gray(Tensor! out, Tensor image) -> ()");
#ifdef CPU_KERNEL
  ops.impl("img2gray", c10::kCPU, &img2gray);
#endif
#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  ops.impl("img2gray", c10::kCUDA, &img2gray);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
