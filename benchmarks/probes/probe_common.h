// Host helpers shared by the probes: random fp8 operands and scales, a launch-argument builder for the
// hand-written kernel, and a timer (median of 20 launches after 3-5 warm-ups, 256 MiB memset between
// launches so that every launch starts with a cold L2, as benchmarks/gemm_h200.py does).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include <cuda_runtime.h>

namespace probe {

__global__ void fill_fp8(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    p[i] = uint8_t((x & 0x80) | (x & 0x3F));  // e4m3 with exponent field <= 7: |v| < 2, never NaN
  }
}
__global__ void fill_scale(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2246822519u ^ seed;
    x ^= x >> 15, x *= 0x2c1b3c6du, x ^= x >> 12;
    p[i] = 0.25f + float(x & 1023) / 1024.0f;
  }
}

struct Buffers {
  uint8_t *a = nullptr, *b = nullptr, *flush = nullptr;
  float *sfa = nullptr, *sfb = nullptr;
  void *d = nullptr, *d2 = nullptr, *ws = nullptr;
  size_t max_elems = 0, ws_bytes = size_t(1) << 30;
  explicit Buffers(size_t max_el) : max_elems(max_el) {
    cudaMalloc(&a, max_el);
    cudaMalloc(&b, max_el);
    cudaMalloc(&sfa, 64 << 20);
    cudaMalloc(&sfb, 64 << 20);
    cudaMalloc(&d, max_el * 2);
    cudaMalloc(&d2, max_el * 2);
    cudaMalloc(&flush, 256u << 20);
    cudaMalloc(&ws, ws_bytes);
    fill_fp8<<<1024, 256>>>(a, max_el, 1u);
    fill_fp8<<<1024, 256>>>(b, max_el, 7u);
    fill_scale<<<1024, 256>>>(sfa, 16 << 20, 3u);
    fill_scale<<<1024, 256>>>(sfb, 16 << 20, 5u);
    cudaDeviceSynchronize();
  }
};

// K-major a (m, k), b (n, k); a_scale MN-major (rows padded to 4), b_scale (n/128, k/128) K-contiguous.
template <class KernelArgs, class Decomposition>
KernelArgs gemm_args(const Buffers& B, int m, int n, int k, void* d, Decomposition dec, int splits = 1) {
  KernelArgs a;
  const int kb = (k + 127) / 128;
  a.m = m, a.n = n, a.k = k;
  a.a = B.a, a.lda = k, a.b = B.b, a.ldb = k;
  a.sfa = B.sfa, a.sfa_ld = (m + 3) / 4 * 4, a.sfa_rows = (m + 3) / 4 * 4;
  a.sfb = B.sfb, a.sfb_ld = kb, a.sfb_rows = (n + 127) / 128;
  a.d = d, a.ldd = n, a.alpha = 1.0f, a.max_swizzle = 8;
  a.decomposition = dec, a.splits = splits;
  return a;
}

inline double median_us(const Buffers& B, const std::function<cudaError_t()>& launch, int warmup = 5, int reps = 20) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ts;
  for (int it = 0; it < warmup + reps; ++it) {
    cudaMemsetAsync(B.flush, it, 256u << 20);
    cudaEventRecord(e0);
    const cudaError_t err = launch();
    cudaEventRecord(e1);
    if (err != cudaSuccess) {
      printf("launch error: %s\n", cudaGetErrorString(err));
      return -1.0;
    }
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (it >= warmup) ts.push_back(ms * 1000.f);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace probe
