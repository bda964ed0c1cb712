#pragma once

#include <torch/library.h>

// out[..., h, w] = gray(image[..., h, w, :]) for a uint8 RGB image of shape (..., H, W, 3).
void img2gray(at::Tensor& out, const at::Tensor& image);
