// The server's insides, shared by the files that hold its parts:
//   connections.*    reading requests off the sockets under the time-outs (slow clients, floods)
//   routes.cpp       the routes, the API key, error objects, the request counter behind /metrics
//   completions.cpp  a completion request: checks, prompt, the scheduler, the non-streamed reply
//   streaming.cpp    a streamed reply as server-sent events
//   slots_view.cpp   GET /slots: the runtime's live state, for the page
//   http_server.cpp  HttpServer itself: bind, run, stop
// Nothing here reaches below genai: what the views show comes from the scheduler's status.
#pragma once
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "genai/serving/scheduler.h"
#include "genai/tools/tool_call_parser.h"
#include "server/connections.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace npullm::server {

using nlohmann::json;

std::string dump(const json& j);  // compact, invalid UTF-8 replaced
int64_t unix_now();
// OpenAI's finish_reason for a request's end (tool_calls: the reply was parsed into calls).
const char* finish_name(FinishReason r, bool tool_calls = false);
json usage_json(const genai::ServeResult& r);
// The error object with its status (and Retry-After on a 503).
void send_error(httplib::Response& res, const ApiError& e);
// 503 for a request that comes while the server drains.
ApiError draining_error();

// What the scheduler thread hands to the HTTP thread of one request.
struct Channel {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> pieces;
  std::deque<std::string> reasoning;  // a harmony chat's reasoning pieces (ServeRequest::split_reasoning)
  bool done = false;
  genai::ServeResult result;
  std::atomic<bool> gone{false};  // the client went away: the scheduler stops the request
  uint64_t id = 0;
};

// Where the server is in its life (http_server.h).
enum class Phase { Loading, Ready, Draining };

struct HttpServer::Impl {
  std::atomic<genai::Scheduler*> sched{nullptr};  // set once, when the model is loaded
  std::atomic<Phase> phase{Phase::Loading};
  // Streamed replies whose connection has not finished (their last bytes not yet written): stop()
  // waits for them, since httplib stops writing a chunked reply once the listener is closed.
  std::atomic<int> open_streams{0};
  ServerOptions opt;
  ConnTable conns;
  GuardedServer svr{conns, opt};
  RequestCounter counter;
  int bound_port = 0;
  std::atomic<uint64_t> next_id{1};
  std::mt19937_64 seed_rng{std::random_device{}()};
  std::mutex seed_mu;

  explicit Impl(ServerOptions o);  // routes.cpp

  // routes.cpp
  void routes();
  // The scheduler; nullptr after answering 503 when the model is still loading.
  genai::Scheduler* loaded(httplib::Response& res);
  bool authorized(const httplib::Request& req, httplib::Response& res);
  uint64_t fresh_seed();

  // completions.cpp: POST /v1/chat/completions (chat) and /v1/completions.
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);

  // streaming.cpp: server-sent events, one "data: {chunk}" event per piece of text as the scheduler
  // produces it. With tool calls (`tools` non-null) the text goes through the parser: content as it
  // is said, each call once complete (tool_reply_deltas).
  void stream(genai::Scheduler& sched, httplib::Response& res, std::shared_ptr<Channel> ch, bool chat, const std::string& id,
              int64_t created, bool usage, std::shared_ptr<genai::tools::ToolCallParser> tools);

  // slots_view.cpp
  json slots_json(const genai::Scheduler& sched);
};

}  // namespace npullm::server
