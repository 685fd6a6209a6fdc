// /metrics: the scheduler's and the server's counters in Prometheus' text exposition format
// (version 0.0.4): "# HELP" and "# TYPE" lines, then samples; histograms as cumulative
// name_bucket{le="..."} series ending at +Inf, with name_sum and name_count. Times are in seconds.
//
// It also speaks the model-server protocol of the Gateway API Inference Extension (what its
// endpoint picker scrapes to route a request: ../shared/k8s/model-server-protocol.md), under the
// names vLLM gives those signals, so that a picker set up for vLLM (its default) routes to npullm
// with no change:
//   vllm:num_requests_waiting  gauge  TotalQueuedRequests: requests waiting for a slot
//   vllm:num_requests_running  gauge  TotalRunningRequests: requests holding a slot (prefill or decode)
//   vllm:kv_cache_usage_perc   gauge  KVCacheUtilization, a fraction 0-1: K/V rows held by running
//                                     requests over all slots' rows. Rows a free slot keeps for
//                                     prefix reuse count as free, as vLLM counts its evictable
//                                     cached blocks: the next request may take them.
//   vllm:cache_config_info     gauge  1, with the labels block_size (BlockSize, in tokens) and
//                                     num_gpu_blocks (NumGPUBlocks), for prefix-aware routing.
// npullm reuses a prefix at any length, row by row, not in blocks; a "block" here is
// kPrefixBlockTokens rows, the least that a prefix held by another slot must exceed to be copied in
// (genai::Scheduler::kMinCopiedRows), and the number of blocks is every slot's rows over it: what
// the picker's model of the server's prefix cache (an LRU of block hashes) needs to size itself.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "genai/serving/scheduler.h"

namespace npullm::server {

// HTTP requests by route and status, counted by the server.
class RequestCounter {
 public:
  void add(const std::string& route, int status);
  std::map<std::pair<std::string, int>, uint64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

inline constexpr int64_t kPrefixBlockTokens = genai::Scheduler::kMinCopiedRows;

// All of it, from one status snapshot (so the signals agree with each other). `model_name` labels
// the protocol's series, as vLLM's carry theirs.
std::string prometheus_text(const genai::SchedulerStatus& st, const std::map<std::pair<std::string, int>, uint64_t>& requests,
                            const std::string& model_name);

}  // namespace npullm::server
