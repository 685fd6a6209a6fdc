#include "device/cpu/worker_pool.h"

#include <immintrin.h>

#include <cmath>
#include <string>

#include "common/trace.h"

namespace npullm::cpu {

namespace {
// Pauses a waiting thread spins before it sleeps (a worker) or yields (the caller): about 0.1-0.3 ms
// at ~40-140 cycles a pause, long enough to bridge the gap between two stages of one step without
// a system call, short enough that a pool waiting on a busy machine gives the core back soon.
constexpr int kSpinsBeforeSleep = 2000;
}  // namespace

WorkerPool::WorkerPool(int threads) : n_threads_(threads < 1 ? 1 : threads), ran_(static_cast<size_t>(n_threads_)) {
  for (int w = 1; w < n_threads_; ++w) threads_.emplace_back([this, w] { worker_main(w); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  job_.fetch_add(1);
  job_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::vector<int64_t> WorkerPool::items_per_worker() const {
  std::vector<int64_t> out;
  for (const auto& r : ran_) out.push_back(r.load(std::memory_order_relaxed));
  return out;
}

void WorkerPool::work(int worker, uint32_t job) {
  int64_t ran = 0;
  for (;;) {
    uint64_t s = claim_.load(std::memory_order_acquire);
    int64_t item;
    do {
      // Another job's word (this one finished, or a later one began): nothing to claim here. A stale
      // n_items_ only makes the exchange below fail and re-read.
      if (static_cast<uint32_t>(s >> 32) != job) goto out;
      item = static_cast<int64_t>(s & 0xffffffffu);
      if (item >= n_items_.load(std::memory_order_acquire)) goto out;  // see run_raw()
    } while (!claim_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire));
    // The job cannot end (nor fn_ change) before this claimed item is done.
    fn_(ctx_, item, worker);
    ++ran;
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
out:
  ran_[static_cast<size_t>(worker)].fetch_add(ran, std::memory_order_relaxed);
}

void WorkerPool::worker_main(int worker) {
  if (trace::on()) trace::name_thread("cpu worker " + std::to_string(worker));
  uint32_t seen = 0;
  for (;;) {
    uint32_t j = job_.load(std::memory_order_acquire);
    for (int spin = 0; j == seen && spin < kSpinsBeforeSleep; ++spin) {
      _mm_pause();
      j = job_.load(std::memory_order_acquire);
    }
    if (j == seen) {
      job_.wait(seen, std::memory_order_acquire);  // futex sleep until run_raw() starts a job
      continue;
    }
    seen = j;
    if (stop_.load()) return;
    work(worker, j);
  }
}

void WorkerPool::run_raw(int64_t n_items, RawFn fn, void* ctx, bool parallel) {
  if (n_items <= 0) return;
  parallel = parallel && n_threads_ > 1 && n_items > 1;
  const Clock::time_point start = parallel ? Clock::now() : Clock::time_point{};
  if (!parallel || start < solo_until_) {
    for (int64_t i = 0; i < n_items; ++i) fn(ctx, i, 0);
    ran_[0].fetch_add(n_items, std::memory_order_relaxed);
    return;
  }
  // Every item of the previous job is done, so no thread reads fn_ / ctx_ now. But a worker may still
  // be in work() for it, holding its exhausted word (job, n): close that word before n_items_ grows,
  // or such a worker, reading the new n_items_ before the new word below, would claim item n of the
  // old job number and run it with fn_ half-written (and twice). Release/acquire on n_items_: a worker
  // that reads the new count then fails its exchange on this closed word.
  claim_.store(static_cast<uint64_t>(jobs_ + 1) << 32 | 0xffffffffu, std::memory_order_relaxed);
  fn_ = fn;
  ctx_ = ctx;
  n_items_.store(n_items, std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  const uint32_t job = ++jobs_;
  claim_.store(static_cast<uint64_t>(job) << 32, std::memory_order_release);  // publishes the above
  job_.store(job, std::memory_order_release);
  job_.notify_all();
  work(0, job);
  // Wait for items other threads claimed and still run; yield if that takes long (the machine may
  // have descheduled one of them, and spinning would only keep it off the core).
  for (int spin = 0; spin < kSpinsBeforeSleep && done_.load(std::memory_order_acquire) != n_items; ++spin) _mm_pause();
  if (done_.load(std::memory_order_acquire) == n_items) return;
  const Clock::time_point waiting = Clock::now();
  while (done_.load(std::memory_order_acquire) != n_items) std::this_thread::yield();
  const Clock::time_point end = Clock::now();
  const Clock::duration waited = end - waiting;
  if (waited > std::chrono::milliseconds(1) && waited > 2 * (waiting - start)) {
    // A worker was preempted holding an item. Once in a while that is the hypervisor or a daemon
    // taking the core for a few ms (measured on this project's VMs: a 2-4 ms stall every second
    // or so); running alone for 50 ms after each of those cost far more than the stalls did. So the
    // time lost waiting is summed with a decay (time constant kLossWindow), and only when it
    // exceeds a quarter of that window (another process shares the core for real) does the pool
    // run alone for a while, longer if it keeps happening.
    constexpr double kLossWindow = 0.25;  // seconds
    const double since = std::chrono::duration<double>(end - last_stall_).count();
    lost_ = lost_ * std::exp(-since / kLossWindow) + std::chrono::duration<double>(waited).count();
    if (lost_ > kLossWindow / 4) {
      const Clock::duration first = std::chrono::milliseconds(50), most = std::chrono::seconds(1);
      solo_for_ = end - last_solo_ > 2 * most || solo_for_ == Clock::duration{} ? first : std::min(2 * solo_for_, most);
      solo_until_ = end + solo_for_;
      last_solo_ = end;
      lost_ = 0.0;
      ++solo_periods_;
    }
    last_stall_ = end;
  }
}

}  // namespace npullm::cpu
