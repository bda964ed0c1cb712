// The gfx942 (MI300X, CDNA3) architecture layer: every target-specific operation the gemm
// kernels perform goes through these functions, so the same kernel bodies compile
//   * for the GPU (HIP device pass, __HIP_DEVICE_COMPILE__): thin wrappers over clang builtins,
//     always inlined, so the ISA is what a hand-written kernel would give;
//   * for the CPU SIMT emulator (FP8GEMM_SIMT_EMULATION, plain host C++, no HIP): the functions
//     come from gfx942_simt_emulation.h (test infrastructure in tests/emulation/, on the include
//     path of the emulated build only), which implements the same names on a CPU execution layer;
//   * for the host pass of a .hip file: declarations only (device bodies are never emitted there).
//
// API (namespace fp8gemm::arch), all FP8GEMM_DEVICE:
//   lane_id() 0..63, wave_id(), thread_id(), block_threads(), block_id_{x,y,z}(), grid_dim_{x,y,z}()
//   barrier()                        workgroup barrier with LDS fence (__syncthreads semantics)
//   lds_base()                       the workgroup's dynamic LDS buffer (size fixed at launch)
//   lds_load<T>(p), lds_store<T>(p, v)        T in {1, 2, 4, 8, 16}-byte PODs
//   global_load<T>(p), global_store<T>(p, v)  same T set
//   mfma_16x16x32_fp8(a, b, c) -> f32x4, mfma_32x32x16_fp8(a, b, c) -> f32x16
//       wave-wide; a/b = the lane's 8 e4m3fnuz bytes (byte i = item i of AMD's lane layout)
//   shfl(v, src_lane)                ds_bpermute semantics (read v from lane src_lane)
//   opaque(v)                        returns v; hides it from the optimiser (see below)
// Vector types u32x4 / f32x4 / f32x16 are defined here for every mode (the emulator header must
// not redefine them; it sees FP8GEMM_ARCH_TYPES_DEFINED).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8_numerics.h"

#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define FP8GEMM_DEVICE __device__ __forceinline__
#define FP8GEMM_HIP 1
#else
#define FP8GEMM_DEVICE inline
#endif

#if defined(FP8GEMM_SIMT_EMULATION) && defined(__HIP_DEVICE_COMPILE__)
#error "FP8GEMM_SIMT_EMULATION is a host-only build mode"
#endif

namespace fp8gemm::arch {

// ---- vector types ---------------------------------------------------------------------------
// clang's ext_vector_type is what the MFMA builtins take; GCC (the emulator's host build) gets the
// equivalent GNU vector extension (same size, same element indexing with v[i]).
#if defined(__clang__)
typedef uint32_t u32x4 __attribute__((ext_vector_type(4)));
typedef uint32_t u32x2 __attribute__((ext_vector_type(2)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
#else
typedef uint32_t u32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x2 __attribute__((vector_size(8)));
typedef float f32x4 __attribute__((vector_size(16)));
typedef float f32x16 __attribute__((vector_size(64)));
#endif
static_assert(sizeof(u32x4) == 16 && sizeof(u32x2) == 8 && sizeof(f32x4) == 16 && sizeof(f32x16) == 64,
              "vector type sizes");

constexpr int kWaveSize = 64;
constexpr int kLdsBytesPerCu = 65536;

}  // namespace fp8gemm::arch
#define FP8GEMM_ARCH_TYPES_DEFINED 1

#if defined(FP8GEMM_SIMT_EMULATION)

// Provides every function of the API above except opaque(), in namespace fp8gemm::arch, for the CPU
// (tests/emulation/gfx942_simt_emulation.h; the product build never defines the macro).
#include "gfx942_simt_emulation.h"

namespace fp8gemm::arch {
inline int opaque(int v) { return v; }
}  // namespace fp8gemm::arch

#elif defined(FP8GEMM_HIP)

namespace fp8gemm::arch {

#if defined(__HIP_DEVICE_COMPILE__) && !defined(__gfx942__) && !defined(__gfx940__) && !defined(__gfx941__)
#error "gfx942_arch.h: the device pass must target gfx940/941/942 (fp8 MFMA, e4m3fnuz)"
#endif

// Kernels here launch 1-D workgroups of whole waves (the launcher guarantees it), so the wave
// index is uniform; readfirstlane tells the compiler so (keeps it in an SGPR).
FP8GEMM_DEVICE int thread_id() { return static_cast<int>(__builtin_amdgcn_workitem_id_x()); }
FP8GEMM_DEVICE int lane_id() { return static_cast<int>(__builtin_amdgcn_workitem_id_x() & 63u); }
FP8GEMM_DEVICE int wave_id() {
  return __builtin_amdgcn_readfirstlane(static_cast<int>(__builtin_amdgcn_workitem_id_x() >> 6));
}
FP8GEMM_DEVICE int block_threads() { return static_cast<int>(blockDim.x); }
FP8GEMM_DEVICE int block_id_x() { return static_cast<int>(__builtin_amdgcn_workgroup_id_x()); }
FP8GEMM_DEVICE int block_id_y() { return static_cast<int>(__builtin_amdgcn_workgroup_id_y()); }
FP8GEMM_DEVICE int block_id_z() { return static_cast<int>(__builtin_amdgcn_workgroup_id_z()); }
FP8GEMM_DEVICE int grid_dim_x() { return static_cast<int>(gridDim.x); }
FP8GEMM_DEVICE int grid_dim_y() { return static_cast<int>(gridDim.y); }
FP8GEMM_DEVICE int grid_dim_z() { return static_cast<int>(gridDim.z); }

FP8GEMM_DEVICE void barrier() { __syncthreads(); }

FP8GEMM_DEVICE uint8_t* lds_base() {
  extern __shared__ __attribute__((aligned(16))) uint8_t fp8gemm_dynamic_lds[];
  return fp8gemm_dynamic_lds;
}

template <class T>
FP8GEMM_DEVICE T lds_load(const T* p) {
  return *p;
}
template <class T>
FP8GEMM_DEVICE void lds_store(T* p, const T& v) {
  *p = v;
}
template <class T>
FP8GEMM_DEVICE T global_load(const T* p) {
  return *p;
}
template <class T>
FP8GEMM_DEVICE void global_store(T* p, const T& v) {
  *p = v;
}

FP8GEMM_DEVICE f32x4 mfma_16x16x32_fp8(uint64_t a, uint64_t b, f32x4 c) {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(static_cast<long>(a), static_cast<long>(b), c, 0, 0, 0);
#else
  (void)a, (void)b;
  return c;  // host pass: never executed
#endif
}
FP8GEMM_DEVICE f32x16 mfma_32x32x16_fp8(uint64_t a, uint64_t b, f32x16 c) {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(static_cast<long>(a), static_cast<long>(b), c, 0, 0, 0);
#else
  (void)a, (void)b;
  return c;
#endif
}

FP8GEMM_DEVICE int shfl(int v, int src_lane) {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_ds_bpermute(src_lane << 2, v);
#else
  (void)src_lane;
  return v;
#endif
}

// Returns v unchanged, but the compiler can no longer see where it came from. Used inside a loop
// on a lane-dependent base so that the addresses derived from it are recomputed per iteration
// (one v_add each) instead of being hoisted out of the loop and pinning a VGPR apiece.
FP8GEMM_DEVICE int opaque(int v) {
#if defined(__HIP_DEVICE_COMPILE__)
  asm volatile("" : "+v"(v));
#endif
  return v;
}

}  // namespace fp8gemm::arch

#endif  // FP8GEMM_HIP
