// Decode-sized FP8 block-scaled GEMM (M <= 64) on Hopper: see sm90_decode.h for the contract.
//
// One CTA = one or two math warpgroups (64 weight rows each) and a producer warp. Per 128-wide K block
// the producer's lane 0 loads the CTA's weight rows and the BT activation rows by TMA, and its 32 lanes
// copy the block's scales (a_scale of each activation row, b_scale of the weight rows' 128-row block) with
// cp.async, all completing on one "full" mbarrier. Each math warpgroup runs 4 wgmma m64nBTk32 (weights
// from shared memory as the A operand, activations as B) into a temporary and promotes it, acc[row, tok]
// += tmp[row, tok] * b_scale * a_scale[tok] (DeepSeek's recipe, fp32), with two temporaries so that the
// next block's wgmmas run while this one is promoted. The k_split CTAs of a weight tile are one cluster:
// each covers a contiguous range of K blocks, writes its fp32 partial tile to its own shared memory, and
// after a cluster barrier each CTA sums a share of the tile over the cluster's CTAs in rank order
// (distributed shared memory) and stores bf16. Without a split, at most one CTA per slot is launched and
// each walks several tiles with one ring, so no CTA start-up or pipeline fill is paid twice.
#include "sm90_decode.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>

#include "sm90_ptx.cuh"

namespace fp8gemm::cuda::sm90 {
namespace decode {

template <int BT_, int kMathWGs_>
struct Cfg {
  static constexpr int BT = BT_;              // activation rows per wgmma (its N): 8, 16, 32 or 64
  static constexpr int kMathWGs = kMathWGs_;  // 64 weight rows each
  static constexpr int BW = 64 * kMathWGs;    // weight rows per CTA
  static constexpr int kThreads = 128 * kMathWGs + 32;
  static constexpr int kProducerWarp = 4 * kMathWGs;
  static constexpr int kAcc = BT / 2;  // fp32 accumulators per thread (m64nBT)
  // Two temporaries (the next block's wgmmas run during this one's promotion) where the wgmmas are long
  // enough to hide; at BT = 8 ptxas would serialise the 4-register fragments anyway.
  static constexpr bool kDoubleBuffer = BT >= 16;
  static constexpr int kWBytes = BW * kBlockK, kXBytes = BT * kBlockK;
  static constexpr int kTmaBytes = kWBytes + kXBytes;  // the TMA bytes of one stage
  static constexpr int kCtasPerSm = ctas_per_sm(BT, kMathWGs);
  static constexpr int kStageMemory = kCtasPerSm == 2 ? 96 * 1024 : 200 * 1024;
  static constexpr int kStages = kStageMemory / kTmaBytes > 8 ? 8 : kStageMemory / kTmaBytes;
  // Weight stages, activation stages (1024-aligned: 128-byte swizzle), then per stage BT a_scale values and
  // one b_scale, then the barriers.
  static constexpr int kOffX = kStages * kWBytes;
  static constexpr int kOffSa = kOffX + kStages * kXBytes;
  static constexpr int kOffSb = kOffSa + kStages * BT * 4;
  static constexpr int kOffBar = (kOffSb + kStages * 4 + 7) / 8 * 8;
  static constexpr int kOffSeg = kOffBar + 2 * kStages * 8;  // expert mode: the segments (3E + 1 ints)
  static constexpr int kSmemBytes = 1024 /* alignment slack */ + kOffSeg;
  static_assert(BT == 8 || BT == 16 || BT == 32 || BT == 64, "BT: a Wgmma<> specialisation");
  static_assert(kMathWGs == 1 || kMathWGs == 2, "a CTA's weight rows lie in one 128-row b_scale block");
  static_assert(kWBytes % 1024 == 0 && kXBytes % 1024 == 0, "1024-byte aligned swizzled tiles");
  static_assert(kStages >= 2, "at least two stages");
  static_assert(BW * BT * 4 <= kOffSa, "the partial tile fits in the stage memory");
};

struct Params {
  int32_t m, n, k;
  const float* sa;
  int64_t sa_sm, sa_skb;
  const float* sb;
  int64_t sb_snb, sb_skb;
  uint16_t* out;
  int64_t out_sm, out_sn;
  float alpha;
  int32_t kb_per_split;  // K blocks per CTA of a cluster
  // Expert mode (segments or offsets set; see DecodeArgs).
  const int32_t* segments;
  int32_t experts;
  int64_t sb_se;
  const int32_t* row_map;
  const int32_t* offsets;
  int64_t offsets_stride;
};

// One unit of work: weight rows [n0, n0 + BW) of `expert` (rows wrow.. of the stacked weights) against
// activation rows [row0, row0 + rows).
struct Unit {
  int n0, wrow, row0, rows, expert;
};

// Unit u of `units`. Dense: weight tile u, every activation row. Expert mode: weight tile u / chunks of
// chunk u % chunks (chunks of one tile run side by side, so an expert's chunks share its weight in L2);
// seg = the segments staged in shared memory.
template <class C>
__device__ __forceinline__ Unit unit_of(const Params& p, const int* seg, int chunks, int u) {
  if (p.segments == nullptr && p.offsets == nullptr) return {u * C::BW, u * C::BW, 0, p.m, 0};
  const int t = u / chunks, c = u % chunks;
  const int* prefix = seg + 2 * p.experts;
  // The last expert whose first chunk is <= c (experts without chunks repeat the prefix before them).
  int lo = 0, hi = p.experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (prefix[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  const int row0 = seg[lo] + (c - prefix[lo]) * C::BT;
  return {t * C::BW, lo * p.n + t * C::BW, row0, min(C::BT, seg[p.experts + lo] - row0), lo};
}

__device__ __forceinline__ uint16_t bf16_rne(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Expert mode from offsets: the segments of DecodeArgs::segments (chunks of bt rows) in seg, whose end
// rows seg[E, 2E) hold the offsets clamped into [0, m] (loaded by the whole CTA). One warp, 32 experts at
// a time: the ends' running maximum and the chunk counts' prefix by shuffles.
__device__ void segments_from_offsets(const Params& p, int bt, int* seg) {
  const int lane = threadIdx.x % 32, experts = p.experts;
  int run_end = 0, run_chunks = 0;
  for (int base = 0; base < experts; base += 32) {
    const int e = base + lane;
    int end = e < experts ? seg[experts + e] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, end, o);
      if (lane >= o) end = max(end, u);
    }
    end = max(end, run_end);
    int start = __shfl_up_sync(0xffffffffu, end, 1);
    if (lane == 0) start = run_end;
    const int count = e < experts ? (end - start + bt - 1) / bt : 0;
    int incl = count;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    if (e < experts) {
      seg[e] = start;
      seg[experts + e] = end;
      seg[2 * experts + e] = run_chunks + incl - count;
    }
    run_end = __shfl_sync(0xffffffffu, end, 31);
    run_chunks += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) seg[3 * experts] = run_chunks;
}

// The output row of activation row `tok` of unit w.
__device__ __forceinline__ int64_t out_row(const Params& p, const Unit& w, int tok) {
  const int r = w.row0 + tok;
  return p.row_map != nullptr ? int64_t(p.row_map[r]) : int64_t(r);
}

__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kCtasPerSm)
    fp8_decode_gemm_kernel(const __grid_constant__ CUtensorMap map_w, const __grid_constant__ CUtensorMap map_x,
                           const Params p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kOffBar);
  uint64_t* empty = full + C::kStages;
  const float* smem_sa = reinterpret_cast<const float*>(smem + C::kOffSa);
  const float* smem_sb = reinterpret_cast<const float*>(smem + C::kOffSb);

  const uint32_t split = cluster_ctarank(), nsplit = cluster_nctarank();
  const int tiles = (p.n + C::BW - 1) / C::BW;
  int* seg = reinterpret_cast<int*>(smem + C::kOffSeg);
  const int num_kb = (p.k + kBlockK - 1) / kBlockK;
  const int kb0 = int(split) * p.kb_per_split;
  const int kb1 = min(num_kb, kb0 + p.kb_per_split);
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x / 32), 0), lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(&full[s], 1 + 32);           // the TMA's expect_tx arrival + one cp.async arrival per lane
      mbar_init(&empty[s], 4 * C::kMathWGs);  // one arrival per math warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  // As a programmatic dependent of the preparation pass, the set-up above overlaps its tail; nothing
  // below reads its outputs before it has completed. Without the launch attribute this returns at once.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int chunks = 1;
  if (p.segments != nullptr) {
    for (int i = threadIdx.x; i <= 3 * p.experts; i += C::kThreads) seg[i] = p.segments[i];
    __syncthreads();
    chunks = seg[3 * p.experts];
  } else if (p.offsets != nullptr) {
    for (int e = threadIdx.x; e < p.experts; e += C::kThreads)
      seg[p.experts + e] = min(max(p.offsets[int64_t(e) * p.offsets_stride], 0), p.m);
    __syncthreads();
    if (warp == 0) segments_from_offsets(p, C::BT, seg);
    __syncthreads();
    chunks = seg[3 * p.experts];
    // Rows past the last segment belong to no expert: zeros, a share per CTA.
    for (int r = seg[2 * p.experts - 1] + int(blockIdx.x); r < p.m; r += int(gridDim.x))
      for (int c = threadIdx.x; c < p.n; c += C::kThreads) p.out[int64_t(r) * p.out_sm + int64_t(c) * p.out_sn] = 0;
  }
  const int units = tiles * chunks;

  const bool math = warp < C::kProducerWarp;
  const int wg = warp / 4;                    // this math warpgroup's 64-row slice
  const int r0 = (warp % 4) * 16 + lane / 4;  // accumulator rows r0 and r0 + 8 of the slice
  const int c0 = 2 * (lane % 4);              // accumulator columns (activation rows) 8j + c0, 8j + c0 + 1
  if (warp == C::kProducerWarp && lane == 0) {
    prefetch_map(&map_w);
    prefetch_map(&map_x);
  }

  // Unsplit units (nsplit == 1): the grid has at most one CTA per slot and each CTA walks the units
  // blockIdx.x, blockIdx.x + gridDim.x, ...; the ring's stage and phase carry over from unit to unit, so
  // the producer loads the next unit while the math warps store this one. Split units: one per cluster
  // (in expert mode the grid covers the most units any routing gives; clusters past `units` do nothing).
  const int unit_step = nsplit == 1 ? int(gridDim.x) : units;
  int s = 0;  // this thread's ring position: the producer's next stage to fill, a math warp's next to read
  uint32_t phase = 0;
  float acc[C::kAcc];
  Unit w{};
  bool worked = false;
  for (int u = int(blockIdx.x / nsplit); u < units; u += unit_step) {
    w = unit_of<C>(p, seg, chunks, u);
    worked = true;
    const int n0 = w.n0;
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.0f;
    if (warp == C::kProducerWarp) {
      // ---------------- producer warp ----------------
      const float* sb_row = p.sb + int64_t(w.expert) * p.sb_se + int64_t(n0 / 128) * p.sb_snb;
      const float* sa_rows = p.sa + int64_t(w.row0) * p.sa_sm;
      for (int kb = kb0; kb < kb1; ++kb) {
        if (lane == 0) {
          mbar_wait(&empty[s], phase ^ 1);
          mbar_arrive_expect_tx(&full[s], C::kTmaBytes);
          tma_load_2d(smem + s * C::kWBytes, &map_w, &full[s], kb * kBlockK, w.wrow);
          tma_load_2d(smem + C::kOffX + s * C::kXBytes, &map_x, &full[s], kb * kBlockK, w.row0);
        }
        __syncwarp();  // the stage is free for every lane once lane 0 has seen it released
        const uint32_t sa_dst = smem_addr(smem + C::kOffSa) + uint32_t(s * C::BT * 4);
#pragma unroll
        for (int t = lane; t < C::BT; t += 32)  // activation rows beyond the unit's get 0
          cp_async_4(sa_dst + 4u * uint32_t(t), t < w.rows ? sa_rows + int64_t(t) * p.sa_sm + int64_t(kb) * p.sa_skb : p.sa,
                     t < w.rows ? 4u : 0u);
        if (lane == 0) cp_async_4(smem_addr(smem + C::kOffSb) + uint32_t(s * 4), sb_row + int64_t(kb) * p.sb_skb, 4u);
        cp_async_arrive(&full[s]);
        if (++s == C::kStages) { s = 0; phase ^= 1; }
      }
    } else {
      // ---------------- math warpgroups ----------------
      constexpr int R = C::kAcc;
      float tmp0[R], tmp1[R];
      float f0[C::BT / 8][2], f1[C::BT / 8][2];  // promotion factors b_scale * a_scale of the block in tmp0 / tmp1
      // Waits for stage `stage`, reads its scales into f and issues its wgmmas into d (not waited for).
      auto issue = [&](float* d, float (&f)[C::BT / 8][2], int stage, uint32_t ph) {
        mbar_wait(&full[stage], ph);
        const float sb = smem_sb[stage];
#pragma unroll
        for (int j = 0; j < C::BT / 8; ++j) {
          f[j][0] = sb * smem_sa[stage * C::BT + 8 * j + c0];
          f[j][1] = sb * smem_sa[stage * C::BT + 8 * j + c0 + 1];
        }
        const uint64_t dw = smem_desc_k128b(smem + stage * C::kWBytes + wg * 64 * kBlockK);
        const uint64_t dx = smem_desc_k128b(smem + C::kOffX + stage * C::kXBytes);
#pragma unroll
        for (int i = 0; i < R; ++i) fence_reg(d[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 32; ++kk)  // K advances 32 bytes (2 descriptor units) in the swizzled rows
          wgmma_call<C::BT>(dw + uint64_t(2 * kk), dx + uint64_t(2 * kk), d, kk > 0, std::make_index_sequence<R>{});
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < R; ++i) fence_reg(d[i]);
      };
      // After d's wgmmas completed: release the stage, promote d into acc.
      auto promote = [&](float* d, const float (&f)[C::BT / 8][2]) {
#pragma unroll
        for (int i = 0; i < R; ++i) fence_reg(d[i]);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (++s == C::kStages) { s = 0; phase ^= 1; }
#pragma unroll
        for (int j = 0; j < C::BT / 8; ++j) {
          acc[4 * j + 0] = fmaf(d[4 * j + 0], f[j][0], acc[4 * j + 0]);
          acc[4 * j + 1] = fmaf(d[4 * j + 1], f[j][1], acc[4 * j + 1]);
          acc[4 * j + 2] = fmaf(d[4 * j + 2], f[j][0], acc[4 * j + 2]);
          acc[4 * j + 3] = fmaf(d[4 * j + 3], f[j][1], acc[4 * j + 3]);
        }
      };
      // Double buffer: block i lives in tmp[i % 2]; block i + 1 is issued before block i is promoted. The steady state
      // issues and waits unconditionally (wait_group 1), so ptxas can prove the promoted registers are not
      // in flight and keeps the wgmmas asynchronous; the 1-2 block tail is peeled.
      const int nkb = kb1 - kb0;
      int s_next = s;
      uint32_t ph_next = phase;
      auto issue_next = [&](float* d, float (&f)[C::BT / 8][2]) {
        issue(d, f, s_next, ph_next);
        if (++s_next == C::kStages) { s_next = 0; ph_next ^= 1; }
      };
      if (!C::kDoubleBuffer) {
        for (int i = 0; i < nkb; ++i) {
          issue_next(tmp0, f0);
          wgmma_wait<0>();
          promote(tmp0, f0);
        }
      } else if (nkb > 0) {
        issue_next(tmp0, f0);
        int i = 0;
        for (; i + 2 < nkb; i += 2) {
          issue_next(tmp1, f1);
          wgmma_wait<1>();
          promote(tmp0, f0);
          issue_next(tmp0, f0);
          wgmma_wait<1>();
          promote(tmp1, f1);
        }
        if (i + 1 < nkb) {
          issue_next(tmp1, f1);
          wgmma_wait<1>();
          promote(tmp0, f0);
          wgmma_wait<0>();
          promote(tmp1, f1);
        } else {
          wgmma_wait<0>();
          promote(tmp0, f0);
        }
      }
    }

    if (nsplit > 1) break;
    // acc element 4j + 2h + e is weight row n0 + 64 wg + r0 + 8h, activation row 8j + c0 + e.
    if (math) {
#pragma unroll
      for (int j = 0; j < C::BT / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int row = n0 + 64 * wg + r0 + 8 * h, tok = 8 * j + c0 + e;
            if (row < p.n && tok < w.rows)
              p.out[out_row(p, w, tok) * p.out_sm + int64_t(row) * p.out_sn] = bf16_rne(acc[4 * j + 2 * h + e] * p.alpha);
          }
    }
  }
  // Every CTA of a cluster sees the same `units`: a cluster without a unit leaves as a whole.
  if (nsplit == 1 || !worked) return;
  const int n0 = w.n0;

  // Split K: once every math warpgroup's last wgmma has completed (the named barrier), the weight stages can
  // hold this CTA's partial tile, part[tok * BW + row]; the cluster barrier publishes it to the other CTAs.
  float* part = reinterpret_cast<float*>(smem);
  if (math) {
    if constexpr (C::kMathWGs > 1) named_barrier(1, 128 * C::kMathWGs);
#pragma unroll
    for (int j = 0; j < C::BT / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          part[(8 * j + c0 + e) * C::BW + 64 * wg + r0 + 8 * h] = acc[4 * j + 2 * h + e];
  }
  __syncwarp();
  cluster_sync();
  // Rank `split` sums its share of the tile's real activation rows over the cluster's CTAs in rank order:
  // the same bits whichever CTA runs first. The remote loads are all issued before the first add.
  // Consecutive threads take consecutive weight rows, i.e. consecutive output columns.
  const int total = C::BW * w.rows, share = (total + int(nsplit) - 1) / int(nsplit);
  const int first = int(split) * share, last = min(total, first + share);
  const uint32_t part_addr = smem_addr(part);
  for (int idx = first + int(threadIdx.x); idx < last; idx += C::kThreads) {
    const int tok = idx / C::BW, row = n0 + idx % C::BW;
    if (row >= p.n) continue;
    float partial[kDecodeMaxSplit];
#pragma unroll
    for (uint32_t q = 0; q < kDecodeMaxSplit; ++q)
      if (q < nsplit) partial[q] = ld_shared_cluster_f32(part_addr + 4u * uint32_t(idx), q);
    float v = 0.0f;
#pragma unroll
    for (uint32_t q = 0; q < kDecodeMaxSplit; ++q)
      if (q < nsplit) v += partial[q];
    p.out[out_row(p, w, tok) * p.out_sm + int64_t(row) * p.out_sn] = bf16_rne(v * p.alpha);
  }
  cluster_sync();  // no CTA leaves while another may still read its shared memory
#endif
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------
template <class C>
cudaError_t launch(const DecodeArgs& a, cudaStream_t stream) {
  CUtensorMap map_w, map_x;
  const bool experts = a.expert_mode();
  const int64_t w_rows = experts ? int64_t(a.experts) * a.n : a.n;
  if (!make_map_2d(&map_w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.b, w_rows, a.k, a.ldb, C::BW, kBlockK,
                   CU_TENSOR_MAP_SWIZZLE_128B) ||
      !make_map_2d(&map_x, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.a, a.m, a.k, a.lda, C::BT, kBlockK,
                   CU_TENSOR_MAP_SWIZZLE_128B))
    return cudaErrorInvalidValue;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return cudaGetLastError();
  const int smem_bytes = C::kSmemBytes + (experts ? 4 * (3 * a.experts + 1) : 0);
  if (const cudaError_t e = opt_in_dynamic_smem<fp8_decode_gemm_kernel<C>>(dev, C::kSmemBytes + 4 * (3 * kDecodeMaxExperts + 1));
      e != cudaSuccess)
    return e;

  const int kb = (a.k + kBlockK - 1) / kBlockK;
  Params p{a.m,   a.n,         a.k,          a.sa,  a.sa_stride_m, a.sa_stride_kb, a.sb,
           a.sb_stride_nb, a.sb_stride_kb, a.out, a.out_stride_m, a.out_stride_n, a.alpha,
           (kb + a.k_split - 1) / a.k_split, a.segments, a.experts, a.sb_stride_e, a.row_map, a.offsets, a.offsets_stride};
  const int64_t units = experts ? expert_max_units(a.m, a.n, a.experts, C::BT, C::BW) : (a.n + C::BW - 1) / C::BW;
  const int sms = a.sm_count > 0 ? a.sm_count : 132;
  if (units * a.k_split > INT32_MAX) return cudaErrorInvalidValue;
  // Unsplit: at most one CTA per slot; dense, where the units are known here, only as many as still take
  // the busiest CTA's count each (288 units on 264 slots: 144 CTAs of 2, not 24 CTAs streaming a second unit
  // alone while 240 idle).
  int64_t ctas = a.k_split == 1 ? std::min<int64_t>(units, C::kCtasPerSm * sms) : units * a.k_split;
  if (a.k_split == 1 && !experts) {
    const int64_t rounds = (units + ctas - 1) / ctas;
    ctas = (units + rounds - 1) / rounds;
  }
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(ctas));
  lc.blockDim = dim3(C::kThreads);
  lc.dynamicSmemBytes = smem_bytes;
  lc.stream = stream;
  lc.attrs = attrs;
  attrs[lc.numAttrs].id = cudaLaunchAttributeClusterDimension;
  attrs[lc.numAttrs].val.clusterDim.x = static_cast<unsigned>(a.k_split);
  attrs[lc.numAttrs].val.clusterDim.y = 1;
  attrs[lc.numAttrs].val.clusterDim.z = 1;
  ++lc.numAttrs;
  if (a.overlap_previous) {
    attrs[lc.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[lc.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++lc.numAttrs;
  }
  const cudaError_t e = cudaLaunchKernelEx(&lc, fp8_decode_gemm_kernel<C>, map_w, map_x, p);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template <int BT>
cudaError_t launch_rows(const DecodeArgs& a, cudaStream_t stream) {
  return a.rows_per_cta == 64 ? launch<Cfg<BT, 1>>(a, stream) : launch<Cfg<BT, 2>>(a, stream);
}

// Clusters of each size 1..kDecodeMaxSplit of configuration C that fit on device `dev` at once (0 where
// the occupancy API does not say), into slots[0..kDecodeMaxSplit].
template <class C>
void query_cluster_slots(int dev, int32_t* slots) {
  if (opt_in_dynamic_smem<fp8_decode_gemm_kernel<C>>(dev, C::kSmemBytes + 4 * (3 * kDecodeMaxExperts + 1)) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  for (int split = 1; split <= kDecodeMaxSplit; ++split) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(split);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3(static_cast<unsigned>(split));
    lc.blockDim = dim3(C::kThreads);
    lc.dynamicSmemBytes = C::kSmemBytes;
    lc.attrs = attr;
    lc.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, fp8_decode_gemm_kernel<C>, &lc) == cudaSuccess) slots[split] = n;
    else cudaGetLastError();
  }
}

// DecodeArgs::cluster_slots of token tile BT on the current device, queried once per device.
template <int BT>
const int32_t* cluster_slots() {
  constexpr int kDevices = 64, kPerDevice = 2 * (kDecodeMaxSplit + 1);
  static int32_t table[kDevices][kPerDevice] = {};
  static std::atomic<bool> ready[kDevices] = {};
  static std::mutex mutex;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDevices) {
    cudaGetLastError();
    return nullptr;
  }
  if (!ready[dev].load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!ready[dev].load(std::memory_order_relaxed)) {
      query_cluster_slots<Cfg<BT, 1>>(dev, table[dev]);
      query_cluster_slots<Cfg<BT, 2>>(dev, table[dev] + kDecodeMaxSplit + 1);
      ready[dev].store(true, std::memory_order_release);
    }
  }
  return table[dev];
}

template <int BT>
cudaError_t plan_and_launch(const DecodeArgs& args, cudaStream_t stream) {
  DecodeArgs a = args;
  a.cluster_slots = cluster_slots<BT>();
  return launch_rows<BT>(decode_plan(a), stream);
}

}  // namespace decode

bool decode_can_implement(const DecodeArgs& a) {
  auto al16 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
  const bool experts = a.expert_mode();
  if (experts && (a.experts < 1 || a.experts > kDecodeMaxExperts || int64_t(a.experts) * a.n > INT32_MAX)) return false;
  return a.m >= 1 && (experts || a.m <= kDecodeMaxM) && a.n >= 1 && a.k >= 1 && a.k % 16 == 0 && a.lda % 16 == 0 &&
         a.ldb % 16 == 0 && al16(a.a) && al16(a.b) && a.sa != nullptr && a.sb != nullptr && a.out != nullptr &&
         (a.rows_per_cta == 0 || a.rows_per_cta == 64 || a.rows_per_cta == 128) && a.k_split >= 0 &&
         a.k_split <= kDecodeMaxSplit;
}

cudaError_t decode_run(const DecodeArgs& args, cudaStream_t stream) {
  if (!decode_can_implement(args)) return cudaErrorInvalidValue;
  switch (args.expert_mode() ? decode_expert_chunk_rows(args.m, args.experts) : decode::token_tile(args.m)) {
    case 8: return decode::plan_and_launch<8>(args, stream);
    case 16: return decode::plan_and_launch<16>(args, stream);
    case 32: return decode::plan_and_launch<32>(args, stream);
    default: return decode::plan_and_launch<64>(args, stream);
  }
}

}  // namespace fp8gemm::cuda::sm90
