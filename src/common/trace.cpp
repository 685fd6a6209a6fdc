// The trace's ring and its JSON writer (trace.h).
#include "common/trace.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"

namespace npullm::trace {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

constexpr uint32_t kRuntimePid = 1, kRequestsPid = 2;

struct Event {
  int64_t t0 = 0, t1 = 0;
  uint64_t tid = 0;
  uint32_t pid = kRuntimePid;
  const char* cat = "";
  std::string name, args;
};

struct Recorder {
  std::mutex mu;
  std::vector<Event> ring;  // capacity slots, written round
  size_t next = 0;          // where the next span goes
  uint64_t total = 0;       // spans recorded since start
  int64_t origin = 0;       // start()'s now_ns: timestamps count from it
  std::map<uint64_t, std::string> thread_names;
};

Recorder& rec() {
  static Recorder* r = new Recorder();  // (never destroyed: threads may still record at exit)
  return *r;
}

std::atomic<uint32_t> g_next_tid{1};
thread_local uint32_t t_tid = 0;

void record(Event e) {
  Recorder& r = rec();
  std::lock_guard lock(r.mu);
  if (r.ring.empty()) return;
  r.ring[r.next] = std::move(e);
  r.next = (r.next + 1) % r.ring.size();
  r.total++;
}

// Microseconds since start, with the nanoseconds as decimals (the format's unit is the µs).
double us(int64_t ns, int64_t origin) { return static_cast<double>(ns - origin) / 1000.0; }

}  // namespace

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void start(size_t max_events) {
  Recorder& r = rec();
  {
    std::lock_guard lock(r.mu);
    r.ring.assign(std::max<size_t>(1, max_events), Event{});
    r.next = 0;
    r.total = 0;
    r.origin = now_ns();
  }
  detail::g_on.store(true, std::memory_order_relaxed);
}

void stop() { detail::g_on.store(false, std::memory_order_relaxed); }

uint32_t thread_id() {
  if (t_tid == 0) t_tid = g_next_tid.fetch_add(1, std::memory_order_relaxed);
  return t_tid;
}

void name_thread(std::string name) {
  const uint32_t tid = thread_id();
  Recorder& r = rec();
  std::lock_guard lock(r.mu);
  r.thread_names[tid] = std::move(name);
}

void span(const char* cat, std::string name, int64_t t0, int64_t t1, std::string args) {
  span_on(thread_id(), cat, std::move(name), t0, t1, std::move(args));
}

void span_on(uint32_t tid, const char* cat, std::string name, int64_t t0, int64_t t1, std::string args) {
  if (!on()) return;
  record(Event{t0, t1, tid, kRuntimePid, cat, std::move(name), std::move(args)});
}

void request_span(uint64_t request, std::string name, int64_t t0, int64_t t1, std::string args) {
  if (!on()) return;
  record(Event{t0, t1, request, kRequestsPid, "request", std::move(name), std::move(args)});
}

uint64_t recorded() {
  Recorder& r = rec();
  std::lock_guard lock(r.mu);
  return r.total;
}

size_t write(const std::string& path) {
  std::vector<Event> events;
  std::map<uint64_t, std::string> names;
  int64_t origin;
  {
    Recorder& r = rec();
    std::lock_guard lock(r.mu);
    const size_t n = std::min<uint64_t>(r.total, r.ring.size());
    events.reserve(n);
    const size_t first = r.total > r.ring.size() ? r.next : 0;  // the oldest kept
    for (size_t i = 0; i < n; ++i) events.push_back(r.ring[(first + i) % r.ring.size()]);
    names = r.thread_names;
    origin = r.origin;
  }
  nlohmann::json out = nlohmann::json::array();
  out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kRuntimePid}, {"tid", 0}, {"args", {{"name", "npullm"}}}});
  out.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kRequestsPid}, {"tid", 0}, {"args", {{"name", "requests"}}}});
  for (const auto& [tid, name] : names)
    out.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", kRuntimePid}, {"tid", tid}, {"args", {{"name", name}}}});
  std::map<uint64_t, bool> requests;
  for (const Event& e : events) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"pid", e.pid}, {"tid", e.tid},
                        {"ts", us(e.t0, origin)}, {"dur", static_cast<double>(e.t1 - e.t0) / 1000.0}};
    if (!e.args.empty()) {
      nlohmann::json a = nlohmann::json::parse(e.args, nullptr, /*allow_exceptions=*/false);
      j["args"] = a.is_discarded() ? nlohmann::json{{"text", e.args}} : std::move(a);
    }
    if (e.pid == kRequestsPid) requests[e.tid] = true;
    out.push_back(std::move(j));
  }
  for (const auto& [id, _] : requests)
    out.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", kRequestsPid}, {"tid", id}, {"args", {{"name", fmt::format("request {}", id)}}}});
  const std::string text = nlohmann::json{{"traceEvents", std::move(out)}, {"displayTimeUnit", "ms"}}.dump();
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) fail("--trace: cannot write '{}'", path);
  if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size() || std::fflush(f.get()) != 0)
    fail("--trace: writing '{}' failed (disk full?)", path);
  return events.size();
}

}  // namespace npullm::trace
