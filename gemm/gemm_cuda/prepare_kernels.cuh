// The preparation pass of the Hopper backend: everything a call needs before the GEMM kernel, in ONE
// launch. It brings operands that are not K-major (the challenge's M/N-contiguous layout, any other
// strides, K not a multiple of 16, e4m3fnuz) into K-major rows padded to k_pad, and copies scales
// into the layouts the kernels read. Knows nothing of torch: raw pointers, sizes, strides.
//
// Work is a flat list of CTAs: [operand 0 tiles][operand 1 tiles][scale-copy CTAs]. An operand tile
// is 128 rows x 128 K columns (K-contiguous copies: 64 or 32 rows when the tiles are few). Tiles of a
// source that is contiguous along rows with a 4-byte aligned base and K stride take the vectorised
// transpose (16-, 8- or 4-byte loads as the alignment allows, a 4x4 byte transpose in registers, an
// XOR-swizzled shared tile without bank conflicts, 16-byte stores); K-contiguous sources with 4-byte
// aligned rows take straight vector copies; every other tile takes the generic byte path. The same
// paths write fp16 (the exact-accumulation variant's operands) instead of fp8 bytes: 8 K elements
// (16 bytes of fp16) per thread and store instead of 16, so a warp's stores stay contiguous.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fp8gemm::cuda::prep {

constexpr int kThreads = 256;
constexpr int kTileRows = 128, kTileK = 128;
constexpr int kGenericPitch = kTileK + 1;  // bytes per row of the generic path's shared tile

struct OperandJob {
  const uint8_t* src = nullptr;  // (rows, k) with strides (s_row, s_k) in elements
  int64_t rows = 0, s_row = 0, s_k = 0;
  void* dst = nullptr;  // (rows, k_pad) K-major: fp8 bytes, or fp16 when converting to half
  int tile_rows = kTileRows;  // rows per CTA (set_tiling)
  int tiles_k = 0, tiles = 0;
};

struct ScaleJob {
  const float* src = nullptr;  // (rows, cols) with strides (s_r, s_c)
  int64_t rows = 0, cols = 0, s_r = 0, s_c = 0;
  float* dst = nullptr;  // (rows_pad, cols): column-major with ld rows_pad, or row-major with ld cols
  int64_t rows_pad = 0;
  bool dst_col_major = false;
};

struct PrepareArgs {
  OperandJob op[2];
  int n_ops = 0;
  ScaleJob scale[2];
  int n_scales = 0;
  int scale_ctas = 0;  // CTAs after the operand tiles that copy the scales (grid-stride)
  int64_t k = 0, k_pad = 0;
  int fnuz = 0;         // e4m3fnuz source: fp8 out maps it to e4m3fn bytes (0x80 -> 0x7f, *flag raised on
                        // +-240); fp16 out decodes it exactly
  int* flag = nullptr;  // where fnuz +-240 is reported (0x7f / 0xff: not representable after the 2x reinterpretation)
};

__device__ __forceinline__ float decode_fp8(uint8_t b, bool fnuz) {
  const int sign = b >> 7, e = (b >> 3) & 0xf, mant = b & 7;
  if (fnuz) {
    if (b == 0x80) return __int_as_float(0x7fc00000);
    // bias 8; subnormal e == 0: mant * 2^-3 * 2^(1-8)
    const float mag = e == 0 ? ldexpf(float(mant), -10) : ldexpf(float(8 + mant), e - 11);
    return sign ? -mag : mag;
  }
  if ((b & 0x7f) == 0x7f) return __int_as_float(0x7fc00000);
  const float mag = e == 0 ? ldexpf(float(mant), -9) : ldexpf(float(8 + mant), e - 10);
  return sign ? -mag : mag;
}

// fnuz bytes as fn bytes: 0x80 (fnuz NaN; fn would read -0) -> 0x7f (fn NaN); flags 0x7f / 0xff.
__device__ __forceinline__ uint8_t fnuz_byte_to_fn(uint8_t b, bool& special) {
  if ((b & 0x7f) == 0x7f) special = true;
  return b == 0x80 ? uint8_t(0x7f) : b;
}

__device__ __forceinline__ uint32_t fnuz_word_to_fn(uint32_t v, bool& special) {
  uint32_t r = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) r |= uint32_t(fnuz_byte_to_fn(uint8_t(v >> (8 * j)), special)) << (8 * j);
  return r;
}

// Largest of 16, 8 and 4 that divides both an address and a stride in bytes (1: neither): the widest
// load a vectorised path may use at every row or column the stride reaches from the address.
__host__ __device__ __forceinline__ int vec_alignment(const void* p, int64_t stride) {
  const uint64_t x = uint64_t(reinterpret_cast<uintptr_t>(p)) | uint64_t(stride);
  return (x & 15) == 0 ? 16 : (x & 7) == 0 ? 8 : (x & 3) == 0 ? 4 : 1;
}

__device__ __forceinline__ uint2 load8(const uint8_t* p, int align) {
  if (align >= 8) return __ldg(reinterpret_cast<const uint2*>(p));
  const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
  return make_uint2(__ldg(q), __ldg(q + 1));
}

__device__ __forceinline__ uint4 load16(const uint8_t* p, int align) {
  if (align >= 16) return __ldg(reinterpret_cast<const uint4*>(p));
  const uint2 lo = load8(p, align), hi = load8(p + 8, align);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// The first n of 16 consecutive bytes (n < 16, possibly <= 0), zeros after: a chunk that crosses the
// end of a row or column is read byte by byte so that nothing past it is touched.
__device__ __forceinline__ uint4 load_partial16(const uint8_t* p, int64_t n) {
  uint32_t b[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (i < n) b[i / 4] |= uint32_t(__ldg(p + i)) << (8 * (i % 4));
  }
  return make_uint4(b[0], b[1], b[2], b[3]);
}

// What one thread moves per access along K: 16 fp8 elements (16 bytes in, 16 out), or, for fp16 out,
// 8 elements (8 bytes in, 16 out) so that consecutive threads store consecutive 16-byte words.
template <bool kToHalf>
using ChunkVec = std::conditional_t<kToHalf, uint2, uint4>;
template <bool kToHalf>
constexpr int kChunkElems = kToHalf ? 8 : 16;

// Loads the chunk at p, of which `valid` elements lie inside the row (the rest read as 0).
template <bool kToHalf>
__device__ __forceinline__ ChunkVec<kToHalf> load_chunk(const uint8_t* p, int64_t valid, int align) {
  if constexpr (kToHalf) {
    if (valid >= 8) return load8(p, align);
    const uint4 v = load_partial16(p, valid);
    return make_uint2(v.x, v.y);
  } else {
    return valid >= 16 ? load16(p, align) : load_partial16(p, valid);
  }
}

// Stores one chunk of row `row` starting at K element kk (a multiple of the chunk; fp8 rows are padded
// to 16 elements and fp16 rows to 8, so a chunk that starts before k_pad ends inside it): fp8 bytes
// with fnuz mapped to fn, or the exact fp16 value of each byte.
template <bool kToHalf>
__device__ __forceinline__ void store_chunk(void* dst, int64_t row, int64_t kk, int64_t k_pad, ChunkVec<kToHalf> v,
                                            bool fnuz, bool& special) {
  if constexpr (!kToHalf) {
    if (fnuz) {
      v.x = fnuz_word_to_fn(v.x, special);
      v.y = fnuz_word_to_fn(v.y, special);
      v.z = fnuz_word_to_fn(v.z, special);
      v.w = fnuz_word_to_fn(v.w, special);
    }
    *reinterpret_cast<uint4*>(static_cast<uint8_t*>(dst) + row * k_pad + kk) = v;
  } else {
    const uint32_t w[2] = {v.x, v.y};
    uint32_t h[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t pair = w[q / 2] >> (16 * (q % 2));
      const uint32_t lo = __half_as_ushort(__float2half_rn(decode_fp8(uint8_t(pair), fnuz)));
      const uint32_t hi = __half_as_ushort(__float2half_rn(decode_fp8(uint8_t(pair >> 8), fnuz)));
      h[q] = lo | (hi << 16);  // exact: every fp8 value is an fp16 value
    }
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst) + row * k_pad + kk) = make_uint4(h[0], h[1], h[2], h[3]);
  }
}

// Vectorised transpose of one tile. Requires s_row == 1 and `align` (vec_alignment of src and s_k) >= 4.
// Thread t loads 16 consecutive rows of 4 consecutive K columns, transposes the four 4x4 byte blocks with
// byte permutes and stores 16 words (row, 4 K bytes) into the shared tile. The tile's 16-byte granules
// are XOR-swizzled by the row's 16-row chunk, so both the word stores and the later row reads are free
// of bank conflicts.
template <bool kToHalf>
__device__ __forceinline__ bool transpose_tile_vec(const OperandJob& job, int64_t r0, int64_t k0, int64_t k, int64_t k_pad,
                                                   bool fnuz, int align, uint32_t* tile /* [kTileRows][kTileK / 4] */) {
  const int t = threadIdx.x;
  const int chunk = t & 7;   // 16-row chunk of the tile
  const int kquad = t >> 3;  // 4-column group of the tile, 0..31
  const int64_t row = r0 + 16 * chunk;
  uint32_t w[4][4];  // w[j][g]: K column 4*kquad + j, rows 4g..4g+3 of the chunk
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t col = k0 + 4 * kquad + j;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (col < k && row < job.rows) {
      const uint8_t* p = job.src + row + col * job.s_k;
      v = row + 16 <= job.rows ? load16(p, align) : load_partial16(p, job.rows - row);
    }
    w[j][0] = v.x; w[j][1] = v.y; w[j][2] = v.z; w[j][3] = v.w;
  }
  const int swz = chunk << 2;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    // 4x4 byte transpose: in, word j = column j, byte i = row i; out, word i = row i, byte j = column j.
    const uint32_t lo01 = __byte_perm(w[0][g], w[1][g], 0x5140), hi01 = __byte_perm(w[0][g], w[1][g], 0x7362);
    const uint32_t lo23 = __byte_perm(w[2][g], w[3][g], 0x5140), hi23 = __byte_perm(w[2][g], w[3][g], 0x7362);
    const uint32_t rows4[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                               __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
#pragma unroll
    for (int i = 0; i < 4; ++i) tile[(16 * chunk + 4 * g + i) * (kTileK / 4) + (kquad ^ swz)] = rows4[i];
  }
  __syncthreads();
  bool special = false;
  using Vec = ChunkVec<kToHalf>;
  constexpr int kC = kChunkElems<kToHalf>, kPerRow = kTileK / kC, kRowsPerPass = kThreads / kPerRow;
#pragma unroll
  for (int it = 0; it < kTileRows / kRowsPerPass; ++it) {
    const int i = t + it * kThreads;
    const int c = i % kPerRow, r = i / kPerRow;
    const int64_t kk = k0 + kC * c;
    if (r0 + r >= job.rows || kk >= k_pad) continue;
    // Granule g (16 bytes) of row r sits at word 4 * (g ^ ((r >> 4) & 7)).
    const int g = kC * c / 16, word_in_granule = (kC * c % 16) / 4;
    const Vec v = *reinterpret_cast<const Vec*>(tile + r * (kTileK / 4) + 4 * (g ^ ((r >> 4) & 7)) + word_in_granule);
    store_chunk<kToHalf>(job.dst, r0 + r, kk, k_pad, v, fnuz, special);
  }
  return special;
}

// K-contiguous source (s_k == 1, vec_alignment of src and s_row >= 4) that still needs a pass (e4m3fnuz,
// K not a multiple of 16, fp16 out): straight chunk copies of job.tile_rows rows, no shared memory.
// wide: one load per chunk (rows aligned to the chunk's bytes), else 4-byte loads.
template <bool kToHalf>
__device__ __forceinline__ bool copy_tile_kmajor_vec(const OperandJob& job, int64_t r0, int64_t k0, int64_t k,
                                                     int64_t k_pad, bool fnuz, bool wide) {
  using Vec = ChunkVec<kToHalf>;
  constexpr int kC = kChunkElems<kToHalf>, kPerRow = kTileK / kC, kRowsPerPass = kThreads / kPerRow;
  constexpr int kMaxPasses = kTileRows / kRowsPerPass;
  const int passes = job.tile_rows / kRowsPerPass;
  // A thread keeps its K chunk in every pass; only the row moves.
  const int64_t kk = k0 + kC * (threadIdx.x % kPerRow);
  const int64_t row0 = r0 + threadIdx.x / kPerRow;
  if (kk >= k_pad) return false;
  const int align = wide ? 16 : 4;
  const uint8_t* src = job.src + row0 * job.s_row + kk;
  const int64_t pass_stride = int64_t(kRowsPerPass) * job.s_row;
  // All of a thread's loads are issued before its first store (the stores may alias the source as far
  // as the compiler knows, so it would not hoist them): one round trip to memory instead of several.
  Vec v[kMaxPasses];
#pragma unroll
  for (int it = 0; it < kMaxPasses; ++it) {
    v[it] = Vec{};
    if (it < passes && row0 + it * kRowsPerPass < job.rows)
      v[it] = load_chunk<kToHalf>(src + it * pass_stride, k - kk, align);
  }
  bool special = false;
#pragma unroll
  for (int it = 0; it < kMaxPasses; ++it) {
    const int64_t row = row0 + it * kRowsPerPass;
    if (it < passes && row < job.rows) store_chunk<kToHalf>(job.dst, row, kk, k_pad, v[it], fnuz, special);
  }
  return special;
}

// Any other strides: bytes in through a padded shared tile, 4 K elements per store.
template <bool kToHalf>
__device__ __forceinline__ bool convert_tile_generic(const OperandJob& job, int64_t r0, int64_t k0, int64_t k,
                                                     int64_t k_pad, bool fnuz, uint8_t* tile /* [kTileRows][kGenericPitch] */) {
  const int t = threadIdx.x;
  const bool along_rows = job.s_row <= job.s_k;  // walk the smaller stride across the warp
  for (int i = t; i < kTileRows * kTileK; i += kThreads) {
    const int r = along_rows ? i % kTileRows : i / kTileK;
    const int c = along_rows ? i / kTileRows : i % kTileK;
    uint8_t v = 0;
    if (r0 + r < job.rows && k0 + c < k) v = job.src[(r0 + r) * job.s_row + (k0 + c) * job.s_k];
    tile[r * kGenericPitch + c] = v;
  }
  __syncthreads();
  bool special = false;
  for (int i = t; i < kTileRows * (kTileK / 4); i += kThreads) {
    const int w = i % (kTileK / 4), r = i / (kTileK / 4);
    const int64_t kk = k0 + 4 * w;
    if (r0 + r >= job.rows || kk >= k_pad) continue;
    if constexpr (kToHalf) {
      uint32_t h[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float f = (kk + j < k) ? decode_fp8(tile[r * kGenericPitch + 4 * w + j], fnuz) : 0.0f;
        h[j] = __half_as_ushort(__float2half_rn(f));  // exact: every fp8 value is an fp16 value
      }
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(job.dst) + (r0 + r) * k_pad + kk) =
          make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
    } else {
      uint32_t v = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint8_t b = (kk + j < k) ? tile[r * kGenericPitch + 4 * w + j] : uint8_t(0);
        if (fnuz) b = fnuz_byte_to_fn(b, special);
        v |= uint32_t(b) << (8 * j);
      }
      *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(job.dst) + (r0 + r) * k_pad + kk) = v;
    }
  }
  return special;
}

enum class Path { kTranspose, kKMajorCopy, kGeneric };

__host__ __device__ __forceinline__ Path path_of(const OperandJob& j) {
  if (j.s_row == 1 && vec_alignment(j.src, j.s_k) >= 4) return Path::kTranspose;
  if (j.s_k == 1 && vec_alignment(j.src, j.s_row) >= 4) return Path::kKMajorCopy;
  return Path::kGeneric;
}

// Rows per CTA of the K-contiguous copies, from the number of 128-row tiles of the whole pass. Each CTA
// issues all its loads at once and then stores, so with few CTAs the pass waits on one memory round trip
// per SM; smaller CTAs (no shared tile to fill) spread the same bytes over more SMs and more round trips
// in flight. fp16 out never takes 128 rows: its thread chunk is half as wide, so a 128-row CTA would keep
// 8 loads per thread in flight, and 64 rows ran 5-15 % faster on every benchmark shape. Thresholds
// measured on an H200 with 32, 64 and 128 rows per CTA on the challenge shapes.
inline int kmajor_copy_rows(int64_t tiles_of_128_rows, int sms, bool to_half) {
  if (!to_half && tiles_of_128_rows >= 4 * int64_t(sms)) return 128;
  if (tiles_of_128_rows >= 2 * int64_t(sms)) return 64;
  return 32;
}

// Sets a job's tiling once src, rows and strides are set: K tiles of kTileK, `rows_per_cta` rows per
// CTA for the K-contiguous copy path (a multiple of 32 up to kTileRows), kTileRows for the others.
inline void set_tiling(OperandJob& j, int64_t k_pad, int rows_per_cta) {
  j.tile_rows = path_of(j) == Path::kKMajorCopy ? rows_per_cta : kTileRows;
  j.tiles_k = int((k_pad + kTileK - 1) / kTileK);
  j.tiles = j.tiles_k * int((j.rows + j.tile_rows - 1) / j.tile_rows);
}

// Tiles every operand job of `args` (src, rows, strides and args.k_pad set) and returns their CTAs. The
// K-contiguous copies take kmajor_copy_rows' choice for the whole pass, or `rows_per_cta` when it is
// non-zero (a fixed tiling, for measurements).
inline int tile_operand_jobs(PrepareArgs& args, int sms, bool to_half, int rows_per_cta = 0) {
  int64_t full_tiles = 0;  // 128-row tiles of all operands
  for (int i = 0; i < args.n_ops; ++i) {
    set_tiling(args.op[i], args.k_pad, kTileRows);
    full_tiles += args.op[i].tiles;
  }
  const int rows = rows_per_cta > 0 ? rows_per_cta : kmajor_copy_rows(full_tiles, sms, to_half);
  int ctas = 0;
  for (int i = 0; i < args.n_ops; ++i) {
    set_tiling(args.op[i], args.k_pad, rows);
    ctas += args.op[i].tiles;
  }
  return ctas;
}

// kToHalf: operands become fp16 (the exact value of each fp8 byte, fn or fnuz) instead of fp8 bytes.
// fp8 out: at least 6 CTAs (1536 threads) per SM, registers capped at 40; fp16 out needs 47 without
// spilling: 5 CTAs.
template <bool kToHalf>
__global__ void __launch_bounds__(kThreads, kToHalf ? 5 : 6) prepare_kernel(const PrepareArgs args) {
  __shared__ __align__(16) uint8_t smem[kTileRows * kGenericPitch];
  int tile = blockIdx.x;
  int op = 0;
  while (op < args.n_ops && tile >= args.op[op].tiles) tile -= args.op[op++].tiles;
  if (op < args.n_ops) {
    const OperandJob& job = args.op[op];
    const int64_t r0 = int64_t(tile / job.tiles_k) * job.tile_rows, k0 = int64_t(tile % job.tiles_k) * kTileK;
    const bool fnuz = args.fnuz != 0;
    bool special;
    switch (path_of(job)) {
      case Path::kTranspose:
        special = transpose_tile_vec<kToHalf>(job, r0, k0, args.k, args.k_pad, fnuz, vec_alignment(job.src, job.s_k),
                                              reinterpret_cast<uint32_t*>(smem));
        break;
      case Path::kKMajorCopy:
        special = copy_tile_kmajor_vec<kToHalf>(job, r0, k0, args.k, args.k_pad, fnuz,
                                                vec_alignment(job.src, job.s_row) >= kChunkElems<kToHalf>);
        break;
      default:
        special = convert_tile_generic<kToHalf>(job, r0, k0, args.k, args.k_pad, fnuz, smem);
    }
    if (!kToHalf && fnuz) {
      if (__syncthreads_or(special) && threadIdx.x == 0) atomicOr(args.flag, 1);
    }
    return;
  }
  // Scale copies, grid-stride over the scale CTAs, walking each destination contiguously.
  const int64_t first = int64_t(tile) * kThreads + threadIdx.x, step = int64_t(args.scale_ctas) * kThreads;
  for (int s = 0; s < args.n_scales; ++s) {
    const ScaleJob& j = args.scale[s];
    const int64_t total = j.rows_pad * j.cols;
    for (int64_t i = first; i < total; i += step) {
      int64_t r, c;
      if (j.dst_col_major) { r = i % j.rows_pad; c = i / j.rows_pad; }
      else { c = i % j.cols; r = i / j.cols; }
      const float v = r < j.rows ? j.src[r * j.s_r + c * j.s_c] : 0.0f;
      j.dst[i] = v;  // i == c * rows_pad + r (column-major) or r * cols + c (row-major)
    }
  }
}

}  // namespace fp8gemm::cuda::prep
