// A fixed pool of worker threads that runs "n items, any order" jobs with the caller taking part.
//
// Threads wait for work by spinning briefly (bounded) and then sleeping on an atomic (futex), so a
// job that follows another within microseconds starts without a system call, and an idle pool
// costs nothing. Items are claimed one at a time from a word that holds the job's number and the
// next item, and run() returns when every item is *done*, not when every thread has checked in:
// a worker the OS has descheduled (a busy machine) simply claims nothing, and the caller runs the
// items itself. Only an item already claimed by a thread that is then preempted can hold a job up:
// the caller counts as lost each wait for such an item of over a millisecond and longer than twice
// its own share took; when the time lost (summed with a decay of 250 ms) passes a quarter of that
// (another process really shares the core, not a hypervisor's occasional few ms), the pool runs
// jobs on the caller alone for a while (50 ms, doubling while it keeps happening, at most 1 s), its
// workers asleep, and then tries again. So a busy machine costs at most the speed of one thread.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace npullm::cpu {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);  // threads >= 1, including the caller
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return n_threads_; }

  // For a job of `count` items that are ranges of one piece of data, in order: the range item k
  // should cover so that each thread's ranges are contiguous. run() hands items out in order, so
  // with T threads in step thread t takes items t, t + T, t + 2T, ...; those get ranges t * count / T
  // onward, one after another (a decode matmul then reads one run of the weight per thread, its
  // fetches going on from a range into the next). Any other order (a thread held up, one that woke
  // late) is only slower. The identity where T does not divide the count.
  int64_t in_step_range(int64_t k, int64_t count) const {
    if (count % n_threads_ != 0) return k;
    return (k % n_threads_) * (count / n_threads_) + k / n_threads_;
  }

  // Calls fn(item, worker) for every item in [0, n_items); worker is in [0, threads()). With
  // parallel false the caller runs them all (a job too small to be worth waking anyone for).
  template <typename Fn>
  void run(int64_t n_items, Fn&& fn, bool parallel = true) {
    run_raw(n_items, [](void* ctx, int64_t item, int worker) { (*static_cast<Fn*>(ctx))(item, worker); }, &fn, parallel);
  }

  // Items run by each worker since the pool was made (worker 0 is the caller): for tests.
  std::vector<int64_t> items_per_worker() const;
  // Times the pool fell back to the caller alone because a worker held a job up (see above).
  int64_t solo_periods() const { return solo_periods_; }

 private:
  using RawFn = void (*)(void* ctx, int64_t item, int worker);
  void run_raw(int64_t n_items, RawFn fn, void* ctx, bool parallel);
  void worker_main(int worker);
  void work(int worker, uint32_t job);  // claims and runs items of `job` until none are left

  int n_threads_;
  std::vector<std::thread> threads_;
  uint32_t jobs_ = 0;                  // jobs started (the caller's count)
  std::atomic<uint32_t> job_{0};       // the current job's number: workers sleep on it
  std::atomic<uint64_t> claim_{0};     // (job << 32) | next item of that job
  std::atomic<int64_t> n_items_{0};    // items of the current job
  std::atomic<int64_t> done_{0};       // items of the current job completed
  std::atomic<bool> stop_{false};
  RawFn fn_ = nullptr;                 // read only by a thread holding a claimed item of the job
  void* ctx_ = nullptr;
  std::vector<std::atomic<int64_t>> ran_;  // per worker
  // Busy-machine fallback (the caller's alone): jobs run inline until solo_until_.
  using Clock = std::chrono::steady_clock;
  Clock::time_point solo_until_{}, last_stall_{}, last_solo_{};
  Clock::duration solo_for_{};
  double lost_ = 0.0;  // seconds lost waiting for held-up items, decayed (see run_raw)
  int64_t solo_periods_ = 0;
};

}  // namespace npullm::cpu
