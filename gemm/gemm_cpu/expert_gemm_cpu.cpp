// CPU backend of the MoE expert GEMMs (see expert_gemm_cpu.h).
#include "expert_gemm_cpu.h"
#include "gemm_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace fp8gemm {
namespace cpu {
namespace {

int64_t read_id(const ExpertGemmProblem& p, int64_t row) {
  const int64_t i = row * p.ids_stride;
  switch (p.ids_dtype) {
    case IndexDtype::kInt8: return static_cast<const int8_t*>(p.ids)[i];
    case IndexDtype::kUInt8: return static_cast<const uint8_t*>(p.ids)[i];
    case IndexDtype::kInt16: return static_cast<const int16_t*>(p.ids)[i];
    case IndexDtype::kInt32: return static_cast<const int32_t*>(p.ids)[i];
    case IndexDtype::kInt64: return static_cast<const int64_t*>(p.ids)[i];
  }
  return -1;
}

void zero_row(const ExpertGemmProblem& p, int64_t row) {
  std::memset(p.out + row * p.out_stride_s, 0, static_cast<size_t>(p.n) * sizeof(uint16_t));
}

// The dense problem of rows [0, m) of a (already offset to the segment) against expert e.
GemmProblem dense(const ExpertGemmProblem& p, int64_t e, int64_t m, const uint8_t* a, int64_t a_stride,
                  const float* a_scale, int64_t a_scale_stride_m, int64_t a_scale_stride_kb, uint16_t* out,
                  int64_t out_stride) {
  GemmProblem d;
  d.m = m;
  d.n = p.n;
  d.k = p.k;
  d.a = a;
  d.a_stride_m = a_stride;
  d.a_stride_k = 1;
  d.a_scale = a_scale;
  d.a_scale_stride_m = a_scale_stride_m;
  d.a_scale_stride_kb = a_scale_stride_kb;
  d.b = p.b + e * p.b_stride_e;
  d.b_stride_n = p.b_stride_n;
  d.b_stride_k = p.b_stride_k;
  d.b_scale = p.b_scale + e * p.b_scale_stride_e;
  d.b_scale_stride_nb = p.b_scale_stride_nb;
  d.b_scale_stride_kb = p.b_scale_stride_kb;
  d.out = out;
  d.out_stride_m = out_stride;
  d.out_stride_n = 1;
  d.format = p.format;
  return d;
}

void sorted_offsets(const ExpertGemmProblem& p) {
  // start = end(e - 1): the offsets clamped into a running maximum inside [0, s] (expert_gemm.h).
  int64_t start = 0;
  for (int64_t e = 0; e < p.experts; ++e) {
    const int64_t end = std::min<int64_t>(std::max<int64_t>(p.offsets[e * p.offsets_stride], start), p.s);
    if (end > start)
      gemm(dense(p, e, end - start, p.a + start * p.a_stride_s, p.a_stride_s, p.a_scale + start * p.a_scale_stride_s,
                 p.a_scale_stride_s, p.a_scale_stride_kb, p.out + start * p.out_stride_s, p.out_stride_s));
    start = end;
  }
  for (int64_t row = start; row < p.s; ++row) zero_row(p, row);
}

void per_row_ids(const ExpertGemmProblem& p) {
  // Counting sort of the rows by expert; rows of no expert are zeroed.
  std::vector<int64_t> first(p.experts + 1, 0), expert(p.s);
  for (int64_t row = 0; row < p.s; ++row) {
    const int64_t e = read_id(p, row);
    expert[row] = e;
    if (e >= 0 && e < p.experts) ++first[e + 1];
    else zero_row(p, row);
  }
  for (int64_t e = 0; e < p.experts; ++e) first[e + 1] += first[e];
  const int64_t routed = first[p.experts];
  if (routed == 0) return;
  std::vector<int64_t> order(routed), fill(first.begin(), first.end() - 1);
  for (int64_t row = 0; row < p.s; ++row)
    if (expert[row] >= 0 && expert[row] < p.experts) order[fill[expert[row]]++] = row;

  // Gathered copies: a rows K-contiguous, scales (routed, kb) row-major, out rows N-contiguous.
  const int64_t kb = p.k_blocks();
  std::vector<uint8_t> a(static_cast<size_t>(routed * p.k));
  std::vector<float> a_scale(static_cast<size_t>(routed * kb));
  std::vector<uint16_t> out(static_cast<size_t>(routed * p.n));
  for (int64_t i = 0; i < routed; ++i) {
    const int64_t row = order[i];
    std::memcpy(a.data() + i * p.k, p.a + row * p.a_stride_s, static_cast<size_t>(p.k));
    for (int64_t b = 0; b < kb; ++b)
      a_scale[i * kb + b] = p.a_scale[row * p.a_scale_stride_s + b * p.a_scale_stride_kb];
  }
  for (int64_t e = 0; e < p.experts; ++e) {
    const int64_t begin = first[e], rows = first[e + 1] - begin;
    if (rows == 0) continue;
    gemm(dense(p, e, rows, a.data() + begin * p.k, p.k, a_scale.data() + begin * kb, kb, 1, out.data() + begin * p.n,
               p.n));
  }
  for (int64_t i = 0; i < routed; ++i)
    std::memcpy(p.out + order[i] * p.out_stride_s, out.data() + i * p.n, static_cast<size_t>(p.n) * sizeof(uint16_t));
}

}  // namespace

void expert_gemm(const ExpertGemmProblem& p) {
  if (p.s <= 0 || p.n <= 0) return;
  if (p.k <= 0 || p.experts <= 0) {  // empty sums, or no expert to route to: all zeros
    for (int64_t row = 0; row < p.s; ++row) zero_row(p, row);
    return;
  }
  if (p.routing == ExpertRouting::kSortedOffsets)
    sorted_offsets(p);
  else
    per_row_ids(p);
}

}  // namespace cpu
}  // namespace fp8gemm
