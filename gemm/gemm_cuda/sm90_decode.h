// Decode-sized FP8 block-scaled GEMM on Hopper (sm_90a): M <= 64 rows of activations against a weight
// that is read once. Torch-free interface of sm90_decode.cu.
//
//   out[m, n] = bf16( alpha * sum_kb sa[m, kb] * sb[n / 128, kb] * sum_{k in kb} a[m, k] * b[n, k] )
//
// The weight rows are the wgmma's M side (64 per warpgroup slice) and the activation rows its N side
// (8, 16, 32 or 64), so a handful of tokens costs no more tensor-core work than it needs. Each CTA
// streams 64 or 128 weight rows over a range of K blocks through a TMA ring; the CTAs sharing a weight
// tile form one thread-block cluster and add their fp32 partial sums through distributed shared memory
// in a fixed order (deterministic, no workspace, one launch). Unsplit tiles are walked by persistent
// CTAs whose ring runs on from one tile to the next.
//
// Expert mode (DecodeArgs::segments set): the MoE expert GEMM of few rows per expert. b is the experts'
// stacked weights and a the activation rows sorted by expert; the work units are (weight tile, chunk of
// up to token_tile rows of one expert), so each hit expert's weight is streamed once per chunk and experts
// without rows cost nothing. The chunks come from the segments a routing kernel wrote just before (see
// DecodeArgs); the grid is sized from shapes alone, so the launch is capturable in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <cuda_runtime_api.h>

namespace fp8gemm::cuda::sm90 {

constexpr int kDecodeMaxM = 64;
constexpr int kDecodeMaxSplit = 8;  // CTAs per cluster (portable limit)
constexpr int kDecodeMaxExperts = 512;  // expert mode: the segments are staged in shared memory

struct DecodeArgs {
  int32_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // activations (m, k): K-major e4m3fn, 16-byte aligned base and row stride
  int64_t lda = 0;
  const void* b = nullptr;  // weights (n, k): K-major e4m3fn, 16-byte aligned base and row stride
  int64_t ldb = 0;
  const float* sa = nullptr;  // a_scale (m, ceil(k/128)), any strides (elements)
  int64_t sa_stride_m = 0, sa_stride_kb = 0;
  const float* sb = nullptr;  // b_scale (ceil(n/128), ceil(k/128)), any strides
  int64_t sb_stride_nb = 0, sb_stride_kb = 0;
  uint16_t* out = nullptr;  // bf16 (m, n), any strides
  int64_t out_stride_m = 0, out_stride_n = 0;
  float alpha = 1.0f;
  int32_t rows_per_cta = 0;  // weight rows per CTA, 64 or 128; 0: chosen by decode_plan
  int32_t k_split = 0;       // CTAs per weight tile along K, 1..kDecodeMaxSplit; 0: chosen by decode_plan
  int32_t sm_count = 0;      // SMs of the device (0: taken as 132, an H100 / H200)
  // Clusters of s CTAs that fit on the device at once, [rows_per_cta / 64 - 1][s] (decode_run fills it from
  // the occupancy API: a cluster stays inside one GPC, so fewer fit than the SM slots / s); nullptr or 0:
  // taken as the slots / s.
  const int32_t* cluster_slots = nullptr;
  // Launch as a programmatic dependent of the stream's previous kernel (the launcher's preparation
  // pass): the kernel waits for it (griddepcontrol.wait) before touching global memory.
  bool overlap_previous = false;

  // Expert mode (segments or offsets set): m = the rows of a (every expert's), n = the weight rows of one
  // expert, b = the experts' stacked (experts * n, k) weights (row stride ldb), sb = expert 0's scales and
  // sb_stride_e elements from one expert's scales to the next. segments (device, written by the kernel
  // before this one, which this launch waits for): start rows [0, E), end rows [E, 2E) and the exclusive
  // prefix of each expert's chunk count [2E, 3E] (segments[3E] = all chunks), chunks of
  // decode_expert_chunk_rows(m, experts) rows. Output row of a's row r: row_map[r] (nullptr: r).
  const int32_t* segments = nullptr;
  int32_t experts = 0;
  int64_t sb_stride_e = 0;
  const int32_t* row_map = nullptr;
  // Expert mode without a routing kernel (matmul_grouped): instead of segments, the inclusive row ends
  // offsets[e * offsets_stride] (device), which every CTA turns into the segments itself, clamped into a
  // running maximum inside [0, m] (include/expert_gemm.h); the output rows past the last end are written
  // with zeros.
  const int32_t* offsets = nullptr;
  int64_t offsets_stride = 0;

  bool expert_mode() const { return segments != nullptr || offsets != nullptr; }
};

bool decode_can_implement(const DecodeArgs& a);
// Runs decode_plan(a) (shapes it leaves open are chosen there) and launches the kernel on `stream`.
cudaError_t decode_run(const DecodeArgs& a, cudaStream_t stream);

namespace decode {

constexpr int kBlockK = 128;

// Two CTAs per SM where the accumulators leave room (a register budget of 168 per thread), else one
// with a deeper ring: either way about 200 KB of stages in flight per SM.
constexpr int ctas_per_sm(int bt, int slices) { return bt * slices >= 128 ? 1 : 2; }

// Activation rows per wgmma (its N) for m rows.
constexpr int token_tile(int m) { return m <= 8 ? 8 : m <= 16 ? 16 : m <= 32 ? 32 : 64; }

// Estimated time (seconds) to stream the weight with `rows` weight rows per CTA and `split` CTAs per tile
// along K: the weight bytes at the HBM's rate, the weight and activation tiles together at the L2's (every
// CTA reads the activation rows again), or the busiest CTA's share at the rate one CTA's ring sustains,
// whichever is longest; plus a start-up cost per wave of CTAs and the cluster reduction of a split tile.
// Unsplit tiles run as one persistent wave; split tiles in waves of `clusters` clusters (0: slots / split),
// the busiest CTA's share counted once per wave. Constants fitted to H200 measurements of every plan on
// DeepSeek-V3 shapes (benchmarks/gemm_bench.py --calibrate-decode), the 128-row ring rate to H100 ones.
inline double plan_cost(int64_t n, int64_t kb, int bt, int rows, int split, int sms, int64_t clusters = 0) {
  constexpr double kHbmRate = 3.4e12;        // bytes/s of weight the HBM delivers to streaming CTAs
  constexpr double kL2Rate = 7.0e12;         // bytes/s of weight + activation tiles into the SMs
  // Bytes/s one CTA's TMA ring sustains: more for 128 weight rows (16 KB a stage) than for 64 (8 KB); from
  // H100 measurements, where 1 x 36864 x 7168 took 100 us as 192 CTAs of three 64-row tiles and 92 us as
  // 144 CTAs of two 128-row tiles.
  const double cta_rate = rows == 128 ? 24.0e9 : 20.0e9;
  constexpr double kCtaSeconds = 0.25e-6;    // per wave of CTAs: the first loads in flight, the drain
  constexpr double kReduceSeconds = 3.0e-6;  // a split tile: cluster barriers, the distributed-shared-memory sums
  const int64_t tiles = (n + rows - 1) / rows;
  const int64_t units = tiles * split, slots = int64_t(ctas_per_sm(bt, rows / 64)) * sms;
  const int64_t kb_per = (kb + split - 1) / split;
  // Unsplit tiles: persistent CTAs, at most one per slot, the busiest taking `rounds` tiles. Split tiles:
  // one cluster per tile, `per_wave` clusters at a time.
  const int64_t per_wave = clusters > 0 ? clusters : (slots / split > 0 ? slots / split : 1);
  const int64_t waves = split == 1 ? 1 : (tiles + per_wave - 1) / per_wave;
  const int64_t rounds = split == 1 ? (tiles + slots - 1) / slots : waves;
  const double w_bytes = double(tiles * rows) * double(kb * kBlockK);
  const double wx_bytes = double(units) * double(kb_per) * double((rows + bt) * kBlockK);
  const double cta_bytes = double(rounds * kb_per) * double(rows * kBlockK);
  double t = w_bytes / kHbmRate;
  if (wx_bytes / kL2Rate > t) t = wx_bytes / kL2Rate;
  if (cta_bytes / cta_rate > t) t = cta_bytes / cta_rate;
  return t + double(waves) * kCtaSeconds + (split > 1 ? kReduceSeconds : 0.0);
}

// Expert mode: the most work units any routing of m rows over `experts` experts can give (every hit
// expert's last chunk partial), `rows` weight rows per unit.
inline int64_t expert_max_units(int64_t m, int64_t n, int64_t experts, int bt, int rows) {
  const int64_t chunks = m / bt + (m < experts ? m : experts);
  return chunks * ((n + rows - 1) / rows);
}

}  // namespace decode

inline int decode_expert_chunk_rows(int64_t rows, int64_t experts) {
  const int64_t hit = rows < experts ? rows : experts;
  return decode::token_tile(static_cast<int>(hit > 0 ? (rows + hit - 1) / hit > 64 ? 64 : (rows + hit - 1) / hit : 1));
}

// rows_per_cta and k_split filled in where they are 0: the pair with the lowest decode::plan_cost, with
// no CTA left without K blocks.
// Expert mode: the cost of the weight rows of the min(m, experts) experts that can be hit, and a split
// only where one wave of clusters covers every unit the routing could produce.
inline DecodeArgs decode_plan(const DecodeArgs& a) {
  DecodeArgs r = a;
  const int64_t kb = (int64_t(a.k) + decode::kBlockK - 1) / decode::kBlockK;
  const int sms = a.sm_count > 0 ? a.sm_count : 132;
  const bool experts = a.expert_mode();
  const int bt = experts ? decode_expert_chunk_rows(a.m, a.experts) : decode::token_tile(a.m);
  const int64_t hit = experts ? (a.m < a.experts ? a.m : a.experts) : 1;
  auto clusters = [&](int rows, int split) -> int64_t {
    return a.cluster_slots != nullptr ? a.cluster_slots[(rows / 64 - 1) * (kDecodeMaxSplit + 1) + split] : 0;
  };
  const int64_t n_rows = experts ? hit * a.n : a.n;
  bool found = false;
  double best = 0.0;
  for (const int rows : {128, 64}) {
    if (a.rows_per_cta != 0 && rows != a.rows_per_cta) continue;
    for (int split = 1; split <= kDecodeMaxSplit; ++split) {
      if (a.k_split != 0 && split != a.k_split) continue;
      const int64_t kb_per = (kb + split - 1) / split;
      if (a.k_split == 0 && (split - 1) * kb_per >= kb) continue;
      if (experts && split > 1) {
        const int64_t fit = clusters(rows, split) > 0 ? clusters(rows, split)
                                                      : int64_t(decode::ctas_per_sm(bt, rows / 64)) * sms / split;
        if (decode::expert_max_units(a.m, a.n, a.experts, bt, rows) > fit) continue;
      }
      const double cost = decode::plan_cost(n_rows, kb, bt, rows, split, sms, clusters(rows, split));
      if (!found || cost < best) {
        found = true;
        best = cost;
        r.rows_per_cta = rows;
        r.k_split = split;
      }
    }
  }
  return r;
}

}  // namespace fp8gemm::cuda::sm90
