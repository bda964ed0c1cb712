// The grayscale formula shared by every backend (torch-free, host and device).
//
//   gray = trunc(0.21f*R + 0.72f*G + 0.07f*B)   in float32, evaluated as ((0.21R + 0.72G) + 0.07B)
//
// Each product and sum is rounded on its own. A fused multiply-add would skip one rounding and can
// change the truncated result by one. nvcc never contracts the explicitly rounded intrinsics; HIP
// defines them as plain `*` and `+` and clang contracts by default, so the device path also turns
// contraction off with a pragma (and the ROCm build passes -ffp-contract=off); the CPU path is built
// with -ffp-contract=off.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define IMG2GRAY_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define IMG2GRAY_HOST_DEVICE inline
#endif

namespace grayscale {

constexpr float kR = 0.21f;
constexpr float kG = 0.72f;
constexpr float kB = 0.07f;

#if defined(__CUDA_ARCH__) && !defined(__clang__)
// nvcc: the _rn intrinsics are rounded individually and never contracted.
__device__ __forceinline__ uint8_t gray_of(uint32_t r, uint32_t g, uint32_t b) {
  const float rg = __fadd_rn(__fmul_rn(kR, static_cast<float>(r)), __fmul_rn(kG, static_cast<float>(g)));
  return static_cast<uint8_t>(__fadd_rn(rg, __fmul_rn(kB, static_cast<float>(b))));
}
#else
// Host compilers and clang (HIP): plain operators with contraction disabled for this block (HIP's
// __fmul_rn is a plain `*` that clang would otherwise fuse with the following add).
IMG2GRAY_HOST_DEVICE uint8_t gray_of_rgb(float r, float g, float b) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  const float rg = kR * r + kG * g;
  // Values lie in [0, 256): truncation through int32 equals the direct float -> uint8 conversion and
  // has a vector instruction (cvttps2dq) where float -> uint8 does not.
  return static_cast<uint8_t>(static_cast<int32_t>(rg + kB * b));
}

IMG2GRAY_HOST_DEVICE uint8_t gray_of(uint32_t r, uint32_t g, uint32_t b) {
  return gray_of_rgb(static_cast<float>(r), static_cast<float>(g), static_cast<float>(b));
}
#endif

}  // namespace grayscale
