// Launcher of the GPU kernel. Torch-free and free of CUDA/HIP types, so the (never hipified) binding
// can include it in CUDA and ROCm builds alike.
#pragma once

#include <cstdint>

namespace grayscale {

// rgb: `rows` rows of `width` packed RGB pixels (row stride 3*width bytes); gray: rows x width bytes.
// `stream` is a cudaStream_t (hipStream_t under ROCm). Returns nullptr on success, else the runtime's
// error string.
const char* rgb_to_gray_gpu(const uint8_t* rgb, uint8_t* gray, int64_t rows, int64_t width, void* stream);

}  // namespace grayscale
