// The CPU backends' worker pool: a few work items spread over torch's inter-op threads plus the
// calling thread (header-only, shared by the GEMM and the activation quantization).
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace fp8gemm {
namespace cpu {

// Runs worker(claim) on up to at::get_num_threads() threads until the `count` work items are used up;
// claim(i) hands out the next unclaimed item and returns false when none is left.
//
// Why not at::parallel_for: with ATen's OpenMP backend (the default torch builds) it is an inline
// `#pragma omp parallel`, which runs serially unless this file is compiled with -fopenmp, and
// kernel-builder passes no OpenMP flags. at::launch (the inter-op pool) needs no compiler flag. The
// calling thread works too, so the call finishes even when the pool is busy. The shared state lives on
// the heap, and a pool task that starts after the last item was claimed never calls `worker`, so a late
// task is harmless after this function has returned. The wait at the end polls (yield, then short
// sleeps) instead of using std::condition_variable, whose wait() needs a libstdc++ symbol version
// (GLIBCXX_3.4.30) newer than manylinux_2_28 allows.
template <typename Worker>
void run_on_workers(int64_t count, const Worker& worker) {
  struct Shared {
    explicit Shared(int64_t n) : count(n) {}
    const int64_t count;
    std::atomic<int64_t> next{0};
    std::atomic<int> active{0};  // threads inside `work` below
    std::mutex error_mutex;
    std::exception_ptr error;
  };
  const int64_t threads = std::min<int64_t>(count, at::in_parallel_region() ? 1 : at::get_num_threads());
  if (threads <= 1) {
    int64_t next = 0;
    worker([&](int64_t& item) { return (item = next++) < count; });
    return;
  }
  auto shared = std::make_shared<Shared>(count);
  auto work = [&worker](Shared& s) {
    // Registered before looking: once the caller has seen every item claimed and `active` at 0, a task
    // that registers afterwards is bound to see nothing left (all operations are sequentially consistent).
    s.active.fetch_add(1);
    if (s.next.load() < s.count) {
      try {
        worker([&s](int64_t& item) { return (item = s.next.fetch_add(1)) < s.count; });
      } catch (...) {
        std::lock_guard<std::mutex> lock(s.error_mutex);
        if (!s.error) s.error = std::current_exception();
        s.next.store(s.count);  // the others stop at their next claim
      }
    }
    s.active.fetch_sub(1);
  };
  for (int64_t t = 1; t < threads; ++t) at::launch([shared, work] { work(*shared); });
  work(*shared);
  // Every item is claimed now; wait for the threads still finishing theirs.
  for (int spins = 0; shared->active.load() != 0; ++spins) {
    if (spins < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  if (shared->error) std::rethrow_exception(shared->error);
}

}  // namespace cpu
}  // namespace fp8gemm
