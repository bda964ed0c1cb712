// Self-tests of the CPU SIMT execution layer, through kernels written against gfx942_arch.h exactly
// as the gfx942 GEMM is. Built by gemm/tests/test_gfx942_emulation.py:
//   g++ -std=c++20 -O2 -DFP8GEMM_SIMT_EMULATION -Igemm/tests/emulation -Igemm/include simt_selftest.cpp -pthread
// Usage: simt_selftest MODE [ARGS...]   (see main). Exit 0 on success; on an emulated fault the
// KernelError report goes to stderr and the exit status is 2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "driver_io.h"
#include "gfx942_arch.h"

namespace arch = fp8gemm::arch;
namespace simt = fp8gemm::simt;

namespace {

using fp8gemm::simt::driver::read_file;
using fp8gemm::simt::driver::write_file;

// A device buffer holding a copy of `bytes`.
template <class T>
T* upload(const std::vector<uint8_t>& bytes, const char* name, bool writable = false) {
  void* p = simt::device_alloc(bytes.size(), name, writable);
  std::memcpy(p, bytes.data(), bytes.size());
  return static_cast<T*>(p);
}

// ---- one MFMA per lane: registers in, registers out ------------------------------------------
struct MfmaArgs {
  const uint64_t* a;  // [64]
  const uint64_t* b;  // [64]
  const float* c;     // [64][items]
  float* d;           // [64][items]
  int items;          // 4 (16x16x32) or 16 (32x32x16)
  int repeat;         // d = mfma(a, b, d) `repeat` times, starting from c
};

void mfma_kernel(const MfmaArgs& args) {
  const int lane = arch::lane_id();
  const uint64_t a = arch::global_load(args.a + lane);
  const uint64_t b = arch::global_load(args.b + lane);
  if (args.items == 4) {
    arch::f32x4 acc = arch::global_load(reinterpret_cast<const arch::f32x4*>(args.c + lane * 4));
    for (int r = 0; r < args.repeat; ++r) acc = arch::mfma_16x16x32_fp8(a, b, acc);
    arch::global_store(reinterpret_cast<arch::f32x4*>(args.d + lane * 4), acc);
  } else {
    arch::f32x16 acc;
    for (int q = 0; q < 4; ++q) {
      const arch::f32x4 part = arch::global_load(reinterpret_cast<const arch::f32x4*>(args.c + lane * 16 + 4 * q));
      for (int i = 0; i < 4; ++i) acc[4 * q + i] = part[i];
    }
    for (int r = 0; r < args.repeat; ++r) acc = arch::mfma_32x32x16_fp8(a, b, acc);
    for (int q = 0; q < 4; ++q) {
      arch::f32x4 part;
      for (int i = 0; i < 4; ++i) part[i] = acc[4 * q + i];
      arch::global_store(reinterpret_cast<arch::f32x4*>(args.d + lane * 16 + 4 * q), part);
    }
  }
}

// ---- a small tiled GEMM: C[M][N] (fp32) = A[M][K] . B[N][K]^T, fp8 e4m3fnuz, K-major ----------
// 256 threads = 4 waves as 2x2, workgroup tile 64x64, K step 32, staged through LDS with 16-byte
// global loads, zero-filled tails. Wave tile 32x32: 2x2 MFMA 16x16x32 or one 32x32x16 (x2 in K).
struct TileArgs {
  const uint8_t* a;
  const uint8_t* b;
  float* c;
  int m, n, k;
  bool use32;
};
constexpr int kTile = 64, kStepK = 32, kLdsRow = kStepK + 16;  // padded rows, 16-byte aligned

uint64_t lds_operand(const uint8_t* row_base) {
  // 8 consecutive k bytes of one row, as two 4-byte LDS reads (v0 = low dword).
  const uint32_t lo = arch::lds_load(reinterpret_cast<const uint32_t*>(row_base));
  const uint32_t hi = arch::lds_load(reinterpret_cast<const uint32_t*>(row_base + 4));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

void tile_gemm_kernel(const TileArgs& g) {
  uint8_t* s_a = arch::lds_base();
  uint8_t* s_b = s_a + kTile * kLdsRow;
  const int tid = arch::thread_id(), lane = arch::lane_id(), wave = arch::wave_id();
  const int m0 = arch::block_id_y() * kTile, n0 = arch::block_id_x() * kTile;
  const int wm = (wave / 2) * 32, wn = (wave % 2) * 32;
  arch::f32x4 acc16[2][2];
  arch::f32x16 acc32;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int r = 0; r < 4; ++r) acc16[i][j][r] = 0.f;
  for (int r = 0; r < 16; ++r) acc32[r] = 0.f;

  for (int k0 = 0; k0 < g.k; k0 += kStepK) {
    // 64 rows x 32 bytes per operand = 128 16-byte chunks; threads 0..127 load A, 128..255 B.
    const int chunk = tid % 128, row = chunk / 2, col = (chunk % 2) * 16;
    const bool is_a = tid < 128;
    const uint8_t* src = is_a ? g.a : g.b;
    const int rows = is_a ? g.m : g.n, r0 = is_a ? m0 : n0;
    alignas(16) uint8_t bytes[16];
    for (int i = 0; i < 16; ++i) bytes[i] = 0;
    if (r0 + row < rows) {
      if (k0 + col + 16 <= g.k && g.k % 16 == 0) {
        const arch::u32x4 v = arch::global_load(reinterpret_cast<const arch::u32x4*>(src + (r0 + row) * g.k + k0 + col));
        std::memcpy(bytes, &v, 16);
      } else {
        for (int i = 0; i < 16; ++i)
          if (k0 + col + i < g.k) bytes[i] = arch::global_load(src + (r0 + row) * g.k + k0 + col + i);
      }
    }
    arch::u32x4 v;
    std::memcpy(&v, bytes, 16);
    arch::lds_store(reinterpret_cast<arch::u32x4*>((is_a ? s_a : s_b) + row * kLdsRow + col), v);
    arch::barrier();
    if (!g.use32) {
      // 16x16x32: lane supplies row/col lane%16, k = 8*(lane/16) .. +7.
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
          const uint64_t a = lds_operand(s_a + (wm + 16 * i + lane % 16) * kLdsRow + 8 * (lane / 16));
          const uint64_t b = lds_operand(s_b + (wn + 16 * j + lane % 16) * kLdsRow + 8 * (lane / 16));
          acc16[i][j] = arch::mfma_16x16x32_fp8(a, b, acc16[i][j]);
        }
    } else {
      // 32x32x16: row/col lane%32, k = 8*(lane/32) .. +7; two instructions cover K step 32.
      for (int kk = 0; kk < kStepK; kk += 16) {
        const uint64_t a = lds_operand(s_a + (wm + lane % 32) * kLdsRow + kk + 8 * (lane / 32));
        const uint64_t b = lds_operand(s_b + (wn + lane % 32) * kLdsRow + kk + 8 * (lane / 32));
        acc32 = arch::mfma_32x32x16_fp8(a, b, acc32);
      }
    }
    arch::barrier();
  }
  // Epilogue with the D layouts: 16x16: row 4*(lane/16)+r, col lane%16;
  // 32x32: row 8*(r/4) + 4*(lane/32) + r%4, col lane%32.
  if (!g.use32) {
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        for (int r = 0; r < 4; ++r) {
          const int row = m0 + wm + 16 * i + 4 * (lane / 16) + r, col = n0 + wn + 16 * j + lane % 16;
          if (row < g.m && col < g.n) arch::global_store(g.c + row * g.n + col, acc16[i][j][r]);
        }
  } else {
    for (int r = 0; r < 16; ++r) {
      const int row = m0 + wm + 8 * (r / 4) + 4 * (lane / 32) + r % 4, col = n0 + wn + lane % 32;
      if (row < g.m && col < g.n) arch::global_store(g.c + row * g.n + col, acc32[r]);
    }
  }
}

// ---- block reduction through LDS + barriers, then a wave reduction through shfl ----------------
struct ReduceArgs {
  const float* x;  // [blocks][per_block]
  float* out;      // [blocks][2]: LDS tree sum, shfl sum of wave 0's slice
  int per_block;
};

void reduce_kernel(const ReduceArgs& g) {
  float* s = reinterpret_cast<float*>(arch::lds_base());
  const int tid = arch::thread_id(), n = arch::block_threads();
  const float* x = g.x + static_cast<int64_t>(arch::block_id_x()) * g.per_block;
  float part = 0.f;
  for (int i = tid; i < g.per_block; i += n) part += arch::global_load(x + i);
  arch::lds_store(s + tid, part);
  arch::barrier();
  for (int stride = n / 2; stride > 0; stride /= 2) {
    if (tid < stride) arch::lds_store(s + tid, arch::lds_load(s + tid) + arch::lds_load(s + tid + stride));
    arch::barrier();
  }
  if (arch::wave_id() == 0) {
    // Butterfly over the wave with ds_bpermute semantics, integer-valued partial sums (exact).
    int v = static_cast<int>(part);
    for (int off = 32; off > 0; off /= 2) v += arch::shfl(v, arch::lane_id() ^ off);
    if (tid == 0) {
      arch::global_store(g.out + 2 * arch::block_id_x(), arch::lds_load(s));
      arch::global_store(g.out + 2 * arch::block_id_x() + 1, static_cast<float>(v));
    }
  }
}

// ---- kernels that must fail --------------------------------------------------------------------
struct FaultArgs {
  const float* in;  // [n]
  float* out;       // [n]
  int n;
  int mode;
};

enum FaultMode {
  kOobGlobal, kOobLds, kBarrierDeadlock, kMfmaDivergeSite, kMfmaDivergeSkip, kLdsRace, kGlobalRace,
  kReadOnlyStore, kUninitLds, kMisaligned, kSpin, kRawSegv, kStackOverflow, kDivergentBarrier, kSpinLds, kNumFaults
};
const char* const kFaultNames[kNumFaults] = {
    "oob-global", "oob-lds", "barrier-deadlock", "mfma-diverge-site", "mfma-diverge-skip", "lds-race", "global-race",
    "readonly-store", "uninit-lds", "misaligned", "spin-timeout", "raw-segv", "stack-overflow", "divergent-barrier",
    "spin-lds-timeout"};

int deep_recursion(int depth) {
  volatile char pad[4096];
  pad[0] = static_cast<char>(depth);
  return depth > 1000000 ? pad[0] : deep_recursion(depth + 1) + pad[0];
}

void fault_kernel(const FaultArgs& g) {
  const int tid = arch::thread_id(), lane = arch::lane_id(), wave = arch::wave_id();
  const bool culprit_wg = arch::block_id_x() == 1;
  float* s = reinterpret_cast<float*>(arch::lds_base());
  switch (g.mode) {
    case kOobGlobal: {
      // One past the last element, on one lane of one workgroup only.
      const int i = (culprit_wg && wave == 1 && lane == 5) ? g.n : tid % g.n;
      (void)arch::global_load(g.in + i);
      break;
    }
    case kOobLds:  // launched with 128 floats of LDS; one lane stores to float 128
      if (tid < 128) arch::lds_store(s + ((culprit_wg && wave == 1 && lane == 7) ? 128 : tid), 1.f);
      break;
    case kBarrierDeadlock:
      if (culprit_wg && wave == 1 && lane >= 32) return;  // these lanes never arrive
      arch::barrier();
      break;
    case kMfmaDivergeSite: {
      arch::f32x4 c = {0, 0, 0, 0};
      if (culprit_wg && wave == 1 && lane >= 32)
        c = arch::mfma_16x16x32_fp8(0, 0, c);
      else
        c = arch::mfma_16x16x32_fp8(0, 0, c);
      (void)c;
      break;
    }
    case kMfmaDivergeSkip: {
      arch::f32x4 c = {0, 0, 0, 0};
      if (!(culprit_wg && wave == 1 && lane == 63)) c = arch::mfma_16x16x32_fp8(0, 0, c);
      arch::barrier();
      (void)c;
      break;
    }
    case kLdsRace:
      if (tid < 128) {
        arch::lds_store(s + tid, 1.f);
        // No barrier: thread tid reads what thread tid-1 wrote.
        if (tid > 0) (void)arch::lds_load(s + tid - 1);
      }
      break;
    case kGlobalRace:
      // Every workgroup writes the same element tid.
      arch::global_store(g.out + tid % g.n, 1.f);
      break;
    case kReadOnlyStore:
      if (culprit_wg && tid == 3) arch::global_store(const_cast<float*>(g.in), 1.f);
      break;
    case kUninitLds:
      if (tid < 127) arch::lds_store(s + tid, 1.f);
      arch::barrier();
      (void)arch::lds_load(s + tid % 128);  // slot 127 was never written
      break;
    case kMisaligned:
      (void)arch::global_load(reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(g.in) + 2));
      break;
    case kSpin:
      // Waits for a flag no one sets; only the launch timeout ends it.
      while (culprit_wg && arch::global_load(g.in) == 0.f) {
      }
      break;
    case kRawSegv:
      if (culprit_wg && tid == 65) {
        volatile float* p = nullptr;
        *p = 1.f;
      }
      break;
    case kStackOverflow:
      if (culprit_wg && tid == 66) (void)deep_recursion(0);
      break;
    case kSpinLds:
      // Waits for another lane to raise an LDS flag: cannot work without a barrier in between
      // (on the GPU it is a race; here the spinning fiber never yields). The timeout reports it.
      if (tid == 0) arch::lds_store(s, 0.f);
      arch::barrier();
      if (culprit_wg && tid == 70)
        while (arch::lds_load(s) == 0.f) {
        }
      break;
    case kDivergentBarrier:
      if (culprit_wg && wave == 1)
        arch::barrier();
      else
        arch::barrier();
      break;
  }
}

// ---- hand-off between workgroups through an atomic ticket (the stream-K protocol) --------------
// Every workgroup writes its part, releases it and takes a ticket; the last one acquires and sums
// all parts. The modes leave out one step each (the emulator must report the read race) or touch
// the ticket with a plain load (reported as mixed plain/atomic access).
enum HandoffMode { kHandoffOk, kNoRelease, kNoAcquire, kNoBarrier, kPlainTicket, kNumHandoffModes };
const char* const kHandoffFaults[kNumHandoffModes] = {"", "handoff-no-release", "handoff-no-acquire",
                                                      "handoff-no-barrier", "handoff-plain-ticket"};

struct HandoffArgs {
  float* parts;      // [workgroups][256]
  uint32_t* ticket;  // zeroed by the host
  float* out;        // [256]: written by the last workgroup
  int mode;
};

void handoff_kernel(const HandoffArgs& g) {
  const int tid = arch::thread_id(), wg = arch::block_id_x(), n = arch::grid_dim_x();
  uint32_t* const flag = reinterpret_cast<uint32_t*>(arch::lds_base());
  arch::global_store(g.parts + wg * 256 + tid, static_cast<float>(wg * 1000 + tid));
  if (g.mode != kNoRelease) arch::fence_release_agent();
  if (g.mode != kNoBarrier) arch::barrier();
  if (tid == 0) arch::lds_store(flag, arch::atomic_add_agent(g.ticket, 1u));
  arch::barrier();
  const bool last = arch::lds_load(flag) == static_cast<uint32_t>(n - 1);
  if (g.mode == kPlainTicket && tid == 1) (void)arch::global_load(g.ticket);
  if (!last) return;
  if (g.mode != kNoAcquire) arch::fence_acquire_agent();
  float sum = 0.f;
  for (int w = 0; w < n; ++w) sum += arch::global_load(g.parts + w * 256 + tid);
  arch::global_store(g.out + tid, sum);
}

void launch_handoff(int workgroups, int mode, const std::vector<int64_t>& order, const std::string& name) {
  HandoffArgs g{};
  g.mode = mode;
  g.parts = static_cast<float*>(simt::device_alloc(sizeof(float) * 256 * workgroups, "parts"));
  g.ticket = static_cast<uint32_t*>(simt::device_alloc(sizeof(uint32_t), "ticket", true, 0));
  g.out = static_cast<float*>(simt::device_alloc(sizeof(float) * 256, "out"));
  simt::options().workgroup_order = order;
  simt::launch(simt::Dim3{workgroups, 1, 1}, 256, 16, handoff_kernel, g, name);
  simt::options().workgroup_order.clear();
  // The sums (exact: integers below 2^24), then the order the tickets were taken in.
  for (int t = 0; t < 256; ++t) std::printf("%s%.0f", t ? " " : "", static_cast<double>(g.out[t]));
  std::printf("\n");
  for (const auto& [addr, wgs] : simt::atomic_history())
    for (size_t i = 0; i < wgs.size(); ++i) std::printf("%s%lld", i ? " " : "", static_cast<long long>(wgs[i]));
  std::printf("\n");
}

int run(int argc, char** argv) {
  if (argc < 2) throw std::runtime_error("usage: simt_selftest MODE ...");
  const std::string mode = argv[1];
  if (mode == "tables") {
    // The compiled-in lane tables, for the tests that compare them with the closed forms (and with
    // AMD's calculator output where it is available).
    const simt::MfmaLayout* ts[2] = {&simt::kMfma16x16x32, &simt::kMfma32x32x16};
    std::printf("{");
    for (int t = 0; t < 2; ++t) {
      const simt::MfmaLayout& L = *ts[t];
      std::printf("%s\"%s\": {\"permuted\": %d, \"M\": %d, \"N\": %d, \"K\": %d, \"d_items\": %d",
                  t ? ", " : "", L.instruction, L.permuted, L.M, L.N, L.K, L.d_items);
      auto dump = [&](const char* name, const signed char (*tab)[8]) {
        std::printf(", \"%s\": [", name);
        for (int l = 0; l < 64; ++l)
          for (int i = 0; i < 8; ++i) std::printf("%s%d", (l || i) ? "," : "", tab[l][i]);
        std::printf("]");
      };
      auto dump16 = [&](const char* name, const signed char (*tab)[16]) {
        std::printf(", \"%s\": [", name);
        for (int l = 0; l < 64; ++l)
          for (int i = 0; i < L.d_items; ++i) std::printf("%s%d", (l || i) ? "," : "", tab[l][i]);
        std::printf("]");
      };
      dump("a_row", L.a_row);
      dump("a_k", L.a_k);
      dump("b_k", L.b_k);
      dump("b_col", L.b_col);
      dump16("d_row", L.d_row);
      dump16("d_col", L.d_col);
      std::printf("}");
    }
    std::printf("}\n");
    return 0;
  }
  if (mode == "fp8") {  // the emulator's e4m3fnuz decoding of all 256 bytes, float64
    double v[256];
    for (int i = 0; i < 256; ++i) v[i] = simt::fnuz_table().v[i];
    write_file(argv[2], v, sizeof v);
    return 0;
  }
  if (mode == "mfma") {  // mfma DIR ITEMS REPEAT: DIR/a.bin b.bin c.bin -> DIR/d.bin
    const std::string dir = argv[2];
    MfmaArgs args{};
    args.items = std::atoi(argv[3]);
    args.repeat = std::atoi(argv[4]);
    args.a = upload<uint64_t>(read_file(dir + "/a.bin"), "a");
    args.b = upload<uint64_t>(read_file(dir + "/b.bin"), "b");
    args.c = upload<float>(read_file(dir + "/c.bin"), "c");
    args.d = static_cast<float*>(simt::device_alloc(64 * args.items * sizeof(float), "d"));
    simt::launch(simt::Dim3{1, 1, 1}, 64, 0, mfma_kernel, args, "mfma_selftest");
    write_file(dir + "/d.bin", args.d, 64 * args.items * sizeof(float));
    return 0;
  }
  if (mode == "tile-gemm") {  // tile-gemm DIR M N K USE32: DIR/a.bin b.bin -> DIR/c.bin
    const std::string dir = argv[2];
    TileArgs g{};
    g.m = std::atoi(argv[3]);
    g.n = std::atoi(argv[4]);
    g.k = std::atoi(argv[5]);
    g.use32 = std::atoi(argv[6]) != 0;
    g.a = upload<uint8_t>(read_file(dir + "/a.bin"), "a");
    g.b = upload<uint8_t>(read_file(dir + "/b.bin"), "b");
    g.c = static_cast<float*>(simt::device_alloc(sizeof(float) * g.m * g.n, "c"));
    const simt::Dim3 grid{(g.n + kTile - 1) / kTile, (g.m + kTile - 1) / kTile, 1};
    simt::launch(grid, 256, 2 * kTile * kLdsRow, tile_gemm_kernel, g, "tile_gemm");
    write_file(dir + "/c.bin", g.c, sizeof(float) * g.m * g.n);
    std::printf("mfma16=%llu mfma32=%llu barriers=%llu\n",
                static_cast<unsigned long long>(simt::stats().mfma16.load()),
                static_cast<unsigned long long>(simt::stats().mfma32.load()),
                static_cast<unsigned long long>(simt::stats().barriers.load()));
    return 0;
  }
  if (mode == "reduce") {  // reduce DIR BLOCKS PER_BLOCK THREADS: DIR/x.bin -> DIR/out.bin
    const std::string dir = argv[2];
    const int blocks = std::atoi(argv[3]);
    ReduceArgs g{};
    g.per_block = std::atoi(argv[4]);
    const int threads = std::atoi(argv[5]);
    g.x = upload<float>(read_file(dir + "/x.bin"), "x");
    g.out = static_cast<float*>(simt::device_alloc(sizeof(float) * 2 * blocks, "out"));
    simt::launch(simt::Dim3{blocks, 1, 1}, threads, sizeof(float) * threads, reduce_kernel, g, "reduce");
    write_file(dir + "/out.bin", g.out, sizeof(float) * 2 * blocks);
    return 0;
  }
  if (mode == "handoff") {  // handoff WORKGROUPS [ORDER...]: the sums, then the ticket order
    std::vector<int64_t> order;
    for (int i = 3; i < argc; ++i) order.push_back(std::atoll(argv[i]));
    launch_handoff(std::atoi(argv[2]), kHandoffOk, order, "handoff");
    return 0;
  }
  if (mode == "fault") {  // fault NAME: must end with a located report
    const std::string name = argv[2];
    for (int i = 1; i < kNumHandoffModes; ++i)
      if (name == kHandoffFaults[i]) {
        simt::options().threads = 1;  // one after another: workgroup 2 is the last, and reads
        launch_handoff(3, i, {0, 1, 2}, "fault_" + name);
        std::printf("fault kernel %s completed without a report\n", name.c_str());
        return 0;
      }
    FaultArgs g{};
    g.mode = -1;
    for (int i = 0; i < kNumFaults; ++i)
      if (name == kFaultNames[i]) g.mode = i;
    if (g.mode < 0) throw std::runtime_error("unknown fault kernel " + name);
    g.n = 256;
    std::vector<uint8_t> zeros(sizeof(float) * g.n, 0);
    g.in = upload<float>(zeros, "in");
    g.out = static_cast<float*>(simt::device_alloc(sizeof(float) * g.n, "out"));
    simt::launch(simt::Dim3{3, 1, 1}, 256, 128 * sizeof(float), fault_kernel, g, std::string("fault_") + name);
    std::printf("fault kernel %s completed without a report\n", name.c_str());
    return 0;
  }
  throw std::runtime_error("unknown mode " + mode);
}

}  // namespace

int main(int argc, char** argv) {
  return fp8gemm::simt::driver::run_main([&] { return run(argc, argv); });
}
