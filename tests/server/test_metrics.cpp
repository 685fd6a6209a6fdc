// /metrics speaks the model-server protocol that the Gateway API Inference Extension's endpoint
// picker reads (../shared/k8s/model-server-protocol.md): the queued and running requests and the
// K/V utilisation as gauges under vLLM's names, and the cache layout as vLLM's cache_config_info.
// Checked on a made-up status, then against a live scheduler's own state (its slots, its queue,
// what the test submitted) at every token and from a thread that scrapes while requests run, wait
// and finish.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include "genai/serving/scheduler.h"
#include "server/metrics.h"
#include "test_util.h"

namespace npullm::server {
namespace {

// Every sample line "name{labels} value" or "name value" of a Prometheus text, by name (the last
// one of a name wins), and the TYPE of each name.
struct Scrape {
  std::map<std::string, double> value;
  std::map<std::string, std::string> labels, type;
};

Scrape parse(const std::string& text) {
  Scrape s;
  static const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$)");
  static const std::regex type(R"(^# TYPE (\S+) (\S+)$)");
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    std::smatch m;
    if (std::regex_match(line, m, type)) {
      s.type[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample)) {
      s.value[m[1]] = std::stod(m[3]);
      s.labels[m[1]] = m[2];
    }
  }
  return s;
}

TEST(Metrics, ProtocolSignalsFollowTheSchedulersStatus) {
  genai::SchedulerStatus st;
  st.parallel = 4;
  st.slot_capacity = 512;
  st.queue = 3;
  st.busy_slots = 2;
  st.kv_rows_in_use = 300;
  const Scrape s = parse(prometheus_text(st, {}, "tiny \"model\""));
  for (const char* name : {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:cache_config_info"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(s.value.count(name));
    EXPECT_EQ(s.type.at(name), "gauge");  // the protocol's types: gauges, the cache info a labelled gauge
  }
  EXPECT_EQ(s.value.at("vllm:num_requests_waiting"), 3);
  EXPECT_EQ(s.value.at("vllm:num_requests_running"), 2);
  EXPECT_DOUBLE_EQ(s.value.at("vllm:kv_cache_usage_perc"), 300.0 / 2048.0);
  EXPECT_EQ(s.labels.at("vllm:num_requests_waiting"), R"({model_name="tiny \"model\""})");
  // A block is kPrefixBlockTokens rows; every slot's rows together make num_gpu_blocks of them.
  EXPECT_EQ(kPrefixBlockTokens, 16);
  EXPECT_EQ(s.labels.at("vllm:cache_config_info"), R"({block_size="16",num_gpu_blocks="128"})");
  EXPECT_EQ(s.value.at("vllm:cache_config_info"), 1);

  genai::SchedulerStatus idle;  // nothing loaded yet: no division by zero
  EXPECT_EQ(parse(prometheus_text(idle, {}, "m")).value.at("vllm:kv_cache_usage_perc"), 0);
}

// One scrape checked against the state it was rendered from and against what the test submitted.
void check_scrape(const genai::SchedulerStatus& st, int64_t submitted) {
  const Scrape s = parse(prometheus_text(st, {}, "stories260K"));
  int64_t running = 0, rows = 0;
  for (const genai::SlotStatus& slot : st.slots) {
    if (std::string(slot.state) == "idle") continue;
    running++;
    rows += slot.kv_rows;
  }
  const double waiting = s.value.at("vllm:num_requests_waiting");
  const double busy = s.value.at("vllm:num_requests_running");
  const double usage = s.value.at("vllm:kv_cache_usage_perc");
  EXPECT_EQ(waiting, st.queue);
  EXPECT_EQ(busy, running);
  EXPECT_NEAR(usage, static_cast<double>(rows) / static_cast<double>(st.parallel * st.slot_capacity), 1e-12);
  EXPECT_GE(usage, 0.0);
  EXPECT_LE(usage, 1.0);
  EXPECT_LE(busy, st.parallel);
  // Every request the test submitted is waiting, running or finished: none is lost between them.
  const auto finished = static_cast<int64_t>(st.requests_done + st.requests_cancelled + st.requests_failed);
  EXPECT_EQ(static_cast<int64_t>(waiting + busy) + finished, submitted);
}

TEST(Metrics, ProtocolSignalsMatchALiveSchedulerAtEveryScrape) {
  const char* kModel = "models/llama2c/stories260K.gguf";
  NPULLM_REQUIRE_SHARED(kModel);
  PipelineConfig pc;
  pc.use_cache = false;
  pc.variants = {64, 128, 256};
  pc.prefill_chunk = 16;
  pc.threads = 1;
  genai::SchedulerConfig sc;
  sc.parallel = 2;  // 6 requests: some wait, some run, all finish
  sc.max_queue = 8;
  genai::Scheduler sched(test::shared_path(kModel), pc, sc);

  const int kRequests = 6;
  std::atomic<int64_t> submitted{0};
  std::atomic<int> checks{0}, saw_waiting{0}, saw_running{0};
  std::vector<std::future<void>> done;
  // Everything is submitted before any on_text can run (the first step comes after the submits).
  std::mutex submit_mu;
  std::unique_lock hold(submit_mu);
  for (int i = 0; i < kRequests; ++i) {
    auto finished = std::make_shared<std::promise<void>>();
    done.push_back(finished->get_future());
    genai::ServeRequest r;
    r.prompt_ids = sched.encode_prompt(i % 2 ? "Once upon a time" : "The little dog ran to the park and");
    r.gen.max_new_tokens = 40 + 10 * i;
    r.on_text = [&](std::string_view) {
      std::lock_guard lk(submit_mu);  // after every submit
      const genai::SchedulerStatus st = sched.status();
      check_scrape(st, submitted);
      checks++;
      if (st.queue > 0) saw_waiting++;
      if (st.busy_slots > 0) saw_running++;
      return true;
    };
    r.on_done = [finished](const genai::ServeResult&) { finished->set_value(); };
    sched.submit(std::move(r));
    submitted++;
  }
  hold.unlock();
  // A scraper on a thread of its own, as the endpoint picker is.
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop) {
      check_scrape(sched.status(), submitted);
      checks++;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (auto& f : done) ASSERT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  stop = true;
  scraper.join();
  const genai::SchedulerStatus end = sched.status();
  check_scrape(end, submitted);
  const Scrape s = parse(prometheus_text(end, {}, "stories260K"));
  EXPECT_EQ(s.value.at("vllm:num_requests_waiting"), 0);
  EXPECT_EQ(s.value.at("vllm:num_requests_running"), 0);
  // Rows the free slots keep for prefix reuse count as free.
  EXPECT_EQ(s.value.at("vllm:kv_cache_usage_perc"), 0);
  int64_t kept = 0;
  for (const auto& slot : end.slots) kept += slot.kv_rows;
  EXPECT_GT(kept, 0);
  EXPECT_GT(saw_waiting, 0) << "no scrape saw a request waiting";
  EXPECT_GT(saw_running, 0);
  EXPECT_GT(checks, kRequests * 10);
}

}  // namespace
}  // namespace npullm::server
