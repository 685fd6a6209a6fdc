#include "device/cpu/worker_pool.h"

#include <immintrin.h>

namespace npullm::cpu {

namespace {
constexpr int kSpinsBeforeSleep = 4000;  // a few tens of microseconds of pause before sleeping or yielding
}

WorkerPool::WorkerPool(int threads) : n_threads_(threads < 1 ? 1 : threads) {
  for (int w = 1; w < n_threads_; ++w) threads_.emplace_back([this, w] { worker_main(w); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  epoch_.fetch_add(1);
  epoch_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::drain(int worker) {
  for (;;) {
    const int64_t item = next_item_.fetch_add(1, std::memory_order_relaxed);
    if (item >= n_items_) break;
    fn_(ctx_, item, worker);
  }
}

void WorkerPool::worker_main(int worker) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t e = epoch_.load(std::memory_order_acquire);
    for (int spin = 0; e == seen && spin < kSpinsBeforeSleep; ++spin) {
      _mm_pause();
      e = epoch_.load(std::memory_order_acquire);
    }
    if (e == seen) {
      epoch_.wait(seen, std::memory_order_acquire);  // futex sleep until run_raw() bumps the epoch
      continue;
    }
    seen = e;
    if (stop_.load()) return;
    drain(worker);
    busy_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void WorkerPool::run_raw(int64_t n_items, RawFn fn, void* ctx) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items == 1) {
    for (int64_t i = 0; i < n_items; ++i) fn(ctx, i, 0);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  n_items_ = n_items;
  next_item_.store(0, std::memory_order_relaxed);
  busy_.store(n_threads_ - 1, std::memory_order_relaxed);
  epoch_.fetch_add(1, std::memory_order_release);
  epoch_.notify_all();
  drain(0);
  // Spin while the others finish their last items; yield if that takes long (an oversubscribed
  // machine may have descheduled a worker, and spinning would only keep it off the core).
  for (int spin = 0; busy_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinsBeforeSleep) _mm_pause();
    else std::this_thread::yield();
  }
}

}  // namespace npullm::cpu
