// Bare streaming reads for gemm_bench.py's decode suite: each kernel reads n bytes once and does nothing
// else, so the fastest of them over a weight's bytes is what reading that weight can cost on this GPU,
// the ceiling for a decode GEMM that has to read it. Built by gemm_bench.py with nvcc, called through ctypes.
//
//   stream_read_vec:  a grid-stride loop of 16-byte streaming loads, `unroll` in flight per thread.
//   stream_read_bulk: (sm_90) each CTA reads one contiguous range with bulk copies into a ring of
//                     `stages` shared-memory buffers of `chunk` bytes, one thread issuing.
// Both fold what they read into a value stored only if it equals an improbable constant, so no load is
// dead code.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr uint32_t kNever = 0x9e3779b9u;

template <int U>
__device__ __forceinline__ uint32_t read_vec(const uint4* __restrict__ p, int64_t n16) {
  uint32_t acc = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  return acc;
}

__global__ void stream_read_vec(const uint4* __restrict__ p, int64_t n16, uint32_t* sink, int unroll) {
  const uint32_t acc = unroll >= 8 ? read_vec<8>(p, n16) : read_vec<4>(p, n16);
  if (acc == kNever) *sink = acc;
}

__global__ void stream_read_bulk(const uint8_t* __restrict__ p, int64_t n, uint32_t* sink, int chunk, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t ring[];
  uint64_t* bar = reinterpret_cast<uint64_t*>(ring + int64_t(stages) * chunk);
  if (threadIdx.x != 0) return;
  const int64_t chunks = (n + chunk - 1) / chunk, per_cta = (chunks + gridDim.x - 1) / gridDim.x;
  const int64_t c0 = int64_t(blockIdx.x) * per_cta, c1 = c0 + per_cta < chunks ? c0 + per_cta : chunks;
  for (int s = 0; s < stages; ++s)
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(uint32_t(__cvta_generic_to_shared(&bar[s]))));
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  auto issue = [&](int64_t c, int s) {
    const uint32_t b = uint32_t(__cvta_generic_to_shared(&bar[s]));
    const uint32_t dst = uint32_t(__cvta_generic_to_shared(ring + int64_t(s) * chunk));
    const int64_t off = c * chunk;
    const uint32_t bytes = uint32_t(n - off < chunk ? n - off : chunk);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(p + off), "r"(bytes), "r"(b)
                 : "memory");
  };
  int64_t next = c0;
  for (int s = 0; s < stages && next < c1; ++s, ++next) issue(next, s);
  uint32_t acc = 0, parity = 0;  // parity: bit s is stage s's phase
  for (int64_t c = c0, s = 0; c < c1; ++c) {
    const uint32_t b = uint32_t(__cvta_generic_to_shared(&bar[s]));
    asm volatile(
        "{\n .reg .pred P;\n WAIT_%=:\n mbarrier.try_wait.parity.shared.b64 P, [%0], %1;\n @!P bra WAIT_%=;\n}" ::"r"(b),
        "r"((parity >> s) & 1u)
        : "memory");
    parity ^= 1u << s;
    acc ^= *reinterpret_cast<volatile uint32_t*>(ring + s * chunk);
    if (next < c1) issue(next++, int(s));
    if (++s == stages) s = 0;
  }
  if (acc == kNever) *sink = acc;
#endif
}

}  // namespace

// n: bytes, a multiple of 16 from a 16-byte aligned p. Returns the cudaError_t of the launch.
extern "C" int stream_read_vec_launch(const void* p, long long n, void* sink, int grid, int threads, int unroll,
                                      void* stream) {
  stream_read_vec<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const uint4*>(p), n / 16,
                                                                          static_cast<uint32_t*>(sink), unroll);
  return int(cudaGetLastError());
}

extern "C" int stream_read_bulk_launch(const void* p, long long n, void* sink, int grid, int chunk, int stages,
                                       void* stream) {
  if (stages < 1 || stages > 32 || chunk < 16 || chunk % 16 != 0) return int(cudaErrorInvalidValue);  // parity: 32 bits
  const int smem = stages * chunk + 8 * stages;
  if (const cudaError_t e = cudaFuncSetAttribute(stream_read_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      e != cudaSuccess)
    return int(e);
  stream_read_bulk<<<grid, 32, smem, static_cast<cudaStream_t>(stream)>>>(static_cast<const uint8_t*>(p), n,
                                                                          static_cast<uint32_t*>(sink), chunk, stages);
  return int(cudaGetLastError());
}
