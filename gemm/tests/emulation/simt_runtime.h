// CPU SIMT execution layer for the gfx942 kernels, used only in the host build with
// FP8GEMM_SIMT_EMULATION. Header-only; needs C++20 (std::source_location), Linux, pthreads.
//
// Model
//   * launch(grid, block_threads, lds_bytes, body, args) runs body(args) once per work-item:
//     workgroups are spread over a few OS threads; inside a workgroup every lane of every wave64
//     is its own fiber (own stack, own registers), scheduled cooperatively on that workgroup's
//     OS thread. A fiber runs until it reaches a collective (barrier, MFMA, shfl) or returns.
//   * barrier(): the lane blocks until every lane of the workgroup has arrived (strict: a lane
//     that returned never arrives). LDS/global epochs advance at each barrier.
//   * wave collectives (MFMA, shfl): the lane deposits its operands and blocks until all lanes
//     of its wave have arrived at the same call site; the last one computes every lane's result.
//   * LDS: one buffer per workgroup, every access bounds/alignment checked and race checked per
//     byte (two lanes touching a byte between the same pair of barriers, one of them writing);
//     reading LDS bytes never written by this workgroup is an error.
//   * global memory: every access must lie inside a buffer registered for the process
//     (device_alloc / register_buffer), stores only into writable ones; writes are race checked
//     per byte (two workgroups writing a byte, or a byte read by a workgroup other than the one
//     that wrote it during the same launch unless an atomic hand-off orders them (below), or two
//     lanes of one workgroup without a barrier).
//   * atomics and agent-scope fences (acquire/release, as HIP's __hip_atomic_* at agent scope):
//     a write of workgroup W is visible to a lane of workgroup R only through this chain: the
//     writing lane's release fence; a barrier of W; an atomic read-modify-write of W on location X
//     (or the writing lane's own atomic on X); an atomic of R on X after it; a barrier of R; the
//     reading lane's acquire fence (or the reading lane's own atomic). Anything less is reported
//     as a read race. Plain and atomic accesses to the same bytes in one launch are reported too.
//   * workgroup order: workgroups are taken in linear order, or in Options::workgroup_order (a
//     permutation); with one worker thread they run one after another in that order, which is
//     how the tests choose which workgroup arrives last at an atomic.
//   * failure: any violation, a deadlock (no fiber can run but not all returned), a wave that
//     diverges around a collective, or the wall-clock timeout ends the launch with a KernelError
//     naming kernel, workgroup, wave and lane. A SIGSEGV inside a fiber (wild pointer, stack
//     overflow into the guard page) prints the same location and exits with status 3.
#pragma once

#if !defined(__linux__)
#error "simt_runtime.h: the SIMT emulator needs Linux (mmap, sigaltstack)"
#endif

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace fp8gemm::simt {

constexpr int kWaveSize = 64;
constexpr size_t kMaxLdsBytes = 65536;  // gfx942: 64 KiB LDS per CU, the most one workgroup can get
constexpr int kMaxBlockThreads = 1024;

struct Dim3 {
  int64_t x = 1, y = 1, z = 1;
};

// Every emulated failure surfaces as this exception on the thread that called launch().
class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  int threads = 0;                  // worker OS threads; 0: env FP8GEMM_SIMT_THREADS or hardware
  double timeout_s = 0;             // per launch; 0: env FP8GEMM_SIMT_TIMEOUT_S or 300
  size_t fiber_stack_bytes = 256 * 1024;
  bool lds_uninitialized_read_is_error = true;
  // Order in which workgroups (linear ids, x fastest) are started: empty = 0, 1, 2, ...; else a
  // permutation of the grid's linear ids (checked at launch).
  std::vector<int64_t> workgroup_order;
};

inline Options& options() {
  static Options o;
  return o;
}

// Cumulative counters over all launches of the process (drivers print them; tests assert that
// collectives really ran).
struct LaunchStats {
  std::atomic<uint64_t> barriers{0}, mfma16{0}, mfma32{0}, shfl{0}, lds_bytes_read{0}, lds_bytes_written{0},
      global_bytes_read{0}, global_bytes_written{0}, workgroups{0}, atomics{0};
  // Global accesses of 16 bytes (dwordx4 loads) and of 8 bytes (dwordx2 stores): which path ran.
  std::atomic<uint64_t> global_loads_16_bytes{0}, global_stores_8_bytes{0};
};
inline LaunchStats& stats() {
  static LaunchStats s;
  return s;
}

// The atomics of the last launch: per location (address), the linear ids of the workgroups that
// accessed it, in the order the accesses happened (which one arrived last at a stream-K tile).
inline std::map<uintptr_t, std::vector<int64_t>>& atomic_history() {
  static std::map<uintptr_t, std::vector<int64_t>> h;
  return h;
}

namespace detail {

inline std::string site_str(const std::source_location& s) {
  const char* f = s.file_name();
  const char* slash = std::strrchr(f, '/');
  return std::string(slash ? slash + 1 : f) + ":" + std::to_string(s.line());
}

inline std::string seconds_str(double s) {
  std::ostringstream o;
  o << s << " s";
  return o.str();
}

inline bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

// ---------------------------------------------------------------------------------------------
// Fibers. x86-64: a 14-instruction context switch of the callee-saved registers, no syscall
// (swapcontext would cost a sigprocmask per switch). MXCSR / x87 control words are not switched:
// every fiber starts with the launching thread's and kernels never change them. Elsewhere: ucontext.
#if defined(__x86_64__)
extern "C" void fp8gemm_simt_switch(void** save_sp, void* new_sp);
extern "C" void fp8gemm_simt_trampoline();
asm(R"(
  .text
  .weak fp8gemm_simt_switch
  .type fp8gemm_simt_switch,@function
fp8gemm_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fp8gemm_simt_switch,.-fp8gemm_simt_switch

  .weak fp8gemm_simt_trampoline
  .type fp8gemm_simt_trampoline,@function
fp8gemm_simt_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size fp8gemm_simt_trampoline,.-fp8gemm_simt_trampoline
)");
#endif

struct Stack {
  uint8_t* base = nullptr;  // mapping start (guard page first)
  size_t bytes = 0;         // whole mapping
  size_t guard = 0;
};

inline Stack map_stack(size_t usable) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  usable = (usable + page - 1) / page * page;
  Stack s;
  s.guard = page;
  s.bytes = usable + page;
  void* p = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw KernelError("simt: cannot map a fiber stack of " + std::to_string(s.bytes) + " bytes");
  mprotect(p, page, PROT_NONE);  // stacks grow down: overflow hits this page -> SIGSEGV handler
  s.base = static_cast<uint8_t*>(p);
  return s;
}

struct Fiber {
  Stack stack;
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

struct SchedulerContext {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

// ---------------------------------------------------------------------------------------------
// Global buffers.
struct Buffer {
  uintptr_t begin = 0, end = 0;
  std::string name;
  bool writable = true;
  bool owned = false;          // allocated by device_alloc (with red zones)
  void* allocation = nullptr;  // owned: the mmap'd block
  size_t allocation_bytes = 0;
  // Per-byte writer record for the current launch, allocated at the buffer's first store.
  std::atomic<std::atomic<uint64_t>*> shadow{nullptr};
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::atomic<bool> launch_running{false};
};
inline Registry& registry() {
  static Registry r;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Execution state.
enum class LaneState : uint8_t { kRunnable, kAtBarrier, kAtWaveOp, kDone, kFailed };
enum class WaveOp : uint8_t { kNone, kMfma16x16x32, kMfma32x32x16, kShfl };

inline const char* wave_op_name(WaveOp op) {
  switch (op) {
    case WaveOp::kMfma16x16x32: return "mfma_16x16x32_fp8";
    case WaveOp::kMfma32x32x16: return "mfma_32x32x16_fp8";
    case WaveOp::kShfl: return "shfl";
    default: return "none";
  }
}

struct Workgroup;

struct Lane {
  Workgroup* wg = nullptr;
  Fiber fiber;
  int tid = 0, wave = 0, lane = 0;
  LaneState state = LaneState::kRunnable;
  std::source_location wait_site;  // where it blocked (barrier / wave op)
  // wave-op operands and results
  uint64_t op_a = 0, op_b = 0;
  float op_c[16] = {};
  float op_d[16] = {};
  int shfl_value = 0, shfl_src = 0, shfl_result = 0;
  size_t cached_buffer = 0;  // index of the last global buffer hit
  uint32_t access_count = 0;
  // Agent-scope release fences: the lane's global writes in barrier epochs <= rel_cov are covered
  // by its last fence (executed in epoch rel_epoch; a later write in that same epoch lowers the
  // coverage to the epoch before); prev_rel_cov is the coverage of the fence before that one.
  uint32_t rel_epoch = 0, rel_cov = 0, prev_rel_cov = 0;
  // Acquisitions of its workgroup (Workgroup::acquired[0, acquired)) this lane has acquired.
  size_t acquired = 0;
};

struct Wave {
  int first_tid = 0, n_lanes = 0;
  WaveOp op = WaveOp::kNone;
  std::source_location op_site;
  int arrived = 0;
  uint64_t ops_done = 0;
};

struct LdsShadow {
  uint32_t write_epoch = 0;  // 0: never written by this workgroup
  uint32_t read_epoch = 0;
  uint16_t writer = 0;
  uint16_t reader = 0;  // kManyReaders: several lanes read it in read_epoch
};
constexpr uint16_t kManyReaders = 0xffff;

struct LaunchState;

// What an atomic location publishes: per workgroup (linear id) the barrier epoch up to which each
// of its threads' global writes are released (0: none).
using Published = std::map<int64_t, std::vector<uint32_t>>;

struct Acquisition {
  uint32_t epoch;  // barrier epoch of the acquiring atomic
  int tid;         // the lane that executed it
  Published seen;  // what the location had published when it was read
};

struct Workgroup {
  LaunchState* launch = nullptr;
  int64_t x = 0, y = 0, z = 0, linear = 0;
  int n_lanes = 0;
  std::vector<Lane>* lanes = nullptr;
  std::vector<Wave> waves;
  uint8_t* lds = nullptr;
  size_t lds_bytes = 0;
  LdsShadow* lds_shadow = nullptr;
  uint32_t epoch = 1;  // barrier intervals, starts at 1
  int barrier_arrived = 0;
  std::source_location barrier_site;
  int done = 0;
  std::vector<Acquisition> acquired;  // atomics of this workgroup, in execution order
  bool failed = false;
  std::string error;
  SchedulerContext* sched = nullptr;
};

struct LaunchState {
  std::string kernel;
  Dim3 grid;
  int block_threads = 0;
  size_t lds_bytes = 0;
  std::function<void()> body;
  const void* args = nullptr;  // the launch's argument object (arch::kernel_arg)
  size_t args_size = 0;
  std::vector<Buffer*> buffers;  // registry snapshot (frozen during the launch)
  std::atomic<int64_t> next_wg{0};
  std::atomic<bool> cancel{false};
  std::mutex error_mu;
  std::string first_error;
  std::chrono::steady_clock::time_point deadline;
  double timeout_s = 0;
  std::mutex shadow_mu;
  std::vector<int64_t> order;                 // workgroup start order (empty: linear)
  std::mutex atomic_mu;                       // atomics are serialised (with what they publish)
  std::map<uintptr_t, Published> published;   // per atomic location (its first byte)
};

inline thread_local Lane* tl_lane = nullptr;

inline std::string where(const Workgroup& wg) {
  std::ostringstream o;
  o << "kernel '" << wg.launch->kernel << "', workgroup (" << wg.x << "," << wg.y << "," << wg.z << ")";
  return o.str();
}

inline std::string where(const Lane& l) {
  std::ostringstream o;
  o << where(*l.wg) << ", wave " << l.wave << ", lane " << l.lane << " (thread " << l.tid << ")";
  return o.str();
}

// Raised inside a fiber; caught by the fiber's entry function, which records it and hands control
// back to the scheduler for good.
struct LaneFault {
  std::string message;
};

[[noreturn]] inline void fault(const std::string& what) {
  Lane* l = tl_lane;
  if (l == nullptr) throw KernelError("simt: " + what + " (outside any emulated lane)");
  throw LaneFault{where(*l) + ": " + what};
}

inline Lane& current_lane(const char* fn) {
  Lane* l = tl_lane;
  if (l == nullptr)
    throw KernelError(std::string("simt: arch::") + fn + "() called outside a kernel launched with simt::launch");
  return *l;
}

// Back to the scheduler; returns when the scheduler resumes this lane.
inline void yield_to_scheduler(Lane& l) {
#if defined(__x86_64__)
  fp8gemm_simt_switch(&l.fiber.sp, l.wg->sched->sp);
#else
  swapcontext(&l.fiber.ctx, &l.wg->sched->ctx);
#endif
}

inline void check_deadline(Lane& l) {
  if ((++l.access_count & 0xfffu) == 0) {
    LaunchState& ls = *l.wg->launch;
    if (ls.cancel.load(std::memory_order_relaxed)) fault("launch cancelled (another workgroup failed)");
    if (std::chrono::steady_clock::now() > ls.deadline)
      fault("timeout: launch still running after " + seconds_str(ls.timeout_s) +
            " (a lane spinning without reaching a barrier?)");
  }
}

inline void fiber_main(Lane* l) {
  try {
    l->wg->launch->body();
    l->state = LaneState::kDone;
    ++l->wg->done;
  } catch (LaneFault& f) {
    l->state = LaneState::kFailed;
    l->wg->failed = true;
    l->wg->error = f.message;
  } catch (std::exception& e) {
    l->state = LaneState::kFailed;
    l->wg->failed = true;
    l->wg->error = where(*l) + ": exception: " + e.what();
  } catch (...) {
    l->state = LaneState::kFailed;
    l->wg->failed = true;
    l->wg->error = where(*l) + ": unknown exception";
  }
  // Never resumed after this.
  yield_to_scheduler(*l);
  std::abort();  // unreachable: the scheduler never switches to a finished fiber
}

#if !defined(__x86_64__)
inline void fiber_main_ucontext(unsigned hi, unsigned lo) {
  fiber_main(reinterpret_cast<Lane*>((static_cast<uintptr_t>(hi) << 32) | lo));
}
#endif

inline void init_fiber(Lane& l) {
  uint8_t* top = l.fiber.stack.base + l.fiber.stack.bytes;
#if defined(__x86_64__)
  // Frame popped by fp8gemm_simt_switch: r15 r14 r13 r12 rbx rbp, then the return address
  // (the trampoline), which starts with rsp 16-byte aligned as a `call` needs.
  const uintptr_t entry_rsp = (reinterpret_cast<uintptr_t>(top) - 64) & ~uintptr_t{15};
  uint64_t* sp = reinterpret_cast<uint64_t*>(entry_rsp - 56);
  sp[0] = 0;                                                     // r15
  sp[1] = 0;                                                     // r14
  sp[2] = reinterpret_cast<uint64_t>(&fiber_main);               // r13: entry
  sp[3] = reinterpret_cast<uint64_t>(&l);                        // r12: argument
  sp[4] = 0;                                                     // rbx
  sp[5] = 0;                                                     // rbp
  sp[6] = reinterpret_cast<uint64_t>(&fp8gemm_simt_trampoline);  // return address
  l.fiber.sp = sp;
#else
  getcontext(&l.fiber.ctx);
  l.fiber.ctx.uc_stack.ss_sp = l.fiber.stack.base + l.fiber.stack.guard;
  l.fiber.ctx.uc_stack.ss_size = l.fiber.stack.bytes - l.fiber.stack.guard;
  l.fiber.ctx.uc_link = nullptr;
  const uintptr_t p = reinterpret_cast<uintptr_t>(&l);
  makecontext(&l.fiber.ctx, reinterpret_cast<void (*)()>(&fiber_main_ucontext), 2, static_cast<unsigned>(p >> 32),
              static_cast<unsigned>(p & 0xffffffffu));
#endif
}

inline void resume(Workgroup& wg, Lane& l) {
  tl_lane = &l;
#if defined(__x86_64__)
  fp8gemm_simt_switch(&wg.sched->sp, l.fiber.sp);
#else
  swapcontext(&wg.sched->ctx, &l.fiber.ctx);
#endif
  tl_lane = nullptr;
}

// ---------------------------------------------------------------------------------------------
// SIGSEGV inside a fiber: name the lane, say whether it hit its stack guard page, exit(3).
struct SegvState {
  std::once_flag installed;
};
inline SegvState& segv_state() {
  static SegvState s;
  return s;
}

inline void segv_handler(int sig, siginfo_t* info, void*) {
  Lane* l = tl_lane;
  if (l == nullptr) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  const uintptr_t guard_lo = reinterpret_cast<uintptr_t>(l->fiber.stack.base);
  const bool overflow = addr >= guard_lo && addr < guard_lo + l->fiber.stack.guard;
  char msg[512];
  int n = std::snprintf(msg, sizeof msg,
                        "simt: kernel '%s', workgroup (%lld,%lld,%lld), wave %d, lane %d (thread %d): %s at address "
                        "%p%s\n",
                        l->wg->launch->kernel.c_str(), static_cast<long long>(l->wg->x),
                        static_cast<long long>(l->wg->y), static_cast<long long>(l->wg->z), l->wave, l->lane, l->tid,
                        sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", info->si_addr,
                        overflow ? " (fiber stack overflow: raise simt::options().fiber_stack_bytes)"
                                 : " (a raw pointer dereference outside the checked accessors?)");
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(std::min<int>(n, sizeof msg - 1)));
  _exit(3);
}

inline void install_segv_handler_for_thread() {
  // Every worker thread needs its own alternate stack (the faulting fiber stack may be unusable).
  thread_local std::unique_ptr<uint8_t[]> alt;
  if (!alt) {
    const size_t n = 64 * 1024;
    alt.reset(new uint8_t[n]);
    stack_t ss{};
    ss.ss_sp = alt.get();
    ss.ss_size = n;
    sigaltstack(&ss, nullptr);
  }
  std::call_once(segv_state().installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

// ---------------------------------------------------------------------------------------------
// Scheduling of one workgroup.

inline std::string describe_blocked(Workgroup& wg) {
  // Group lanes by what they are doing, as ranges of thread ids.
  std::ostringstream o;
  std::vector<Lane>& lanes = *wg.lanes;
  auto state_of = [&](const Lane& l) -> std::string {
    switch (l.state) {
      case LaneState::kDone: return "returned";
      case LaneState::kAtBarrier: return "waiting at barrier " + site_str(l.wait_site);
      case LaneState::kAtWaveOp: {
        const Wave& w = wg.waves[static_cast<size_t>(l.wave)];
        return std::string("waiting at ") + wave_op_name(w.op) + " " + site_str(l.wait_site) + " (wave " +
               std::to_string(l.wave) + ": " + std::to_string(w.arrived) + "/" + std::to_string(w.n_lanes) +
               " lanes arrived)";
      }
      case LaneState::kFailed: return "failed";
      default: return "runnable";
    }
  };
  int i = 0;
  const int n = wg.n_lanes;
  while (i < n) {
    const std::string s = state_of(lanes[static_cast<size_t>(i)]);
    int j = i + 1;
    while (j < n && state_of(lanes[static_cast<size_t>(j)]) == s) ++j;
    o << "\n    threads " << i << ".." << (j - 1) << " (waves " << i / kWaveSize << ".." << (j - 1) / kWaveSize
      << "): " << s;
    i = j;
  }
  // A wave stuck in a collective: name the lanes that never arrived and where they are.
  for (const Wave& w : wg.waves) {
    if (w.arrived == 0 || w.arrived == w.n_lanes) continue;
    o << "\n  wave " << (w.first_tid / kWaveSize) << " diverged around " << wave_op_name(w.op) << " at "
      << site_str(w.op_site) << ": lanes";
    for (int t = w.first_tid; t < w.first_tid + w.n_lanes; ++t) {
      const Lane& l = lanes[static_cast<size_t>(t)];
      if (l.state != LaneState::kAtWaveOp) o << " " << l.lane << " (" << state_of(l) << ")";
    }
    o << " never arrived";
  }
  return o.str();
}

inline void run_workgroup(Workgroup& wg) {
  std::vector<Lane>& lanes = *wg.lanes;
  for (int t = 0; t < wg.n_lanes; ++t) {
    Lane& l = lanes[static_cast<size_t>(t)];
    l.wg = &wg;
    l.tid = t;
    l.wave = t / kWaveSize;
    l.lane = t % kWaveSize;
    l.state = LaneState::kRunnable;
    l.cached_buffer = 0;
    l.rel_epoch = l.rel_cov = l.prev_rel_cov = 0;
    l.acquired = 0;
    init_fiber(l);
  }
  LaunchState& ls = *wg.launch;
  while (wg.done < wg.n_lanes) {
    bool progressed = false;
    for (int t = 0; t < wg.n_lanes; ++t) {
      Lane& l = lanes[static_cast<size_t>(t)];
      if (l.state != LaneState::kRunnable) continue;
      resume(wg, l);
      progressed = true;
      if (wg.failed) {
        throw KernelError("simt: " + wg.error);
      }
    }
    if (wg.done == wg.n_lanes) break;
    if (!progressed) {
      throw KernelError("simt: " + where(wg) +
                        ": deadlock: no lane can proceed (a barrier some lanes never reach, or a wave that "
                        "diverged around a wave-wide operation):" +
                        describe_blocked(wg));
    }
    if (ls.cancel.load(std::memory_order_relaxed)) {
      throw KernelError("simt: " + where(wg) + ": cancelled");
    }
    if (std::chrono::steady_clock::now() > ls.deadline) {
      throw KernelError("simt: " + where(wg) + ": timeout after " + seconds_str(ls.timeout_s) + ":" +
                        describe_blocked(wg));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Collectives.

inline void barrier(const std::source_location& site) {
  Lane& l = current_lane("barrier");
  Workgroup& wg = *l.wg;
  if (wg.barrier_arrived == 0) {
    wg.barrier_site = site;
  } else if (!same_site(wg.barrier_site, site)) {
    fault("reaches barrier " + site_str(site) + " while other lanes of the workgroup wait at barrier " +
          site_str(wg.barrier_site) + " (divergent barriers)");
  }
  l.wait_site = site;
  l.state = LaneState::kAtBarrier;
  if (++wg.barrier_arrived == wg.n_lanes) {
    for (int t = 0; t < wg.n_lanes; ++t) (*wg.lanes)[static_cast<size_t>(t)].state = LaneState::kRunnable;
    wg.barrier_arrived = 0;
    ++wg.epoch;
    stats().barriers.fetch_add(1, std::memory_order_relaxed);
    return;  // the last lane to arrive goes on without a switch
  }
  yield_to_scheduler(l);
}

// Runs `compute(wave)` once all lanes of the caller's wave have deposited their operands (the
// caller deposits before calling). Lanes of a wave must all call the same op at the same site.
template <class Compute>
inline void wave_collective(Lane& l, WaveOp op, const std::source_location& site, Compute&& compute) {
  Workgroup& wg = *l.wg;
  Wave& w = wg.waves[static_cast<size_t>(l.wave)];
  if (w.arrived == 0) {
    w.op = op;
    w.op_site = site;
  } else if (w.op != op || !same_site(w.op_site, site)) {
    fault(std::string("wave diverged around a wave-wide operation: this lane calls ") + wave_op_name(op) + " at " +
          site_str(site) + " while " + std::to_string(w.arrived) + " lane(s) of the wave wait in " +
          wave_op_name(w.op) + " at " + site_str(w.op_site));
  }
  l.wait_site = site;
  l.state = LaneState::kAtWaveOp;
  if (++w.arrived == w.n_lanes) {
    compute(w);
    for (int t = w.first_tid; t < w.first_tid + w.n_lanes; ++t)
      (*wg.lanes)[static_cast<size_t>(t)].state = LaneState::kRunnable;
    w.arrived = 0;
    w.op = WaveOp::kNone;
    ++w.ops_done;
    return;
  }
  yield_to_scheduler(l);
}

inline int shfl(int v, int src_lane, const std::source_location& site) {
  Lane& l = current_lane("shfl");
  l.shfl_value = v;
  l.shfl_src = src_lane;
  wave_collective(l, WaveOp::kShfl, site, [&](Wave& w) {
    std::vector<Lane>& lanes = *l.wg->lanes;
    for (int i = 0; i < w.n_lanes; ++i) {
      Lane& dst = lanes[static_cast<size_t>(w.first_tid + i)];
      // ds_bpermute: byte address (src << 2) wraps modulo the wave's 64 dwords.
      const int src = dst.shfl_src & (kWaveSize - 1);
      dst.shfl_result = src < w.n_lanes ? lanes[static_cast<size_t>(w.first_tid + src)].shfl_value : 0;
    }
    stats().shfl.fetch_add(1, std::memory_order_relaxed);
  });
  return l.shfl_result;
}

// ---------------------------------------------------------------------------------------------
// LDS.

inline void lds_check(Lane& l, const void* p, size_t size, size_t align, bool write, const std::source_location& site) {
  check_deadline(l);  // a lane spinning on an LDS flag never yields: the timeout must still fire
  Workgroup& wg = *l.wg;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t base = reinterpret_cast<uintptr_t>(wg.lds);
  const char* kind = write ? "LDS store" : "LDS load";
  if (a < base || a + size > base + wg.lds_bytes || a + size < a) {
    std::ostringstream o;
    o << kind << " of " << size << " bytes at LDS offset " << static_cast<long long>(a - base)
      << " is out of bounds (LDS size " << wg.lds_bytes << " bytes) at " << site_str(site);
    fault(o.str());
  }
  // LDS addresses start at 0 on the GPU: alignment is that of the offset.
  if ((a - base) % align != 0) {
    std::ostringstream o;
    o << kind << " of " << size << " bytes at LDS offset " << (a - base) << " is misaligned (needs " << align
      << ") at " << site_str(site);
    fault(o.str());
  }
  const size_t off = a - base;
  const uint32_t e = wg.epoch;
  const uint16_t me = static_cast<uint16_t>(l.tid);
  for (size_t i = 0; i < size; ++i) {
    LdsShadow& s = wg.lds_shadow[off + i];
    if (write) {
      if (s.write_epoch == e && s.writer != me) {
        std::ostringstream o;
        o << "LDS race: " << kind << " at offset " << off + i << " (" << site_str(site)
          << ") after thread " << s.writer << " wrote it with no barrier in between";
        fault(o.str());
      }
      if (s.read_epoch == e && s.reader != me) {
        std::ostringstream o;
        o << "LDS race: " << kind << " at offset " << off + i << " (" << site_str(site) << ") after "
          << (s.reader == kManyReaders ? std::string("other threads") : "thread " + std::to_string(s.reader))
          << " read it with no barrier in between";
        fault(o.str());
      }
      s.write_epoch = e;
      s.writer = me;
    } else {
      if (s.write_epoch == 0 && options().lds_uninitialized_read_is_error) {
        std::ostringstream o;
        o << "LDS load of offset " << off + i << " that no thread of this workgroup has written (" << site_str(site)
          << ")";
        fault(o.str());
      }
      if (s.write_epoch == e && s.writer != me) {
        std::ostringstream o;
        o << "LDS race: " << kind << " at offset " << off + i << " (" << site_str(site) << ") of a byte thread "
          << s.writer << " wrote with no barrier in between";
        fault(o.str());
      }
      if (s.read_epoch != e) {
        s.read_epoch = e;
        s.reader = me;
      } else if (s.reader != me) {
        s.reader = kManyReaders;
      }
    }
  }
  (write ? stats().lds_bytes_written : stats().lds_bytes_read).fetch_add(size, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Global memory.

// Writer record: workgroup linear index + 1 (32 bits) | thread (16) | barrier epoch (16).
inline uint64_t writer_record(const Lane& l) {
  return (static_cast<uint64_t>(l.wg->linear + 1) << 32) | (static_cast<uint64_t>(l.tid) << 16) |
         (l.wg->epoch & 0xffffu);
}

// Shadow value of bytes accessed by atomics in this launch.
constexpr uint64_t kAtomicRecord = ~uint64_t{0};

// Is the write recorded as `w` visible to lane l of another workgroup through an atomic hand-off?
// (See the model at the top: the writer's release fence before an atomic of its workgroup, an
// atomic of l's workgroup that read what it published, and l's acquire fence or own atomic.)
inline bool handed_off(const Lane& l, uint64_t w) {
  const int64_t writer_wg = static_cast<int64_t>(w >> 32) - 1;
  const size_t writer_tid = (w >> 16) & 0xffff;
  const uint32_t epoch = w & 0xffff;
  const std::vector<Acquisition>& acq = l.wg->acquired;
  for (size_t i = 0; i < acq.size(); ++i) {
    if (i >= l.acquired && acq[i].tid != l.tid) continue;
    const auto it = acq[i].seen.find(writer_wg);
    if (it != acq[i].seen.end() && writer_tid < it->second.size() && it->second[writer_tid] >= epoch) return true;
  }
  return false;
}

inline std::string describe_writer(uint64_t w) {
  std::ostringstream o;
  o << "workgroup #" << ((w >> 32) - 1) << " thread " << ((w >> 16) & 0xffff);
  return o.str();
}

inline void global_check(Lane& l, const void* p, size_t size, size_t align, bool write,
                         const std::source_location& site, bool atomic = false) {
  check_deadline(l);
  LaunchState& ls = *l.wg->launch;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Buffer* buf = nullptr;
  if (l.cached_buffer < ls.buffers.size()) {
    Buffer* c = ls.buffers[l.cached_buffer];
    if (a >= c->begin && a + size <= c->end) buf = c;
  }
  if (buf == nullptr) {
    for (size_t i = 0; i < ls.buffers.size(); ++i) {
      Buffer* c = ls.buffers[i];
      if (a >= c->begin && a + size <= c->end && a + size >= a) {
        buf = c;
        l.cached_buffer = i;
        break;
      }
    }
  }
  const char* kind = atomic ? "global atomic" : write ? "global store" : "global load";
  if (buf == nullptr) {
    std::ostringstream o;
    o << kind << " of " << size << " bytes at " << p << " is outside every registered buffer";
    // Name the nearest buffer so an off-by-one tile is easy to spot.
    const Buffer* near = nullptr;
    long long dist = 0;
    for (const Buffer* c : ls.buffers) {
      long long d = a < c->begin ? static_cast<long long>(c->begin - a) : static_cast<long long>(a - c->begin);
      if (near == nullptr || d < dist) near = c, dist = d;
    }
    if (near != nullptr)
      o << " (byte offset " << static_cast<long long>(a - near->begin) << " from buffer '" << near->name << "' of "
        << (near->end - near->begin) << " bytes)";
    o << " at " << site_str(site);
    fault(o.str());
  }
  if (a % align != 0) {
    std::ostringstream o;
    o << kind << " of " << size << " bytes at offset " << (a - buf->begin) << " of buffer '" << buf->name
      << "' is misaligned (needs " << align << ") at " << site_str(site);
    fault(o.str());
  }
  if (write && !buf->writable) {
    std::ostringstream o;
    o << kind << " into read-only buffer '" << buf->name << "' at offset " << (a - buf->begin) << " at "
      << site_str(site);
    fault(o.str());
  }
  const size_t off = a - buf->begin;
  std::atomic<uint64_t>* shadow = buf->shadow.load(std::memory_order_acquire);
  auto mixed = [&](size_t i) {
    std::ostringstream o;
    o << kind << " of offset " << off + i << " of buffer '" << buf->name << "' (" << site_str(site)
      << (atomic ? ") which a plain store wrote in this launch" : ") which atomics access in this launch")
      << " (plain and atomic accesses to the same bytes)";
    fault(o.str());
  };
  if (write) {
    if (shadow == nullptr) {
      std::lock_guard<std::mutex> g(ls.shadow_mu);
      shadow = buf->shadow.load(std::memory_order_acquire);
      if (shadow == nullptr) {
        const size_t n = buf->end - buf->begin;
        shadow = new std::atomic<uint64_t>[n];
        for (size_t i = 0; i < n; ++i) shadow[i].store(0, std::memory_order_relaxed);
        buf->shadow.store(shadow, std::memory_order_release);
      }
    }
    if (atomic) {
      for (size_t i = 0; i < size; ++i) {
        const uint64_t prev = shadow[off + i].exchange(kAtomicRecord, std::memory_order_relaxed);
        if (prev != 0 && prev != kAtomicRecord) mixed(i);
      }
      return;
    }
    // A write after this lane's release fence in the same barrier epoch is not covered by it.
    if (l.rel_epoch == l.wg->epoch) l.rel_cov = l.wg->epoch - 1;
    const uint64_t me = writer_record(l);
    for (size_t i = 0; i < size; ++i) {
      const uint64_t prev = shadow[off + i].exchange(me, std::memory_order_relaxed);
      if (prev == kAtomicRecord) mixed(i);
      if (prev == 0 || prev == me) continue;
      const bool same_wg = (prev >> 32) == (me >> 32);
      const bool same_thread = same_wg && ((prev >> 16) & 0xffff) == ((me >> 16) & 0xffff);
      const bool ordered = same_wg && (prev & 0xffff) != (me & 0xffff);  // a barrier separates them
      if (!same_thread && !ordered) {
        std::ostringstream o;
        o << "global write race: store to offset " << off + i << " of buffer '" << buf->name << "' ("
          << site_str(site) << ") which " << describe_writer(prev)
          << (same_wg ? " wrote with no barrier in between" : " also wrote in this launch");
        fault(o.str());
      }
    }
    stats().global_bytes_written.fetch_add(size, std::memory_order_relaxed);
    if (size == 8) stats().global_stores_8_bytes.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (shadow != nullptr) {
      const uint64_t me = writer_record(l);
      for (size_t i = 0; i < size; ++i) {
        const uint64_t prev = shadow[off + i].load(std::memory_order_relaxed);
        if (prev == 0) continue;
        if (prev == kAtomicRecord) mixed(i);
        const bool same_wg = (prev >> 32) == (me >> 32);
        const bool same_thread = same_wg && ((prev >> 16) & 0xffff) == ((me >> 16) & 0xffff);
        const bool ordered = same_wg ? (prev & 0xffff) != (me & 0xffff) : handed_off(l, prev);
        if (!same_thread && !ordered) {
          std::ostringstream o;
          o << "global read race: load of offset " << off + i << " of buffer '" << buf->name << "' ("
            << site_str(site) << ") which " << describe_writer(prev)
            << (same_wg ? " wrote with no barrier in between"
                        : " wrote in this launch with no release fence / atomic / acquire fence hand-off to this lane");
          fault(o.str());
        }
      }
    }
    stats().global_bytes_read.fetch_add(size, std::memory_order_relaxed);
    if (size == 16) stats().global_loads_16_bytes.fetch_add(1, std::memory_order_relaxed);
  }
}

// ---------------------------------------------------------------------------------------------
// Atomics and agent-scope fences (the model at the top of this file).

inline void check_sync_epoch(const Lane& l, const char* what, const std::source_location& site) {
  // Writer records keep 16 bits of the barrier epoch; hand-offs compare them, so they must not wrap.
  if (l.wg->epoch >= 0xffffu)
    fault(std::string(what) + " after 65534 barriers in one workgroup: the race checker's epochs would wrap (" +
          site_str(site) + ")");
}

inline void fence_release(const std::source_location& site) {
  Lane& l = current_lane("fence_release_agent");
  check_sync_epoch(l, "release fence", site);
  if (l.rel_epoch != l.wg->epoch) l.prev_rel_cov = l.rel_cov;
  l.rel_epoch = l.wg->epoch;
  l.rel_cov = l.wg->epoch;
}

inline void fence_acquire(const std::source_location& site) {
  Lane& l = current_lane("fence_acquire_agent");
  check_sync_epoch(l, "acquire fence", site);
  // Atomics of other lanes of the workgroup are ordered before this fence by a barrier.
  const std::vector<Acquisition>& acq = l.wg->acquired;
  while (l.acquired < acq.size() && acq[l.acquired].epoch < l.wg->epoch) ++l.acquired;
}

// Atomic fetch-add on a 32-bit global word, acquire-release at agent scope: releases what the
// workgroup's release fences (ordered before it by a barrier) and this lane's program order cover,
// and acquires everything released to this location so far.
// One 32-bit atomic read-modify-write (new value = f(old)), returning the old value.
template <class F>
inline uint32_t atomic_rmw_u32(uint32_t* p, F f, const char* what, const std::source_location& site) {
  Lane& l = current_lane(what);
  check_sync_epoch(l, "atomic", site);
  global_check(l, p, sizeof(uint32_t), sizeof(uint32_t), true, site, /*atomic=*/true);
  Workgroup& wg = *l.wg;
  LaunchState& ls = *wg.launch;
  std::lock_guard<std::mutex> g(ls.atomic_mu);
  uint32_t old;
  std::memcpy(&old, p, sizeof old);
  const uint32_t updated = f(old);
  std::memcpy(p, &updated, sizeof updated);
  Published& pub = ls.published[reinterpret_cast<uintptr_t>(p)];
  std::vector<uint32_t>& mine = pub[wg.linear];
  mine.resize(static_cast<size_t>(wg.n_lanes), 0);
  for (int t = 0; t < wg.n_lanes; ++t) {
    const Lane& o = (*wg.lanes)[static_cast<size_t>(t)];
    const uint32_t cov = t == l.tid ? wg.epoch : o.rel_epoch < wg.epoch ? o.rel_cov : o.prev_rel_cov;
    mine[static_cast<size_t>(t)] = std::max(mine[static_cast<size_t>(t)], cov);
  }
  wg.acquired.push_back(Acquisition{wg.epoch, l.tid, pub});
  atomic_history()[reinterpret_cast<uintptr_t>(p)].push_back(wg.linear);
  stats().atomics.fetch_add(1, std::memory_order_relaxed);
  return old;
}

inline uint32_t atomic_add_u32(uint32_t* p, uint32_t v, const std::source_location& site) {
  return atomic_rmw_u32(p, [v](uint32_t old) { return old + v; }, "atomic_add_agent", site);
}

// global_atomic_inc: the counter wraps to 0 once it has reached `limit`.
inline uint32_t atomic_inc_u32(uint32_t* p, uint32_t limit, const std::source_location& site) {
  return atomic_rmw_u32(p, [limit](uint32_t old) { return old >= limit ? 0u : old + 1u; }, "atomic_inc_agent", site);
}

// ---------------------------------------------------------------------------------------------
// Pools of fiber stacks, reused across launches (mapping 512 stacks per launch is wasted time).
struct StackPool {
  std::mutex mu;
  std::vector<std::unique_ptr<std::vector<Lane>>> free_sets;
  size_t stack_bytes = 0;
};
inline StackPool& stack_pool() {
  static StackPool p;
  return p;
}

inline std::unique_ptr<std::vector<Lane>> take_lane_set(int n_lanes, size_t stack_bytes) {
  StackPool& p = stack_pool();
  {
    std::lock_guard<std::mutex> g(p.mu);
    if (p.stack_bytes != stack_bytes) {
      for (auto& set : p.free_sets)
        for (Lane& l : *set) munmap(l.fiber.stack.base, l.fiber.stack.bytes);
      p.free_sets.clear();
      p.stack_bytes = stack_bytes;
    }
    for (size_t i = 0; i < p.free_sets.size(); ++i) {
      if (static_cast<int>(p.free_sets[i]->size()) >= n_lanes) {
        auto set = std::move(p.free_sets[i]);
        p.free_sets.erase(p.free_sets.begin() + static_cast<std::ptrdiff_t>(i));
        return set;
      }
    }
  }
  auto set = std::make_unique<std::vector<Lane>>(static_cast<size_t>(kMaxBlockThreads));
  for (int i = 0; i < n_lanes; ++i) (*set)[static_cast<size_t>(i)].fiber.stack = map_stack(stack_bytes);
  // Stacks for the remaining slots are mapped on demand by ensure_stacks.
  return set;
}

inline void ensure_stacks(std::vector<Lane>& set, int n_lanes, size_t stack_bytes) {
  for (int i = 0; i < n_lanes; ++i)
    if (set[static_cast<size_t>(i)].fiber.stack.base == nullptr)
      set[static_cast<size_t>(i)].fiber.stack = map_stack(stack_bytes);
}

inline void give_back_lane_set(std::unique_ptr<std::vector<Lane>> set) {
  StackPool& p = stack_pool();
  std::lock_guard<std::mutex> g(p.mu);
  p.free_sets.push_back(std::move(set));
}

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

inline double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

inline void record_error(LaunchState& ls, const char* what) {
  std::lock_guard<std::mutex> g(ls.error_mu);
  if (ls.first_error.empty()) ls.first_error = what;
  ls.cancel.store(true);
}

inline void worker_impl(LaunchState& ls) {
  install_segv_handler_for_thread();
  const int n_lanes = ls.block_threads;
  const size_t stack_bytes = options().fiber_stack_bytes;
  auto set = take_lane_set(n_lanes, stack_bytes);
  ensure_stacks(*set, n_lanes, stack_bytes);
  // Page-aligned, like the LDS aperture (offset 0 is aligned for any access width).
  const size_t lds_alloc = (std::max<size_t>(ls.lds_bytes, 1) + 4095) / 4096 * 4096;
  std::unique_ptr<uint8_t, void (*)(void*)> lds_mem(static_cast<uint8_t*>(std::aligned_alloc(4096, lds_alloc)), std::free);
  if (!lds_mem) throw KernelError("simt: cannot allocate LDS");
  const struct {
    uint8_t* p;
    size_t n;
    uint8_t* data() const { return p; }
    size_t size() const { return n; }
  } lds{lds_mem.get(), std::max<size_t>(ls.lds_bytes, 1)};
  std::vector<LdsShadow> shadow(std::max<size_t>(ls.lds_bytes, 1));
  SchedulerContext sched;
  const int64_t n_wg = ls.grid.x * ls.grid.y * ls.grid.z;
  try {
    for (;;) {
      if (ls.cancel.load(std::memory_order_relaxed)) break;
      const int64_t next = ls.next_wg.fetch_add(1);
      if (next >= n_wg) break;
      const int64_t i = ls.order.empty() ? next : ls.order[static_cast<size_t>(next)];
      Workgroup wg;
      wg.launch = &ls;
      wg.linear = i;
      // x fastest, as the hardware dispatcher numbers workgroups.
      wg.x = i % ls.grid.x;
      wg.y = (i / ls.grid.x) % ls.grid.y;
      wg.z = i / (ls.grid.x * ls.grid.y);
      wg.n_lanes = n_lanes;
      wg.lanes = set.get();
      const int n_waves = (n_lanes + kWaveSize - 1) / kWaveSize;
      wg.waves.resize(static_cast<size_t>(n_waves));
      for (int w = 0; w < n_waves; ++w) {
        wg.waves[static_cast<size_t>(w)].first_tid = w * kWaveSize;
        wg.waves[static_cast<size_t>(w)].n_lanes = std::min(kWaveSize, n_lanes - w * kWaveSize);
      }
      // Fresh LDS per workgroup: contents poisoned with 0x80 (the e4m3fnuz NaN), shadow cleared.
      std::memset(lds.data(), 0x80, lds.size());
      std::memset(static_cast<void*>(shadow.data()), 0, shadow.size() * sizeof(LdsShadow));
      wg.lds = ls.lds_bytes ? lds.data() : nullptr;
      wg.lds_bytes = ls.lds_bytes;
      wg.lds_shadow = shadow.data();
      wg.sched = &sched;
      run_workgroup(wg);
      stats().workgroups.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (std::exception& e) {
    record_error(ls, e.what());
  }
  // Stacks of abandoned fibers hold no resources we must release (kernels use PODs), so the set
  // can be reused as is.
  give_back_lane_set(std::move(set));
}

// Never lets an exception (KernelError, bad_alloc from a stack mapping, ...) escape a std::thread.
inline void worker(LaunchState& ls) {
  try {
    worker_impl(ls);
  } catch (std::exception& e) {
    record_error(ls, e.what());
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Public API.

// Registers [p, p + bytes) as global memory the kernels may access. `name` appears in reports.
inline void register_buffer(const void* p, size_t bytes, const std::string& name, bool writable) {
  auto& r = detail::registry();
  if (r.launch_running.load()) throw KernelError("simt: register_buffer('" + name + "') during a launch");
  std::lock_guard<std::mutex> g(r.mu);
  auto b = std::make_unique<detail::Buffer>();
  b->begin = reinterpret_cast<uintptr_t>(p);
  b->end = b->begin + bytes;
  b->name = name;
  b->writable = writable;
  for (auto& o : r.buffers)
    if (b->begin < o->end && o->begin < b->end)
      throw KernelError("simt: buffer '" + name + "' overlaps registered buffer '" + o->name + "'");
  r.buffers.push_back(std::move(b));
}

inline void unregister_buffer(const void* p) {
  auto& r = detail::registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (size_t i = 0; i < r.buffers.size(); ++i) {
    if (r.buffers[i]->begin == reinterpret_cast<uintptr_t>(p)) {
      if (r.buffers[i]->owned) munmap(r.buffers[i]->allocation, r.buffers[i]->allocation_bytes);
      delete[] r.buffers[i]->shadow.load();
      r.buffers.erase(r.buffers.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
  throw KernelError("simt: unregister_buffer of a pointer that is not a registered buffer");
}

// Emulated device allocation: page-aligned, with an unregistered, inaccessible page before and
// after, so an overrun is reported (checked accessors) or faults (raw access), never lands in a
// neighbouring buffer. Contents are filled with `fill` (poison by default).
inline void* device_alloc(size_t bytes, const std::string& name, bool writable = true, uint8_t fill = 0xff) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t body = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  const size_t total = body + 2 * page;
  void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw KernelError("simt: device_alloc('" + name + "', " + std::to_string(bytes) + ") failed");
  uint8_t* base = static_cast<uint8_t*>(m);
  mprotect(base, page, PROT_NONE);
  mprotect(base + page + body, page, PROT_NONE);
  // Start 256-byte aligned (what hipMalloc and torch's allocator give), end as close to the guard
  // page as that allows; the bytes in between are not registered, so an overrun is still reported.
  uint8_t* p = base + page + (body - bytes) / 256 * 256;
  std::memset(p, fill, bytes);
  register_buffer(p, bytes, name, writable);
  auto& r = detail::registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.buffers.back()->owned = true;
  r.buffers.back()->allocation = m;
  r.buffers.back()->allocation_bytes = total;
  return p;
}

inline void device_free(void* p) { unregister_buffer(p); }

// Runs body(args) on every lane of a grid of workgroups of `block_threads` lanes with
// `lds_bytes` of LDS each. Synchronous. Throws KernelError with a located report on failure.
template <class Grid, class Body, class Args>
void launch(const Grid& grid, int block_threads, size_t lds_bytes, Body body, const Args& args,
            const std::string& kernel_name = "", std::source_location site = std::source_location::current()) {
  detail::LaunchState ls;
  ls.kernel = kernel_name.empty() ? "launched at " + detail::site_str(site) : kernel_name;
  ls.grid = Dim3{static_cast<int64_t>(grid.x), static_cast<int64_t>(grid.y), static_cast<int64_t>(grid.z)};
  ls.block_threads = block_threads;
  ls.lds_bytes = lds_bytes;
  auto fail = [&](const std::string& why) { throw KernelError("simt: launch of kernel '" + ls.kernel + "': " + why); };
  if (ls.grid.x < 1 || ls.grid.y < 1 || ls.grid.z < 1)
    fail("grid (" + std::to_string(ls.grid.x) + "," + std::to_string(ls.grid.y) + "," + std::to_string(ls.grid.z) +
         ") has an empty dimension");
  if (block_threads < 1 || block_threads > kMaxBlockThreads)
    fail("block_threads " + std::to_string(block_threads) + " is outside 1.." + std::to_string(kMaxBlockThreads));
  // HSA dispatch packets carry the grid size in work-items as uint32 per dimension.
  if (ls.grid.x * block_threads > 0xffffffffLL || ls.grid.y > 0xffffffffLL || ls.grid.z > 0xffffffffLL)
    fail("grid exceeds the 2^32-1 work-items per dimension of an HSA dispatch");
  if (lds_bytes > kMaxLdsBytes)
    fail("needs " + std::to_string(lds_bytes) + " bytes of LDS; gfx942 gives a workgroup at most 65536");
  ls.body = [&] { body(args); };
  ls.args = &args;
  ls.args_size = sizeof(Args);
  const int64_t n_wg_total = ls.grid.x * ls.grid.y * ls.grid.z;
  if (!options().workgroup_order.empty()) {
    ls.order = options().workgroup_order;
    std::vector<bool> hit(static_cast<size_t>(n_wg_total), false);
    bool ok = static_cast<int64_t>(ls.order.size()) == n_wg_total;
    for (size_t i = 0; ok && i < ls.order.size(); ++i) {
      ok = ls.order[i] >= 0 && ls.order[i] < n_wg_total && !hit[static_cast<size_t>(ls.order[i])];
      if (ok) hit[static_cast<size_t>(ls.order[i])] = true;
    }
    if (!ok) fail("Options::workgroup_order is not a permutation of the grid's " + std::to_string(n_wg_total) + " workgroups");
  }
  const double timeout = options().timeout_s > 0 ? options().timeout_s : detail::env_double("FP8GEMM_SIMT_TIMEOUT_S", 300);
  ls.timeout_s = timeout;
  ls.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));

  auto& reg = detail::registry();
  {
    std::lock_guard<std::mutex> g(reg.mu);
    for (auto& b : reg.buffers) ls.buffers.push_back(b.get());
  }
  bool expected = false;
  if (!reg.launch_running.compare_exchange_strong(expected, true)) fail("another launch is running (launches are synchronous)");
  atomic_history().clear();
  struct Unfreeze {
    detail::Registry& r;
    std::vector<detail::Buffer*>& bufs;
    ~Unfreeze() {
      for (detail::Buffer* b : bufs) delete[] b->shadow.exchange(nullptr);
      r.launch_running.store(false);
    }
  } unfreeze{reg, ls.buffers};

  const int64_t n_wg = ls.grid.x * ls.grid.y * ls.grid.z;
  int threads = options().threads > 0 ? options().threads
                                      : detail::env_int("FP8GEMM_SIMT_THREADS",
                                                        static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  threads = static_cast<int>(std::min<int64_t>(std::max(threads, 1), n_wg));

  // Hard watchdog: a lane stuck in a loop that never touches an accessor cannot be interrupted;
  // report and exit rather than hang.
  std::atomic<bool> finished{false};
  std::mutex wd_mu;
  std::condition_variable wd_cv;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lk(wd_mu);
    if (!wd_cv.wait_for(lk, std::chrono::milliseconds(static_cast<int64_t>((timeout + 30) * 1000)),
                        [&] { return finished.load(); })) {
      std::fprintf(stderr,
                   "simt: kernel '%s': no progress %.0f s after its timeout (a lane loops without any checked "
                   "access or collective); exiting\n",
                   ls.kernel.c_str(), 30.0);
      std::fflush(stderr);
      _exit(124);
    }
  });
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([&] { detail::worker(ls); });
  detail::worker(ls);
  for (auto& t : pool) t.join();
  {
    std::lock_guard<std::mutex> lk(wd_mu);
    finished.store(true);
  }
  wd_cv.notify_all();
  watchdog.join();
  if (!ls.first_error.empty()) throw KernelError(ls.first_error);
}

}  // namespace fp8gemm::simt
