// Hopper launcher of the MoE expert GEMMs (expert_gemm_cuda.h).
//
// Plan, from shapes and strides alone (never from the routing's values, so every launch is capturable):
// * tiled path (e4m3fn operands in the layouts TMA reads: K-contiguous 16-byte rows, n % 8 == 0): a small
//   routing kernel turns the routing into row segments per expert (matmul_grouped: the offsets, clamped;
//   matmul_batched: a counting sort of the rows by expert, then the activation rows gathered in that
//   order), then the sm90 tile kernel walks (expert segment, M block, N block) tiles; or, with at most
//   one row per expert on average (decode), the decode kernel in expert mode streams each hit expert's
//   weight once (sm90_decode.h), for matmul_grouped straight from the offsets (no routing kernel);
// * generic path (everything else: e4m3fnuz, odd K, N or strides): one CUDA-core kernel, exact in the CPU
//   backend's arithmetic order, one output row slice per block.
// Rows that belong to no expert are written with zeros.
#include "expert_gemm_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gemm_cuda.h"
#include "sm90_decode.h"
#include "sm90_kernel_args.h"

namespace fp8gemm::cuda {
namespace {

constexpr int kRouteThreads = 1024;  // routing kernels: one CTA scans the experts
constexpr int kGenericThreads = 128;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// ------------------------------------------------------------------------------------------------
// Device helpers
// ------------------------------------------------------------------------------------------------
__device__ __forceinline__ void wait_for_previous_kernel() {
  // Programmatic dependent launch: returns at once when this kernel was launched without the attribute.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ int64_t load_id(const void* ids, int64_t stride, IndexDtype dtype, int64_t row) {
  const int64_t i = row * stride;
  switch (dtype) {
    case IndexDtype::kInt8: return static_cast<const int8_t*>(ids)[i];
    case IndexDtype::kUInt8: return static_cast<const uint8_t*>(ids)[i];
    case IndexDtype::kInt16: return static_cast<const int16_t*>(ids)[i];
    case IndexDtype::kInt32: return static_cast<const int32_t*>(ids)[i];
    default: return static_cast<const int64_t*>(ids)[i];
  }
}

// Inclusive scan over the CTA's kRouteThreads threads, op = max or +, identity 0 (values are >= 0).
template <bool kMax>
__device__ int block_scan(int v, int* warp_totals) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = kMax ? max(v, u) : v + u;
  }
  if (lane == 31) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = warp_totals[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w = kMax ? max(w, u) : w + u;
    }
    warp_totals[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v = kMax ? max(v, warp_totals[warp - 1]) : v + warp_totals[warp - 1];
  __syncthreads();
  return v;
}

// Segments of the experts from their inclusive row ends raw_end(e), clamped into a running maximum inside
// [0, rows] so that segments never overlap nor leave the matrix: start rows in seg[0, E), end rows in
// seg[E, 2E), the exclusive prefix of their bm-row block counts in seg[2E, 3E] (seg[3E] = all blocks).
// One CTA of kRouteThreads threads.
template <class RawEnd>
__device__ void write_segments(int experts, int rows, int bm, RawEnd raw_end, int32_t* seg) {
  __shared__ int warp_totals[32];
  __shared__ int ends[kRouteThreads];
  __shared__ int carry[2];  // running end, blocks so far
  if (threadIdx.x == 0) carry[0] = carry[1] = 0;
  __syncthreads();
  for (int base = 0; base < experts; base += kRouteThreads) {
    const int e = base + threadIdx.x;
    const int end_in = e < experts ? min(max(raw_end(e), 0), rows) : 0;
    const int carry_end = carry[0], carry_blocks = carry[1];
    const int end = max(carry_end, block_scan<true>(end_in, warp_totals));
    ends[threadIdx.x] = end;
    __syncthreads();
    const int start = threadIdx.x == 0 ? carry_end : ends[threadIdx.x - 1];
    const int blocks = e < experts ? (end - start + bm - 1) / bm : 0;
    const int blocks_incl = block_scan<false>(blocks, warp_totals);
    if (e < experts) {
      seg[e] = start;
      seg[experts + e] = end;
      seg[2 * experts + e] = carry_blocks + blocks_incl - blocks;
    }
    if (threadIdx.x == kRouteThreads - 1) {
      carry[0] = end;
      carry[1] = carry_blocks + blocks_incl;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) seg[3 * experts] = carry[1];
}

// Zeros of one bf16 row of n columns, by one warp.
__device__ __forceinline__ void zero_row(uint16_t* row, int64_t n) {
  for (int64_t c = threadIdx.x % 32; c < n; c += 32) row[c] = 0;
}

// matmul_grouped: CTA 0 writes the segments; every CTA zeroes its share of the rows past the last end.
__global__ void __launch_bounds__(kRouteThreads) grouped_segments_kernel(ExpertGemmProblem p, int bm, int32_t* seg) {
  wait_for_previous_kernel();
  const int experts = static_cast<int>(p.experts), rows = static_cast<int>(p.s);
  auto raw_end = [&](int e) { return p.offsets[int64_t(e) * p.offsets_stride]; };
  if (blockIdx.x == 0) write_segments(experts, rows, bm, raw_end, seg);
  // The last segment ends at the largest clamped offset.
  __shared__ int last_end;
  if (threadIdx.x == 0) last_end = 0;
  __syncthreads();
  int local = 0;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) local = max(local, min(max(raw_end(e), 0), rows));
  atomicMax(&last_end, local);
  __syncthreads();
  const int warps = blockDim.x / 32;
  for (int64_t r = last_end + int64_t(blockIdx.x) * warps + threadIdx.x / 32; r < p.s; r += int64_t(gridDim.x) * warps)
    zero_row(p.out + r * p.out_stride_s, p.n);
}

// matmul_batched, tiled path, step 1 (one CTA): counting sort of the rows by expert. perm[row] = the row's
// place in expert order (-1 for a row of no expert), row_map[place] = row; segments as above.
__global__ void __launch_bounds__(kRouteThreads) batched_sort_kernel(ExpertGemmProblem p, int bm, int32_t* seg,
                                                                    int32_t* perm, int32_t* row_map) {
  extern __shared__ int counts[];  // experts entries: counts, then their inclusive prefix
  __shared__ int warp_totals[32];
  __shared__ int carry;
  wait_for_previous_kernel();
  const int experts = static_cast<int>(p.experts);
  for (int e = threadIdx.x; e < experts; e += blockDim.x) counts[e] = 0;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t r = threadIdx.x; r < p.s; r += blockDim.x) {
    const int64_t e = load_id(p.ids, p.ids_stride, p.ids_dtype, r);
    perm[r] = e >= 0 && e < experts ? atomicAdd(&counts[e], 1) : -1;  // rank inside the expert
  }
  __syncthreads();
  for (int base = 0; base < experts; base += kRouteThreads) {
    const int e = base + threadIdx.x;
    const int c = e < experts ? counts[e] : 0;
    const int before = carry;
    const int incl = block_scan<false>(c, warp_totals) + before;
    if (e < experts) counts[e] = incl;
    if (threadIdx.x == kRouteThreads - 1) carry = incl;
    __syncthreads();
  }
  write_segments(experts, static_cast<int>(p.s), bm, [&](int e) { return counts[e]; }, seg);
  for (int64_t r = threadIdx.x; r < p.s; r += blockDim.x) {
    const int rank = perm[r];
    if (rank < 0) continue;
    const int64_t e = load_id(p.ids, p.ids_stride, p.ids_dtype, r);
    const int place = (e > 0 ? counts[e - 1] : 0) + rank;
    perm[r] = place;
    row_map[place] = static_cast<int32_t>(r);
  }
}

// matmul_batched, tiled path, step 2: each row's fp8 activations and scales to its place in expert order
// (16-byte copies: k and the row stride are multiples of 16), or zeros into the output rows of no expert.
__global__ void batched_gather_kernel(ExpertGemmProblem p, const int32_t* perm, uint8_t* a_sorted, float* sfa_sorted,
                                      int64_t sfa_ld) {
  wait_for_previous_kernel();
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  const int64_t kb = p.k_blocks();
  for (int64_t r = int64_t(blockIdx.x) * warps + threadIdx.x / 32; r < p.s; r += int64_t(gridDim.x) * warps) {
    const int place = perm[r];
    if (place < 0) {
      zero_row(p.out + r * p.out_stride_s, p.n);
      continue;
    }
    const uint4* src = reinterpret_cast<const uint4*>(p.a + r * p.a_stride_s);
    uint4* dst = reinterpret_cast<uint4*>(a_sorted + int64_t(place) * p.k);
    for (int64_t v = lane; v < p.k / 16; v += 32) dst[v] = src[v];
    for (int64_t g = lane; g < kb; g += 32)
      sfa_sorted[place + g * sfa_ld] = p.a_scale[r * p.a_scale_stride_s + g * p.a_scale_stride_kb];
  }
}

// Exact decode of one fp8 byte (NaN patterns to NaN), as the CPU backend's table.
__device__ float decode_fp8(int byte, Fp8Format format) {
  const int sign = byte >> 7, exponent = (byte >> 3) & 0xF, mantissa = byte & 0x7;
  const bool fnuz = format == Fp8Format::kE4M3FNUZ;
  if (fnuz ? byte == 0x80 : (byte & 0x7F) == 0x7F) return __int_as_float(0x7FC00000);
  const int bias = fnuz ? 8 : 7;
  const float magnitude = exponent == 0 ? ldexpf(float(mantissa), 1 - bias - 3) : ldexpf(float(8 + mantissa), exponent - bias - 3);
  return sign ? -magnitude : magnitude;
}

// Generic path: block (row, 128 columns) items, grid-stride. Per output, the CPU backend's order: per K
// block an fp32 sum of exact products in increasing k, then acc = fma(a_scale * b_scale, partial, acc).
// matmul_grouped rows past the segments were zeroed by grouped_segments_kernel and are skipped here.
__global__ void __launch_bounds__(kGenericThreads) expert_gemm_generic_kernel(ExpertGemmProblem p, const int32_t* seg) {
  __shared__ float lut[256];
  __shared__ float a_block[128];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) lut[i] = decode_fp8(i, p.format);
  const int64_t chunks = ceil_div(p.n, kGenericThreads), kb_count = p.k_blocks();
  for (int64_t item = blockIdx.x; item < p.s * chunks; item += gridDim.x) {
    const int64_t r = item / chunks, n = (item % chunks) * kGenericThreads + threadIdx.x;
    int64_t e;
    if (p.routing == ExpertRouting::kPerRowIds) {
      e = load_id(p.ids, p.ids_stride, p.ids_dtype, r);
      if (e < 0 || e >= p.experts) {
        if (n < p.n) p.out[r * p.out_stride_s + n] = 0;
        continue;  // uniform over the block
      }
    } else {
      // The first expert whose segment ends past r (segments are contiguous from row 0).
      const int32_t* ends = seg + p.experts;
      if (r >= ends[p.experts - 1]) continue;
      int64_t lo = 0, hi = p.experts - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (ends[mid] > r) hi = mid;
        else lo = mid + 1;
      }
      e = lo;
    }
    const uint8_t* a_row = p.a + r * p.a_stride_s;
    const uint8_t* b_row = p.b + e * p.b_stride_e + (n < p.n ? n : 0) * p.b_stride_n;
    const float* bs_row = p.b_scale + e * p.b_scale_stride_e + (n < p.n ? n / 128 : 0) * p.b_scale_stride_nb;
    float acc = 0.0f;
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      const int64_t k0 = kb * 128, len = p.k - k0 < 128 ? p.k - k0 : 128;
      __syncthreads();  // the previous block's a values are consumed (and the table written, the first time)
      if (threadIdx.x < len) a_block[threadIdx.x] = lut[a_row[k0 + threadIdx.x]];
      __syncthreads();
      if (n < p.n) {
        float partial = 0.0f;
        for (int64_t k = 0; k < len; ++k)
          partial = __fadd_rn(partial, __fmul_rn(a_block[k], lut[b_row[(k0 + k) * p.b_stride_k]]));
        const float scale = __fmul_rn(p.a_scale[r * p.a_scale_stride_s + kb * p.a_scale_stride_kb],
                                      bs_row[kb * p.b_scale_stride_kb]);
        acc = __fmaf_rn(scale, partial, acc);
      }
    }
    if (n < p.n) p.out[r * p.out_stride_s + n] = __bfloat16_as_ushort(__float2bfloat16_rn(acc));
  }
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------
struct Plan {
  bool tiled = false;
  bool decode = false;  // the decode kernel in expert mode, chunks of bm rows
  int bm = 64;
  bool pairs = false;   // bm = 128 tiles run by CTA pairs sharing their A block

  size_t off_seg = 0, off_perm = 0, off_row_map = 0, off_a = 0, off_sfa = 0, total = 0;
  int64_t sfa_ld = 0;  // sorted a_scale's row stride per K block (batched, tiled)
};

using sm90::aligned16;

bool fits_int32(const ExpertGemmProblem& p) {
  constexpr int64_t kMax = INT32_MAX;
  return p.s <= kMax && p.n <= kMax && p.k <= kMax && p.experts <= kMax && p.experts * p.n <= kMax;
}

// The layouts the tile kernel's TMA maps read, from the problem's shapes, strides and pointers.
bool tiled_layout(const ExpertGemmProblem& p) {
  return p.format == Fp8Format::kE4M3FN && fits_int32(p) && p.k % 16 == 0 && p.n % 8 == 0 &&
         p.a_stride_s % 16 == 0 && aligned16(p.a) && p.b_stride_k == 1 && p.b_stride_n % 16 == 0 &&
         p.b_stride_e == p.n * p.b_stride_n && aligned16(p.b) && p.b_scale_stride_kb == 1 &&
         p.a_scale_stride_s == 1 && sm90::sfa_tma_readable(p.a_scale, p.a_scale_stride_kb) &&
         p.out_stride_s == p.n && aligned16(p.out);
}

// GEMM_CUDA_EXPERT_KERNEL=decode|tiles|pairs forces one of the kernels where the layout allows it (the
// tests run each on every case; a tuning tool): the decode kernel, the tile kernel with the shape rule's
// rows per tile, or its 128-row tiles run by CTA pairs. Read per call, like GEMM_CUDA_CONFIG.
enum class ForcedKernel { kNone, kDecode, kTiles, kPairs };
ForcedKernel forced_expert_kernel() {
  const char* v = std::getenv("GEMM_CUDA_EXPERT_KERNEL");
  if (v == nullptr) return ForcedKernel::kNone;
  const std::string s(v);
  return s == "decode"  ? ForcedKernel::kDecode
         : s == "tiles" ? ForcedKernel::kTiles
         : s == "pairs" ? ForcedKernel::kPairs
                        : ForcedKernel::kNone;
}

Plan make_plan(const ExpertGemmProblem& p) {
  Plan pl;
  pl.tiled = tiled_layout(p);
  // At most one row per expert on average (decode) the time is streaming the hit experts' weights, and the
  // decode kernel's deeper ring and fused routing win; with more rows the tile kernel is as fast or faster
  // (H100, benchmarks/moe_bench.py). Experts of few rows waste less of a 64-row tile.
  const int chunk = sm90::decode_expert_chunk_rows(p.s, p.experts);  // rows per chunk of the decode kernel
  const bool decode_ok = pl.tiled && p.experts <= sm90::kDecodeMaxExperts;
  const ForcedKernel forced = forced_expert_kernel();
  switch (forced) {
    case ForcedKernel::kDecode: pl.decode = decode_ok; break;
    case ForcedKernel::kTiles:
    case ForcedKernel::kPairs: pl.decode = false; break;
    default: pl.decode = decode_ok && p.s <= p.experts;
  }
  pl.bm = pl.decode ? chunk : p.s <= 64 * p.experts && forced != ForcedKernel::kPairs ? 64 : 128;
  // CTA pairs from 128 rows per expert on average and N >= 3072: there (DeepSeek-V3 and Qwen3-235B-A22B at
  // 4096 tokens) they took 0.91-1.02x the single-CTA time; with fewer rows per expert, or Qwen3-30B-A3B's N
  // of 1536 / 2048, they gain nothing (both forced on moe_bench.py's shapes, H100; docs/cuda_sm90.md).
  const bool pairs_pay = p.s >= 128 * p.experts && p.n >= 3072;
  pl.pairs = !pl.decode && pl.bm == 128 &&
             (forced == ForcedKernel::kPairs || (forced == ForcedKernel::kNone && pairs_pay));
  size_t off = 0;
  if (pl.tiled || p.routing == ExpertRouting::kSortedOffsets) {
    pl.off_seg = off;
    off += align256(size_t(3 * p.experts + 1) * sizeof(int32_t));
  }
  if (pl.tiled && p.routing == ExpertRouting::kPerRowIds) {
    pl.off_perm = off;
    off += align256(size_t(p.s) * sizeof(int32_t));
    pl.off_row_map = off;
    off += align256(size_t(p.s) * sizeof(int32_t));
    pl.off_a = off;
    off += align256(size_t(p.s) * size_t(p.k));
    pl.sfa_ld = (p.s + 3) / 4 * 4;
    pl.off_sfa = off;
    off += align256(size_t(pl.sfa_ld) * size_t(p.k_blocks()) * sizeof(float));
  }
  pl.total = off;
  return pl;
}

template <class T>
T* at(void* base, size_t off) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(base) + off);
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the stream's
// previous kernel when `overlap`.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), int grid, int block, size_t smem, cudaStream_t stream, bool overlap,
                   Args&&... args) {
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute attr[1];
  lc.gridDim = dim3(static_cast<unsigned>(grid));
  lc.blockDim = dim3(static_cast<unsigned>(block));
  lc.dynamicSmemBytes = smem;
  lc.stream = stream;
  if (overlap) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = attr;
    lc.numAttrs = 1;
  }
  const cudaError_t err = cudaLaunchKernelEx(&lc, kernel, std::forward<Args>(args)...);
  return err != cudaSuccess ? err : cudaGetLastError();
}

bool valid(const ExpertGemmProblem& p) {
  const bool routing_ok = p.routing == ExpertRouting::kPerRowIds ? p.ids != nullptr
                                                                  : p.offsets != nullptr && p.experts <= INT32_MAX;
  return p.s >= 1 && p.n >= 1 && p.k >= 1 && p.experts >= 1 && p.s <= INT32_MAX && p.a != nullptr &&
         p.a_scale != nullptr && p.b != nullptr && p.b_scale != nullptr && p.out != nullptr && routing_ok;
}

// The tiled paths' activation rows in expert order: fp8 rows, their scales
// (row stride 1, K-block stride sa_stride_kb) and the output row of each (nullptr: the same row).
struct SortedRows {
  const uint8_t* a;
  int64_t lda;
  const float* sa;
  int64_t sa_stride_kb;
  const int32_t* row_map;
};

// The decode kernel in expert mode: segments from the routing kernel, or (segments == nullptr) from the offsets.
sm90::DecodeArgs decode_args(const ExpertGemmProblem& p, const SortedRows& rows, const int32_t* segments, int sms,
                             bool overlap_previous) {
  sm90::DecodeArgs d;
  d.m = static_cast<int32_t>(p.s);
  d.n = static_cast<int32_t>(p.n);
  d.k = static_cast<int32_t>(p.k);
  d.a = rows.a;
  d.lda = rows.lda;
  d.sa = rows.sa;
  d.sa_stride_m = 1;
  d.sa_stride_kb = rows.sa_stride_kb;
  d.b = p.b;
  d.ldb = p.b_stride_n;
  d.sb = p.b_scale;
  d.sb_stride_nb = p.b_scale_stride_nb;
  d.sb_stride_kb = p.b_scale_stride_kb;
  d.sb_stride_e = p.b_scale_stride_e;
  d.out = p.out;
  d.out_stride_m = p.out_stride_s;
  d.out_stride_n = 1;
  d.sm_count = sms;
  d.overlap_previous = overlap_previous;
  d.experts = static_cast<int32_t>(p.experts);
  d.row_map = rows.row_map;
  d.segments = segments;
  if (segments == nullptr) {
    d.offsets = p.offsets;
    d.offsets_stride = p.offsets_stride;
  }
  return d;
}

// The tile kernel over the experts' segments, as a programmatic dependent of the routing kernel.
sm90::ExpertArgs tile_args(const ExpertGemmProblem& p, const SortedRows& rows, const int32_t* segments, int sms) {
  sm90::ExpertArgs e;
  sm90::KernelArgs& a = e.base;
  a.m = static_cast<int32_t>(p.s);
  a.n = static_cast<int32_t>(p.n);
  a.k = static_cast<int32_t>(p.k);
  a.a = rows.a;
  a.lda = rows.lda;
  a.sfa = rows.sa;
  a.sfa_ld = static_cast<int32_t>(rows.sa_stride_kb);
  a.sfa_rows = static_cast<int32_t>(p.s);
  a.b = p.b;
  a.ldb = p.b_stride_n;
  a.sfb = p.b_scale;
  a.sfb_ld = static_cast<int32_t>(p.b_scale_stride_nb);
  a.sfb_rows = static_cast<int32_t>(p.n_blocks());
  a.d = p.out;
  a.ldd = p.out_stride_s;
  a.sm_count = sms;
  a.group = 8;
  a.overlap_previous = true;
  e.experts = static_cast<int32_t>(p.experts);
  e.sfb_expert_stride = p.b_scale_stride_e;
  e.segments = segments;
  e.row_map = rows.row_map;
  return e;
}

}  // namespace

size_t expert_workspace_bytes(const ExpertGemmProblem& p) { return valid(p) ? make_plan(p).total : 0; }

cudaError_t expert_gemm(const ExpertGemmProblem& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                        bool after_producer) {
  if (!valid(p)) return cudaErrorInvalidValue;
  const Plan pl = make_plan(p);
  if (workspace_bytes < pl.total || (pl.total > 0 && workspace == nullptr) ||
      (reinterpret_cast<uintptr_t>(workspace) & 255u) != 0)
    return cudaErrorInvalidValue;
  const int sms = device_sm_count();
  int32_t* seg = pl.total > 0 ? at<int32_t>(workspace, pl.off_seg) : nullptr;
  const int experts = static_cast<int>(p.experts);
  cudaError_t err = cudaSuccess;
  // matmul_grouped on the decode kernel: its CTAs read the offsets themselves (no routing kernel).
  const bool fused_offsets = pl.decode && p.routing == ExpertRouting::kSortedOffsets;
  if (p.routing == ExpertRouting::kSortedOffsets && !fused_offsets) {
    const int grid = static_cast<int>(std::min<int64_t>(sms, std::max<int64_t>(1, ceil_div(p.s, kRouteThreads / 32))));
    err = launch(grouped_segments_kernel, grid, kRouteThreads, 0, stream, after_producer, p, pl.bm, seg);
    if (err != cudaSuccess) return err;
  }
  if (!pl.tiled) {
    const int64_t items = p.s * ceil_div(p.n, kGenericThreads);
    const int grid = static_cast<int>(std::min<int64_t>(items, int64_t(sms) * 16));
    return launch(expert_gemm_generic_kernel, grid, kGenericThreads, 0, stream, false, p, static_cast<const int32_t*>(seg));
  }

  // The fp8 activation rows in expert order: a as it is (matmul_grouped), else gathered by the routing kernels
  // into the workspace, with the map back to the output rows. a_scale's row stride is 1 on the tiled path.
  SortedRows rows{p.a, p.a_stride_s, p.a_scale, p.a_scale_stride_kb, nullptr};
  if (p.routing == ExpertRouting::kPerRowIds) {
    int32_t* perm = at<int32_t>(workspace, pl.off_perm);
    int32_t* row_map = at<int32_t>(workspace, pl.off_row_map);
    uint8_t* a_sorted = at<uint8_t>(workspace, pl.off_a);
    float* sfa_sorted = at<float>(workspace, pl.off_sfa);
    const size_t smem = size_t(experts) * sizeof(int);
    if (smem > 48 * 1024 &&
        (err = cudaFuncSetAttribute(batched_sort_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem))) != cudaSuccess)
      return err;
    err = launch(batched_sort_kernel, 1, kRouteThreads, smem, stream, after_producer, p, pl.bm, seg, perm, row_map);
    if (err != cudaSuccess) return err;
    const int grid = static_cast<int>(std::min<int64_t>(int64_t(sms) * 4, ceil_div(p.s, 8)));
    err = launch(batched_gather_kernel, std::max(grid, 1), 256, 0, stream, true, p, static_cast<const int32_t*>(perm),
                 a_sorted, sfa_sorted, pl.sfa_ld);
    if (err != cudaSuccess) return err;
    rows = SortedRows{a_sorted, p.k, sfa_sorted, pl.sfa_ld, row_map};
  }
  if (pl.decode) {
    // Without a routing kernel (fused_offsets) the first launch follows the caller's producer directly.
    const sm90::DecodeArgs d = decode_args(p, rows, fused_offsets ? nullptr : seg, sms,
                                           fused_offsets ? after_producer : true);
    return sm90::decode_can_implement(d) ? sm90::decode_run(d, stream) : cudaErrorInvalidValue;
  }
  const sm90::ExpertArgs e = tile_args(p, rows, seg, sms);
  if (!sm90::expert_tiles_can_implement(e)) return cudaErrorInvalidValue;
  if (pl.bm == 64) return sm90::expert_tile64x128_run(e, stream);
  return pl.pairs ? sm90::expert_tile128x128_pair_run(e, stream) : sm90::expert_tile128x128_run(e, stream);
}

}  // namespace fp8gemm::cuda
