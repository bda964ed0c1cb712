// The grayscale formula shared by every backend (torch-free, host and device).
//
//   gray = trunc(0.21f*R + 0.72f*G + 0.07f*B)   in float32, evaluated as ((0.21R + 0.72G) + 0.07B)
//
// Each product and sum is rounded on its own. A fused multiply-add would skip one rounding and can
// change the truncated result by one, so the GPU path uses the explicitly rounded intrinsics (which
// the compiler never contracts) and the CPU path is built with -ffp-contract=off.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define IMG2GRAY_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define IMG2GRAY_HOST_DEVICE inline
#endif

namespace grayscale {

constexpr float kR = 0.21f;
constexpr float kG = 0.72f;
constexpr float kB = 0.07f;

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
__device__ __forceinline__ uint8_t gray_of(uint32_t r, uint32_t g, uint32_t b) {
  const float rg = __fadd_rn(__fmul_rn(kR, static_cast<float>(r)), __fmul_rn(kG, static_cast<float>(g)));
  return static_cast<uint8_t>(__fadd_rn(rg, __fmul_rn(kB, static_cast<float>(b))));
}
#else
inline uint8_t gray_of(uint32_t r, uint32_t g, uint32_t b) {
  const float rg = kR * static_cast<float>(r) + kG * static_cast<float>(g);
  return static_cast<uint8_t>(rg + kB * static_cast<float>(b));
}
#endif

}  // namespace grayscale
