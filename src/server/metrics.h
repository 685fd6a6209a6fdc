// /metrics: the scheduler's and the server's counters in Prometheus' text exposition format
// (version 0.0.4): "# HELP" and "# TYPE" lines, then samples; histograms as cumulative
// name_bucket{le="..."} series ending at +Inf, with name_sum and name_count. Times are in seconds.
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

std::string prometheus_text(const genai::SchedulerStatus& st, const std::map<std::pair<std::string, int>, uint64_t>& requests,
                            int64_t slots, int64_t slot_capacity);

}  // namespace npullm::server
