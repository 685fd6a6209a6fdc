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

}  // namespace
}  // namespace npullm::cpu
