// Hand-written Hopper (sm_90a) FP8 block-scaled GEMM, DeepGEMM-style:
//
//   d[m, n] = bf16( alpha * sum_kb sfa[m, kb] * sfb[n / 128, kb] * sum_{k in kb} a[m, k] * b[n, k] )
//
// * One producer warpgroup (one thread issues TMA: a tile, b tile and the tile's a_scale column per
//   stage, and copies the stage's b_scale values with cp.async, completing on a "full" mbarrier) and one
//   to three math warpgroups (64 rows each, or 128 as two 64-row slices: the 256-row tile).
// * Per 128-wide K block the math warpgroups run 4 wgmma m64nBNk32 (fp8 e4m3 x e4m3 -> fp32) into a
//   temporary accumulator, then promote: acc += temp * sfa[row] * sfb[col block] in fp32 (DeepSeek's
//   recipe; the fp8 tensor cores keep ~13 fraction bits inside a K block).
// * kDoubleBuffer: two temporary accumulators; the wgmmas of block kb+1 are issued before block kb is
//   promoted, so the tensor cores do not idle during the promotion FFMAs.
// * Persistent grid (one CTA per SM), tiles rasterised in groups of `group_m` M-blocks so that the CTAs
//   running at one time share A and B tiles in L2; optionally the last waves split by K (stream-K) or
//   every tile split by K (split-K), partial sums fixed up through the workspace (see Params).
// * Epilogue: bf16 into swizzled shared memory, then TMA stores (clipped at the matrix edge); the store
//   drains while the warpgroup starts its next tile.
// gemm/docs/cuda_sm90.md describes the design and what each choice measured on the H200.
//
// Device code only sees raw pointers and TMA descriptors; the host side (bottom) builds the descriptors
// from sm90::KernelArgs. Include from exactly one .cu per instantiation.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "sm90_kernel_args.h"
#include "sm90_ptx.cuh"

namespace fp8gemm::cuda::sm90::tile {

// ------------------------------------------------------------------------------------------------
// Compile-time configuration and shared-memory plan
// ------------------------------------------------------------------------------------------------
template <int BN_, int kMathWGs_, bool kDoubleBuffer_, bool kStreamK_ = false, bool kGrouped_ = false,
          int kCluster_ = 1, int kSlices_ = 1>
struct Cfg {
  // kStreamK: the kernel can also split tiles by K (see Params); compiled separately because the
  // extra live state costs the data-parallel main loop registers and speed.
  static constexpr bool kStreamK = kStreamK_;
  // kGrouped: the MoE expert GEMM (Params::segments): tiles walk the experts' row segments.
  static constexpr bool kGrouped = kGrouped_;
  static_assert(!(kStreamK && kGrouped), "expert GEMM tiles are never split by K");
  // kCluster = 2 (expert GEMMs): CTA pairs (thread-block clusters of two) run two tiles of one expert's M
  // block in neighbouring N blocks; each CTA loads half of their shared A block and multicasts it to both,
  // so L2 serves A once per pair.
  static constexpr int kCluster = kCluster_;
  static_assert(kCluster == 1 || (kCluster == 2 && kGrouped), "CTA pairs: expert GEMM tiles");
  // Items per M block: its N tiles, or with CTA pairs its pairs of N tiles (the last one half past the
  // matrix when the N tiles are odd).
  static constexpr int n_items(int num_n) { return kCluster > 1 ? (num_n + 1) / 2 : num_n; }
  static constexpr int BN = BN_, kMathWGs = kMathWGs_;
  static constexpr bool kDoubleBuffer = kDoubleBuffer_;
  static_assert(kMathWGs >= 1 && kMathWGs <= 3, "one to three math warpgroups");
  // kSlices = 2: each math warpgroup owns two 64-row slices of the tile (256 rows with two warpgroups) and
  // runs one K block's wgmmas slice after slice through one temporary accumulator, promoting each slice
  // while the other warpgroup's wgmmas run. A 256x128 tile moves 1/256 + 1/128 bytes of operands per MAC
  // and spreads each tile's set-up and epilogue over twice the work of 128x128.
  static constexpr int kSlices = kSlices_;
  static_assert(kSlices == 1 || (kSlices == 2 && !kDoubleBuffer && !kGrouped),
                "two slices per warpgroup: one temporary accumulator, dense tiles");
  static constexpr int BM = 64 * kMathWGs * kSlices;
  static constexpr int kThreads = 128 * (kMathWGs + 1);
  static constexpr int kAccRegs = BN / 2;  // fp32 per thread of m64nBN
  // Register split (setmaxnreg) with two or three math warpgroups. Every thread starts with the launch's
  // share (65536 / threads, rounded down to 8: 168 with two, 128 with three), and setmaxnreg.inc waits until
  // the producer's setmaxnreg.dec has freed what the math warpgroups add, so
  //   kMathWGs * (kMathRegs - kLaunchRegs) <= kLaunchRegs - kProducerRegs   (else the kernel never starts).
  // The producer drops to 40 (24, the minimum, with three): math 232 with two, 160 with three. CTA pairs,
  // whose producer spills below 56, give it 56 (math 224). With one math warpgroup (256 threads) every
  // thread already has 255.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = kMathWGs == 3 ? 24 : kCluster > 1 ? 56 : 40;
  static constexpr int kMathRegsLeft = (kLaunchRegs + (kLaunchRegs - kProducerRegs) / kMathWGs) / 8 * 8;
  static constexpr int kMathRegs = kMathRegsLeft > 232 ? 232 : kMathRegsLeft;
  static_assert(kMathWGs == 1 || kMathWGs * (kMathRegs - kLaunchRegs) <= kLaunchRegs - kProducerRegs,
                "setmaxnreg: the math warpgroups take no more registers than the producer frees");
  // Epilogue panels: 64 bf16 columns (128-byte swizzle), 32 (64-byte swizzle) or 16 (32-byte swizzle).
  static constexpr int kPanelCols = BN % 64 == 0 ? 64 : BN % 32 == 0 ? 32 : 16;
  static constexpr int kPanels = BN / kPanelCols;
  static constexpr int kPanelBytes = 64 * kPanelCols * 2;  // per 64-row slice
  // The panels' swizzle, Swizzle<B,4,3> (16-byte unit index ^= (offset / 128) mod 2^B), B = 3, 2, 1 for
  // 128-, 64-, 32-byte rows: the epilogue's stores and the TMA store map (whose CU_TENSOR_MAP_SWIZZLE_
  // {128,64,32}B are the values 3, 2, 1) both use it.
  static constexpr int kPanelSwizzleB = kPanelCols == 64 ? 3 : kPanelCols == 32 ? 2 : 1;
  static_assert(BN == 32 || BN == 48 || BN == 64 || BN == 96 || BN == 128 || BN == 144 || BN == 192,
                "BN: a Wgmma<> specialisation (32, 48, 64, 96, 128, 144, 192)");
  // A tile starts at a multiple of gcd(BN, 128) inside its b_scale block, so it straddles at most one
  // block boundary, at a column that is a multiple of that step (promote() relies on both).
  static constexpr int kStraddleStep = BN % 128 == 0 ? 128 : BN % 64 == 0 ? 64 : BN % 32 == 0 ? 32 : 16;
  static_assert(BN <= 128 + kStraddleStep, "a tile may straddle one b_scale block boundary at most");
  // Per-K-block addresses kept as loop-carried values (see issue()): 0-4 % faster for every tile on an
  // H200 except 192x144, 3 % slower with them, which keeps the form ptxas recomputes each K block.
  static constexpr bool kLoopCarriedAddresses = BN != 144;

  // a_scale box per stage: BM scales; expert tiles start at any row while a TMA box must start at a 16-byte
  // aligned column, so theirs starts at the aligned row below and holds 4 more.
  static constexpr int kSfaBox = BM + (kGrouped ? 4 : 0);
  static constexpr int kABytes = BM * kBlockK, kBBytes = BN * kBlockK, kSfaBytes = kSfaBox * 4;
  // Shared memory per stage for the a_scale box: a TMA destination is 128-byte aligned.
  static constexpr int kSfaStride = (kSfaBytes + 127) / 128 * 128;
  static constexpr int kDBytes = kMathWGs * kSlices * kPanels * kPanelBytes;
  static constexpr int kStageBytes = kABytes + kBBytes + kSfaBytes;  // = the TMA bytes of one stage
  static constexpr int kFixed = 1024 /* alignment slack */ + kDBytes + 256 /* barriers */ + 128 /* b_scale */;
  static constexpr int kStageSmem = kABytes + kBBytes + kSfaStride;
  // Up to 16 stages (the barrier area's 256 bytes); only the narrow tiles of small-M problems (64x64,
  // 64x32) fit more than 8: they stream B and re-read A with little work per stage.
  static constexpr int kStageFit = (kMaxSmemBytes - kFixed) / kStageSmem;
  static constexpr int kStages = kStageFit > 16 ? 16 : kStageFit;
  static_assert(kStages >= 2, "tile does not fit in shared memory");
  static_assert(2 * kStages * 8 <= 256, "the full and empty barriers fit the barrier area");
  static constexpr int kSmemBytes = kFixed + kStages * kStageSmem;
  // Offsets from the 1024-aligned base: A stages, B stages, D panels (all 1024-aligned), sfa, barriers, sfb.
  static constexpr int kOffB = kStages * kABytes;
  static constexpr int kOffD = kOffB + kStages * kBBytes;
  static constexpr int kOffSfa = kOffD + kDBytes;
  static constexpr int kOffBar = kOffSfa + kStages * kSfaStride;
  static constexpr int kOffSfb = kOffBar + 256;  // per stage the b_scale of both blocks under the tile (8 bytes)
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0 && kPanelBytes % 1024 == 0, "1024-byte tiles");
};

struct Params {
  int32_t m, n, k;
  const float* sfb;  // (n_blocks, kb): sfb[nb * sfb_ld + kb]
  int32_t sfb_ld, sfb_rows;
  float alpha;
  int32_t group_m;  // rasterisation group (M blocks)
  // Work split. Items [0, dp_items) are whole tiles handed out round-robin. The
  // last sk_items items are split by K, in one of two ways:
  // * splits == 0 (stream-K): their sk_items * num_kb K blocks are cut into contiguous ranges of
  //   sk_len, one per CTA; partial-sum slot = the CTA's index;
  // * splits >= 2 (split-K): each item becomes `splits` units of sk_len K blocks, handed out
  //   round-robin like whole tiles (so that CTAs running together read the same K range of the
  //   operands: L2 hits); partial-sum slot of split s >= 1 of item i = i * (splits - 1) + s - 1.
  // A split item is finished by whoever holds its first K block; the others store their fp32 partial
  // sums in `partials` (one BM x BN slot each) and raise their flag (one per
  // slot and math warpgroup); the finisher waits for the flags and adds the slots.
  int32_t dp_items, sk_items, sk_len, splits;
  float* partials;
  uint32_t* flags;
  int32_t b_before_wait;  // KernelArgs::b_before_wait
  // TMA bytes of one stage: Cfg::kStageBytes, less where a problem of fewer rows than BM loads A and
  // a_scale boxes of only its rows (see run()).
  int32_t stage_tx;
  // Expert GEMMs (Cfg::kGrouped; ExpertArgs): m is the rows of a, n the rows of one expert; b is the experts'
  // stacked (experts * n, k) matrix and sfb the first expert's scales, sfb_expert_stride elements apart.
  // segments (written by the kernel before this one): [0, E) segment start rows, [E, 2E) end rows,
  // [2E, 3E] the exclusive prefix of the experts' BM-row block counts. Tiles whose rows are not all the
  // segment's, and every tile where row_map maps a's rows to out's, store through masked global writes.
  const int32_t* segments;
  int32_t experts;
  int64_t sfb_expert_stride;
  const int32_t* row_map;
  uint16_t* d;
  int64_t ldd;
  // a_scale that TMA cannot read (KernelArgs::sfa; at most kTileScaleCopyMaxRows rows, so every tile
  // starts at row 0): sfa_copy[r + kb * sfa_copy_ld] of rows r < m copied by the producer with cp.async
  // next to b_scale. nullptr: the a_scale TMA box.
  const float* sfa_copy;
  int32_t sfa_copy_ld;
};

// Expert GEMMs: the expert, first row and row count of M block gm (of all the experts' blocks).
struct ExpertTile {
  int expert, row0, rows;
};
__device__ __forceinline__ ExpertTile expert_tile(const Params& p, int gm, int bm) {
  const int32_t* prefix = p.segments + 2 * p.experts;
  // The last expert whose first block is <= gm (experts without blocks repeat the prefix before them).
  int lo = 0, hi = p.experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (prefix[mid] <= gm) lo = mid;
    else hi = mid - 1;
  }
  const int row0 = p.segments[lo] + (gm - prefix[lo]) * bm;
  return {lo, row0, min(bm, p.segments[p.experts + lo] - row0)};
}

// Calls f(phase, t, kb_begin, kb_end, my_slot, contrib_first, contrib_count) for every piece of work of
// this CTA in order: K blocks [kb_begin, kb_end) of item t; phase is std::false_type for
// whole items, std::true_type for the split ones (see Params for the slots). The producer and the math
// warpgroups walk the same sequence.
template <bool kStreamK, class F>
__device__ __forceinline__ void for_each_piece(const Params& p, int first_item, int item_stride, int num_kb, F&& f) {
  for (int t = first_item; t < p.dp_items; t += item_stride) f(std::false_type{}, t, 0, num_kb, 0, 0, 0);
  if constexpr (kStreamK) {
    if (p.sk_items > 0 && p.splits >= 2) {
      for (int u = first_item; u < p.sk_items * p.splits; u += item_stride) {
        const int local = u / p.splits, sp = u - local * p.splits;
        const int kb0 = sp * p.sk_len, kb1 = min(num_kb, kb0 + p.sk_len);  // the host leaves no split empty
        f(std::true_type{}, p.dp_items + local, kb0, kb1, local * (p.splits - 1) + sp - 1, local * (p.splits - 1),
          p.splits - 1);
      }
    } else if (p.sk_items > 0) {
      const int total = p.sk_items * num_kb;
      for (int pos = first_item * p.sk_len, end = min(pos + p.sk_len, total); pos < end;) {
        const int local = pos / num_kb, kb0 = pos - local * num_kb, kb1 = min(num_kb, kb0 + (end - pos));
        // The finisher of `local` adds the CTAs whose ranges start inside it.
        const int tile_end = (local + 1) * num_kb;
        const int n_contrib = max(0, min(item_stride, (tile_end + p.sk_len - 1) / p.sk_len) - (first_item + 1));
        f(std::true_type{}, p.dp_items + local, kb0, kb1, first_item, first_item + 1, n_contrib);
        pos += kb1 - kb0;
      }
    }
  }
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Tile t -> (m block, n block): groups of group_m M-blocks, M fastest inside a group.
__device__ __forceinline__ void tile_coords(int t, int num_m, int num_n, int group_m, int& mb, int& nb) {
  const int per_group = group_m * num_n;
  const int g = t / per_group, r = t - g * per_group;
  const int first = g * group_m;
  const int rows = min(group_m, num_m - first);
  mb = first + r % rows;
  nb = r / rows;
}

// Item t -> (m block, n block) of this CTA: a tile, or with CTA pairs the tile of cluster rank `rank` in
// pair t (N blocks 2j and 2j + 1 of one M block; the second lies past the matrix when N has an odd number
// of blocks).
template <class C>
__device__ __forceinline__ void item_coords(const Params& p, int t, int num_m, int num_n, int rank, int& mb, int& nb) {
  if constexpr (C::kCluster == 1) {
    tile_coords(t, num_m, num_n, p.group_m, mb, nb);
  } else {
    tile_coords(t, num_m, C::n_items(num_n), p.group_m, mb, nb);
    nb = 2 * nb + rank;
  }
}

// Calls f(integral_constant<S>) for the straddle column S = split, one of kStep, 2 kStep, ... below
// kLimit (the last of them without a compare), so that each column group's scale factor is chosen at
// compile time.
template <int kStep, int kLimit, int S = kStep, class F>
__device__ __forceinline__ void straddle_at(int split, F&& f) {
  if constexpr (S + kStep >= kLimit) {
    f(std::integral_constant<int, S>{});
  } else {
    if (split == S) f(std::integral_constant<int, S>{});
    else straddle_at<kStep, kLimit, S + kStep>(split, f);
  }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    fp8_blockscaled_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                                const __grid_constant__ CUtensorMap map_sfa, const __grid_constant__ CUtensorMap map_d,
                                const Params p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kOffBar);
  uint64_t* empty = full + C::kStages;

  // Broadcast from lane 0: lets the compiler see the warpgroup index as warp-uniform, so that the
  // per-warpgroup shared-memory descriptors are computed in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  const int tid = threadIdx.x % 128;
  // Expert GEMMs: num_m (all the experts' M blocks) is read after the wait for the kernel that wrote it.
  int num_m = C::kGrouped ? 0 : (p.m + C::BM - 1) / C::BM;
  const int num_n = (p.n + C::BN - 1) / C::BN;
  const int num_kb = (p.k + kBlockK - 1) / kBlockK;
  // CTA pairs: both CTAs of a cluster walk the same items (pairs of tiles) in lockstep.
  const int first_item = blockIdx.x / C::kCluster, item_stride = gridDim.x / C::kCluster;
  const int rank = C::kCluster > 1 ? static_cast<int>(cluster_ctarank()) : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(&full[s], 2);  // the TMA's expect_tx arrival and the b_scale copies' cp.async arrival
      mbar_init(&empty[s], C::kMathWGs * 4 * C::kCluster);  // one arrival per math warp (of both CTAs of a pair)
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // CTA pairs: the other CTA's barriers are initialised before anything arrives on them.
  if constexpr (C::kCluster > 1) cluster_sync();
  else __syncthreads();
  // Launched as a programmatic dependent of the kernel before it (KernelArgs::overlap_previous), the
  // set-up above overlaps that kernel's tail; each thread waits for it (griddepcontrol.wait) before
  // reading what it wrote or writing anything. Without the launch attribute the wait returns at once.

  if (wg == 0) {
    // ---------------- producer ----------------
    if constexpr (C::kMathWGs >= 2) setmaxnreg_dec<C::kProducerRegs>();
    // One thread of warp 0 issues the loads, chosen by elect.sync: ptxas then knows it is a single
    // thread and emits each TMA load once (behind `tid == 0` it wraps every one in a loop over the
    // active lanes and recomputes the shared-window base per stage).
    if (tid < 32 && elect_one()) {
      prefetch_map(&map_a);
      prefetch_map(&map_b);
      prefetch_map(&map_sfa);
      prefetch_map(&map_d);
      // Where that kernel did not write B, the first tile's first ring of B blocks is requested before
      // the wait; those stages then get only their A and a_scale blocks below. (The host sets
      // b_before_wait only without split tiles, so the first piece is whole tile first_item.)
      int b_early = 0;
      if (!C::kGrouped && p.b_before_wait && first_item < p.dp_items) {
        int mw, nb;
        tile_coords(first_item, num_m, num_n, p.group_m, mw, nb);
        b_early = min(num_kb, C::kStages);
        for (int i = 0; i < b_early; ++i) {
          mbar_arrive_expect_tx(&full[i], p.stage_tx);
          tma_load_2d(smem + C::kOffB + i * C::kBBytes, &map_b, &full[i], i * kBlockK, nb * C::BN);
        }
      }
      asm volatile("griddepcontrol.wait;" ::: "memory");
      if constexpr (C::kGrouped) num_m = p.segments[3 * p.experts];
      int s = 0;
      uint32_t phase = 0;
      // Same order of work as the math warpgroups (see the bottom of the kernel).
      // kCopySfa (std::bool_constant): a_scale by cp.async (Params::sfa_copy) instead of its TMA box; a
      // compile-time choice, so that the TMA path's loop is the same code as without the copy.
      auto produce = [&](auto kCopySfa, const int t, const int kb_begin, const int kb_end) {
        int mw, nb;
        item_coords<C>(p, t, num_m, num_n, rank, mw, nb);
        int m0 = mw * C::BM, n0 = nb * C::BN, b_row0 = n0;
        const float* sfb_base = p.sfb;
        if constexpr (C::kGrouped) {
          const ExpertTile et = expert_tile(p, mw, C::BM);
          m0 = et.row0;
          b_row0 = et.expert * p.n + n0;
          sfb_base += et.expert * p.sfb_expert_stride;
        }
        // The b_scale rows under this tile: block n0/128, and the next one where the tile straddles it
        // (clamped: the second tile of a CTA pair may lie past the matrix, see item_coords). Copied into
        // the stage next to the operands, so that the math warps read it from shared memory like a_scale
        // (a global load per K block in their loop slowed the narrow, L2-bound tiles down).
        const int nblk = C::kCluster > 1 ? min(n0 / 128, p.sfb_rows - 1) : n0 / 128;
        const bool two_blocks = 128 - (n0 % 128) < C::BN && nblk + 1 < p.sfb_rows;
        const float* sfb0 = sfb_base + int64_t(nblk) * p.sfb_ld;
        const float* sfb1 = two_blocks ? sfb0 + p.sfb_ld : sfb0;
        const uint32_t s_sfb = smem_addr(smem + C::kOffSfb);
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          if constexpr (C::kCluster > 1) {
            // Stage s is free in both CTAs (its empty barrier counts both CTAs' math warps): this CTA's
            // half of the A block goes to both, its B block to this CTA only. The partner's half may land
            // before this CTA's expect_tx; the phase completes only after that arrival.
            mbar_wait(&empty[s], phase ^ 1);
            mbar_arrive_expect_tx(&full[s], C::kStageBytes);
            tma_load_2d(smem + C::kOffB + s * C::kBBytes, &map_b, &full[s], kb * kBlockK, b_row0);
            tma_load_2d_multicast(smem + s * C::kABytes + rank * (C::kABytes / 2), &map_a, &full[s], kb * kBlockK,
                                  m0 + rank * (C::BM / 2), 0x3);
          } else {
            if (b_early > 0) {
              --b_early;  // the ring's first pass: stage s is free, its B block and byte count are in
            } else {
              mbar_wait(&empty[s], phase ^ 1);
              mbar_arrive_expect_tx(&full[s], p.stage_tx);
              tma_load_2d(smem + C::kOffB + s * C::kBBytes, &map_b, &full[s], kb * kBlockK, b_row0);
            }
            tma_load_2d(smem + s * C::kABytes, &map_a, &full[s], kb * kBlockK, m0);
          }
          if constexpr (decltype(kCopySfa)::value) {
            const uint32_t s_sfa = smem_addr(smem + C::kOffSfa + s * C::kSfaStride);
            for (int r = 0; r < p.m; ++r)
              cp_async_4(s_sfa + 4u * uint32_t(r), p.sfa_copy + r + int64_t(kb) * p.sfa_copy_ld, 4u);
          } else {
            tma_load_2d(smem + C::kOffSfa + s * C::kSfaStride, &map_sfa, &full[s], C::kGrouped ? m0 & ~3 : m0, kb);
          }
          cp_async_4(s_sfb + 8 * uint32_t(s), sfb0 + kb, 4u);
          cp_async_4(s_sfb + 8 * uint32_t(s) + 4, sfb1 + kb, 4u);
          cp_async_arrive(&full[s]);
          if (++s == C::kStages) { s = 0; phase ^= 1; }
        }
      };
      if constexpr (C::kGrouped) {
        for (int t = first_item; t < num_m * C::n_items(num_n); t += item_stride)
          produce(std::false_type{}, t, 0, num_kb);
      } else {
        auto produce_pieces = [&](auto kCopySfa) {
          for_each_piece<C::kStreamK>(p, first_item, item_stride, num_kb,
                                      [&](auto, int t, int kb0, int kb1, int, int, int) {
                                        produce(kCopySfa, t, kb0, kb1);
                                      });
        };
        if (p.sfa_copy != nullptr) produce_pieces(std::true_type{});
        else produce_pieces(std::false_type{});
      }
    }
  } else {
    // ---------------- math warpgroups ----------------
    if constexpr (C::kMathWGs >= 2) setmaxnreg_inc<C::kMathRegs>();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (C::kGrouped) num_m = p.segments[3 * p.experts];
    const int mw = wg - 1;                 // which warpgroup: rows [mw * 64 * kSlices, +64 * kSlices) of the tile
    const int warp = tid / 32, lane = tid % 32;
    const int r0 = warp * 16 + lane / 4;   // accumulator rows r0 and r0 + 8 (of each 64-row slice)
    const int c0 = 2 * (lane % 4);         // columns 8j + c0, 8j + c0 + 1
    uint8_t* smem_d = smem + C::kOffD + mw * C::kSlices * C::kPanels * C::kPanelBytes;
    // Stage 0's addresses, once: a stage's are these plus a constant times the stage index. Derived
    // from the generic pointer inside the loop, ptxas would recompute them every K block (under the
    // 160-register budget of three math warpgroups it rematerialises the shared-window base).
    uint32_t s_full = smem_addr(full);                                      // full[s]: + 8 s
    uint32_t s_sfa = smem_addr(smem + C::kOffSfa) + 4 * uint32_t(mw * 64 * C::kSlices + r0);  // + kSfaStride s
    uint64_t desc_a = smem_desc_k128b(smem + mw * 64 * C::kSlices * kBlockK);  // + kABytes / 16 s
    uint64_t desc_b = smem_desc_k128b(smem + C::kOffB);                     // + kBBytes / 16 s
    constexpr int R = C::kAccRegs;
    float acc[C::kSlices * R];  // slice sl: acc[sl * R, (sl + 1) * R)
    float tmp0[R];
    float tmp1[C::kDoubleBuffer ? R : 1];
    float sc0[4], sc1[4];  // the scales of the block in tmp0 / tmp1 (see issue)
    int s = 0;
    uint32_t phase = 0;

    // One piece of work: K blocks [kb_begin, kb_end) of tile t. Instantiated twice in stream-K builds:
    // the whole-tile phase gets the same code as the data-parallel build (whose loop bookkeeping the
    // compiler keeps in uniform registers); only the stream-K phase pays for the general form.
    // my_slot: partial-sum slot of this piece (if it does not hold K block 0); contrib_*: the slots
    // the piece holding K block 0 must add (consecutive), when it does not reach the last K block.
    auto process = [&](auto sk_phase, const int t, const int kb_begin, const int kb_end, const int my_slot,
                       const int contrib_first, const int contrib_count) {
      constexpr bool kSk = decltype(sk_phase)::value;
      int mwi, nb;
      item_coords<C>(p, t, num_m, num_n, rank, mwi, nb);
      int m0 = mwi * C::BM;
      [[maybe_unused]] int rows = C::BM;
      const int n0 = nb * C::BN;
      if constexpr (C::kGrouped) {
        const ExpertTile et = expert_tile(p, mwi, C::BM);
        m0 = et.row0, rows = et.rows;
      }
      // The main loop counts K blocks from 0 for every piece of work (stream-K pieces start later in
      // K). Keeps the loop identical to the data-parallel build's, whose bookkeeping the compiler keeps
      // in uniform registers.
      const int nkb = kSk ? kb_end - kb_begin : num_kb;
      const bool sk_contributor = kSk && kb_begin > 0, sk_owner = kSk && kb_end < num_kb;
#pragma unroll
      for (int i = 0; i < C::kSlices * R; ++i) acc[i] = 0.0f;
      const uint32_t s_sfb = smem_addr(smem + C::kOffSfb);  // stage s: b_scale of both blocks at + 8 s

      // Waits for stage `stage`, issues its 4 wgmmas of slice sl into d (not waited for) and keeps the
      // block's a_scale of rows r0 and r0 + 8 and its b_scale of both blocks in sc. The promotion
      // multiplies them: computed here, between the wgmmas, they made the next wgmma wait for the loads.
      auto issue = [&](float* d, float* sc, int stage, uint32_t ph, int sl) {
        float sa0, sa1;
        uint64_t da, db;
        if constexpr (C::kLoopCarriedAddresses) {
          // Opaque updates make these loop-carried values, which ptxas keeps in registers instead of
          // recomputing them from the shared-window base every K block.
          asm volatile("" : "+r"(s_full), "+r"(s_sfa), "+l"(desc_a), "+l"(desc_b));
          if (sl == 0) mbar_wait(s_full + 8 * uint32_t(stage), ph);  // slice 1 follows slice 0 on the stage
          uint32_t sfa = s_sfa + uint32_t(stage * C::kSfaStride + sl * 64 * 4);
          if constexpr (C::kGrouped) sfa += 4u * uint32_t(m0 & 3);  // the box starts at row m0 & ~3
          sa0 = ld_shared_f32(sfa), sa1 = ld_shared_f32(sfa + 32);
          // The start address is the descriptor's low 14 bits (16-byte units); no carry: < 2^18 bytes.
          da = desc_a + uint32_t(stage * (C::kABytes >> 4) + sl * (64 * kBlockK >> 4));
          db = desc_b + uint32_t(stage * (C::kBBytes >> 4));
        } else {
          if (sl == 0) mbar_wait(&full[stage], ph);
          const float* sfa = reinterpret_cast<const float*>(smem + C::kOffSfa + stage * C::kSfaStride) +
                             (mw * C::kSlices + sl) * 64 + (C::kGrouped ? m0 & 3 : 0);
          sa0 = sfa[r0], sa1 = sfa[r0 + 8];
          da = smem_desc_k128b(smem + stage * C::kABytes + (mw * C::kSlices + sl) * 64 * kBlockK);
          db = smem_desc_k128b(smem + C::kOffB + stage * C::kBBytes);
        }
        const float sb0 = ld_shared_f32(s_sfb + 8 * uint32_t(stage)), sb1 = ld_shared_f32(s_sfb + 8 * uint32_t(stage) + 4);
#pragma unroll
        for (int i = 0; i < R; ++i) fence_reg(d[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 32; ++kk)
          wgmma_call<C::BN>(da + 2 * kk, db + 2 * kk, d, kk > 0, std::make_index_sequence<R>{});
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < R; ++i) fence_reg(d[i]);
        sc[0] = sa0, sc[1] = sa1, sc[2] = sb0, sc[3] = sb1;
      };
      // After d's wgmmas completed: release the stage (after its last slice), promote d into slice sl of acc.
      // kSplit (split_c): first column under the next b_scale block, a constant so that each column group's
      // factor is chosen at compile time; the K loop is instantiated per straddle column (see below).
      auto promote = [&](const float* d, const float* sc, int stage, int sl, auto split_c) {
        constexpr int kSplit = decltype(split_c)::value;
        __syncwarp();
        if constexpr (C::kCluster > 1) {
          if (lane < C::kCluster) mbar_arrive_cluster(&empty[stage], lane);  // both CTAs' loads wait for it
        } else {
          if (lane == 0 && sl == C::kSlices - 1) mbar_arrive(&empty[stage]);
        }
        float* a = acc + sl * R;
        // Promotion factors alpha * a_scale * b_scale of rows r0, r0 + 8 under b_scale blocks 0 and 1.
        const float sa0 = sc[0] * p.alpha, sa1 = sc[1] * p.alpha;
        const float f[4] = {sa0 * sc[2], sa1 * sc[2], sa0 * sc[3], sa1 * sc[3]};
#pragma unroll
        for (int j = 0; j < C::BN / 8; ++j) {
          const float f0 = 8 * j >= kSplit ? f[2] : f[0], f1 = 8 * j >= kSplit ? f[3] : f[1];
          a[4 * j + 0] = fmaf(d[4 * j + 0], f0, a[4 * j + 0]);
          a[4 * j + 1] = fmaf(d[4 * j + 1], f0, a[4 * j + 1]);
          a[4 * j + 2] = fmaf(d[4 * j + 2], f1, a[4 * j + 2]);
          a[4 * j + 3] = fmaf(d[4 * j + 3], f1, a[4 * j + 3]);
        }
      };
      auto advance = [&](int& st, uint32_t& ph) {
        if (++st == C::kStages) { st = 0; ph ^= 1; }
      };

      // The K loop, for the tile's straddle column kSplit (one instance per column: a branch among them
      // inside the loop, at every promotion, slowed the tiles that straddle, 64x48 and 64x96, down).
      auto k_loop = [&](auto split_c) {
        if constexpr (C::kDoubleBuffer) {
          // Block kb lives in tmp[kb % 2]; block kb + 1 is issued before kb is promoted. The steady
          // state issues and waits unconditionally (wait_group 1): ptxas then proves that the promoted
          // registers are not in flight and keeps the wgmmas asynchronous; the 1-2 block tail is peeled.
          int s_next = s;
          uint32_t ph_next = phase;
          auto issue_next = [&](float* d, float* sc) {
            issue(d, sc, s_next, ph_next, 0);
            advance(s_next, ph_next);
          };
          auto promote_cur = [&](float* d, const float* sc) {
#pragma unroll
            for (int i = 0; i < R; ++i) fence_reg(d[i]);
            promote(d, sc, s, 0, split_c);
            advance(s, phase);
          };
          issue_next(tmp0, sc0);
          int kb = 0;
          for (; kb + 2 < nkb; kb += 2) {
            issue_next(tmp1, sc1);
            wgmma_wait<1>();
            promote_cur(tmp0, sc0);
            issue_next(tmp0, sc0);
            wgmma_wait<1>();
            promote_cur(tmp1, sc1);
          }
          if (kb + 1 < nkb) {
            issue_next(tmp1, sc1);
            wgmma_wait<1>();
            promote_cur(tmp0, sc0);
            wgmma_wait<0>();
            promote_cur(tmp1, sc1);
          } else {
            wgmma_wait<0>();
            promote_cur(tmp0, sc0);
          }
        } else {
          for (int kb = 0; kb < nkb; ++kb) {
#pragma unroll
            for (int sl = 0; sl < C::kSlices; ++sl) {
              issue(tmp0, sc0, s, phase, sl);
              wgmma_wait<0>();
#pragma unroll
              for (int i = 0; i < R; ++i) fence_reg(tmp0[i]);
              promote(tmp0, sc0, s, sl, split_c);
            }
            advance(s, phase);
          }
        }
      };
      // Columns [0, split) are under b_scale block n0/128, the rest under the next one.
      [[maybe_unused]] const int split = 128 - (n0 % 128);
      if constexpr (128 % C::BN == 0) {
        k_loop(std::integral_constant<int, 128>{});  // tiles that divide 128 never straddle
      } else if (split >= C::BN) {
        k_loop(std::integral_constant<int, C::BN>{});  // this tile does not straddle
      } else {
        // BN = 48: 16 or 32; 96: 32 or 64; 144: 16, 32, ..., 128; 192: 64 or 128.
        straddle_at<C::kStraddleStep, C::BN>(split, k_loop);
      }

      // ---- stream-K: hand a partial tile over, or collect the others' partials ----
      if (sk_contributor) {
        // Not the tile's first K block: publish the fp32 partial sums (fragment order, coalesced).
        constexpr int kQuads = C::kSlices * R / 4;
        float4* slot = reinterpret_cast<float4*>(p.partials) + (size_t(my_slot) * C::kMathWGs + mw) * kQuads * 128;
#pragma unroll
        for (int i = 0; i < kQuads; ++i)
          __stcg(slot + i * 128 + tid, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
        named_barrier(1 + mw, 128);
        if (tid == 0) {
          __threadfence();
          st_release(p.flags + my_slot * C::kMathWGs + mw, 1u);
        }
        return;
      }
      if (sk_owner) {
        // First K blocks of a split tile: add the partials of every CTA whose range starts inside it.
        for (int cta = contrib_first; cta < contrib_first + contrib_count; ++cta) {
          if (tid == 0) {
            uint32_t* flag = p.flags + cta * C::kMathWGs + mw;
            while (ld_acquire(flag) == 0u) {
            }
          }
          named_barrier(1 + mw, 128);
          constexpr int kQuads = C::kSlices * R / 4;
          const float4* slot = reinterpret_cast<const float4*>(p.partials) + (size_t(cta) * C::kMathWGs + mw) * kQuads * 128;
#pragma unroll
          for (int i = 0; i < kQuads; ++i) {
            const float4 v = __ldcg(slot + i * 128 + tid);
            acc[4 * i] += v.x, acc[4 * i + 1] += v.y, acc[4 * i + 2] += v.z, acc[4 * i + 3] += v.w;
          }
        }
      }

      if constexpr (C::kGrouped) {
        if (rows < C::BM || p.row_map != nullptr) {
          // ---- expert tile holding rows of another segment, or rows mapped elsewhere: masked writes ----
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = mw * 64 + r0 + 8 * h;
            if (r >= rows) continue;
            const int64_t out_row = p.row_map != nullptr ? p.row_map[m0 + r] : m0 + r;
            uint16_t* dst = p.d + out_row * p.ldd + n0 + c0;
#pragma unroll
            for (int j = 0; j < C::BN / 8; ++j)
              if (n0 + 8 * j + c0 < p.n)  // n % 8 == 0: the pair's second column is inside too
                *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack_bf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
          }
          return;
        }
      }
      // The pair's second tile past the last N block: computed on zero-filled operands, never stored.
      if (C::kCluster > 1 && n0 >= p.n) return;
      // ---- epilogue: bf16 into swizzled panels, then TMA stores of this warpgroup's 64-row slices ----
      if (tid == 0) tma_store_wait_read();  // the previous tile's stores have left shared memory
      named_barrier(1 + mw, 128);
#pragma unroll
      for (int sl = 0; sl < C::kSlices; ++sl) {
#pragma unroll
        for (int j = 0; j < C::BN / 8; ++j) {
          const int col = 8 * j + c0;
          const int panel = sl * C::kPanels + col / C::kPanelCols, pc = col % C::kPanelCols;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = r0 + 8 * h;
            uint32_t off = uint32_t(row * C::kPanelCols * 2 + pc * 2);
            off ^= ((off >> 7) & ((1u << C::kPanelSwizzleB) - 1u)) << 4;  // Cfg::kPanelSwizzleB
            *reinterpret_cast<uint32_t*>(smem_d + panel * C::kPanelBytes + off) =
                pack_bf16x2(acc[sl * R + 4 * j + 2 * h], acc[sl * R + 4 * j + 2 * h + 1]);
          }
        }
      }
      fence_proxy_async();
      named_barrier(1 + mw, 128);
      if (tid == 0) {
#pragma unroll
        for (int sl = 0; sl < C::kSlices; ++sl)
#pragma unroll
          for (int pnl = 0; pnl < C::kPanels; ++pnl)
            tma_store_2d(&map_d, smem_d + (sl * C::kPanels + pnl) * C::kPanelBytes, n0 + pnl * C::kPanelCols,
                         m0 + (mw * C::kSlices + sl) * 64);
        tma_store_commit();
      }
    };
    if constexpr (C::kGrouped) {
      for (int t = first_item; t < num_m * C::n_items(num_n); t += item_stride)
        process(std::false_type{}, t, 0, num_kb, 0, 0, 0);
    } else {
      for_each_piece<C::kStreamK>(p, first_item, item_stride, num_kb, process);
    }
    if (tid == 0) tma_store_wait_all();
  }
  // CTA pairs: neither CTA exits while the other may still arrive on its barriers or load into it.
  if constexpr (C::kCluster > 1) cluster_sync();
#endif
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------
static_assert(CU_TENSOR_MAP_SWIZZLE_32B == 1 && CU_TENSOR_MAP_SWIZZLE_64B == 2 && CU_TENSOR_MAP_SWIZZLE_128B == 3,
              "Cfg::kPanelSwizzleB is passed to the TMA store map as a CUtensorMapSwizzle");

inline bool splits_k(const KernelArgs& a) {
  return a.decomposition == Decomposition::kStreamK || (a.decomposition == Decomposition::kSplitK && a.splits >= 2);
}

struct Split {
  int grid = 0;
  int dp_items = 0, sk_items = 0, sk_len = 0, splits = 0;
  int64_t slots = 0;  // partial-sum slots
};

inline int sm_count_of(const KernelArgs& a) {
  int sms = a.sm_count;
  if (sms <= 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      sms = 132;
    }
  }
  return sms;
}

// Data-parallel: one CTA per item up to the SM count, items round-robin.
// Stream-K (on request, when the last wave would be partial): all SMs. If the partial wave fills at
// most half of them, its items are split into equal K ranges at common offsets after the whole waves
// (split_k_tail_splits(), sm90_kernel_args.h); otherwise the partial wave (plus one full wave unless
// stream_k_partial_wave_only()) is split by K evenly over the CTAs, so that no CTA idles at the end
// and no range is a sliver. Split-K (on request, KernelArgs::splits >= 2): every item in `splits`
// units of equal K ranges (fewer when K is short), handed out round-robin.
template <class C>
Split plan_split(const KernelArgs& a) {
  const int sms = sm_count_of(a);
  const int64_t items = int64_t((a.m + C::BM - 1) / C::BM) * ((a.n + C::BN - 1) / C::BN);
  const int64_t kb = (a.k + kBlockK - 1) / kBlockK;
  const int64_t slots = sms;  // co-resident CTAs: one per SM
  Split sp;
  if (const int64_t tail = split_k_tail_splits(items, slots, kb);
      C::kStreamK && a.decomposition == Decomposition::kStreamK && tail >= 2) {
    // Whole waves, then the partial wave's items in `tail` equal K ranges (split-K units).
    const int64_t rem = items % slots;
    sp.grid = static_cast<int>(slots);
    sp.dp_items = static_cast<int>(items - rem);
    sp.sk_items = static_cast<int>(rem);
    sp.sk_len = static_cast<int>((kb + tail - 1) / tail);
    sp.splits = static_cast<int>(tail);
    sp.slots = rem * (tail - 1);
    return sp;
  }
  if (C::kStreamK && a.decomposition == Decomposition::kStreamK && items % slots != 0) {
    const int64_t full = items / slots, rem = items % slots;
    const int64_t sk = rem + (full >= 1 && !stream_k_partial_wave_only(items, slots, kb) ? slots : 0);
    sp.grid = static_cast<int>(slots);
    sp.dp_items = static_cast<int>(items - sk);
    sp.sk_items = static_cast<int>(sk);
    sp.sk_len = static_cast<int>((sk * kb + slots - 1) / slots);
    sp.slots = slots;
    return sp;
  }
  if (C::kStreamK && a.decomposition == Decomposition::kSplitK && a.splits >= 2 && kb >= 2) {
    const int64_t len = (kb + a.splits - 1) / a.splits;
    const int64_t splits = (kb + len - 1) / len;  // no empty unit
    const int64_t units = items * splits;
    sp.grid = static_cast<int>(units < slots ? units : slots);
    sp.dp_items = 0;
    sp.sk_items = static_cast<int>(items);
    sp.sk_len = static_cast<int>(len);
    sp.splits = static_cast<int>(splits);
    sp.slots = items * (splits - 1);
    return sp;
  }
  sp.grid = static_cast<int>(items < slots ? items : slots);
  sp.dp_items = static_cast<int>(items);
  return sp;
}

constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Workspace of a split plan: one flag per slot and math warpgroup (zero when the kernel starts), then the
// partial-sum slots.
template <class C>
size_t flags_bytes(const Split& sp) {
  return sp.sk_items == 0 ? 0 : align_up(size_t(sp.slots) * C::kMathWGs * sizeof(uint32_t), 256);
}
template <class C>
size_t workspace_bytes(const Split& sp) {
  return sp.sk_items == 0 ? 0 : flags_bytes<C>(sp) + size_t(sp.slots) * C::BM * C::BN * sizeof(float);
}
template <class C>
size_t workspace_bytes(const KernelArgs& a) {
  return workspace_bytes<C>(plan_split<C>(a));
}
template <class C>
size_t zeroed_bytes(const KernelArgs& a) {
  return flags_bytes<C>(plan_split<C>(a));
}

template <class C>
bool can_implement(const KernelArgs& a) {
  // K-major fp8 operands with 16-byte rows, MN-major a_scale with a 16-byte K-block stride (any stride up to
  // kTileScaleCopyMaxRows rows), row-major bf16 out with 16-byte rows (the launcher stages anything else);
  // non-swapped problems only.
  return a.m > 0 && a.n > 0 && a.k > 0 && a.k % 16 == 0 && a.lda % 16 == 0 && a.ldb % 16 == 0 && a.ldd % 8 == 0 &&
         (sfa_tma_readable(a.sfa, a.sfa_ld) || a.m <= kTileScaleCopyMaxRows) && aligned16(a.a) &&
         aligned16(a.b) && aligned16(a.d);
}

// Launch configuration: programmatic stream serialization when the kernel may overlap the previous one
// (`attrs` must outlive the returned value's use).
template <class C>
cudaLaunchConfig_t launch_config(int grid, cudaStream_t stream, bool overlap_previous, cudaLaunchAttribute (&attrs)[2]) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>(grid));
  lc.blockDim = dim3(C::kThreads);
  lc.dynamicSmemBytes = C::kSmemBytes;
  lc.stream = stream;
  lc.attrs = attrs;
  lc.numAttrs = 0;
  if (overlap_previous) {
    cudaLaunchAttribute& a = attrs[lc.numAttrs++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
  if (C::kCluster > 1) {
    cudaLaunchAttribute& a = attrs[lc.numAttrs++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = C::kCluster;
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = 1;
  }
  return lc;
}

// CTA pairs (Cfg::kCluster = 2) that fit on device `dev` at once: the occupancy API's answer for clusters
// of two, queried once per device (132 SMs do not always give 66 pairs: clusters stay inside a GPC). The
// caller has opted the kernel in to its shared memory on `dev`.
template <class C>
int pair_slots(int dev, int fallback) {
  constexpr int kDevices = 64;
  static std::atomic<int> slots[kDevices] = {};
  if (dev < 0 || dev >= kDevices) return fallback;
  int n = slots[dev].load(std::memory_order_relaxed);
  if (n > 0) return n;
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t lc = launch_config<C>(2, nullptr, false, attrs);
  if (cudaOccupancyMaxActiveClusters(&n, fp8_blockscaled_gemm_kernel<C>, &lc) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    return fallback;
  }
  slots[dev].store(n, std::memory_order_relaxed);
  return n;
}

template <class C>
cudaError_t run(const KernelArgs& a, void* workspace, size_t workspace_size, cudaStream_t stream) {
  if (!can_implement<C>(a)) return cudaErrorInvalidValue;
  const Split sp = plan_split<C>(a);
  float* partials = nullptr;
  uint32_t* flags = nullptr;
  if (sp.sk_items > 0) {
    if (workspace == nullptr || workspace_size < workspace_bytes<C>(sp)) return cudaErrorInvalidValue;
    flags = static_cast<uint32_t*>(workspace);
    partials = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + flags_bytes<C>(sp));
    if (!a.workspace_zeroed) {
      const cudaError_t e = cudaMemsetAsync(flags, 0, flags_bytes<C>(sp), stream);
      if (e != cudaSuccess) return e;
    }
  }
  CUtensorMap ma, mb, msfa, md;
  const int64_t kb = (a.k + kBlockK - 1) / kBlockK;
  // Fewer rows than a tile: A and a_scale boxes of just those rows (a_scale's rounded up to 16 bytes), so
  // that no TMA load is mostly past the matrix (64x32 tiles on 8x4096x7168, H100: 12.7 us against 16.6 with
  // 64-row boxes). The tile's other rows of shared memory are never written; their accumulator rows are not
  // stored.
  const int a_rows = a.m < C::BM ? a.m : C::BM;
  const int sfa_box = a.m < C::BM ? (a.m + 3) / 4 * 4 : C::BM;
  // An a_scale that TMA cannot read is copied by the producer (Params::sfa_copy); its map is then A's,
  // prefetched and never loaded.
  const bool sfa_tma = sfa_tma_readable(a.sfa, a.sfa_ld);
  if (!make_map_2d(&ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.a, a.m, a.k, a.lda, a_rows, kBlockK,
                   CU_TENSOR_MAP_SWIZZLE_128B) ||
      !make_map_2d(&mb, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.b, a.n, a.k, a.ldb, C::BN, kBlockK,
                   CU_TENSOR_MAP_SWIZZLE_128B) ||
      // a_scale as a (kb, sfa_rows) row-major matrix: one box = the tile's scales of one K block (BM, or
      // sfa_box above). (the launcher passes leading dimensions that are valid even for one K block / one row)
      (sfa_tma && !make_map_2d(&msfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, a.sfa, kb, a.sfa_rows, a.sfa_ld, 1, sfa_box,
                               CU_TENSOR_MAP_SWIZZLE_NONE)) ||
      !make_map_2d(&md, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, a.d, a.m, a.n, a.ldd, 64,
                   C::kPanelCols, static_cast<CUtensorMapSwizzle>(C::kPanelSwizzleB)))
    return cudaErrorInvalidValue;
  if (!sfa_tma) msfa = ma;

  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return cudaGetLastError();
  if (const cudaError_t e = opt_in_dynamic_smem<fp8_blockscaled_gemm_kernel<C>>(dev, C::kSmemBytes); e != cudaSuccess) return e;

  Params p{a.m,        a.n,         a.k,       a.sfb,     a.sfb_ld, a.sfb_rows,
           a.alpha,    a.group > 1 ? a.group : 8,      sp.dp_items,
           sp.sk_items, sp.sk_len,  sp.splits, partials,  flags,
           a.overlap_previous && a.b_before_wait && sp.sk_items == 0,
           a_rows * kBlockK + C::kBBytes + (sfa_tma ? sfa_box * 4 : 0)};
  if (!sfa_tma) {
    p.sfa_copy = a.sfa;
    p.sfa_copy_ld = a.sfa_ld;
  }
  // Not after a flag memset: that is not a kernel to overlap.
  cudaLaunchAttribute attrs[2];
  const bool memset_before = sp.sk_items > 0 && !a.workspace_zeroed;
  const cudaLaunchConfig_t lc = launch_config<C>(sp.grid, stream, a.overlap_previous && !memset_before, attrs);
  const cudaError_t e = cudaLaunchKernelEx(&lc, fp8_blockscaled_gemm_kernel<C>, ma, mb, msfa, md, p);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

// Expert GEMMs: one launch over every expert's row segments (ExpertArgs). The grid is sized by the
// largest number of tiles any routing can give (every expert's last block partial), never by the routing
// itself, so the launch needs nothing from the host and is capturable in a CUDA graph.
template <class C>
cudaError_t run_experts(const ExpertArgs& e, cudaStream_t stream) {
  static_assert(C::kGrouped, "an expert-GEMM configuration");
  const KernelArgs& a = e.base;
  if (!can_implement<C>(a) || !sfa_tma_readable(a.sfa, a.sfa_ld) || a.n % 8 != 0 || e.experts < 1 ||
      e.segments == nullptr)
    return cudaErrorInvalidValue;
  const int64_t kb = (a.k + kBlockK - 1) / kBlockK;
  CUtensorMap ma, mb, msfa, md;
  if (!make_map_2d(&ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.a, a.m, a.k, a.lda, C::BM / C::kCluster, kBlockK,
                   CU_TENSOR_MAP_SWIZZLE_128B) ||
      !make_map_2d(&mb, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.b, int64_t(e.experts) * a.n, a.k, a.ldb, C::BN, kBlockK,
                   CU_TENSOR_MAP_SWIZZLE_128B) ||
      !make_map_2d(&msfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, a.sfa, kb, a.sfa_rows, a.sfa_ld, 1, C::kSfaBox,
                   CU_TENSOR_MAP_SWIZZLE_NONE) ||
      !make_map_2d(&md, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, a.d, a.m, a.n, a.ldd, 64, C::kPanelCols,
                   static_cast<CUtensorMapSwizzle>(C::kPanelSwizzleB)))
    return cudaErrorInvalidValue;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return cudaGetLastError();
  if (const cudaError_t err = opt_in_dynamic_smem<fp8_blockscaled_gemm_kernel<C>>(dev, C::kSmemBytes); err != cudaSuccess)
    return err;
  const int64_t max_items = ((a.m + C::BM - 1) / C::BM + e.experts) * int64_t(C::n_items((a.n + C::BN - 1) / C::BN));
  const int64_t slots = C::kCluster > 1 ? pair_slots<C>(dev, sm_count_of(a) / 2) : sm_count_of(a);
  const int grid = static_cast<int>(C::kCluster * (max_items < slots ? max_items : slots));
  Params p{a.m,     a.n,        a.k,    a.sfb,   a.sfb_ld, a.sfb_rows, a.alpha, a.group > 1 ? a.group : 8,
           0,       0,          0,      0,       nullptr,  nullptr,    0,       C::kStageBytes, e.segments,
           e.experts, e.sfb_expert_stride, e.row_map, static_cast<uint16_t*>(a.d), a.ldd};
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t lc = launch_config<C>(grid, stream, a.overlap_previous, attrs);
  const cudaError_t err = cudaLaunchKernelEx(&lc, fp8_blockscaled_gemm_kernel<C>, ma, mb, msfa, md, p);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace fp8gemm::cuda::sm90::tile

// Defines the entry points of sm90_kernel_args.h for one tile configuration from its two builds, the
// types name##_dp and name##_sk (namespace fp8gemm::cuda::sm90): KernelArgs::decomposition kStreamK or
// kSplitK runs the build of the kernel that can split tiles by K, anything else the data-parallel one.
#define FP8GEMM_SM90_TILE_ENTRIES(name)                                                                \
  namespace fp8gemm::cuda::sm90 {                                                                      \
  size_t name##_workspace_bytes(const KernelArgs& a) {                                                 \
    return tile::splits_k(a) ? tile::workspace_bytes<name##_sk>(a) : tile::workspace_bytes<name##_dp>(a); \
  }                                                                                                    \
  size_t name##_zeroed_bytes(const KernelArgs& a) {                                                    \
    return tile::splits_k(a) ? tile::zeroed_bytes<name##_sk>(a) : tile::zeroed_bytes<name##_dp>(a);     \
  }                                                                                                    \
  bool name##_can_implement(const KernelArgs& a) { return tile::can_implement<name##_dp>(a); }         \
  cudaError_t name##_run(const KernelArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream) {        \
    return tile::splits_k(a) ? tile::run<name##_sk>(a, ws, ws_bytes, stream)                          \
                             : tile::run<name##_dp>(a, ws, ws_bytes, stream);                          \
  }                                                                                                    \
  }

// The same for a tile of one 64-row slice per math warpgroup: (name, BN, math warpgroups, double buffering).
#define FP8GEMM_SM90_TILE_KERNEL(name, ...)        \
  namespace fp8gemm::cuda::sm90 {                  \
  using name##_dp = tile::Cfg<__VA_ARGS__, false>; \
  using name##_sk = tile::Cfg<__VA_ARGS__, true>;  \
  }                                                \
  FP8GEMM_SM90_TILE_ENTRIES(name)
