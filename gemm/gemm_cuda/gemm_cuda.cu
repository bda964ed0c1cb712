// Launcher of the Hopper (sm_90a) FP8 block-scaled GEMM backend.
//
// Fast path: both operands K-major with 16-byte aligned rows, e4m3fn, per-row a_scale contiguous
// along M with a 16-byte aligned K-block stride, b_scale contiguous along K, bf16 out row-major
// with 16-byte aligned rows -> one GEMM kernel launch, nothing else.
// Everything else is first brought into that form inside the caller's workspace (counted in the
// call's time) by one preparation launch (prepare_kernels.cuh: operand transpose/pad/convert, scale
// copies); rows of out that TMA cannot store go through a staging buffer and a copy.
// See gemm/docs/cuda_sm90.md for the rules and the measured numbers.
#include "gemm_cuda.h"
#include "gemm_cuda_config.h"
#include "gemm_shape_dispatch.h"
#include "prepare_kernels.cuh"
#include "sm90_kernel_args.h"

#include <cuda_runtime.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace fp8gemm::cuda {
namespace {

constexpr int64_t kQB = kQuantBlock;  // 128

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
constexpr size_t align256(size_t x) { return (x + 255) & ~size_t{255}; }

using prep::aligned16;

// ------------------------------------------------------------------------------------------------
// Tuned configurations: the fastest correct configuration of each challenge benchmark shape in the
// H200 sweeps of 2026-11-30 (benchmarks/gemm_h200.py --sweep [--hand-sweep]; median of do_bench with
// L2 flushed, K-major inputs): the CUTLASS kernels of session 1 against the hand-written ones
// (sm90_hand_kernel.cuh). Times (ours, and CUTLASS's best in brackets where ours won) are from the
// 10:09 UTC sweep, the last two entries from the 10:16 UTC sweep after the stream-K build got the
// data-parallel main loop (benchmarks/results/gemm_h200_sweep.json); where runs disagreed (the H200s
// differ by up to +-5 % between machines) the entry is the one that won more runs, CUTLASS on a tie.
// * = session 3 (benchmarks/results/gemm_h200_probes/streamk_plan.txt, 11:32 UTC): once stream-K
// splits only the partial wave (sm90_kernel_args.h, stream_k_partial_wave_only), the hand-written
// stream-K kernel beat its own data-parallel build, which had tied CUTLASS's stream-K kernel (the
// previous entry) in the 10:23 UTC sweep (133.4 vs 133.8 us, 52.0 vs 52.3 us).
// ** = session 4: the three-warpgroup 192x128 kernel beat the previous entry on these shapes in each of
// four same-run comparisons (gemm_h200.py --compare, 3-5 rounds, benchmarks/results/gemm_h200_compare/
// c2, c3, c5, c6); times are "ours (previous entry)" of c3.
// *** = session 5: once the kernel computed its shared-memory descriptors in uniform registers (192x128:
// 3-5 % faster, 128x128 0-3 %, benchmarks/results/gemm_h200_probes/ab_uniform_wg.txt), 192x128 with
// rasterisation group 4 beat the 128x128 entry on these shapes in two same-run comparisons (session 4's
// c5, and c11 of session 5, benchmarks/results/gemm_h200_compare/); times are c11's.
// **** = session 6: the 192x144 tile (one wave of 128 tiles on this shape, against two of 128x128) in
// two same-run comparisons (c13: 45.3 vs 52.4 us, c14: 45.0 vs 51.7; torch 48.7 / 48.6); times are c13's.
// ***** = session 6: 192x128 data-parallel instead of 128x128 stream-K. Under do_bench the two tie: 348.3
// vs 353.4 us in c15, 345.1 vs 336.5 in c11, 368.2 vs 377.6 in c9 (older kernel). Under 2 s of
// back-to-back calls at the 700 W limit 192x128 was 3 % faster in both rounds: 357.3 / 357.7 vs 368.4 /
// 368.0 us (benchmarks/results/gemm_h200_clocks_session6/); times are c15's.
// Shapes not listed take choose_generic().
// ------------------------------------------------------------------------------------------------
using SV = Sm90Variant;
using SS = Sm90Split;
constexpr TunedShape<Sm90Config> kTuned[] = {
    {pack_shape(1024, 1536, 7168), {SV::kHand128x128Db, SS::kDataParallel, 1, 8, false}},       // 27.0 us (CUTLASS 27.6)
    {pack_shape(1024, 3072, 1536), {SV::kHand128x192, SS::kDataParallel, 1, 8, false}},         // 16.1 us (17.4)
    {pack_shape(1024, 576, 7168), {SV::kHand128x64Db, SS::kDataParallel, 1, 8, false}},         // 20.7 us (22.8)
    {pack_shape(1024, 7168, 256), {SV::kPingpong64x128, SS::kDataParallel, 1, 1, false}},       // 13.2 us
    {pack_shape(1024, 7168, 2048), {SV::kHand128x128Db, SS::kDataParallel, 1, 8, false}},       // 33.8 us (34.9)
    {pack_shape(1024, 4608, 7168), {SV::kCoop128x128StreamK, SS::kStreamK, 1, 1, false}},       // 61.1 us
    {pack_shape(1024, 7168, 2304), {SV::kHand128x128Db, SS::kDataParallel, 1, 8, false}},       // 36.8 us (37.7)
    {pack_shape(1024, 512, 7168), {SV::kHand64x128Db, SS::kStreamK, 1, 8, false}},              // 18.2 us (22.4)
    {pack_shape(1024, 4096, 512), {SV::kHand128x128Db, SS::kDataParallel, 1, 8, false}},        // 12.1 us (12.2)
    {pack_shape(6144, 1536, 7168), {SV::kHand192x128, SS::kDataParallel, 1, 8, false}},         // 121.0 us (123.8) **
    {pack_shape(6144, 3072, 1536), {SV::kHand192x128, SS::kDataParallel, 1, 8, false}},         // 53.6 us (53.6) **
    {pack_shape(6144, 576, 7168), {SV::kHand192x144, SS::kDataParallel, 1, 4, false}},          // 45.3 us (52.4) ****
    {pack_shape(6144, 7168, 256), {SV::kHand192x128, SS::kDataParallel, 1, 8, false}},         // 35.5 us (40.7) **
    {pack_shape(6144, 7168, 2048), {SV::kHand192x128, SS::kDataParallel, 1, 4, false}},         // 161.2 us (166.0) ***
    {pack_shape(6144, 4608, 7168), {SV::kHand192x128, SS::kDataParallel, 1, 8, false}},         // 348.3 us (353.4) *****
    {pack_shape(6144, 7168, 2304), {SV::kHand192x128, SS::kDataParallel, 1, 4, false}},         // 182.1 us (185.3) ***
    {pack_shape(6144, 512, 7168), {SV::kHand192x128, SS::kDataParallel, 1, 8, false}},         // 41.1 us (50.3) **
    {pack_shape(6144, 4096, 512), {SV::kHand192x128, SS::kDataParallel, 1, 8, false}},         // 32.7 us (34.3) **
};
static_assert(tuned_keys_unique(kTuned), "duplicate shape in the sm90 tuning table");

int device_sm_count() {
  // Cached per device: cudaDeviceGetAttribute is cheap, but this runs on every call.
  static std::atomic<int> cache[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 132;
  if (dev < 64) {
    int v = cache[dev].load(std::memory_order_relaxed);
    if (v > 0) return v;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) {
    cudaGetLastError();
    sms = 132;
  }
  if (dev < 64) cache[dev].store(sms, std::memory_order_relaxed);
  return sms;
}

bool f16_variant(SV v) { return v == SV::kF16Coop128x128StreamK; }
bool hand_variant(SV v) { return static_cast<int>(v) >= static_cast<int>(SV::kHand128x128Db); }
bool swap_variant(SV v) { return v == SV::kSwap128x64StreamK; }
// Kernels that honour KernelArgs::decomposition (the hand-written ones: data-parallel or stream-K).
bool stream_k_variant(SV v) {
  return v == SV::kCoop128x128StreamK || v == SV::kSwap128x64StreamK || v == SV::kF16Coop128x128StreamK ||
         hand_variant(v);
}

// GEMM_CUDA_EXACT_ACCUMULATION=1: run the fp16 exact-accumulation variant (read per call, so a
// process can switch; getenv is a few hundred ns).
bool exact_accumulation_requested() {
  const char* v = std::getenv("GEMM_CUDA_EXACT_ACCUMULATION");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

// GEMM_CUDA_PDL=0: launch the GEMM kernel only after the preparation pass has completed, instead of as
// its programmatic dependent (read per call; for A/B timing, and a switch for tools that mishandle
// programmatic dependent launches).
bool overlap_prep_allowed() {
  const char* v = std::getenv("GEMM_CUDA_PDL");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

Sm90Config choose_generic(const GemmProblem& p, bool exact) {
  Sm90Config c;
  const int64_t sms = device_sm_count();
  const int64_t kb = p.k_blocks();
  const int64_t tiles = ceil_div(p.m, 128) * ceil_div(p.n, 128);  // 128x128 tiles
  if (exact) {
    c.variant = SV::kF16Coop128x128StreamK;
    c.split = (tiles < sms * 4 && kb >= 8) ? SS::kStreamK : SS::kDataParallel;
    return c;
  }
  if (p.m <= 128) {
    // Decode and small-batch M (session 7, benchmarks/results/gemm_h200_compare/ c16-c18: DeepGEMM's M = 64
    // and 128 shapes, M = 1 / 16 / 32, short-K and few-tile cases; 9-16 configurations each). These are
    // bound by reading B, so what counts is how many SMs stream it: one tile row of the hand-written
    // 64x128 (M <= 64) or 128x64 (M <= 128) kernel, which beat CUTLASS's swap-AB 128x64 (the previous
    // rule for M <= 64) on every such shape. With a long K and too few tiles to keep a quarter (half) of
    // the SMs busy, the K range is split: split-K 4 for 64x128 from 32 K blocks (17 tiles: 16.2 us against
    // 20.2 data-parallel on 64x2112x7168), stream-K for 128x64 from 48 (33 tiles at K = 7168: 16.4
    // against 19.8; but 24 tiles at K = 4096: 15.1 against 13.3 data-parallel). With more tiles,
    // data-parallel (56 tiles at K = 16384: 45.1 us, stream-K 46.8). K <= 512: ping-pong 64x128 (all
    // configurations within about 10 % there, torch as well).
    const bool m64 = p.m <= 64;
    const int64_t row_tiles = m64 ? ceil_div(p.n, 128) : ceil_div(p.n, 64);
    c.max_swizzle = 8;
    if (kb <= 4) {
      c.variant = SV::kPingpong64x128;
      c.max_swizzle = 1;
    } else if (m64) {
      c.variant = SV::kHand64x128Db;
      if (kb >= 32 && row_tiles * 4 <= sms) {
        c.split = SS::kSplitK;
        c.splits = 4;
      }
    } else {
      c.variant = SV::kHand128x64Db;
      if (kb >= 48 && row_tiles * 2 <= sms) c.split = SS::kStreamK;
    }
    return c;
  }
  // Rules read off the H200 sweeps (docs/cuda_sm90.md). The hand-written double-buffered 128x128
  // kernel (sm90_hand_kernel.cuh) won most shapes; CUTLASS keeps short K with few tiles (ping-pong
  // 64x128: its epilogue overlaps the other warpgroup's MMAs) and long K with a partial last wave
  // (its stream-K build is faster than ours there); very few tiles and a long K -> our 64x128
  // stream-K build (every SM busy, partial sums fixed up in the workspace).
  const double waves = double(tiles) / double(sms);
  const double frac = waves - static_cast<double>(static_cast<int64_t>(waves));
  const bool stream_k_128 = kb >= 32 && frac > 0.0 && frac < 0.6;  // the 128x128 stream-K rule below
  // 192x128 (three math warpgroups) against 128x128: work per CTA in 64x128 row-slices of a tile, for
  // whole waves (data-parallel), or for an even share plus half a slice of hand-over where the 128x128
  // stream-K rule applies. Fewer slices -> 192x128; as many -> 192x128 (rasterisation group 4) up to
  // K = 2304 (its fewer, larger tiles halve the per-tile prologue/epilogue share; measured at K = 1536,
  // 2048 and 2304), the 128x128 kernel otherwise. This picks the measured winner on all 18 benchmark
  // shapes (benchmarks/results/gemm_h200_compare/).
  const int64_t tiles192 = ceil_div(p.m, 192) * ceil_div(p.n, 128);
  const double work192 = 3.0 * static_cast<double>(ceil_div(tiles192, sms));
  double work128 = 2.0 * static_cast<double>(ceil_div(tiles, sms));
  if (stream_k_128) work128 = std::min(work128, 2.0 * waves + 0.5);
  // Where 128x128 needs stream-K to come out ahead, 192x128 data-parallel also takes up to 4 % more
  // estimated work (the estimate leaves out stream-K's hand-over): 6144x4608x7168 is 27 against 26.7
  // slices, and 192x128 tied under do_bench and was 3 % faster under sustained load
  // (gemm_h200_clocks_session6/); 4096x2112x7168 is 9 against 8.74, and 192x128 took 107.7 us against
  // 111.6 (ours) and 120.2 (CUTLASS) for 128x128 stream-K (compare c16).
  const bool near_tie_with_stream_k = stream_k_128 && work192 > work128 && work192 <= 1.04 * work128;
  // Short K (<= 12 blocks): per-tile prologue and epilogue weigh more, and 192x128 amortises them over
  // 1.5x the rows; it also wins with up to 3 % more estimated work (c16: 4096x32768x512, 129 against 126
  // slices, 148.3 against 162.3 us; 4096x24576x1536, 96 against 94, 286.6 against 297.2 us).
  const bool short_k_near_tie = kb <= 12 && work192 > work128 && work192 <= 1.03 * work128;
  // 192x144 (same kernel, 144 columns): in the same units a tile is 3 x 144 / 128 = 3.375 slices. Taken
  // only for a long K and when it saves at least 10 % of the per-CTA work against both others; e.g.
  // 6144x576: 128 tiles (one wave) = 3.375, against 4 (128x128: 240 tiles, two waves) and 6 (192x128).
  const int64_t tiles144 = ceil_div(p.m, 192) * ceil_div(p.n, 144);
  const double work144 = 3.375 * static_cast<double>(ceil_div(tiles144, sms));
  if (kb >= 16 && work144 < 0.9 * std::min(work128, work192)) {
    c.variant = SV::kHand192x144;
    c.max_swizzle = 8;
  } else if (work192 < work128 || (work192 == work128 && kb <= 18) || near_tie_with_stream_k || short_k_near_tie) {
    c.variant = SV::kHand192x128;
    c.max_swizzle = work192 == work128 ? 4 : 8;
  } else if (kb <= 4 && tiles >= sms * 2) {
    c.variant = SV::kHand128x128Db;
    c.max_swizzle = 8;
  } else if (kb <= 4) {
    c.variant = SV::kPingpong64x128;
  } else if (tiles * 4 <= sms && kb >= 16) {
    c.variant = SV::kHand64x128Db;
    c.split = SS::kStreamK;
    c.max_swizzle = 8;
  } else if (stream_k_128) {
    // Ours when its stream-K splits only the partial wave (6144x{512,1536}x7168), CUTLASS's otherwise
    // (1024x4608x7168: 61 vs 66 us).
    if (sm90::stream_k_partial_wave_only(tiles, sms, kb)) {
      c.variant = SV::kHand128x128Db;
      c.max_swizzle = 8;
    } else {
      c.variant = SV::kCoop128x128StreamK;
    }
    c.split = SS::kStreamK;
  } else {
    c.variant = SV::kHand128x128Db;
    c.max_swizzle = 8;
  }
  return c;
}

// Entry points (sm90_kernel_args.h) of each Sm90Variant's translation unit: the one place that maps a
// variant id to its code, for the workspace size, the launch and the override check. Empty for an id
// that names no variant (4: the dropped swap-AB 128x192; anything out of range).
struct VariantEntry {
  size_t (*workspace_bytes)(const sm90::KernelArgs&) = nullptr;
  cudaError_t (*run)(const sm90::KernelArgs&, void*, size_t, cudaStream_t) = nullptr;
};

VariantEntry variant_entry(SV v) {
#define FP8GEMM_ENTRY(name) VariantEntry{&sm90::name##_workspace_bytes, &sm90::name##_run}
  switch (v) {
    case SV::kCoop128x128StreamK: return FP8GEMM_ENTRY(coop128x128_sk);
    case SV::kCoop128x128Cluster2: return FP8GEMM_ENTRY(coop128x128_c2);
    case SV::kPingpong64x128: return FP8GEMM_ENTRY(pingpong64x128);
    case SV::kSwap128x64StreamK: return FP8GEMM_ENTRY(swap128x64_sk);
    case SV::kF16Coop128x128StreamK: return FP8GEMM_ENTRY(f16coop128x128_sk);
    case SV::kHand128x128Db: return FP8GEMM_ENTRY(hand128x128db);
    case SV::kHand128x128DbC2: return FP8GEMM_ENTRY(hand128x128dbc2);
    case SV::kHand64x128Db: return FP8GEMM_ENTRY(hand64x128db);
    case SV::kHand64x128DbC2: return FP8GEMM_ENTRY(hand64x128dbc2);
    case SV::kHand128x192: return FP8GEMM_ENTRY(hand128x192);
    case SV::kHand128x64Db: return FP8GEMM_ENTRY(hand128x64db);
    case SV::kHand192x128: return FP8GEMM_ENTRY(hand192x128);
    case SV::kHand192x144: return FP8GEMM_ENTRY(hand192x144);
  }
#undef FP8GEMM_ENTRY
  return {};
}

// ------------------------------------------------------------------------------------------------
// Plan: which preparation passes a problem needs and where their outputs live in the workspace.
// Pure host arithmetic, shared by workspace_bytes() and gemm() so they always agree.
// ------------------------------------------------------------------------------------------------
struct Plan {
  Sm90Config cfg;
  bool f16 = false;   // operands converted to fp16 (exact-accumulation variant)
  bool fnuz = false;  // e4m3fnuz bytes reinterpreted as e4m3fn (alpha = 1/4, +-240 fallback)
  bool convert_a = false, convert_b = false;  // transpose / pad / fnuz->fn into workspace
  int64_t k_kernel = 0;                       // K the kernel sees (k, or k padded to 16)
  bool copy_sfa = false, copy_sfb = false;    // scale copies into the kernel's layouts
  int64_t sfa_rows = 0;                       // per-row scale rows seen by the kernel (m or m padded to 4)
  bool stage_out = false;                     // kernel writes a compact buffer, then a strided copy
  int64_t staged_ld = 0;
  // Workspace offsets (bytes).
  size_t off_flag = 0, off_a = 0, off_b = 0, off_sfa = 0, off_sfb = 0, off_out = 0, off_kernel = 0;
  size_t kernel_ws = 0, total = 0;
  sm90::KernelArgs args;  // pointers relative to a null workspace until bind()
};

// Effective leading dimension of a matrix for TMA: if it has one row the stride is never used,
// so any aligned value does.
int64_t effective_ld(int64_t rows, int64_t ld, int64_t min_ld, int64_t align) {
  return rows == 1 ? round_up(min_ld, align) : ld;
}

bool operand_direct(const uint8_t* ptr, int64_t rows, int64_t k, int64_t s_row, int64_t s_k) {
  if (s_k != 1 || k % 16 != 0 || !aligned16(ptr)) return false;
  const int64_t ld = effective_ld(rows, s_row, k, 16);
  return ld % 16 == 0 && ld >= k;
}

bool row_scales_direct(const float* ptr, int64_t rows, int64_t kb, int64_t s_row, int64_t s_kb) {
  // TMA over (rows, kb) contiguous along rows: 16-byte aligned base and K-block stride, rows % 4 == 0.
  if (!aligned16(ptr) || rows % 4 != 0) return false;
  if (s_row != 1 && rows > 1) return false;
  const int64_t ld = kb == 1 ? rows : s_kb;
  return ld % 4 == 0 && ld >= rows && ld <= INT32_MAX;
}

bool block_scales_direct(int64_t nb, int64_t kb, int64_t s_nb, int64_t s_kb) {
  if (s_kb != 1 && kb > 1) return false;
  const int64_t ld = nb == 1 ? kb : s_nb;
  return ld >= kb && ld <= INT32_MAX;
}

Plan make_plan(const GemmProblem& p, const Sm90Config& cfg) {
  Plan pl;
  pl.cfg = cfg;
  const bool swap = swap_variant(cfg.variant);
  pl.f16 = f16_variant(cfg.variant);
  // fp16 copies hold fnuz values exactly: no reinterpretation, no flag, no fallback.
  pl.fnuz = p.format == Fp8Format::kE4M3FNUZ && !pl.f16;
  const int64_t kb = p.k_blocks();

  pl.convert_a = pl.f16 || pl.fnuz || !operand_direct(p.a, p.m, p.k, p.a_stride_m, p.a_stride_k);
  pl.convert_b = pl.f16 || pl.fnuz || !operand_direct(p.b, p.n, p.k, p.b_stride_n, p.b_stride_k);
  if (p.k % 16 != 0) pl.convert_a = pl.convert_b = true;  // TMA rows must be 16-byte multiples
  // Padded K: 16 bytes of fp8, or 8 fp16 elements (16 bytes).
  pl.k_kernel = (pl.convert_a || pl.convert_b) ? round_up(p.k, pl.f16 ? 8 : 16) : p.k;
  const size_t elem = pl.f16 ? 2 : 1;

  pl.copy_sfa = !row_scales_direct(p.a_scale, p.m, kb, p.a_scale_stride_m, p.a_scale_stride_kb);
  pl.sfa_rows = pl.copy_sfa ? round_up(p.m, 4) : p.m;
  pl.copy_sfb = !block_scales_direct(p.n_blocks(), kb, p.b_scale_stride_nb, p.b_scale_stride_kb);

  const int64_t out_ld = effective_ld(p.m, p.out_stride_m, p.n, 8);
  const bool out_direct = p.out_stride_n == 1 && out_ld % 8 == 0 && out_ld >= p.n &&
                          aligned16(p.out);
  pl.stage_out = !out_direct;
  pl.staged_ld = round_up(p.n, 8);

  // Workspace layout.
  size_t off = 0;
  if (pl.fnuz) { pl.off_flag = off; off += 256; }
  if (pl.convert_a) { pl.off_a = off; off = align256(off + elem * size_t(p.m) * size_t(pl.k_kernel)); }
  if (pl.convert_b) { pl.off_b = off; off = align256(off + elem * size_t(p.n) * size_t(pl.k_kernel)); }
  if (pl.copy_sfa) { pl.off_sfa = off; off = align256(off + sizeof(float) * size_t(pl.sfa_rows) * size_t(kb)); }
  if (pl.copy_sfb) { pl.off_sfb = off; off = align256(off + sizeof(float) * size_t(p.n_blocks()) * size_t(kb)); }
  if (pl.stage_out) { pl.off_out = off; off = align256(off + 2 * size_t(p.m) * size_t(pl.staged_ld)); }
  pl.off_kernel = off;

  // Kernel arguments (pointers into the workspace are offsets here; bind() adds the base).
  sm90::KernelArgs a;
  const uint8_t* A = pl.convert_a ? reinterpret_cast<const uint8_t*>(pl.off_a) : p.a;
  const int64_t lda = pl.convert_a ? pl.k_kernel : effective_ld(p.m, p.a_stride_m, p.k, 16);  // elements
  const uint8_t* B = pl.convert_b ? reinterpret_cast<const uint8_t*>(pl.off_b) : p.b;
  const int64_t ldb = pl.convert_b ? pl.k_kernel : effective_ld(p.n, p.b_stride_n, p.k, 16);
  const float* SFA = pl.copy_sfa ? reinterpret_cast<const float*>(pl.off_sfa) : p.a_scale;
  const int64_t sfa_ld = pl.copy_sfa ? pl.sfa_rows : (kb == 1 ? p.m : p.a_scale_stride_kb);
  const float* SFB = pl.copy_sfb ? reinterpret_cast<const float*>(pl.off_sfb) : p.b_scale;
  const int64_t sfb_ld = pl.copy_sfb ? kb : (p.n_blocks() == 1 ? kb : p.b_scale_stride_nb);
  void* D = pl.stage_out ? reinterpret_cast<void*>(pl.off_out) : static_cast<void*>(p.out);
  const int64_t ldd = pl.stage_out ? pl.staged_ld : out_ld;

  a.k = static_cast<int32_t>(pl.k_kernel);
  if (!swap) {
    a.m = static_cast<int32_t>(p.m); a.n = static_cast<int32_t>(p.n);
    a.a = A; a.lda = lda; a.b = B; a.ldb = ldb;
    a.sfa = SFA; a.sfa_ld = static_cast<int32_t>(sfa_ld); a.sfa_rows = static_cast<int32_t>(pl.sfa_rows);
    a.sfb = SFB; a.sfb_ld = static_cast<int32_t>(sfb_ld); a.sfb_rows = static_cast<int32_t>(p.n_blocks());
  } else {
    // Transposed problem: out^T (n x m) = b (n x k) . a^T; out^T is column-major with ld = out's row stride.
    a.m = static_cast<int32_t>(p.n); a.n = static_cast<int32_t>(p.m);
    a.a = B; a.lda = ldb; a.b = A; a.ldb = lda;
    a.sfa = SFB; a.sfa_ld = static_cast<int32_t>(sfb_ld); a.sfa_rows = static_cast<int32_t>(p.n_blocks());
    a.sfb = SFA; a.sfb_ld = static_cast<int32_t>(sfa_ld); a.sfb_rows = static_cast<int32_t>(pl.sfa_rows);
  }
  a.d = D; a.ldd = ldd;
  a.alpha = pl.fnuz ? 0.25f : 1.0f;  // fnuz bits read as fn are 2x per operand
  a.decomposition = static_cast<sm90::Decomposition>(cfg.split);
  a.splits = std::max<int32_t>(1, cfg.splits);
  a.max_swizzle = std::max<int32_t>(1, cfg.max_swizzle);
  a.raster_along_n = cfg.raster_along_n;
  a.sm_count = device_sm_count();
  if (!stream_k_variant(cfg.variant)) a.decomposition = sm90::Decomposition::kDataParallel;
  pl.args = a;

  const VariantEntry entry = variant_entry(cfg.variant);
  if (entry.workspace_bytes != nullptr) pl.kernel_ws = entry.workspace_bytes(a);
  pl.total = align256(off + pl.kernel_ws);
  return pl;
}

bool problem_valid(const GemmProblem& p) {
  if (p.m < 1 || p.n < 1 || p.k < 1) return false;
  if (!shape_packable(p.m, p.n, p.k)) return false;  // 21-bit dims: also keeps int32 kernel sizes safe
  if (!p.a || !p.b || !p.a_scale || !p.b_scale || !p.out) return false;
  if (p.format != Fp8Format::kE4M3FN && p.format != Fp8Format::kE4M3FNUZ) return false;
  return true;
}

// ------------------------------------------------------------------------------------------------
// Preparation kernels.
// ------------------------------------------------------------------------------------------------

// out[m * s_m + n * s_n] = staged[m * ld + n]
__global__ void copy_out_kernel(const uint16_t* __restrict__ staged, int64_t m, int64_t n, int64_t ld,
                                uint16_t* __restrict__ out, int64_t s_m, int64_t s_n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    out[r * s_m + c * s_n] = staged[r * ld + c];
  }
}

using prep::decode_fp8;

__device__ __forceinline__ uint16_t float_to_bf16_rne(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Exact CUDA-core GEMM straight from the caller's tensors: for each output element, fp32 sums of
// the 128-wide K blocks (products of two fp8 values are exact in fp32), each multiplied by its two
// scales and accumulated in fp32. 16x16 outputs per block, K staged 128 at a time through shared
// memory. With `flag` non-null it exits at once unless *flag is set (the fnuz +-240 fallback).
__global__ void __launch_bounds__(256) exact_gemm_kernel(GemmProblem p, const int* flag) {
  if (flag != nullptr && *reinterpret_cast<const volatile int*>(flag) == 0) return;
  __shared__ float sa[16][kQB + 1];
  __shared__ float sb[16][kQB + 1];
  const bool fnuz = p.format == Fp8Format::kE4M3FNUZ;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t tiles_n = ceil_div(p.n, 16), tiles = ceil_div(p.m, 16) * tiles_n;
  const int64_t kb_count = p.k_blocks();
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t m0 = (tile / tiles_n) * 16, n0 = (tile % tiles_n) * 16;
    const int64_t m = m0 + ty, n = n0 + tx;
    float acc = 0.0f;
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      __syncthreads();
      for (int i = threadIdx.x; i < 16 * kQB; i += 256) {
        const int r = i / kQB, c = i % kQB;
        const int64_t kk = kb * kQB + c;
        float va = 0.0f, vb = 0.0f;
        if (kk < p.k && m0 + r < p.m) va = decode_fp8(p.a[(m0 + r) * p.a_stride_m + kk * p.a_stride_k], fnuz);
        if (kk < p.k && n0 + r < p.n) vb = decode_fp8(p.b[(n0 + r) * p.b_stride_n + kk * p.b_stride_k], fnuz);
        sa[r][c] = va;
        sb[r][c] = vb;
      }
      __syncthreads();
      float block_sum = 0.0f;
#pragma unroll 8
      for (int c = 0; c < kQB; ++c) block_sum = fmaf(sa[ty][c], sb[tx][c], block_sum);
      if (m < p.m && n < p.n) {
        const float s = p.a_scale[m * p.a_scale_stride_m + kb * p.a_scale_stride_kb] *
                        p.b_scale[(n / kQB) * p.b_scale_stride_nb + kb * p.b_scale_stride_kb];
        acc = fmaf(s, block_sum, acc);
      }
    }
    if (m < p.m && n < p.n) p.out[m * p.out_stride_m + n * p.out_stride_n] = float_to_bf16_rne(acc);
  }
}

int grid_for(int64_t work, int64_t per_block, int sms) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ceil_div(work, per_block), int64_t(sms) * 8)));
}

cudaError_t launch_kernel(const Plan& pl, const sm90::KernelArgs& args, void* ws, size_t ws_bytes, cudaStream_t stream) {
  const VariantEntry e = variant_entry(pl.cfg.variant);
  return e.run != nullptr ? e.run(args, ws, ws_bytes, stream) : cudaErrorInvalidValue;
}

template <class T>
T* at(void* base, size_t off) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(base) + off);
}

cudaError_t run_plan(const GemmProblem& p, const Plan& pl, void* workspace, size_t workspace_size,
                     cudaStream_t stream) {
  if (workspace_size < pl.total || (pl.total > 0 && workspace == nullptr)) return cudaErrorInvalidValue;
  if ((reinterpret_cast<uintptr_t>(workspace) & 255u) != 0) return cudaErrorInvalidValue;
  const int sms = device_sm_count();
  const int64_t kb = p.k_blocks();
  int* flag = pl.fnuz ? at<int>(workspace, pl.off_flag) : nullptr;
  cudaError_t err;
  if (pl.fnuz) {
    if ((err = cudaMemsetAsync(flag, 0, sizeof(int), stream)) != cudaSuccess) return err;
  }
  // One launch for every preparation: operand passes, then the scale copies.
  prep::PrepareArgs prep_args;
  prep_args.k = p.k;
  prep_args.k_pad = pl.k_kernel;
  // fnuz source bytes: mapped to fn bytes (fp8 path, pl.fnuz) or decoded exactly (fp16 path).
  prep_args.fnuz = p.format == Fp8Format::kE4M3FNUZ;
  prep_args.flag = flag;
  auto add_operand = [&](const uint8_t* src, int64_t rows, int64_t s_row, int64_t s_k, size_t off) {
    prep::OperandJob& j = prep_args.op[prep_args.n_ops++];
    j.src = src; j.rows = rows; j.s_row = s_row; j.s_k = s_k; j.dst = at<void>(workspace, off);
  };
  if (pl.convert_a) add_operand(p.a, p.m, p.a_stride_m, p.a_stride_k, pl.off_a);
  if (pl.convert_b) add_operand(p.b, p.n, p.b_stride_n, p.b_stride_k, pl.off_b);
  int prep_ctas = prep::tile_operand_jobs(prep_args, sms, pl.f16);
  int64_t scale_elems = 0;
  auto add_scales = [&](const float* src, int64_t rows, int64_t cols, int64_t s_r, int64_t s_c, size_t off,
                        int64_t rows_pad, bool col_major) {
    prep::ScaleJob& j = prep_args.scale[prep_args.n_scales++];
    j.src = src; j.rows = rows; j.cols = cols; j.s_r = s_r; j.s_c = s_c; j.dst = at<float>(workspace, off);
    j.rows_pad = rows_pad; j.dst_col_major = col_major;
    scale_elems = std::max(scale_elems, rows_pad * cols);
  };
  // a_scale: (sfa_rows, kb) contiguous along rows; b_scale: (nb, kb) contiguous along kb.
  if (pl.copy_sfa) add_scales(p.a_scale, p.m, kb, p.a_scale_stride_m, p.a_scale_stride_kb, pl.off_sfa, pl.sfa_rows, true);
  if (pl.copy_sfb)
    add_scales(p.b_scale, p.n_blocks(), kb, p.b_scale_stride_nb, p.b_scale_stride_kb, pl.off_sfb, p.n_blocks(), false);
  if (prep_args.n_scales > 0) {
    prep_args.scale_ctas = grid_for(scale_elems, prep::kThreads, sms);
    prep_ctas += prep_args.scale_ctas;
  }
  if (prep_ctas > 0) {
    if (pl.f16)
      prep::prepare_kernel<true><<<prep_ctas, prep::kThreads, 0, stream>>>(prep_args);
    else
      prep::prepare_kernel<false><<<prep_ctas, prep::kThreads, 0, stream>>>(prep_args);
  }
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  // Rebase workspace-relative pointers.
  sm90::KernelArgs args = pl.args;
  const bool swap = swap_variant(pl.cfg.variant);
  auto rebase = [&](const void* rel, bool in_ws) -> const void* {
    return in_ws ? static_cast<const void*>(static_cast<const uint8_t*>(workspace) + reinterpret_cast<uintptr_t>(rel))
                 : rel;
  };
  const bool a_ws = swap ? pl.convert_b : pl.convert_a;
  const bool b_ws = swap ? pl.convert_a : pl.convert_b;
  const bool sfa_ws = swap ? pl.copy_sfb : pl.copy_sfa;
  const bool sfb_ws = swap ? pl.copy_sfa : pl.copy_sfb;
  args.a = rebase(args.a, a_ws);
  args.b = rebase(args.b, b_ws);
  args.sfa = static_cast<const float*>(rebase(args.sfa, sfa_ws));
  args.sfb = static_cast<const float*>(rebase(args.sfb, sfb_ws));
  args.d = const_cast<void*>(rebase(args.d, pl.stage_out));
  args.overlap_previous = prep_ctas > 0 && overlap_prep_allowed();
  void* kernel_ws = pl.kernel_ws > 0 ? at<void>(workspace, pl.off_kernel) : nullptr;

  if ((err = launch_kernel(pl, args, kernel_ws, pl.kernel_ws, stream)) != cudaSuccess) return err;

  if (pl.stage_out) {
    copy_out_kernel<<<grid_for(p.m * p.n, 256, sms), 256, 0, stream>>>(at<uint16_t>(workspace, pl.off_out), p.m,
                                                                       p.n, pl.staged_ld, p.out, p.out_stride_m,
                                                                       p.out_stride_n);
  }
  if (pl.fnuz) {
    // Always launched; returns at once unless a conversion pass met +-240 (see docs/cuda_sm90.md).
    exact_gemm_kernel<<<sms * 2, 256, 0, stream>>>(p, flag);
  }
  return cudaGetLastError();
}

bool config_valid(const GemmProblem& p, const Sm90Config& cfg) {
  if (variant_entry(cfg.variant).run == nullptr) return false;
  if (static_cast<int>(cfg.split) < 0 || static_cast<int>(cfg.split) > 3) return false;
  (void)p;
  return true;
}

// GEMM_CUDA_CONFIG="variant,split,splits,swizzle" (integers: Sm90Variant, Sm90Split, split-K count,
// rasterisation group/swizzle) forces one configuration: for tuning sweeps and for the tests that run
// every kernel. A malformed or invalid value is ignored (the normal choice is made).
bool config_override(const GemmProblem& p, Sm90Config& c) {
  const char* v = std::getenv("GEMM_CUDA_CONFIG");
  if (v == nullptr || v[0] == '\0') return false;
  long f[4] = {0, 0, 1, 1};
  const char* q = v;
  for (int i = 0; i < 4; ++i) {
    char* end = nullptr;
    f[i] = std::strtol(q, &end, 10);
    if (end == q) return false;
    q = end;
    if (i < 3) {
      if (*q != ',') return false;
      ++q;
    }
  }
  if (*q != '\0' || f[2] < 1 || f[2] > 64 || f[3] < 1 || f[3] > 64) return false;
  Sm90Config o;
  o.variant = static_cast<Sm90Variant>(f[0]);
  o.split = static_cast<Sm90Split>(f[1]);
  o.splits = static_cast<int32_t>(f[2]);
  o.max_swizzle = static_cast<int32_t>(f[3]);
  if (!config_valid(p, o)) return false;
  c = o;
  return true;
}

}  // namespace

Sm90Config choose_config(const GemmProblem& p) {
  Sm90Config forced;
  if (config_override(p, forced)) return forced;
  if (exact_accumulation_requested()) return choose_generic(p, true);
  if (const Sm90Config* t = find_tuned(kTuned, p.m, p.n, p.k)) return *t;
  return choose_generic(p, false);
}

Sm90Config choose_generic_config(const GemmProblem& p) { return choose_generic(p, false); }

size_t workspace_bytes_with(const GemmProblem& p, const Sm90Config& cfg) {
  if (!problem_valid(p) || !config_valid(p, cfg)) return 0;
  return make_plan(p, cfg).total;
}

cudaError_t gemm_with(const GemmProblem& p, const Sm90Config& cfg, void* workspace, size_t workspace_size,
                      cudaStream_t stream) {
  if (!problem_valid(p) || !config_valid(p, cfg)) return cudaErrorInvalidValue;
  return run_plan(p, make_plan(p, cfg), workspace, workspace_size, stream);
}

size_t workspace_bytes(const GemmProblem& p) {
  if (!problem_valid(p)) return 0;
  return workspace_bytes_with(p, choose_config(p));
}

cudaError_t gemm(const GemmProblem& p, void* workspace, size_t workspace_size, cudaStream_t stream) {
  if (!problem_valid(p)) return cudaErrorInvalidValue;
  return gemm_with(p, choose_config(p), workspace, workspace_size, stream);
}

cudaError_t gemm_exact_reference(const GemmProblem& p, cudaStream_t stream) {
  if (!problem_valid(p)) return cudaErrorInvalidValue;
  const int64_t tiles = ceil_div(p.m, 16) * ceil_div(p.n, 16);
  exact_gemm_kernel<<<grid_for(tiles, 1, device_sm_count()), 256, 0, stream>>>(p, nullptr);
  return cudaGetLastError();
}

}  // namespace fp8gemm::cuda
