// GET /slots: the runtime's live state as JSON, which the page polls: per slot its state, K/V rows,
// the generate variant that holds them, cached prefix and tokens/s; the last step's blob and its
// padding; totals; the connections. All of it from the scheduler's status and the connection table.
#include "server/http_server_impl.h"

namespace npullm::server {

json HttpServer::Impl::slots_json(const genai::Scheduler& sched) {
  const genai::SchedulerStatus st = sched.status();
  json slots = json::array();
  for (const genai::SlotStatus& s : st.slots)
    slots.push_back({{"id", s.id}, {"state", s.state}, {"kv_rows", s.kv_rows}, {"capacity", s.capacity}, {"variant", s.variant},
                     {"cached_tokens", s.cached_tokens}, {"prompt_tokens", s.prompt_tokens}, {"generated", s.generated}, {"tps", s.tps}});
  return {{"model", sched.model_name()},
          {"parallel", st.parallel},
          {"capacities", st.capacities},
          {"batch_sizes", st.batch_sizes},
          {"queue", st.queue},
          {"decode_tps", st.decode_tps},
          {"step", {{"batch", st.last_batch}, {"capacity", st.last_capacity}, {"active", st.last_active},
                    {"padded_rows", st.last_batch - st.last_active}}},
          {"totals", {{"requests", st.requests_done}, {"generated_tokens", st.generated_tokens}, {"cached_tokens", st.cached_tokens},
                      {"padded_rows", st.padded_rows}, {"decode_steps", st.decode_steps},
                      {"longest_decode_stall_ms", st.longest_decode_stall_ms}}},
          {"connections", {{"open", conns.open.load()}, {"waiting", conns.queued.load()}, {"cut_slow", conns.cut_slow.load()},
                           {"cut_crowded", conns.cut_crowded.load()}, {"refused", conns.refused.load()}}},
          {"slots", slots}};
}

}  // namespace npullm::server
