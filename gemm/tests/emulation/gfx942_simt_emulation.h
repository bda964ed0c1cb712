// The CPU side of the gfx942 architecture layer (gfx942_arch.h includes this when
// FP8GEMM_SIMT_EMULATION is defined): the same names as the HIP side, implemented on the SIMT
// execution layer of simt_runtime.h. Every function must be called from a lane of a kernel run
// by fp8gemm::simt::launch. The trailing std::source_location parameters are defaulted; kernels
// call these exactly as on the GPU, and reports name the kernel line.
#pragma once

#if !defined(FP8GEMM_SIMT_EMULATION)
#error "gfx942_simt_emulation.h is the FP8GEMM_SIMT_EMULATION build of gfx942_arch.h; include gfx942_arch.h"
#endif
#if !defined(FP8GEMM_ARCH_TYPES_DEFINED)
#error "include gfx942_arch.h (it defines the vector types), not gfx942_simt_emulation.h directly"
#endif

#include <cstring>
#include <source_location>
#include <type_traits>

#include "simt_mfma.h"
#include "simt_runtime.h"

namespace fp8gemm::arch {

namespace simt_detail = ::fp8gemm::simt::detail;

inline int lane_id() { return simt_detail::current_lane("lane_id").lane; }
inline int wave_id() { return simt_detail::current_lane("wave_id").wave; }
inline int thread_id() { return simt_detail::current_lane("thread_id").tid; }
inline int block_threads() { return simt_detail::current_lane("block_threads").wg->n_lanes; }
inline int block_id_x() { return static_cast<int>(simt_detail::current_lane("block_id_x").wg->x); }
inline int block_id_y() { return static_cast<int>(simt_detail::current_lane("block_id_y").wg->y); }
inline int block_id_z() { return static_cast<int>(simt_detail::current_lane("block_id_z").wg->z); }
inline int grid_dim_x() { return static_cast<int>(simt_detail::current_lane("grid_dim_x").wg->launch->grid.x); }
inline int grid_dim_y() { return static_cast<int>(simt_detail::current_lane("grid_dim_y").wg->launch->grid.y); }
inline int grid_dim_z() { return static_cast<int>(simt_detail::current_lane("grid_dim_z").wg->launch->grid.z); }

inline void barrier(std::source_location site = std::source_location::current()) { simt_detail::barrier(site); }

inline uint8_t* lds_base() {
  simt_detail::Lane& l = simt_detail::current_lane("lds_base");
  if (l.wg->lds == nullptr) simt_detail::fault("lds_base() in a kernel launched with 0 bytes of LDS");
  return l.wg->lds;
}

template <class T>
inline T lds_load(const T* p, std::source_location site = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "LDS accesses move PODs");
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "LDS accesses are 1, 2, 4, 8 or 16 bytes");
  simt_detail::Lane& l = simt_detail::current_lane("lds_load");
  simt_detail::lds_check(l, p, sizeof(T), alignof(T), false, site);
  T v;
  std::memcpy(static_cast<void*>(&v), p, sizeof(T));
  return v;
}

template <class T>
inline void lds_store(T* p, const T& v, std::source_location site = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "LDS accesses move PODs");
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "LDS accesses are 1, 2, 4, 8 or 16 bytes");
  simt_detail::Lane& l = simt_detail::current_lane("lds_store");
  simt_detail::lds_check(l, p, sizeof(T), alignof(T), true, site);
  std::memcpy(static_cast<void*>(p), &v, sizeof(T));
}

template <class T>
inline T global_load(const T* p, std::source_location site = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "global accesses move PODs");
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "global accesses are 1, 2, 4, 8 or 16 bytes");
  simt_detail::Lane& l = simt_detail::current_lane("global_load");
  simt_detail::global_check(l, p, sizeof(T), alignof(T), false, site);
  T v;
  std::memcpy(static_cast<void*>(&v), p, sizeof(T));
  return v;
}

template <class T>
inline void global_store(T* p, const T& v, std::source_location site = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "global accesses move PODs");
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
                "global accesses are 1, 2, 4, 8 or 16 bytes");
  simt_detail::Lane& l = simt_detail::current_lane("global_store");
  simt_detail::global_check(l, p, sizeof(T), alignof(T), true, site);
  std::memcpy(static_cast<void*>(p), &v, sizeof(T));
}

// The launch's argument object (launch(..., body, args)); T must be its type (checked by size).
template <class T>
inline T kernel_arg(std::source_location site = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are PODs");
  simt_detail::Lane& l = simt_detail::current_lane("kernel_arg");
  const simt_detail::LaunchState& ls = *l.wg->launch;
  if (ls.args == nullptr || ls.args_size != sizeof(T))
    simt_detail::fault("kernel_arg<T>() with sizeof(T) = " + std::to_string(sizeof(T)) + " but the launch's argument has " +
                       std::to_string(ls.args_size) + " bytes at " + simt_detail::site_str(site));
  T v;
  std::memcpy(static_cast<void*>(&v), ls.args, sizeof(T));
  return v;
}

// Agent-scope synchronisation between workgroups (the hand-off model of simt_runtime.h).
inline uint32_t atomic_add_agent(uint32_t* p, uint32_t v, std::source_location site = std::source_location::current()) {
  return simt_detail::atomic_add_u32(p, v, site);
}
inline uint32_t atomic_inc_agent(uint32_t* p, uint32_t limit, std::source_location site = std::source_location::current()) {
  return simt_detail::atomic_inc_u32(p, limit, site);
}
inline void fence_release_agent(std::source_location site = std::source_location::current()) {
  simt_detail::fence_release(site);
}
inline void fence_acquire_agent(std::source_location site = std::source_location::current()) {
  simt_detail::fence_acquire(site);
}

// v_perm_b32 for selectors 0..7 (the only ones the kernels use): byte i of the result is byte
// sel_i of the 8-byte value hi:lo.
inline uint32_t perm(uint32_t hi, uint32_t lo, uint32_t sel, std::source_location site = std::source_location::current()) {
  const uint64_t v = (uint64_t{hi} << 32) | lo;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t b = (sel >> (8 * i)) & 0xffu;
    if (b > 7) simt_detail::fault("perm selector byte " + std::to_string(b) + " (only 0..7 are emulated) at " + simt_detail::site_str(site));
    r |= static_cast<uint32_t>((v >> (8 * b)) & 0xffu) << (8 * i);
  }
  return r;
}

// Buffer resources: a range over registered global memory. Loads at an offset at or past the range
// return zeros (the GPU's raw-buffer range check); a load that starts inside and ends outside the
// range is reported (the kernels never straddle, so it would be an indexing bug); in-range loads
// are ordinary checked global loads.
struct BufferRsrc {
  const uint8_t* base;
  uint32_t bytes;
};

inline BufferRsrc make_buffer(const void* base, uint32_t bytes,
                              std::source_location site = std::source_location::current()) {
  simt_detail::current_lane("make_buffer");
  if (bytes > kBufferMaxBytes)
    simt_detail::fault("buffer resource of " + std::to_string(bytes) + " bytes (at most 2 GiB) at " +
                       simt_detail::site_str(site));
  return BufferRsrc{static_cast<const uint8_t*>(base), bytes};
}

inline BufferRsrc buffer_advance(const BufferRsrc& r, int64_t bytes) {
  simt_detail::current_lane("buffer_advance");
  return BufferRsrc{r.base + bytes, r.bytes};
}

inline BufferRsrc buffer_with_range(const BufferRsrc& r, uint32_t bytes,
                                    std::source_location site = std::source_location::current()) {
  return make_buffer(r.base, bytes, site);
}

template <class T>
inline T buffer_load(const BufferRsrc& r, uint32_t offset, std::source_location site = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "buffer loads move PODs");
  static_assert(sizeof(T) == 16 || sizeof(T) == 8 || sizeof(T) == 4, "buffer loads move 4, 8 or 16 bytes");
  simt_detail::Lane& l = simt_detail::current_lane("buffer_load");
  if (offset >= r.bytes) return T{};
  if (offset + sizeof(T) > r.bytes)
    simt_detail::fault("buffer load of " + std::to_string(sizeof(T)) + " bytes at offset " + std::to_string(offset) +
                       " straddles the end of its " + std::to_string(r.bytes) + "-byte resource at " +
                       simt_detail::site_str(site));
  const uint8_t* p = r.base + offset;
  simt_detail::global_check(l, p, sizeof(T), alignof(T) < 4 ? alignof(T) : 4, false, site);
  T v;
  std::memcpy(static_cast<void*>(&v), p, sizeof(T));
  return v;
}

inline float scalar_load_f32(const BufferRsrc& r, uint32_t offset,
                             std::source_location site = std::source_location::current()) {
  return buffer_load<float>(r, offset, site);
}

inline f32x4 mfma_16x16x32_fp8(uint64_t a, uint64_t b, f32x4 c,
                               std::source_location site = std::source_location::current()) {
  return simt_detail::mfma<f32x4, 4>(::fp8gemm::simt::kMfma16x16x32, simt_detail::WaveOp::kMfma16x16x32,
                                     a, b, c, site);
}

inline f32x16 mfma_32x32x16_fp8(uint64_t a, uint64_t b, f32x16 c,
                                std::source_location site = std::source_location::current()) {
  return simt_detail::mfma<f32x16, 16>(::fp8gemm::simt::kMfma32x32x16,
                                       simt_detail::WaveOp::kMfma32x32x16, a, b, c, site);
}

inline int shfl(int v, int src_lane, std::source_location site = std::source_location::current()) {
  return simt_detail::shfl(v, src_lane, site);
}

}  // namespace fp8gemm::arch
