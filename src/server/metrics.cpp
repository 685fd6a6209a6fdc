#include "server/metrics.h"

#include <fmt/format.h>

namespace npullm::server {

void RequestCounter::add(const std::string& route, int status) {
  std::lock_guard lk(mu_);
  counts_[{route, status}]++;
}

std::map<std::pair<std::string, int>, uint64_t> RequestCounter::snapshot() const {
  std::lock_guard lk(mu_);
  return counts_;
}

namespace {

void head(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void metric(std::string& out, const char* name, const char* type, const char* help, T value) {
  head(out, name, type, help);
  out += fmt::format("{} {}\n", name, value);
}

// A histogram kept in milliseconds, exposed in seconds.
void histogram(std::string& out, const char* name, const char* help, const genai::Histogram& h) {
  head(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i] / 1000.0, cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name, h.sum / 1000.0, name, h.count);
}

// Prometheus label values escape backslash, double quote and newline.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// The model-server protocol's signals (metrics.h), under vLLM's names.
void protocol(std::string& out, const genai::SchedulerStatus& st, const std::string& model_name) {
  const std::string model = fmt::format("{{model_name=\"{}\"}}", label_value(model_name));
  const int64_t rows = st.parallel * st.slot_capacity;
  head(out, "vllm:num_requests_waiting", "gauge", "Requests waiting for a sequence slot (the protocol's TotalQueuedRequests).");
  out += fmt::format("vllm:num_requests_waiting{} {}\n", model, st.queue);
  head(out, "vllm:num_requests_running", "gauge", "Requests holding a sequence slot, prefilling or decoding (TotalRunningRequests).");
  out += fmt::format("vllm:num_requests_running{} {}\n", model, st.busy_slots);
  head(out, "vllm:kv_cache_usage_perc", "gauge",
       "Fraction (0-1) of all slots' K/V rows held by running requests; rows kept for prefix reuse count as free (KVCacheUtilization).");
  out += fmt::format("vllm:kv_cache_usage_perc{} {}\n", model, rows > 0 ? static_cast<double>(st.kv_rows_in_use) / static_cast<double>(rows) : 0.0);
  head(out, "vllm:cache_config_info", "gauge",
       "K/V cache layout for prefix-aware routing: block_size tokens per block, num_gpu_blocks blocks in all slots together.");
  out += fmt::format("vllm:cache_config_info{{block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1\n", kPrefixBlockTokens, rows / kPrefixBlockTokens);
}

}  // namespace

std::string prometheus_text(const genai::SchedulerStatus& st, const std::map<std::pair<std::string, int>, uint64_t>& requests,
                            const std::string& model_name) {
  const int64_t slots = st.parallel, slot_capacity = st.slot_capacity;
  std::string out;
  head(out, "npullm_http_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, n] : requests) out += fmt::format("npullm_http_requests_total{{route=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  metric(out, "npullm_requests_completed_total", "counter", "Generation requests that finished.", st.requests_done);
  metric(out, "npullm_requests_cancelled_total", "counter", "Generation requests cancelled (client gone or shutdown).", st.requests_cancelled);
  metric(out, "npullm_requests_failed_total", "counter", "Generation requests that failed in the runtime.", st.requests_failed);
  metric(out, "npullm_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", st.prompt_tokens);
  metric(out, "npullm_cached_prompt_tokens_total", "counter", "Prompt tokens reused from a slot's K/V rows instead of prefilled.", st.cached_tokens);
  metric(out, "npullm_copied_prefix_rows_total", "counter", "Of the cached prompt tokens, K/V rows copied in from another slot's prefix.",
         st.copied_prefix_rows);
  metric(out, "npullm_generated_tokens_total", "counter", "Tokens generated.", st.generated_tokens);
  metric(out, "npullm_decode_steps_total", "counter", "Batched decode steps run.", st.decode_steps);
  metric(out, "npullm_padded_rows_total", "counter", "Rows of batched generate blobs that held no sequence.", st.padded_rows);
  metric(out, "npullm_prefill_chunks_total", "counter", "Prefill chunks run between decode steps.", st.prefill_chunks);
  metric(out, "npullm_queue_length", "gauge", "Requests waiting for a slot.", st.queue);
  metric(out, "npullm_slots", "gauge", "Sequence slots.", slots);
  metric(out, "npullm_busy_slots", "gauge", "Slots running a request.", st.busy_slots);
  metric(out, "npullm_kv_rows_in_use", "gauge", "K/V rows held by busy slots.", st.kv_rows_in_use);
  metric(out, "npullm_kv_rows_capacity", "gauge", "K/V rows of all slots together.", slots * slot_capacity);
  metric(out, "npullm_decode_tokens_per_second", "gauge", "Aggregate decode tokens/s over the last second.", st.decode_tps);
  metric(out, "npullm_longest_decode_stall_seconds", "gauge", "Longest gap between decode steps while sequences were decoding.",
         st.longest_decode_stall_ms / 1000.0);
  metric(out, "npullm_spec_draft_tokens_total", "counter", "Speculative decoding: guessed tokens checked in verify steps.", st.spec_drafted);
  metric(out, "npullm_spec_accepted_tokens_total", "counter", "Speculative decoding: guessed tokens the sampler accepted.", st.spec_accepted);
  metric(out, "npullm_spec_verify_steps_total", "counter", "Speculative decoding: verify steps run (each a decode step).",
         st.spec_verify_steps);
  head(out, "npullm_spec_accepted_at_position_total", "counter",
       "Speculative decoding: guesses accepted at each place (1 = the first guess of a step) of a step's guesses.");
  for (size_t i = 0; i < st.spec_accepted_at.size(); ++i)
    out += fmt::format("npullm_spec_accepted_at_position_total{{position=\"{}\"}} {}\n", i + 1, st.spec_accepted_at[i]);
  histogram(out, "npullm_time_to_first_token_seconds", "From request submission to its first token.", st.ttft_ms);
  histogram(out, "npullm_token_latency_seconds", "Between consecutive tokens of a request.", st.token_latency_ms);
  protocol(out, st, model_name);
  return out;
}

}  // namespace npullm::server
