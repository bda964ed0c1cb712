// Torch-free description of one FP8 block-scaled GEMM call, shared by every backend's launcher.
//
//   out[m, n] = bf16_rne( sum_kb a_scale[m, kb] * b_scale[n / 128, kb] * sum_{k in block kb} a[m, k] * b[n, k] )
//
// All strides are in elements (not bytes) and may be anything the caller's tensors have: the
// challenge passes M/N-contiguous a and b (stride_k == M or N), DeepSeek/vLLM pass K-contiguous.
#pragma once

#include <cstdint>

namespace fp8gemm {

// The 128-wide quantisation block along K (a_scale granularity) and along N (b_scale rows).
constexpr int64_t kQuantBlock = 128;

// How the fp8 bytes of a and b are to be decoded.
enum class Fp8Format : int32_t {
  kE4M3FNUZ = 0,  // AMD gfx942 native: bias 8, max 240, 0x80 is NaN, no -0
  kE4M3FN = 1,    // OCP / NVIDIA native: bias 7, max 448, 0x7f/0xff are NaN, 0x80 is -0
};

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;

  const uint8_t* a = nullptr;  // logical (m, k)
  int64_t a_stride_m = 0, a_stride_k = 0;
  const uint8_t* b = nullptr;  // logical (n, k)
  int64_t b_stride_n = 0, b_stride_k = 0;
  const float* a_scale = nullptr;  // logical (m, ceil(k/128))
  int64_t a_scale_stride_m = 0, a_scale_stride_kb = 0;
  const float* b_scale = nullptr;  // logical (ceil(n/128), ceil(k/128))
  int64_t b_scale_stride_nb = 0, b_scale_stride_kb = 0;
  uint16_t* out = nullptr;  // logical (m, n), bfloat16 bit patterns
  int64_t out_stride_m = 0, out_stride_n = 0;

  Fp8Format format = Fp8Format::kE4M3FNUZ;

  constexpr int64_t k_blocks() const { return (k + kQuantBlock - 1) / kQuantBlock; }
  constexpr int64_t n_blocks() const { return (n + kQuantBlock - 1) / kQuantBlock; }
  // "K-major": consecutive k of one row are adjacent in memory (DeepSeek / vLLM layout).
  constexpr bool a_k_major() const { return a_stride_k == 1; }
  constexpr bool b_k_major() const { return b_stride_k == 1; }
  // "MN-major": consecutive rows are adjacent (the AMD challenge's "column-major" layout).
  constexpr bool a_m_major() const { return a_stride_m == 1; }
  constexpr bool b_n_major() const { return b_stride_n == 1; }
};

}  // namespace fp8gemm
