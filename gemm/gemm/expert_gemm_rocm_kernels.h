// Device bodies of the gfx942 MoE expert GEMMs' routing passes (expert_gemm_rocm_plan.h). Per-lane
// function templates written only against gfx942_arch.h, like gemm_rocm_kernels.h: the HIP launcher
// (expert_launcher.hip) wraps them in __global__ functions and the CPU SIMT emulator runs them as they are.
//
//   * grouped_segments_body (matmul_grouped): workgroup 0 turns the offsets into per-expert segments
//     (clamped into a running maximum inside [0, s]); every workgroup zeroes its share of the output rows
//     at or past the last segment's end.
//   * batched_count_body (matmul_batched): each row's rank among the rows of its expert (an atomic count
//     per expert; -1 for a row whose id is outside [0, experts)).
//   * batched_segments_body: one workgroup; the experts' row counts -> segments of the rows in expert order.
//   * batched_gather_body: each row's fp8 bytes (e4m3fn -> e4m3fnuz when asked, K zero-padded to the
//     copy's row length) and scales to its place in expert order, row_map[place] = row; zeros into the
//     output rows of no expert.
// Segments: starts seg[0, E), ends seg[E, 2E), exclusive prefix of their bm-row block counts seg[2E, 3E],
// seg[3E] = all blocks (what the expert mode of the main pass reads, gemm_rocm_args.h ExpertExtra).
#pragma once

#include <cstdint>

#include "expert_gemm.h"
#include "fp8_numerics.h"
#include "gfx942_arch.h"

namespace fp8gemm::rocm {

constexpr int kRouteThreads = 256;                             // every routing pass
constexpr int kRouteLdsBytes = 2 * kRouteThreads * sizeof(int);  // the segment passes' scan buffers

struct RouteArgs {
  int32_t s, n, k, experts, bm;
  int32_t convert_e4m3fn;  // gather: map e4m3fn bytes to e4m3fnuz
  const void* ids;  // batched
  int64_t ids_stride;
  IndexDtype ids_dtype;
  int32_t reserved;
  const int32_t* offsets;  // grouped
  int64_t offsets_stride;
  const uint8_t* a;
  int64_t a_stride_s;
  const float* a_scale;
  int64_t a_scale_stride_s, a_scale_stride_kb;
  uint16_t* out;
  int64_t out_stride_s;
  int32_t* seg;        // 3 * experts + 1
  uint32_t* counts;    // batched: experts (zero before the count pass)
  int32_t* rank;       // batched: s
  int32_t* row_map;    // batched: s
  uint8_t* a_sorted;   // batched: s rows of a_sorted_ld bytes
  int64_t a_sorted_ld;
  float* a_scale_sorted;  // batched: (s, k_blocks) row-major
};

namespace detail {

FP8GEMM_DEVICE int64_t load_id(const RouteArgs& r, int64_t row) {
  const int64_t i = row * r.ids_stride;
  switch (r.ids_dtype) {
    case IndexDtype::kInt8: return arch::global_load(static_cast<const int8_t*>(r.ids) + i);
    case IndexDtype::kUInt8: return arch::global_load(static_cast<const uint8_t*>(r.ids) + i);
    case IndexDtype::kInt16: return arch::global_load(static_cast<const int16_t*>(r.ids) + i);
    case IndexDtype::kInt32: return arch::global_load(static_cast<const int32_t*>(r.ids) + i);
    default: return arch::global_load(static_cast<const int64_t*>(r.ids) + i);
  }
}

FP8GEMM_DEVICE int imax(int a, int b) { return a > b ? a : b; }
FP8GEMM_DEVICE int imin(int a, int b) { return a < b ? a : b; }

// Inclusive scan of v over the kRouteThreads lanes of the workgroup (max or +), through two LDS buffers
// of kRouteThreads ints (Hillis-Steele, one barrier per step). Also gives the exclusive value (0 for
// lane 0) and the total.
template <bool kMax>
FP8GEMM_DEVICE int workgroup_scan(int v, int* buf, int& exclusive, int& total) {
  const int t = arch::thread_id();
  int* cur = buf;
  int* next = buf + kRouteThreads;
  arch::lds_store(cur + t, v);
  arch::barrier();
  for (int o = 1; o < kRouteThreads; o <<= 1) {
    int x = arch::lds_load(cur + t);
    if (t >= o) {
      const int y = arch::lds_load(cur + t - o);
      x = kMax ? imax(x, y) : x + y;
    }
    arch::lds_store(next + t, x);
    arch::barrier();
    int* const swap = cur;
    cur = next;
    next = swap;
  }
  const int inclusive = arch::lds_load(cur + t);
  exclusive = t > 0 ? arch::lds_load(cur + t - 1) : 0;
  total = arch::lds_load(cur + kRouteThreads - 1);
  arch::barrier();  // read before the next scan overwrites the buffers
  return inclusive;
}

// Segments from the experts' raw inclusive row ends raw_end(e), clamped into a running maximum inside
// [0, s]: segments never overlap nor leave the rows. One workgroup.
template <class RawEnd>
FP8GEMM_DEVICE void write_segments(const RouteArgs& r, RawEnd raw_end) {
  int* const buf = reinterpret_cast<int*>(arch::lds_base());
  const int t = arch::thread_id(), experts = r.experts;
  int carry_end = 0, carry_blocks = 0;  // the same in every lane
  for (int base = 0; base < experts; base += kRouteThreads) {
    const int e = base + t;
    const int end_in = e < experts ? imin(imax(raw_end(e), 0), r.s) : 0;
    int before, chunk_end;
    const int end = imax(carry_end, workgroup_scan<true>(end_in, buf, before, chunk_end));
    const int start = imax(carry_end, before);
    const int blocks = e < experts ? (end - start + r.bm - 1) / r.bm : 0;
    int blocks_before, chunk_blocks;
    (void)workgroup_scan<false>(blocks, buf, blocks_before, chunk_blocks);
    if (e < experts) {
      arch::global_store(r.seg + e, start);
      arch::global_store(r.seg + experts + e, end);
      arch::global_store(r.seg + 2 * experts + e, carry_blocks + blocks_before);
    }
    carry_end = imax(carry_end, chunk_end);
    carry_blocks += chunk_blocks;
  }
  if (t == 0) arch::global_store(r.seg + 3 * experts, carry_blocks);
}

// bf16 zeros into output rows first, first + step, ... < s, one workgroup's lanes along the row.
FP8GEMM_DEVICE void zero_rows(const RouteArgs& r, int64_t first, int64_t step) {
  for (int64_t row = first; row < r.s; row += step)
    for (int64_t c = arch::thread_id(); c < r.n; c += kRouteThreads)
      arch::global_store(r.out + row * r.out_stride_s + c, uint16_t{0});
}

}  // namespace detail

FP8GEMM_DEVICE void grouped_segments_body(const RouteArgs& r) {
  auto raw_end = [&](int e) { return arch::global_load(r.offsets + static_cast<int64_t>(e) * r.offsets_stride); };
  if (arch::block_id_x() == 0) detail::write_segments(r, raw_end);
  // The last segment ends at the largest clamped offset; rows from there on belong to no expert.
  int local = 0;
  for (int e = arch::thread_id(); e < r.experts; e += kRouteThreads)
    local = detail::imax(local, detail::imin(detail::imax(raw_end(e), 0), r.s));
  int unused, last_end;
  (void)detail::workgroup_scan<true>(local, reinterpret_cast<int*>(arch::lds_base()), unused, last_end);
  detail::zero_rows(r, last_end + arch::block_id_x(), arch::grid_dim_x());
}

FP8GEMM_DEVICE void batched_count_body(const RouteArgs& r) {
  const int64_t row = static_cast<int64_t>(arch::block_id_x()) * kRouteThreads + arch::thread_id();
  if (row >= r.s) return;
  const int64_t e = detail::load_id(r, row);
  const int rank = e >= 0 && e < r.experts ? static_cast<int>(arch::atomic_add_agent(r.counts + e, 1u)) : -1;
  arch::global_store(r.rank + row, rank);
}

FP8GEMM_DEVICE void batched_segments_body(const RouteArgs& r) {
  int* const buf = reinterpret_cast<int*>(arch::lds_base());
  const int t = arch::thread_id();
  // Inclusive prefix of the counts (the experts' row ends in expert order) into the ends' slots, then the
  // segments from them (each lane reads back only what it wrote).
  int carry = 0;
  for (int base = 0; base < r.experts; base += kRouteThreads) {
    const int e = base + t;
    const int c = e < r.experts ? static_cast<int>(arch::global_load(r.counts + e)) : 0;
    int before, total;
    const int inclusive = detail::workgroup_scan<false>(c, buf, before, total);
    if (e < r.experts) arch::global_store(r.seg + r.experts + e, carry + inclusive);
    carry += total;
  }
  detail::write_segments(r, [&](int e) { return arch::global_load(r.seg + r.experts + e); });
}

// One wave per row (grid-stride): 16-byte chunks of the sorted copy, each built by one lane.
FP8GEMM_DEVICE void batched_gather_body(const RouteArgs& r) {
  constexpr int kWaves = kRouteThreads / 64;
  const int lane = arch::lane_id();
  const int64_t kb = (r.k + 127) / 128;
  const bool vec = r.k % 16 == 0 && r.a_stride_s % 16 == 0 && reinterpret_cast<uintptr_t>(r.a) % 16 == 0;
  for (int64_t row = static_cast<int64_t>(arch::block_id_x()) * kWaves + arch::wave_id(); row < r.s;
       row += static_cast<int64_t>(arch::grid_dim_x()) * kWaves) {
    const int rank = arch::global_load(r.rank + row);
    if (rank < 0) {
      for (int64_t c = lane; c < r.n; c += 64) arch::global_store(r.out + row * r.out_stride_s + c, uint16_t{0});
      continue;
    }
    const int64_t e = detail::load_id(r, row);
    const int64_t place = arch::global_load(r.seg + e) + rank;
    if (lane == 0) arch::global_store(r.row_map + place, static_cast<int32_t>(row));
    const uint8_t* const src = r.a + row * r.a_stride_s;
    uint8_t* const dst = r.a_sorted + place * r.a_sorted_ld;
    for (int64_t c = lane; c < r.a_sorted_ld / 16; c += 64) {
      arch::u32x4 v;
      if (vec && c * 16 < r.k) {
        v = arch::global_load(reinterpret_cast<const arch::u32x4*>(src + c * 16));
      } else {
        for (int w = 0; w < 4; ++w) {
          uint32_t word = 0;
          for (int b = 0; b < 4; ++b) {
            const int64_t k = c * 16 + w * 4 + b;
            if (k < r.k) word |= uint32_t{arch::global_load(src + k)} << (8 * b);
          }
          v[w] = word;
        }
      }
      if (r.convert_e4m3fn)
        for (int w = 0; w < 4; ++w) v[w] = e4m3fn_to_e4m3fnuz_x4(v[w]);
      arch::global_store(reinterpret_cast<arch::u32x4*>(dst + c * 16), v);
    }
    for (int64_t g = lane; g < kb; g += 64)
      arch::global_store(r.a_scale_sorted + place * kb + g,
                         arch::global_load(r.a_scale + row * r.a_scale_stride_s + g * r.a_scale_stride_kb));
  }
}

}  // namespace fp8gemm::rocm
