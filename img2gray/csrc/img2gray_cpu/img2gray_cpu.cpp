// RGB -> gray on the CPU, split across at::get_num_threads() threads (run_on_workers below). Each
// chunk works in blocks of 32 pixels: the RGB bytes are de-interleaved into three float arrays, then
// the formula runs over contiguous arrays, a loop the compiler vectorises (16-byte SSE at the x86-64
// baseline).
#include "img2gray_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "../img2gray_common.h"

namespace grayscale {
namespace {

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

void rgb_to_gray_range(const uint8_t* rgb, uint8_t* gray, int64_t begin, int64_t end) {
  constexpr int kBlock = 32;
  const uint8_t* __restrict__ in = rgb + 3 * begin;
  uint8_t* __restrict__ out = gray + begin;
  const int64_t n = end - begin;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float r[kBlock], g[kBlock], b[kBlock];
    for (int j = 0; j < kBlock; ++j) {
      r[j] = in[3 * (i + j)];
      g[j] = in[3 * (i + j) + 1];
      b[j] = in[3 * (i + j) + 2];
    }
    for (int j = 0; j < kBlock; ++j) out[i + j] = gray_of_rgb(r[j], g[j], b[j]);
  }
  for (; i < n; ++i) out[i] = gray_of(in[3 * i], in[3 * i + 1], in[3 * i + 2]);
}

}  // namespace

void rgb_to_gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t pixels) {
  // 64 Ki pixels per chunk: large enough to amortise scheduling, small enough to balance 4K frames.
  constexpr int64_t kChunk = 1 << 16;
  run_on_workers((pixels + kChunk - 1) / kChunk, [&](const auto& claim) {
    for (int64_t chunk; claim(chunk);)
      rgb_to_gray_range(rgb, gray, chunk * kChunk, std::min(pixels, (chunk + 1) * kChunk));
  });
}

}  // namespace grayscale
