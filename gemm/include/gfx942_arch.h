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
//   kernel_arg<T>()                  the kernel's argument (its only one), re-read at this point
//   mfma_16x16x32_fp8(a, b, c) -> f32x4, mfma_32x32x16_fp8(a, b, c) -> f32x16
//       wave-wide; a/b = the lane's 8 e4m3fnuz bytes (byte i = item i of AMD's lane layout)
//   shfl(v, src_lane)                ds_bpermute semantics (read v from lane src_lane)
//   perm(hi, lo, sel)                v_perm_b32: byte i of the result is byte (sel >> 8i) & 7 of the
//                                    8-byte value hi:lo (selectors 0..7 only)
//   keep(v)                          v unchanged, but materialised whole in registers (see below)
//   make_buffer(base, bytes)         buffer resource (V#) over [base, base + bytes), bytes <= kBufferMaxBytes;
//                                    every field must be uniform across the wave (kept in SGPRs)
//   buffer_advance(rsrc, bytes)      the same resource with its base moved by `bytes` (64-bit scalar add)
//   buffer_with_range(rsrc, bytes)   the same resource with its range set to `bytes` (<= kBufferMaxBytes)
//   buffer_load<T>(rsrc, offset)     T in {uint32_t, u32x2, u32x4}: zeros when offset >= bytes (an
//                                    access is entirely in range or entirely out: the kernels never
//                                    straddle the end), else the bytes at base + offset
//   scalar_load_f32(rsrc, offset)    the same for one float at a wave-uniform offset (s_buffer_load)
//   atomic_add_agent(p, v) -> old    32-bit global fetch-add, acquire-release at agent scope (all XCDs)
//   atomic_inc_agent(p, limit) -> old  32-bit global_atomic_inc (the new value is 0 when old >= limit, else
//                                    old + 1), acquire-release at agent scope
//   fence_release_agent()            this lane's earlier global writes are released at agent scope
//   fence_acquire_agent()            this lane's later global reads see what was released to an atomic
//                                    its workgroup read (after a barrier) -- the hand-off between
//                                    workgroups: writes; release fence; barrier; one lane's atomic ...
//                                    that lane's atomic; barrier; acquire fence; reads
// Vector types u32x4 / f32x4 / f32x16 are defined here for every mode (the emulator header must
// not redefine them; it sees FP8GEMM_ARCH_TYPES_DEFINED).
// FP8GEMM_ISA_NOTE("text") puts the comment ";; fp8gemm: text" into the gfx942 assembly (nothing in
// any other build); the cost-table test finds the main loops by these notes.
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

// Buffer resources: ranges are at most 2 GiB, so kBufferOob is out of range of every resource.
constexpr uint32_t kBufferMaxBytes = 0x80000000u;
constexpr uint32_t kBufferOob = 0x80000000u;

}  // namespace fp8gemm::arch

#if defined(__HIP_DEVICE_COMPILE__)
#define FP8GEMM_ISA_NOTE(text) asm volatile(";; fp8gemm: " text)
#else
#define FP8GEMM_ISA_NOTE(text) ((void)0)
#endif
#define FP8GEMM_ARCH_TYPES_DEFINED 1

#if defined(FP8GEMM_SIMT_EMULATION)

// Provides every function of the API above except keep(), in namespace fp8gemm::arch, for the CPU
// (tests/emulation/gfx942_simt_emulation.h; the product build never defines the macro).
#include "gfx942_simt_emulation.h"

namespace fp8gemm::arch {
template <class T>
inline void keep(T&) {}
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
// Global memory by address space (1), so loads and stores are global_* instructions even for
// pointers the compiler cannot trace back to a kernel argument (kernel_arg below).
template <class T>
FP8GEMM_DEVICE T global_load(const T* p) {
  typedef const T __attribute__((address_space(1)))* GlobalPtr;
  return *(GlobalPtr)(p);
}
template <class T>
FP8GEMM_DEVICE void global_store(T* p, const T& v) {
  typedef T __attribute__((address_space(1)))* GlobalPtr;
  *(GlobalPtr)(p) = v;
}

// The kernel's argument (its only one, at offset 0 of the kernel argument segment), read again
// from that segment at this point. Inside a long outer loop this keeps the compiler from holding
// every field in SGPRs across the inner loops: the loads cannot be hoisted past the empty asm.
template <class T>
FP8GEMM_DEVICE T kernel_arg() {
  static_assert(sizeof(T) % 4 == 0, "kernel arguments are read as dwords");
#if defined(__HIP_DEVICE_COMPILE__)
  typedef const uint32_t __attribute__((address_space(4)))* KernargPtr;
  KernargPtr p = (KernargPtr)(__builtin_amdgcn_kernarg_segment_ptr());
  asm volatile("" : "+s"(p));
  uint32_t w[sizeof(T) / 4];
#pragma unroll
  for (size_t i = 0; i < sizeof(T) / 4; ++i) w[i] = p[i];
  return __builtin_bit_cast(T, w);
#else
  return T{};  // host pass: never executed
#endif
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

// Agent scope: the whole GPU (every XCD); HIP's __hip_atomic builtins and clang's AMDGPU fence take
// the scope by name, so the same code means the same on every ROCm 6.x/7.x compiler.
FP8GEMM_DEVICE uint32_t atomic_add_agent(uint32_t* p, uint32_t v) {
#if defined(__HIP_DEVICE_COMPILE__)
  typedef uint32_t __attribute__((address_space(1)))* GlobalPtr;
  return __hip_atomic_fetch_add((GlobalPtr)(p), v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
#else
  (void)p, (void)v;
  return 0;  // host pass: never executed
#endif
}
FP8GEMM_DEVICE uint32_t atomic_inc_agent(uint32_t* p, uint32_t limit) {
#if defined(__HIP_DEVICE_COMPILE__)
  typedef uint32_t __attribute__((address_space(1)))* GlobalPtr;
  return __builtin_amdgcn_atomic_inc32((GlobalPtr)(p), limit, __ATOMIC_ACQ_REL, "agent");
#else
  (void)p, (void)limit;
  return 0;  // host pass: never executed
#endif
}
FP8GEMM_DEVICE void fence_release_agent() {
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
#endif
}
FP8GEMM_DEVICE void fence_acquire_agent() {
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
#endif
}

// Leaves v unchanged but makes the compiler hold all of it in registers at this point. Applied to a
// 16-byte LDS fragment whose two halves feed two MFMAs, it keeps the read one ds_read_b128: without
// it the compiler may re-read the halves as narrower loads. Not volatile: it may be scheduled freely.
FP8GEMM_DEVICE uint32_t perm(uint32_t hi, uint32_t lo, uint32_t sel) {
#if defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_perm(hi, lo, sel);
#else
  (void)hi, (void)lo, (void)sel;
  return 0;  // host pass: never executed
#endif
}

template <class T>
FP8GEMM_DEVICE void keep(T& v) {
#if defined(__HIP_DEVICE_COMPILE__)
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

// ---- buffer resources (V#, 128 bits in SGPRs) -------------------------------------------------
typedef int32_t i32x4 __attribute__((ext_vector_type(4)));
typedef int32_t i32x2 __attribute__((ext_vector_type(2)));
struct BufferRsrc {
  i32x4 words;
};

#if defined(__HIP_DEVICE_COMPILE__)
// The LLVM intrinsics behind buffer loads, by their IR names (stable since LLVM 9; the clang
// builtins for them are newer than the ROCm 6.0 compiler).
__device__ i32x4 fp8gemm_raw_buffer_load_v4i32(i32x4 rsrc, int32_t voffset, int32_t soffset, int32_t aux) __asm(
    "llvm.amdgcn.raw.buffer.load.v4i32");
__device__ i32x2 fp8gemm_raw_buffer_load_v2i32(i32x4 rsrc, int32_t voffset, int32_t soffset, int32_t aux) __asm(
    "llvm.amdgcn.raw.buffer.load.v2i32");
__device__ int32_t fp8gemm_raw_buffer_load_i32(i32x4 rsrc, int32_t voffset, int32_t soffset, int32_t aux) __asm(
    "llvm.amdgcn.raw.buffer.load.i32");
__device__ float fp8gemm_s_buffer_load_f32(i32x4 rsrc, int32_t offset, int32_t aux) __asm(
    "llvm.amdgcn.s.buffer.load.f32");
#endif

// gfx9 V#: base address bits [47:0], stride 0 (raw buffer), num_records = bytes, dword 3 =
// DATA_FORMAT 32 (the value every gfx9 target uses for untyped raw buffers).
FP8GEMM_DEVICE BufferRsrc make_buffer(const void* base, uint32_t bytes) {
  const uint64_t a = reinterpret_cast<uint64_t>(base);
  BufferRsrc r;
  r.words[0] = __builtin_amdgcn_readfirstlane(static_cast<int32_t>(static_cast<uint32_t>(a)));
  r.words[1] = __builtin_amdgcn_readfirstlane(static_cast<int32_t>(static_cast<uint32_t>(a >> 32) & 0xffffu));
  r.words[2] = __builtin_amdgcn_readfirstlane(static_cast<int32_t>(bytes));
  r.words[3] = 0x00020000;
  return r;
}

// The words stay readfirstlane results, so the compiler keeps a resource that moves with the K loop
// in SGPRs (a 64-bit pointer carried by the loop instead may be moved to VGPRs).
FP8GEMM_DEVICE BufferRsrc buffer_advance(const BufferRsrc& r, int64_t bytes) {
  const uint64_t a = (static_cast<uint64_t>(static_cast<uint32_t>(r.words[1])) << 32 | static_cast<uint32_t>(r.words[0])) +
                     static_cast<uint64_t>(bytes);
  BufferRsrc o = r;
  o.words[0] = __builtin_amdgcn_readfirstlane(static_cast<int32_t>(static_cast<uint32_t>(a)));
  o.words[1] = __builtin_amdgcn_readfirstlane(static_cast<int32_t>(static_cast<uint32_t>(a >> 32) & 0xffffu));
  return o;
}

FP8GEMM_DEVICE BufferRsrc buffer_with_range(const BufferRsrc& r, uint32_t bytes) {
  BufferRsrc o = r;
  o.words[2] = __builtin_amdgcn_readfirstlane(static_cast<int32_t>(bytes));
  return o;
}

template <class T>
FP8GEMM_DEVICE T buffer_load(const BufferRsrc& r, uint32_t offset) {
#if defined(__HIP_DEVICE_COMPILE__)
  const int32_t off = static_cast<int32_t>(offset);
  if constexpr (sizeof(T) == 16)
    return __builtin_bit_cast(T, fp8gemm_raw_buffer_load_v4i32(r.words, off, 0, 0));
  else if constexpr (sizeof(T) == 8)
    return __builtin_bit_cast(T, fp8gemm_raw_buffer_load_v2i32(r.words, off, 0, 0));
  else
    return __builtin_bit_cast(T, fp8gemm_raw_buffer_load_i32(r.words, off, 0, 0));
#else
  static_assert(sizeof(T) == 16 || sizeof(T) == 8 || sizeof(T) == 4, "buffer loads move 4, 8 or 16 bytes");
  (void)r, (void)offset;
  return T{};  // host pass: never executed
#endif
}

FP8GEMM_DEVICE float scalar_load_f32(const BufferRsrc& r, uint32_t offset) {
#if defined(__HIP_DEVICE_COMPILE__)
  return fp8gemm_s_buffer_load_f32(r.words, static_cast<int32_t>(offset), 0);
#else
  (void)r, (void)offset;
  return 0.0f;
#endif
}

}  // namespace fp8gemm::arch

#endif  // FP8GEMM_HIP
