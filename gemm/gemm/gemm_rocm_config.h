// Kernel configurations of the gfx942 GEMM and the shape-keyed tuned table. Plain host C++ (no
// HIP): the launcher, the CPU SIMT emulator and the host unit tests all include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gemm_problem.h"
#include "gemm_shape_dispatch.h"

namespace fp8gemm::rocm {

// MI300X: 304 CUs (8 XCDs x 38), 4 SIMDs per CU, 64 KiB LDS per CU, 512 VGPRs (arch + acc) per
// lane per SIMD.
constexpr int kNumCUs = 304;
constexpr int kSimdsPerCu = 4;
constexpr int kVgprsPerSimdLane = 512;
constexpr int kLdsBytesPerCu = 65536;

constexpr int kBlockK = 128;  // K step of the main loop == the quantisation block

// One compiled instantiation of the main GEMM kernel. The tuned table and the generic path pick
// among these only (each is listed in kGemmKernels and compiled in gemm_launcher.hip).
enum class GemmKernelId : int32_t {
  kT64x64_W2x2_M16 = 0,      // small M*N and memory-bound shapes: 64x64 tile, 4 waves, 16x16x32 MFMA
  kT128x64_W2x1x2_M32 = 1,   // 128x64 tile, two K halves: 64x64 wave tiles keep LDS under the MFMAs
  kT128x128_W2x2_M32 = 2,    // the workhorse
  kT256x128_W4x2_M32 = 3,    // large M: 8 waves, 2 per SIMD
  kCount = 4,
};

struct GemmKernelShape {
  GemmKernelId id;
  int block_m, block_n;  // workgroup tile
  int waves_m, waves_n;  // wave grid; each wave owns (block_m/waves_m) x (block_n/waves_n)
  int waves_k;           // waves sharing one output sub-tile, each over its share of every K block
  int mfma;              // 16 -> v_mfma_f32_16x16x32_fp8_fp8, 32 -> v_mfma_f32_32x32x16_fp8_fp8
  int waves_per_simd;    // occupancy target: the compiler keeps VGPR+AGPR <= 512 / this
  const char* name;      // instantiation name (docs, tests)

  constexpr int threads() const { return 64 * waves_m * waves_n * waves_k; }
  constexpr int wave_tile_m() const { return block_m / waves_m; }
  constexpr int wave_tile_n() const { return block_n / waves_n; }
  constexpr int wave_k() const { return kBlockK / waves_k; }  // K bytes of a block per wave
  // LDS: the K-major A and B tiles, 128-byte rows with XOR-swizzled 16-byte chunks (no padding, so
  // two 128x128 workgroups fit one CU's 64 KiB); with waves_k > 1 the epilogue reuses it to sum the
  // K shares' fp32 accumulators, which may need more.
  constexpr int tile_lds_bytes() const { return (block_m + block_n) * kBlockK; }
  constexpr int reduce_lds_bytes() const { return (waves_k - 1) * waves_m * waves_n * wave_tile_m() * wave_tile_n() * 4; }
  constexpr int lds_bytes() const {
    return tile_lds_bytes() > reduce_lds_bytes() ? tile_lds_bytes() : reduce_lds_bytes();
  }
};

constexpr GemmKernelShape kGemmKernels[] = {
    // Occupancy targets match what LDS allows (64 KiB per CU): 4, 2, 2 and 1 workgroups per CU.
    {GemmKernelId::kT64x64_W2x2_M16, 64, 64, 2, 2, 1, 16, 4, "t64x64_w2x2_m16"},
    {GemmKernelId::kT128x64_W2x1x2_M32, 128, 64, 2, 1, 2, 32, 2, "t128x64_w2x1x2_m32"},
    {GemmKernelId::kT128x128_W2x2_M32, 128, 128, 2, 2, 1, 32, 2, "t128x128_w2x2_m32"},
    {GemmKernelId::kT256x128_W4x2_M32, 256, 128, 4, 2, 1, 32, 2, "t256x128_w4x2_m32"},
};
constexpr int kNumGemmKernels = static_cast<int>(sizeof(kGemmKernels) / sizeof(kGemmKernels[0]));

constexpr const GemmKernelShape& kernel_shape(GemmKernelId id) { return kGemmKernels[static_cast<int>(id)]; }

constexpr bool kernel_table_consistent() {
  for (int i = 0; i < kNumGemmKernels; ++i) {
    const GemmKernelShape& s = kGemmKernels[i];
    if (static_cast<int>(s.id) != i) return false;
    // b_scale has one value per 128 columns: a tile must not straddle two N scale blocks.
    if (s.block_n > 128 || 128 % s.block_n != 0) return false;
    if (s.mfma != 16 && s.mfma != 32) return false;
    if (s.wave_tile_m() % s.mfma != 0 || s.wave_tile_n() % s.mfma != 0) return false;
    if (s.threads() > 1024 || s.lds_bytes() > kLdsBytesPerCu) return false;
    // The occupancy target must be reachable with whole workgroups within the CU's LDS.
    const int waves_per_wg = s.threads() / 64;
    if (s.waves_per_simd * kSimdsPerCu % waves_per_wg != 0) return false;
    if (s.waves_per_simd * kSimdsPerCu / waves_per_wg * s.lds_bytes() > kLdsBytesPerCu) return false;
    // Global->LDS copy: every thread moves whole 16-byte chunks of both tiles.
    if ((s.block_m * kBlockK / 16) % s.threads() != 0 || (s.block_n * kBlockK / 16) % s.threads() != 0) return false;
    // Each lane's MFMA fragment is whole 16-byte LDS reads of its wave's K share.
    if (s.waves_k < 1 || kBlockK % s.waves_k != 0 || s.wave_k() % (64 / s.mfma * 16) != 0) return false;
  }
  return static_cast<int>(GemmKernelId::kCount) == kNumGemmKernels;
}
static_assert(kernel_table_consistent(), "kGemmKernels is inconsistent");

// How the tiles x K blocks of a call are dealt to workgroups (GemmArgs in gemm_rocm_args.h).
// workgroups == 0: one workgroup per output tile, over all of K. Else W = workgroups workgroups:
// the tiles beyond the last whole wave of W (all tiles when there are at most W) are stream-K
// tiles, whose tile x K block iterations are dealt in equal runs to the first sk_workgroups
// workgroups (0: all W), which do them first; every workgroup then takes whole tiles v, v + W, ...
// of the rest. A stream-K tile shared by several workgroups is finished in the kernel by the last
// of them to arrive. W = tiles x s (sk_workgroups 0) is split-K by s.
struct GemmConfig {
  GemmKernelId kernel;
  int32_t workgroups;
  int32_t sk_workgroups;
};

// Tuned configurations for the 18 timed shapes of the AMD Developer Challenge 2025 fp8-mm task.
// Each entry {kernel, workgroups, sk_workgroups} is the configuration with the lowest estimated
// bound in the ISA-derived cost model (near ties: more resident waves per SIMD, no shared tiles,
// one workgroup per tile, fewer workgroups); gemm/tests/test_rocm_isa.py checks
// that they still are, and `python gemm/tests/rocm_cost.py` prints the table of bounds
// (gemm/docs/rocm_gfx942.md). Not measured on an MI300X.
constexpr TunedShape<GemmConfig> kTunedShapes[] = {
    // M = 1024
    {pack_shape(1024, 1536, 7168), {GemmKernelId::kT256x128_W4x2_M32, 288, 0}},
    {pack_shape(1024, 3072, 1536), {GemmKernelId::kT128x64_W2x1x2_M32, 0, 0}},
    {pack_shape(1024, 576, 7168), {GemmKernelId::kT128x128_W2x2_M32, 280, 0}},
    {pack_shape(1024, 7168, 256), {GemmKernelId::kT64x64_W2x2_M16, 0, 0}},
    {pack_shape(1024, 7168, 2048), {GemmKernelId::kT256x128_W4x2_M32, 0, 0}},
    {pack_shape(1024, 4608, 7168), {GemmKernelId::kT128x64_W2x1x2_M32, 0, 0}},
    {pack_shape(1024, 7168, 2304), {GemmKernelId::kT256x128_W4x2_M32, 0, 0}},
    {pack_shape(1024, 512, 7168), {GemmKernelId::kT128x128_W2x2_M32, 256, 0}},
    {pack_shape(1024, 4096, 512), {GemmKernelId::kT128x64_W2x1x2_M32, 0, 0}},
    // M = 6144
    {pack_shape(6144, 1536, 7168), {GemmKernelId::kT256x128_W4x2_M32, 0, 0}},
    {pack_shape(6144, 3072, 1536), {GemmKernelId::kT256x128_W4x2_M32, 0, 0}},
    {pack_shape(6144, 576, 7168), {GemmKernelId::kT128x64_W2x1x2_M32, 0, 0}},
    {pack_shape(6144, 7168, 256), {GemmKernelId::kT64x64_W2x2_M16, 0, 0}},
    {pack_shape(6144, 7168, 2048), {GemmKernelId::kT128x64_W2x1x2_M32, 0, 0}},
    {pack_shape(6144, 4608, 7168), {GemmKernelId::kT256x128_W4x2_M32, 0, 0}},
    {pack_shape(6144, 7168, 2304), {GemmKernelId::kT256x128_W4x2_M32, 304, 256}},
    {pack_shape(6144, 512, 7168), {GemmKernelId::kT256x128_W4x2_M32, 288, 0}},
    {pack_shape(6144, 4096, 512), {GemmKernelId::kT256x128_W4x2_M32, 0, 0}},
};
static_assert(tuned_keys_unique(kTunedShapes), "two tuned entries share a shape key");

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t tile_count(const GemmKernelShape& s, int64_t m, int64_t n) {
  return ceil_div(m, s.block_m) * ceil_div(n, s.block_n);
}

constexpr int kMaxSplitK = 8;

// The generic path: any M, N, K >= 1. Picks the largest tile that still gives the machine a
// reasonable number of workgroups, then splits K (tiles x split workgroups) when the tiles alone
// cannot fill the CUs and K is long enough that each split keeps >= 4 K blocks.
constexpr GemmConfig generic_config(int64_t m, int64_t n, int64_t k) {
  GemmKernelId id = GemmKernelId::kT64x64_W2x2_M16;
  if (m > 64 && n > 64) {
    if (m >= 4096 && tile_count(kernel_shape(GemmKernelId::kT256x128_W4x2_M32), m, n) >= kNumCUs)
      id = GemmKernelId::kT256x128_W4x2_M32;
    else if (n > 64 && tile_count(kernel_shape(GemmKernelId::kT128x128_W2x2_M32), m, n) >= kNumCUs / 2)
      id = GemmKernelId::kT128x128_W2x2_M32;
    else
      id = GemmKernelId::kT128x64_W2x1x2_M32;
  }
  const int64_t tiles = tile_count(kernel_shape(id), m, n);
  const int64_t k_blocks = ceil_div(k, kBlockK);
  int64_t split = 1;
  if (tiles < kNumCUs / 2 && k_blocks >= 8) {
    split = ceil_div(kNumCUs, tiles);
    if (split > k_blocks / 4) split = k_blocks / 4;
    if (split > kMaxSplitK) split = kMaxSplitK;
    if (split < 1) split = 1;
  }
  return GemmConfig{id, split > 1 ? static_cast<int32_t>(tiles * split) : 0, 0};
}

// The tuned entry for a benchmark shape, else the generic choice. Never fails.
constexpr GemmConfig select_config(int64_t m, int64_t n, int64_t k) {
  const GemmConfig* tuned = find_tuned(kTunedShapes, m, n, k);
  return tuned ? *tuned : generic_config(m, n, k);
}

constexpr bool is_tuned_shape(int64_t m, int64_t n, int64_t k) { return find_tuned(kTunedShapes, m, n, k) != nullptr; }

}  // namespace fp8gemm::rocm
