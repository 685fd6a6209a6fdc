// A fixed pool of worker threads that runs "n items, any order" jobs with the caller taking part.
//
// Threads wait for work by spinning briefly and then sleeping on an atomic (futex), so a job that
// follows another within microseconds starts without a system call. run() returns when every item
// is done; items are claimed through one atomic counter, so a slow thread never holds up others.
#pragma once
#include <atomic>
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

  // Calls fn(item, worker) for every item in [0, n_items); worker is in [0, threads()).
  template <typename Fn>
  void run(int64_t n_items, Fn&& fn) {
    run_raw(n_items, [](void* ctx, int64_t item, int worker) { (*static_cast<Fn*>(ctx))(item, worker); }, &fn);
  }

 private:
  using RawFn = void (*)(void* ctx, int64_t item, int worker);
  void run_raw(int64_t n_items, RawFn fn, void* ctx);
  void worker_main(int worker);
  void drain(int worker);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int64_t> next_item_{0};
  std::atomic<int> busy_{0};
  std::atomic<bool> stop_{false};
  int64_t n_items_ = 0;
  RawFn fn_ = nullptr;
  void* ctx_ = nullptr;
};

}  // namespace npullm::cpu
