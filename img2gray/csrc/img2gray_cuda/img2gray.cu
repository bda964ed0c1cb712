// RGB -> gray on the GPU. Also compiled for ROCm (gfx942) after hipify, so only portable CUDA is used.
//
// 2D grid: blockIdx.y walks rows, x-threads walk 16-pixel groups of a row. When a row's input (48*j bytes)
// and output (16*j bytes) are 16-byte aligned, each thread moves whole 16-byte vectors: three loads of
// 16 RGB-triplet bytes, one 16-byte store. Other rows, and the tail of every row, go byte by byte.
#include <cuda_runtime.h>

#include <cstdint>

#include "../img2gray_common.h"
#include "img2gray_gpu.h"

namespace grayscale {
namespace {

constexpr int kPixelsPerThread = 16;
constexpr int kThreadsX = 128;
constexpr int kRowsPerBlock = 2;
constexpr unsigned kMaxGridY = 65535;

__device__ __forceinline__ uint32_t byte_of(const uint4& v, int i) {
  const uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
  return (w >> (8 * (i & 3))) & 0xffu;
}

__device__ __forceinline__ void gray16_vector(const uint8_t* __restrict__ in, uint8_t* __restrict__ out) {
  const uint4* src = reinterpret_cast<const uint4*>(in);
  uint4 v[3] = {src[0], src[1], src[2]};
  uint32_t packed[4] = {0, 0, 0, 0};
#pragma unroll
  for (int p = 0; p < kPixelsPerThread; ++p) {
    // Byte 3p+c of the 48 lives in vector (3p+c)/16 at position (3p+c)%16; all indices are compile-time.
    const uint32_t r = byte_of(v[(3 * p) / 16], (3 * p) % 16);
    const uint32_t g = byte_of(v[(3 * p + 1) / 16], (3 * p + 1) % 16);
    const uint32_t b = byte_of(v[(3 * p + 2) / 16], (3 * p + 2) % 16);
    packed[p / 4] |= static_cast<uint32_t>(gray_of(r, g, b)) << (8 * (p % 4));
  }
  *reinterpret_cast<uint4*>(out) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

__global__ void __launch_bounds__(kThreadsX * kRowsPerBlock)
    rgb_to_gray_kernel(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t rows, int64_t width,
                       bool aligned) {
  const int64_t x0 = (static_cast<int64_t>(blockIdx.x) * kThreadsX + threadIdx.x) * kPixelsPerThread;
  if (x0 >= width) return;
  const int64_t count = width - x0 < kPixelsPerThread ? width - x0 : kPixelsPerThread;
  for (int64_t row = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.y) * kRowsPerBlock) {
    const uint8_t* in = rgb + (row * width + x0) * 3;
    uint8_t* out = gray + row * width + x0;
    if (aligned && count == kPixelsPerThread) {
      gray16_vector(in, out);
    } else {
      for (int64_t p = 0; p < count; ++p) out[p] = gray_of(in[3 * p], in[3 * p + 1], in[3 * p + 2]);
    }
  }
}

}  // namespace

const char* rgb_to_gray_gpu(const uint8_t* rgb, uint8_t* gray, int64_t rows, int64_t width, void* stream) {
  if (rows <= 0 || width <= 0) return nullptr;
  const int64_t groups = (width + kPixelsPerThread - 1) / kPixelsPerThread;
  const int64_t blocks_x = (groups + kThreadsX - 1) / kThreadsX;
  if (blocks_x > 0x7fffffff) return "img2gray: image row too wide for one launch";
  const int64_t blocks_y = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  // Every row start is 16-byte aligned for input (3*width bytes) and output (width bytes) iff width % 16 == 0.
  const bool aligned = width % 16 == 0 && reinterpret_cast<uintptr_t>(rgb) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(gray) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y < kMaxGridY ? blocks_y : kMaxGridY));
  const dim3 block(kThreadsX, kRowsPerBlock);
  rgb_to_gray_kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(rgb, gray, rows, width, aligned);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace grayscale
