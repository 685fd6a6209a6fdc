// The CPU worker pool: every item of every job runs exactly once, on a worker index in range, and
// what the workers wrote is visible to the caller when run() returns; jobs of 0, 1 and many items,
// back to back (the spin path) and after a pause (the futex sleep path). Also run under
// ThreadSanitizer by scripts/test.sh.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "device/cpu/worker_pool.h"

namespace npullm::cpu {
namespace {

TEST(WorkerPool, EveryItemRunsOnceAndIsVisibleAfterRun) {
  for (int threads : {1, 2, 4}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    std::vector<int> hits;
    for (int job = 0; job < 300; ++job) {
      const int64_t n = job % 7 == 0 ? 0 : job % 5 == 0 ? 1 : 1 + (job * 37) % 200;
      hits.assign(static_cast<size_t>(n), 0);  // plain ints: run() must order the workers' writes before it returns
      std::atomic<int> bad_worker{0};
      pool.run(n, [&](int64_t item, int worker) {
        if (worker < 0 || worker >= threads) bad_worker.fetch_add(1);
        hits[static_cast<size_t>(item)] += 1;
      });
      ASSERT_EQ(bad_worker.load(), 0) << threads << " threads, job " << job;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << threads << " threads, job " << job << ", item " << i;
      if (job % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the workers sleep
    }
  }
}

TEST(WorkerPool, DestroyedWhileIdleAndRightAfterAJob) {
  for (int k = 0; k < 20; ++k) {
    WorkerPool pool(3);
    std::atomic<int64_t> sum{0};
    if (k % 2) pool.run(64, [&](int64_t item, int) { sum.fetch_add(item); });
    EXPECT_EQ(sum.load(), k % 2 ? 64 * 63 / 2 : 0);
  }
}

// A worker held up now and then (a hypervisor taking the core for a few ms) costs the wait and
// nothing more; one held up job after job (another process on its core) makes the pool run jobs on
// the caller alone, every item on worker 0.
TEST(WorkerPool, RunsAloneOnlyWhenWorkersAreHeldUpOften) {
  WorkerPool pool(2);
  // Items a worker claims sleep 20 ms (it is held up); the caller's take 200 us each, so the worker
  // has over 3 ms to wake up and claim one of the 16 even on a loaded machine (ctest runs tests side
  // by side), and the caller then waits far longer than its own share took.
  auto held_up = [](int64_t, int worker) {
    if (worker != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  auto quick = [](int64_t, int) {};
  for (int k = 0; k < 3; ++k) {
    pool.run(16, +held_up);
    for (int j = 0; j < 20; ++j) {  // 200+ ms of quick jobs between the stalls
      pool.run(64, +quick);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_EQ(pool.solo_periods(), 0);
  for (int j = 0; j < 200 && pool.solo_periods() == 0; ++j) pool.run(16, +held_up);
  ASSERT_GE(pool.solo_periods(), 1);
  const int64_t worker_items = pool.items_per_worker()[1];
  for (int j = 0; j < 3; ++j) pool.run(16, +held_up);  // ~10 ms: well inside the 50 ms alone
  EXPECT_EQ(pool.items_per_worker()[1], worker_items);
}

}  // namespace
}  // namespace npullm::cpu
