// An execution trace: what ran, on which thread, when — the NPU profiler's view of this runtime.
//
// Off by default, and then each probe costs one relaxed atomic load. `--trace FILE` (cli) turns it
// on: every layer records complete spans ("X" events of Chrome's trace-event format) into one
// bounded ring (the newest `max_events` are kept), and write() saves them as trace-event JSON that
// Perfetto (ui.perfetto.dev) and chrome://tracing open. What records what:
//   device   each stage on the thread that ran it (its op, tasks and, for matmuls, what they read),
//            and on every thread of the pool its share of the stage ("chunks") and its wait at the
//            barrier that closes it;
//   driver   each blob run, on the queue thread (the stages nest inside it there);
//   npuw     each runtime step on the caller's thread: a prefill chunk, a decode batch, a verify
//            run, with the blob it chose (rows x capacity);
//   genai    the scheduler's steps (which slots, prefill or decode), sampling, and per request its
//            queue, prefill and decode spans on a track of its own (process "requests").
// Timestamps are the steady clock's, in microseconds with nanosecond decimals, from start().
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace npullm::trace {

namespace detail {
extern std::atomic<bool> g_on;
}

// Whether spans are being recorded now.
inline bool on() noexcept { return detail::g_on.load(std::memory_order_relaxed); }

// Starts recording into a ring of `max_events` spans (a new start clears the ring).
void start(size_t max_events = 1'000'000);
// Stops recording; what was recorded stays for write().
void stop();

// Steady-clock nanoseconds (the spans' time base).
int64_t now_ns() noexcept;

// This thread's track id in the trace (a small number given at its first span) and its name there.
uint32_t thread_id();
void name_thread(std::string name);

// A span [t0, t1] (now_ns() values) on the calling thread's track (or on `tid`'s, see thread_id),
// named `name`, of category `cat` (a string literal: device, driver, npuw, genai). `args`: a JSON
// object's text or empty, e.g. R"({"rows":4})".
void span(const char* cat, std::string name, int64_t t0, int64_t t1, std::string args = {});
void span_on(uint32_t tid, const char* cat, std::string name, int64_t t0, int64_t t1, std::string args = {});
// A span on the track of request `request` in the "requests" process (queue, prefill, decode).
void request_span(uint64_t request, std::string name, int64_t t0, int64_t t1, std::string args = {});

// Writes what the ring holds as trace-event JSON ({"traceEvents": [...]}), oldest first, with the
// thread and process names; returns the number of spans written. Throws npullm::Error when the
// file cannot be written. Safe while others record (they wait on a lock for the copy).
size_t write(const std::string& path);
// Spans recorded since start() (the ring keeps the newest max_events of them).
uint64_t recorded();

// A span from construction to destruction on this thread, recorded only if tracing was on when it
// began. For the few probes per step where an RAII scope reads best.
class Scope {
 public:
  Scope(const char* cat, const char* name) : cat_(cat), name_(name), t0_(on() ? now_ns() : -1) {}
  ~Scope() {
    if (t0_ >= 0) span(cat_, name_, t0_, now_ns(), std::move(args_));
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  bool active() const { return t0_ >= 0; }
  void set_args(std::string args) { args_ = std::move(args); }

 private:
  const char* cat_;
  const char* name_;
  int64_t t0_;
  std::string args_;
};

}  // namespace npullm::trace
