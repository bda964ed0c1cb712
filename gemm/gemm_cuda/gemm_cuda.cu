// Launcher of the Hopper (sm_90a) FP8 block-scaled GEMM backend.
//
// Fast path: both operands K-major with 16-byte aligned rows, e4m3fn, per-row a_scale contiguous
// along M with a 16-byte aligned K-block stride, b_scale contiguous along K, bf16 out row-major
// with 16-byte aligned rows -> one GEMM kernel launch, nothing else. The decode kernel (M <= 64)
// reads the scales and writes out with any strides, so it needs only the operand conditions.
// Everything else is first brought into that form inside the caller's workspace (counted in the
// call's time) by one preparation launch (prepare_kernels.cuh: operand transpose/pad/convert, scale
// copies); rows of out that TMA cannot store go through a staging buffer and a copy.
// See gemm/docs/cuda_sm90.md for the rules.
#include "gemm_cuda.h"
#include "gemm_cuda_config.h"
#include "gemm_shape_dispatch.h"
#include "prepare_kernels.cuh"
#include "sm90_decode.h"
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

using sm90::aligned16;

// Tuned configurations of the 18 challenge benchmark shapes: the fastest correct configuration per
// shape on an H200 (median kernel time, L2 flushed, K-major inputs). Produced and checked by
// `python3 benchmarks/gemm_bench.py --tune` (one device call; the four 256x128 entries replaced theirs
// where that tile was faster in two H200 sweeps, 1024x576x7168 / 1024x512x7168 took the 64-row tiles
// that were fastest in a sweep of every tile on an H100, and 1024x1536x7168 128x96, 0.89 of 128x128's time
// in a same-process A/B on an H100); shapes not listed take choose_generic().
// ------------------------------------------------------------------------------------------------
using SK = Sm90Kernel;
using SS = Sm90Split;
constexpr TunedShape<Sm90Config> kTuned[] = {
    {pack_shape(1024, 1536, 7168), {SK::kTile128x96, SS::kDataParallel, 1, 8}},
    {pack_shape(1024, 3072, 1536), {SK::kTile128x192, SS::kDataParallel, 1, 4}},
    {pack_shape(1024, 576, 7168), {SK::kTile64x96, SS::kDataParallel, 1, 8}},
    {pack_shape(1024, 7168, 256), {SK::kTile256x128, SS::kDataParallel, 1, 4}},
    {pack_shape(1024, 7168, 2048), {SK::kTile256x128, SS::kDataParallel, 1, 8}},
    {pack_shape(1024, 4608, 7168), {SK::kTile128x192, SS::kStreamK, 1, 4}},
    {pack_shape(1024, 7168, 2304), {SK::kTile256x128, SS::kDataParallel, 1, 8}},
    {pack_shape(1024, 512, 7168), {SK::kTile64x64, SS::kDataParallel, 1, 8}},
    {pack_shape(1024, 4096, 512), {SK::kTile128x128, SS::kDataParallel, 1, 8}},
    {pack_shape(6144, 1536, 7168), {SK::kTile192x128, SS::kDataParallel, 1, 4}},
    {pack_shape(6144, 3072, 1536), {SK::kTile192x128, SS::kDataParallel, 1, 8}},
    {pack_shape(6144, 576, 7168), {SK::kTile192x144, SS::kDataParallel, 1, 4}},
    {pack_shape(6144, 7168, 256), {SK::kTile192x128, SS::kDataParallel, 1, 8}},
    {pack_shape(6144, 7168, 2048), {SK::kTile192x128, SS::kDataParallel, 1, 4}},
    {pack_shape(6144, 4608, 7168), {SK::kTile192x128, SS::kDataParallel, 1, 8}},
    {pack_shape(6144, 7168, 2304), {SK::kTile192x128, SS::kDataParallel, 1, 4}},
    {pack_shape(6144, 512, 7168), {SK::kTile192x128, SS::kDataParallel, 1, 8}},
    {pack_shape(6144, 4096, 512), {SK::kTile256x128, SS::kDataParallel, 1, 8}},
};
static_assert(tuned_keys_unique(kTuned), "duplicate shape in the sm90 tuning table");

// GEMM_CUDA_EXACT_ACCUMULATION=1: run the fp16 exact-accumulation kernel (read per call, so a
// process can switch; getenv is a few hundred ns).
bool exact_accumulation_requested() {
  const char* v = std::getenv("GEMM_CUDA_EXACT_ACCUMULATION");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

// GEMM_CUDA_PDL=0: launch the GEMM kernel only after the kernel before it (the preparation pass, or the
// caller's producer of a / a_scale) has completed, instead of as its programmatic dependent (read per call;
// for A/B timing, and a switch for tools that mishandle programmatic dependent launches).
bool overlap_prep_allowed() {
  const char* v = std::getenv("GEMM_CUDA_PDL");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

Sm90Config make_config(SK kernel, SS split = SS::kDataParallel, int32_t splits = 1, int32_t group = 8) {
  Sm90Config c;
  c.kernel = kernel;
  c.split = split;
  c.splits = splits;
  c.group = group;
  return c;
}

// The narrow tiles of problems with a long K and at most about a wave of 128x128 tiles, in the order that
// settles a tie (measured on an H100: 256x4096x7168 in 17.7 us as 128x64 tiles, 18.2 as 64x128).
// min_m: a candidate only from that many rows (128x96 was measured on 1024-2048 rows only).
struct NarrowTile {
  SK kernel;
  int64_t bm, bn;
  int64_t min_m = 1;
};
constexpr NarrowTile kNarrowTiles[] = {{SK::kTile128x64, 128, 64},       {SK::kTile64x128, 64, 128},
                                       {SK::kTile128x128, 128, 128},     {SK::kTile128x96, 128, 96, 129},
                                       {SK::kTile64x64, 64, 64},         {SK::kTile64x96, 64, 96},
                                       {SK::kTile64x48, 64, 48},         {SK::kTile64x32, 64, 32}};

// The data-parallel narrow tile whose busiest CTA loads the fewest operand bytes: (BM + BN) bytes per K
// column and tile, times the tiles per CTA (waves). With a long K and few tiles each CTA streams its
// operand rows from L2 at the rate one SM takes them in, so that load is the time (256x1536x7168: 128
// tiles of 64x48, 112 bytes, against 96 of 64x64, 128 bytes; 512x1536x7168: 128 of 64x96, 160 bytes,
// against 96 of 128x64, 192 bytes; 1024x1536x7168: 128 of 128x96, 224 bytes, against 96 of 128x128, 256
// bytes).
int64_t busiest_cta_bytes(const GemmProblem& p, int64_t sms, int64_t bm, int64_t bn) {
  return (bm + bn) * ceil_div(ceil_div(p.m, bm) * ceil_div(p.n, bn), sms);
}
const NarrowTile& least_loaded(const GemmProblem& p, int64_t sms) {
  const NarrowTile* best = nullptr;
  int64_t best_bytes = 0;
  for (const NarrowTile& t : kNarrowTiles) {
    if (p.m < t.min_m) continue;
    const int64_t bytes = busiest_cta_bytes(p, sms, t.bm, t.bn);
    if (best == nullptr || bytes < best_bytes) best = &t, best_bytes = bytes;
  }
  return *best;
}
Sm90Config least_loaded_tile(const GemmProblem& p, int64_t sms) { return make_config(least_loaded(p, sms).kernel); }

bool row_scales_tma(const float* ptr, int64_t rows, int64_t kb, int64_t s_row, int64_t s_kb, bool cutlass);
bool row_scales_direct(const float* ptr, int64_t rows, int64_t kb, int64_t s_row, int64_t s_kb, bool cutlass);

Sm90Config choose_generic(const GemmProblem& p, bool exact) {
  const int64_t sms = device_sm_count();
  const int64_t kb = p.k_blocks();
  const int64_t tiles = ceil_div(p.m, 128) * ceil_div(p.n, 128);  // 128x128 tiles
  if (exact) return make_config(SK::kCutlass128x128F16, (tiles < sms * 4 && kb >= 8) ? SS::kStreamK : SS::kDataParallel);
  // Up to 64 rows the time is reading the weight once. Tile kernels stream it over the whole K, every CTA
  // its own weight rows, with no K split to reduce; below 17 rows only where they read a_scale in place
  // (else the launcher copies it first, one kernel more). Lab A/Bs on an H100 (kernel time, L2 flushed):
  // * 64x32 tiles where one wave of them covers N (N <= 4224 on 132 SMs) and K is long: from N >= 2048, and
  //   from 33 rows N >= 1536 (8x4096x7168 12.7 us against 14.9 in the decode kernel; 16x2112x7168 9.5
  //   against 10.0; 64x1536x7168 9.7 against 10.6; 8x1536x7168 9.4 against 8.1: the decode kernel's split
  //   fills more SMs than 48 tiles); below 17 rows only with an a_scale TMA reads (one their producer
  //   copies made them slower than the decode kernel: 1x4096x7168 16.5 us against 14.6);
  // * from 17 rows, N >= 4096 on 64x64 tiles, stream-K when the last of several waves is less than half full;
  // * up to 16 rows, 64x64 tiles where one wave of them covers N >= 4096 and K has at least 8 blocks
  //   (8x7168x2048 7.7 us against 8.4; 16x7168x16384 42.1 against 43.4; with an a_scale their producer
  //   copies, 1x7168x2048 7.6 against 8.7 and 1x7168x16384 40.6 against 42.5), except where the 64x32 rule
  //   above declined only for the a_scale (not measured there);
  // * else the decode kernel (its own cost model picks the rows per CTA and the K split).
  if (p.m <= sm90::kDecodeMaxM) {
    const bool sa_tma = row_scales_tma(p.a_scale, p.m, kb, p.a_scale_stride_m, p.a_scale_stride_kb, false);
    const bool sa_direct = row_scales_direct(p.a_scale, p.m, kb, p.a_scale_stride_m, p.a_scale_stride_kb, false);
    const bool tile32 = kb >= 16 && ceil_div(p.n, 32) <= sms && p.n >= (p.m > 32 ? 1536 : 2048);
    if ((p.m > 16 || sa_tma) && tile32) return make_config(SK::kTile64x32);
    if (p.m > 16 && p.n >= 4096) {
      const int64_t items = ceil_div(p.n, 64);
      const double frac = double(items % sms) / double(sms);
      return make_config(SK::kTile64x64, items > sms && frac > 0.0 && frac < 0.5 && kb >= 16 ? SS::kStreamK
                                                                                             : SS::kDataParallel);
    }
    if (sa_direct && !tile32 && kb >= 8 && p.n >= 4096 && ceil_div(p.n, 64) <= sms) return make_config(SK::kTile64x64);
    return make_config(SK::kDecode, SS::kSplitK, 0, 0);
  }
  if ((p.m <= 128 || tiles * 4 <= sms) && kb >= 16) {
    // Up to 128 rows and a weight of at most one wave of 64x64 tiles (N <= 4224 on 132 SMs), or any M with
    // at most a quarter wave of 128x128 tiles (so at most one wave of 64x64): 64x32 tiles over the whole K
    // where one wave of them fills more than half of the SMs (128x2112x7168: 132 tiles; 256x576x7168: 72,
    // 0.85 of the time of 64x64 tiles in a same-process A/B on an H100), else 64x64 stream-K where those
    // tiles fill at most half of the SMs, else the least loaded narrow tile over the whole K
    // (256x1536x7168: 64x48; 384x1024x4096: 64x48).
    const int64_t items = ceil_div(p.m, 64) * ceil_div(p.n, 64);
    const int64_t items32 = ceil_div(p.m, 64) * ceil_div(p.n, 32);
    if (items32 * 2 > sms && items32 <= sms) return make_config(SK::kTile64x32);
    if (items * 2 <= sms) return make_config(SK::kTile64x64, SS::kStreamK);
    if (items <= sms) return least_loaded_tile(p, sms);
  }
  if (p.m <= 128) {
    // Still bound by reading B: stream-K 128x64 tiles when a long K meets too few of them to keep half of
    // the SMs busy; else 128x64 tiles, or the least loaded tile where its busiest CTA loads at most 6/7 of
    // what 128x64's does (128x32768x512: 256 tiles of 128x128, 2 waves of 256 bytes against 4 of 192, 10.9
    // us on an H100 against 11.6; 128x24576x1536: 2 waves of 256 bytes against 3 of 192 are 8/9 of the
    // load, and 128x128 measured 19.0 us against 17.0 for 128x64, the last wave of 128x128 being less than
    // half full).
    const int64_t row_tiles = ceil_div(p.n, 64);
    if (kb >= 48 && row_tiles * 2 <= sms) return make_config(SK::kTile128x64, SS::kStreamK);
    const NarrowTile& least = least_loaded(p, sms);
    return make_config(7 * busiest_cta_bytes(p, sms, least.bm, least.bn) <= 6 * busiest_cta_bytes(p, sms, 128, 64)
                           ? least.kernel
                           : SK::kTile128x64);
  }
  // Work per CTA in 64x128 row-slices of a tile: 128x128 tiles are 2 slices, 192x128 3, 192x144 3.375,
  // 256x128 4; per wave of `sms` tiles, or for an even share plus half a slice of hand-over where the 128x128
  // stream-K rule applies (a long K whose last wave is partial).
  const double waves = double(tiles) / double(sms);
  const double frac = waves - static_cast<double>(static_cast<int64_t>(waves));
  const bool stream_k_128 = kb >= 32 && frac > 0.0 && frac < 0.6;
  const int64_t tiles192 = ceil_div(p.m, 192) * ceil_div(p.n, 128);
  const double work192 = 3.0 * static_cast<double>(ceil_div(tiles192, sms));
  double work128 = 2.0 * static_cast<double>(ceil_div(tiles, sms));
  if (stream_k_128) work128 = std::min(work128, 2.0 * waves + 0.5);
  // 192x128 also takes up to 4 % more estimated work where 128x128 would need stream-K (the estimate
  // leaves out stream-K's hand-over), and up to 3 % more for a short K (<= 12 blocks), where its fewer,
  // larger tiles amortise the per-tile prologue and epilogue better.
  const bool near_tie_with_stream_k = stream_k_128 && work192 > work128 && work192 <= 1.04 * work128;
  const bool short_k_near_tie = kb <= 12 && work192 > work128 && work192 <= 1.03 * work128;
  // At one or two K blocks the per-tile prologue and epilogue are most of the work: up to 15 % more
  // (1024x7168x256: 9 against 8 slices, 12.3 against 12.8 us).
  const bool tiny_k_near_tie = kb <= 2 && work192 > work128 && work192 <= 1.15 * work128;
  // 192x144 only for a long K and when it saves at least 10 % of the per-CTA work against both others
  // (6144x576: 128 tiles, one wave of 3.375 slices, against 4 for 128x128 and 6 for 192x128).
  const int64_t tiles144 = ceil_div(p.m, 192) * ceil_div(p.n, 144);
  const double work144 = 3.375 * static_cast<double>(ceil_div(tiles144, sms));
  if (kb >= 16 && work144 < 0.9 * std::min(work128, work192)) return make_config(SK::kTile192x144);
  // 256x128 where its slices, counted at 0.97 of the others', are no more work: they measured 3-8 %
  // cheaper on an H200 (fewer operand bytes per MAC, the per-tile costs spread over twice the work;
  // 4096x7168x16384: 28 slices against 27.65 for 128x128 stream-K, 5 % faster; 4096x32768x512: 128
  // against 126, 8 % faster), and 2-3 % slower at 4 % more (6144x7168x2048: 44 against 192x128's 42).
  // Not for a single wave of them (1024x4096x512: 128 tiles, 4 % slower than 128x128's 256).
  const int64_t tiles256 = ceil_div(p.m, 256) * ceil_div(p.n, 128);
  const double work256 = 4.0 * static_cast<double>(ceil_div(tiles256, sms));
  if (tiles256 > sms && 0.97 * work256 <= std::min(work128, work192)) return make_config(SK::kTile256x128);
  // 128x192 (3 slices, one temporary) where it needs fewer slices than both 128x128 (stream-K counted)
  // and 192x128 (256x36864x7168: 3 waves of 3 against 128x128 stream-K's 9.2 and 192x128's 15; 116 us on an
  // H100 against 122.6 for 128x128 stream-K; 1024x3072x1536: one wave of 3 against two of 2).
  const int64_t tiles1x192 = ceil_div(p.m, 128) * ceil_div(p.n, 192);
  const double work1x192 = 3.0 * static_cast<double>(ceil_div(tiles1x192, sms));
  if (tiles >= sms && work1x192 < std::min(work128, work192)) return make_config(SK::kTile128x192);
  if (work192 < work128 || (work192 == work128 && kb <= 18) || near_tie_with_stream_k || short_k_near_tie ||
      tiny_k_near_tie)
    return make_config(SK::kTile192x128, SS::kDataParallel, 1, work192 == work128 ? 4 : 8);
  // Less than a wave of 128x128 tiles and a long K: the least loaded narrow tile over the whole K where
  // 128x64 tiles make at most one wave (512x2112x7168: 132 of 128x64; 512x1536x7168: 128 of 64x96, 16.3
  // us on an H100 against 17.3 as 96 of 128x64; 2048x512x7168: 128 of 128x64), all of them at once
  // instead of stream-K pieces (20 % faster on an H200 for M = 256-2048 and N = 512-4096), and where
  // stream-K does not apply.
  if (tiles < sms && kb >= 16 && (ceil_div(p.m, 128) * ceil_div(p.n, 64) <= sms || !stream_k_128))
    return least_loaded_tile(p, sms);
  if (stream_k_128) {
    // The tile kernel's stream-K where it splits only the partial wave; CUTLASS's scheduler otherwise.
    return sm90::stream_k_partial_wave_only(tiles, sms, kb) ? make_config(SK::kTile128x128, SS::kStreamK)
                                                            : make_config(SK::kCutlass128x128, SS::kStreamK, 1, 1);
  }
  return make_config(SK::kTile128x128);
}

// Entry points (sm90_kernel_args.h) of the tile and CUTLASS kernels: the one place that maps a kernel id
// to its code, for the workspace size and the launch. Empty for the decode kernel (its own interface,
// sm90_decode.h) and for an id out of range.
struct KernelEntry {
  size_t (*workspace_bytes)(const sm90::KernelArgs&) = nullptr;
  size_t (*zeroed_bytes)(const sm90::KernelArgs&) = nullptr;
  cudaError_t (*run)(const sm90::KernelArgs&, void*, size_t, cudaStream_t) = nullptr;
};

KernelEntry kernel_entry(SK k) {
#define FP8GEMM_ENTRY(name) KernelEntry{&sm90::name##_workspace_bytes, &sm90::name##_zeroed_bytes, &sm90::name##_run}
  switch (k) {
    case SK::kCutlass128x128: return FP8GEMM_ENTRY(cutlass128x128);
    case SK::kCutlass128x128F16: return FP8GEMM_ENTRY(cutlass128x128_f16);
    case SK::kTile128x128: return FP8GEMM_ENTRY(tile128x128);
    case SK::kTile64x128: return FP8GEMM_ENTRY(tile64x128);
    case SK::kTile128x192: return FP8GEMM_ENTRY(tile128x192);
    case SK::kTile128x64: return FP8GEMM_ENTRY(tile128x64);
    case SK::kTile192x128: return FP8GEMM_ENTRY(tile192x128);
    case SK::kTile192x144: return FP8GEMM_ENTRY(tile192x144);
    case SK::kTile256x128: return FP8GEMM_ENTRY(tile256x128);
    case SK::kTile64x64: return FP8GEMM_ENTRY(tile64x64);
    case SK::kTile64x32: return FP8GEMM_ENTRY(tile64x32);
    case SK::kTile64x48: return FP8GEMM_ENTRY(tile64x48);
    case SK::kTile64x96: return FP8GEMM_ENTRY(tile64x96);
    case SK::kTile128x96: return FP8GEMM_ENTRY(tile128x96);
    case SK::kDecode: break;
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
  bool f16 = false;     // operands converted to fp16 (exact-accumulation kernel)
  bool decode = false;  // the decode kernel: scales and out with any strides, no scale copies or staging
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
  size_t kernel_zeroed = 0;  // bytes at off_kernel that must be zero when the GEMM kernel starts
  sm90::KernelArgs args;  // pointers into the workspace are offsets until run_plan() rebases them
  sm90::DecodeArgs decode_args;
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

// a_scale laid out as the kernels read it, (rows, kb) contiguous along rows: row_scales_tma where TMA reads it
// (a 16-byte aligned base and K-block stride, fp8_act_quant's layout: (ceil4(M), kb) storage; CUTLASS's kernels
// also want rows % 4 == 0), row_scales_direct where the kernel reads it in place, which the tile kernels also
// do with any K-block stride up to sm90::kTileScaleCopyMaxRows rows (a (1, kb) tensor; their producer copies
// it).
int64_t row_scales_ld(int64_t rows, int64_t kb, int64_t s_row, int64_t s_kb) {
  if (s_row != 1 && rows > 1) return -1;
  const int64_t ld = kb == 1 ? round_up(rows, 4) : s_kb;  // one K block: the stride is never used
  return ld >= rows && ld <= INT32_MAX ? ld : -1;
}
bool row_scales_tma(const float* ptr, int64_t rows, int64_t kb, int64_t s_row, int64_t s_kb, bool cutlass) {
  const int64_t ld = row_scales_ld(rows, kb, s_row, s_kb);
  return ld > 0 && sm90::sfa_tma_readable(ptr, ld) && !(cutlass && rows % 4 != 0);
}
bool row_scales_direct(const float* ptr, int64_t rows, int64_t kb, int64_t s_row, int64_t s_kb, bool cutlass) {
  if (!cutlass && rows <= sm90::kTileScaleCopyMaxRows) return row_scales_ld(rows, kb, s_row, s_kb) > 0;
  return row_scales_tma(ptr, rows, kb, s_row, s_kb, cutlass);
}

bool block_scales_direct(int64_t nb, int64_t kb, int64_t s_nb, int64_t s_kb) {
  if (s_kb != 1 && kb > 1) return false;
  const int64_t ld = nb == 1 ? kb : s_nb;
  return ld >= kb && ld <= INT32_MAX;
}

Plan make_plan(const GemmProblem& p, const Sm90Config& cfg) {
  Plan pl;
  pl.cfg = cfg;
  pl.f16 = cfg.kernel == SK::kCutlass128x128F16;
  pl.decode = cfg.kernel == SK::kDecode;
  // fp16 copies hold fnuz values exactly: no reinterpretation, no flag, no fallback.
  pl.fnuz = p.format == Fp8Format::kE4M3FNUZ && !pl.f16;
  const int64_t kb = p.k_blocks();

  pl.convert_a = pl.f16 || pl.fnuz || !operand_direct(p.a, p.m, p.k, p.a_stride_m, p.a_stride_k);
  pl.convert_b = pl.f16 || pl.fnuz || !operand_direct(p.b, p.n, p.k, p.b_stride_n, p.b_stride_k);
  if (p.k % 16 != 0) pl.convert_a = pl.convert_b = true;  // TMA rows must be 16-byte multiples
  // Padded K: 16 bytes of fp8, or 8 fp16 elements (16 bytes).
  pl.k_kernel = (pl.convert_a || pl.convert_b) ? round_up(p.k, pl.f16 ? 8 : 16) : p.k;
  const size_t elem = pl.f16 ? 2 : 1;

  const bool cutlass = cfg.kernel == SK::kCutlass128x128 || cfg.kernel == SK::kCutlass128x128F16;
  pl.copy_sfa =
      !pl.decode && !row_scales_direct(p.a_scale, p.m, kb, p.a_scale_stride_m, p.a_scale_stride_kb, cutlass);
  pl.sfa_rows = pl.copy_sfa ? round_up(p.m, 4) : p.m;
  pl.copy_sfb = !pl.decode && !block_scales_direct(p.n_blocks(), kb, p.b_scale_stride_nb, p.b_scale_stride_kb);

  const int64_t out_ld = effective_ld(p.m, p.out_stride_m, p.n, 8);
  const bool out_direct = p.out_stride_n == 1 && out_ld % 8 == 0 && out_ld >= p.n &&
                          aligned16(p.out);
  pl.stage_out = !pl.decode && !out_direct;
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
  const int64_t sfa_ld = pl.copy_sfa ? pl.sfa_rows : (kb == 1 ? round_up(p.m, 4) : p.a_scale_stride_kb);
  const float* SFB = pl.copy_sfb ? reinterpret_cast<const float*>(pl.off_sfb) : p.b_scale;
  const int64_t sfb_ld = pl.copy_sfb ? kb : (p.n_blocks() == 1 ? kb : p.b_scale_stride_nb);
  void* D = pl.stage_out ? reinterpret_cast<void*>(pl.off_out) : static_cast<void*>(p.out);
  const int64_t ldd = pl.stage_out ? pl.staged_ld : out_ld;

  const float alpha = pl.fnuz ? 0.25f : 1.0f;  // fnuz bits read as fn are 2x per operand
  if (pl.decode) {
    sm90::DecodeArgs& d = pl.decode_args;
    d.m = static_cast<int32_t>(p.m); d.n = static_cast<int32_t>(p.n); d.k = static_cast<int32_t>(pl.k_kernel);
    d.a = A; d.lda = lda; d.b = B; d.ldb = ldb;
    d.sa = p.a_scale; d.sa_stride_m = p.a_scale_stride_m; d.sa_stride_kb = p.a_scale_stride_kb;
    d.sb = p.b_scale; d.sb_stride_nb = p.b_scale_stride_nb; d.sb_stride_kb = p.b_scale_stride_kb;
    d.out = p.out; d.out_stride_m = p.out_stride_m; d.out_stride_n = p.out_stride_n;
    d.alpha = alpha;
    d.rows_per_cta = cfg.group == 64 || cfg.group == 128 ? cfg.group : 0;
    d.k_split = cfg.splits >= 1 && cfg.splits <= sm90::kDecodeMaxSplit ? cfg.splits : 0;
    d.sm_count = device_sm_count();
    pl.total = align256(off);
    return pl;
  }
  a.k = static_cast<int32_t>(pl.k_kernel);
  a.m = static_cast<int32_t>(p.m); a.n = static_cast<int32_t>(p.n);
  a.a = A; a.lda = lda; a.b = B; a.ldb = ldb;
  a.sfa = SFA; a.sfa_ld = static_cast<int32_t>(sfa_ld); a.sfa_rows = static_cast<int32_t>(pl.sfa_rows);
  a.sfb = SFB; a.sfb_ld = static_cast<int32_t>(sfb_ld); a.sfb_rows = static_cast<int32_t>(p.n_blocks());
  a.d = D; a.ldd = ldd;
  a.alpha = alpha;
  a.decomposition = static_cast<sm90::Decomposition>(cfg.split);
  a.splits = std::max<int32_t>(1, cfg.splits);
  a.group = std::max<int32_t>(1, cfg.group);
  a.sm_count = device_sm_count();
  pl.args = a;

  const KernelEntry entry = kernel_entry(cfg.kernel);
  if (entry.workspace_bytes != nullptr) pl.kernel_ws = entry.workspace_bytes(a);
  if (entry.zeroed_bytes != nullptr) pl.kernel_zeroed = entry.zeroed_bytes(a);
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

template <class T>
T* at(void* base, size_t off) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(base) + off);
}

// The workspace bytes a producer kernel may clear for the GEMM kernel (its split flags), where nothing runs
// between the two: no preparation pass, no fnuz flag.
WorkspaceRange zero_range(const Plan& pl) {
  if (pl.decode || pl.fnuz || pl.convert_a || pl.convert_b || pl.copy_sfa || pl.copy_sfb || pl.kernel_zeroed == 0)
    return {};
  return {pl.off_kernel, pl.kernel_zeroed};
}

cudaError_t run_plan(const GemmProblem& p, const Plan& pl, void* workspace, size_t workspace_size,
                     cudaStream_t stream, bool after_producer, bool producer_zeroed) {
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
  auto rebase = [&](const void* rel, bool in_ws) -> const void* {
    return in_ws ? static_cast<const void*>(static_cast<const uint8_t*>(workspace) + reinterpret_cast<uintptr_t>(rel))
                 : rel;
  };
  // The GEMM kernel overlaps the kernel before it: the preparation pass when there is one (the flag memset
  // of the fnuz path comes before that pass), else the caller's producer of a / a_scale.
  const bool overlap = (prep_ctas > 0 || (after_producer && !pl.fnuz)) && overlap_prep_allowed();
  if (pl.decode) {
    sm90::DecodeArgs d = pl.decode_args;
    d.a = rebase(d.a, pl.convert_a);
    d.b = rebase(d.b, pl.convert_b);
    d.overlap_previous = overlap;
    err = sm90::decode_run(d, stream);
  } else {
    sm90::KernelArgs args = pl.args;
    args.a = rebase(args.a, pl.convert_a);
    args.b = rebase(args.b, pl.convert_b);
    args.sfa = static_cast<const float*>(rebase(args.sfa, pl.copy_sfa));
    args.sfb = static_cast<const float*>(rebase(args.sfb, pl.copy_sfb));
    args.d = const_cast<void*>(rebase(args.d, pl.stage_out));
    args.overlap_previous = overlap;
    args.workspace_zeroed = after_producer && producer_zeroed && zero_range(pl).bytes > 0;
    // Neither that pass (unless it converts b) nor the caller's producer writes b: the tile kernel may
    // start loading it before its wait.
    args.b_before_wait = overlap && !pl.convert_b;
    void* kernel_ws = pl.kernel_ws > 0 ? at<void>(workspace, pl.off_kernel) : nullptr;
    const KernelEntry e = kernel_entry(pl.cfg.kernel);
    err = e.run != nullptr ? e.run(args, kernel_ws, pl.kernel_ws, stream) : cudaErrorInvalidValue;
  }
  if (err != cudaSuccess) return err;

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
  if (static_cast<int>(cfg.split) < 0 || static_cast<int>(cfg.split) > 3) return false;
  if (cfg.kernel == SK::kDecode) return p.m <= sm90::kDecodeMaxM;
  return kernel_entry(cfg.kernel).run != nullptr;
}

const char* const kKernelNames[kSm90KernelCount] = {"cutlass128x128", "cutlass128x128_f16", "tile128x128",
                                                    "tile64x128",     "tile128x192",        "tile128x64",
                                                    "tile192x128",    "tile192x144",        "decode",
                                                    "tile64x64",      "tile64x32",          "tile256x128",
                                                    "tile64x48",      "tile64x96",          "tile128x96"};
const char* const kSplitNames[] = {"dp", "splitk", "streamk", "heuristic"};

// Index of the name that `text` starts with, followed by `sep`; -1 if none.
template <size_t N>
int parse_name(const char*& text, const char* const (&names)[N], char sep) {
  for (size_t i = 0; i < N; ++i) {
    const size_t len = std::strlen(names[i]);
    if (std::strncmp(text, names[i], len) == 0 && text[len] == sep) {
      text += len + (sep != '\0');
      return static_cast<int>(i);
    }
  }
  return -1;
}

// GEMM_CUDA_CONFIG="kernel,split,splits,group" forces one configuration (a tuning tool; see
// docs/cuda_sm90.md): kernel one of kKernelNames, split one of dp / splitk / streamk / heuristic, splits
// and group integers (1-256; decode: splits = CTAs per weight tile along K, group = weight rows per CTA).
// A malformed value, or one the problem cannot run, is ignored and the normal choice is made.
bool config_override(const GemmProblem& p, Sm90Config& c) {
  const char* v = std::getenv("GEMM_CUDA_CONFIG");
  if (v == nullptr || v[0] == '\0') return false;
  const int kernel = parse_name(v, kKernelNames, ',');
  const int split = kernel < 0 ? -1 : parse_name(v, kSplitNames, ',');
  if (split < 0) return false;
  long f[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    char* end = nullptr;
    f[i] = std::strtol(v, &end, 10);
    if (end == v || *end != (i == 0 ? ',' : '\0') || f[i] < 1 || f[i] > 256) return false;
    v = end + 1;
  }
  const Sm90Config o = make_config(static_cast<SK>(kernel), static_cast<SS>(split), static_cast<int32_t>(f[0]),
                                   static_cast<int32_t>(f[1]));
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

const char* kernel_name(Sm90Kernel k) {
  const int i = static_cast<int>(k);
  return i >= 0 && i < kSm90KernelCount ? kKernelNames[i] : "unknown";
}

size_t workspace_bytes_with(const GemmProblem& p, const Sm90Config& cfg) {
  if (!problem_valid(p) || !config_valid(p, cfg)) return 0;
  return make_plan(p, cfg).total;
}

cudaError_t gemm_with(const GemmProblem& p, const Sm90Config& cfg, void* workspace, size_t workspace_size,
                      cudaStream_t stream, bool after_producer, bool producer_zeroed) {
  if (!problem_valid(p) || !config_valid(p, cfg)) return cudaErrorInvalidValue;
  return run_plan(p, make_plan(p, cfg), workspace, workspace_size, stream, after_producer, producer_zeroed);
}

size_t workspace_bytes(const GemmProblem& p) {
  if (!problem_valid(p)) return 0;
  return workspace_bytes_with(p, choose_config(p));
}

WorkspaceRange workspace_zero_range(const GemmProblem& p) {
  if (!problem_valid(p)) return {};
  return zero_range(make_plan(p, choose_config(p)));
}

cudaError_t gemm(const GemmProblem& p, void* workspace, size_t workspace_size, cudaStream_t stream,
                 bool after_producer, bool producer_zeroed) {
  if (!problem_valid(p)) return cudaErrorInvalidValue;
  return gemm_with(p, choose_config(p), workspace, workspace_size, stream, after_producer, producer_zeroed);
}

cudaError_t gemm_exact_reference(const GemmProblem& p, cudaStream_t stream) {
  if (!problem_valid(p)) return cudaErrorInvalidValue;
  const int64_t tiles = ceil_div(p.m, 16) * ceil_div(p.n, 16);
  exact_gemm_kernel<<<grid_for(tiles, 1, device_sm_count()), 256, 0, stream>>>(p, nullptr);
  return cudaGetLastError();
}

int device_sm_count() {
  // Cached per device: cudaDeviceGetAttribute is cheap, but the launch paths run on every call.
  static std::atomic<int> cache[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 132;
  if (dev < 64) {
    const int v = cache[dev].load(std::memory_order_relaxed);
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

}  // namespace fp8gemm::cuda
