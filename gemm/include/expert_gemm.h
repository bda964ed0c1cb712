// Torch-free description of one mixture-of-experts expert GEMM call (matmul_batched / matmul_grouped),
// shared by every backend's launcher.
//
//   out[s, n] = bf16_rne( sum_kb a_scale[s, kb] * b_scale[e(s), n / 128, kb] * sum_{k in kb} a[s, k] * b[e(s), n, k] )
//
// for every row s whose expert e(s) is in [0, experts); every other row of out is written with zeros.
// e(s) comes from the routing:
// * kPerRowIds (matmul_batched): e(s) = ids[s * ids_stride], read as ids_dtype;
// * kSortedOffsets (matmul_grouped): rows are sorted by expert and offsets[e * offsets_stride] is the
//   inclusive row end of expert e, so expert e owns rows [offsets[e - 1], offsets[e]) (offsets[-1] = 0);
//   rows at or past offsets[experts - 1] belong to no expert. Backends that cannot check the offsets
//   without a host synchronisation clamp them into a running maximum: expert e owns [end(e - 1), end(e)) with
//   end(e) = min(max(offsets[e], end(e - 1)), s) and end(-1) = 0, so segments never overlap and a bad value
//   never reads or writes out of bounds.
#pragma once

#include <cstdint>

#include "gemm_problem.h"

namespace fp8gemm {

enum class ExpertRouting : int32_t { kPerRowIds = 0, kSortedOffsets = 1 };

// Integer dtypes an expert-id tensor may have (torch's int8 / uint8 / int16 / int32 / int64).
enum class IndexDtype : int32_t { kInt8 = 0, kUInt8 = 1, kInt16 = 2, kInt32 = 3, kInt64 = 4 };

struct ExpertGemmProblem {
  int64_t s = 0, n = 0, k = 0, experts = 0;

  const uint8_t* a = nullptr;  // (s, k) fp8, K-contiguous: a[row * a_stride_s + k]
  int64_t a_stride_s = 0;
  const float* a_scale = nullptr;  // (s, ceil(k/128))
  int64_t a_scale_stride_s = 0, a_scale_stride_kb = 0;
  const uint8_t* b = nullptr;  // (experts, n, k) fp8
  int64_t b_stride_e = 0, b_stride_n = 0, b_stride_k = 0;
  const float* b_scale = nullptr;  // (experts, ceil(n/128), ceil(k/128)) float32
  int64_t b_scale_stride_e = 0, b_scale_stride_nb = 0, b_scale_stride_kb = 0;
  uint16_t* out = nullptr;  // (s, n) bfloat16 bit patterns, row-major: out[row * out_stride_s + col]
  int64_t out_stride_s = 0;

  Fp8Format format = Fp8Format::kE4M3FN;

  ExpertRouting routing = ExpertRouting::kPerRowIds;
  const void* ids = nullptr;  // kPerRowIds: (s,)
  int64_t ids_stride = 0;
  IndexDtype ids_dtype = IndexDtype::kInt64;
  const int32_t* offsets = nullptr;  // kSortedOffsets: (experts,)
  int64_t offsets_stride = 0;

  constexpr int64_t k_blocks() const { return (k + kQuantBlock - 1) / kQuantBlock; }
  constexpr int64_t n_blocks() const { return (n + kQuantBlock - 1) / kQuantBlock; }
};

}  // namespace fp8gemm
