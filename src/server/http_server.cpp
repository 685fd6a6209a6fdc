#include "server/http_server.h"

#include <httplib.h>
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fmt/format.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "common/error.h"
#include "genai/serving/scheduler.h"
#include "genai/tools/tool_call_parser.h"
#include "genai/tools/tool_constraint.h"
#include "genai/tools/tool_prompt.h"
#include "npuw/llm_runtime.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace npullm::server {

namespace {

using nlohmann::json;

// The chat page (src/server/web/index.html), embedded at build time.
constexpr char kIndexHtml[] =
#include "server_web_page.inc"
    ;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* finish_name(FinishReason r, bool tool_calls = false) {
  if (tool_calls) return "tool_calls";
  return r == FinishReason::Length ? "length" : "stop";
}

using genai::tools::ToolCallParser;

json usage_json(const genai::ServeResult& r) {
  const int64_t completion = static_cast<int64_t>(r.ids.size());
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

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

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump(e.body()), "application/json");
}

bool same_key(const std::string& a, const std::string& b) {
  // Compares every byte whatever the first difference, so timing says nothing of the key.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}


// True when `body`, read as JSON, nests arrays and objects deeper than `limit` (brackets inside
// strings do not count). Checked before parsing, so that no parser or walker downstream recurses
// on a hostile body; a body that is not JSON at all is left to the parser to reject.
bool nested_deeper_than(std::string_view body, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return false;
}

// ---- Connections -------------------------------------------------------------------------------
// cpp-httplib gives each connection a pool thread for its whole life and bounds only the wait for
// each recv(): a client trickling a byte at a time, or announcing more body than it sends, could
// hold a thread for ever, and enough of them (or of idle connections) would starve everyone. So
// the server serves each connection itself (GuardedServer, with httplib's own request processing)
// through ConnStream, whose reads give up once the request has taken read_timeout_s to arrive
// since it was first awaited, or busy_read_ms while other connections wait for a thread. Once a
// request is read and its handler runs, generation is bounded by max_tokens and the scheduler, and
// writing by write_timeout_s (a client that takes nothing for that long is dropped).

using Clock = std::chrono::steady_clock;

struct Conn {
  socket_t sock = -1;
  Clock::time_point since;  // when its current request began to be awaited
  bool busy = false;        // its request was read and a handler runs (set by the handler's thread)
};

thread_local Conn* tl_conn = nullptr;  // the connection this HTTP thread serves

struct ConnTable {
  std::atomic<int64_t> open{0};    // connections being served
  std::atomic<int64_t> queued{0};  // accepted, waiting for a thread
  std::atomic<int64_t> cut_slow{0}, cut_crowded{0}, refused{0};
};

// The HTTP threads: a fixed pool like httplib's own, counting the connections that wait for one.
class Pool final : public httplib::TaskQueue {
 public:
  Pool(size_t n, ConnTable& t) : table_(t) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lk(m_);
      jobs_.push_back(std::move(fn));
      table_.queued++;
    }
    cv_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left to serve
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        table_.queued--;
      }
      fn();
    }
  }
  ConnTable& table_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

// Waits up to `ms` for `events` on `sock`: > 0 ready (or hung up), 0 not yet, < 0 error.
int wait_socket(socket_t sock, short events, int ms) {
  pollfd p{sock, events, 0};
  int r;
  do r = ::poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r;
}

// Why a connection still waiting for (part of) its request must go now: "" if it may wait on.
const char* too_slow(const Conn& c, const ServerOptions& o, ConnTable& t) {
  if (c.busy) return "";
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - c.since).count();
  if (age > int64_t{o.read_timeout_s} * 1000) return "slow";
  if (t.queued > 0 && age > o.busy_read_ms) return "crowded";
  return "";
}

// A socket stream as httplib's own (buffered reads, timed writes), whose reads give up when the
// request is too slow to arrive (see above).
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(Conn& c, const ServerOptions& o, ConnTable& t) : c_(c), o_(o), t_(t) {}

  bool is_readable() const override { return off_ < len_ || const_cast<ConnStream*>(this)->wait_readable(); }
  bool is_writable() const override {
    if (wait_socket(c_.sock, POLLOUT, o_.write_timeout_s * 1000) <= 0) return false;
    char b;  // alive: no EOF or error pending (as httplib's is_socket_alive)
    if (wait_socket(c_.sock, POLLIN, 0) == 0) return true;
    return ::recv(c_.sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (off_ >= len_) {
      if (!wait_readable()) return -1;
      off_ = len_ = 0;
      ssize_t n;
      do n = ::recv(c_.sock, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      len_ = static_cast<size_t>(n);
    }
    const size_t k = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, k);
    off_ += k;
    return static_cast<ssize_t>(k);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(c_.sock, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(::getsockname, ip, port); }
  socket_t socket() const override { return c_.sock; }

  // Waits for bytes, in 50 ms steps: false when none came within read_timeout_s of silence, or
  // the request as a whole is too slow (too_slow); the connection is then closed (gave_up).
  bool wait_readable() {
    const auto silent_until = Clock::now() + std::chrono::seconds(o_.read_timeout_s);
    for (;;) {
      const char* why = too_slow(c_, o_, t_);
      if (!*why && !c_.busy && Clock::now() > silent_until) why = "slow";
      if (*why) {
        (why[0] == 's' ? t_.cut_slow : t_.cut_crowded)++;
        gave_up_ = true;
        return false;
      }
      const int r = wait_socket(c_.sock, POLLIN, 50);
      if (r != 0) return r > 0;
      if (c_.busy && Clock::now() > silent_until) return false;
    }
  }
  bool gave_up() const { return gave_up_; }

 private:
  template <typename F>
  void address(F get, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if (get(c_.sock, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    char host[64] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
      port = ntohs(v6->sin6_port);
    }
    ip = host;
  }

  Conn& c_;
  const ServerOptions& o_;
  ConnTable& t_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
  bool gave_up_ = false;
};

// httplib's server, each connection served through a ConnStream (and refused past the maximum):
// the keep-alive loop of httplib's own process_and_close_socket, with guarded waits.
class GuardedServer final : public httplib::Server {
 public:
  GuardedServer(ConnTable& t, const ServerOptions& o) : table_(t), opt_(o) {}

  // httplib listens with a backlog of 5: a burst of connections would wait in SYN retries (1 s,
  // 3 s, ...) before any thread sees them. listen() again on the bound socket sets a larger one.
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }

 private:
  bool process_and_close_socket(socket_t sock) override {
    if (table_.open + table_.queued >= opt_.max_connections) {
      table_.refused++;
      const std::string body = dump(ApiError{503, "too many open connections; retry later", "server_error", "", "server_overloaded"}.body());
      const std::string msg = fmt::format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
          "Content-Length: {}\r\n\r\n{}", body.size(), body);
      [[maybe_unused]] const ssize_t n = ::send(sock, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(sock, SHUT_RDWR);
      ::close(sock);
      return false;
    }
    table_.open++;
    Conn c;
    c.sock = sock;
    tl_conn = &c;
    bool ret = false;
    for (int left = std::max(1, opt_.keep_alive_max); left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
      c.since = Clock::now();
      c.busy = false;
      if (!await_request(c)) break;
      ConnStream strm(c, opt_, table_);
      bool closed = false;
      ret = process_request(strm, left == 1, closed, nullptr);
      if (!ret || closed || strm.gave_up()) break;  // a request too slow to arrive ends its connection
    }
    tl_conn = nullptr;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    table_.open--;
    return ret;
  }

  // The wait for a (next) request on a kept-alive connection: keep_alive_timeout_s, cut short
  // while other connections wait for a thread.
  bool await_request(Conn& c) {
    const auto until = c.since + std::chrono::seconds(opt_.keep_alive_timeout_s);
    for (;;) {
      const int r = wait_socket(c.sock, POLLIN, 50);
      if (r != 0) return r > 0;
      if (Clock::now() > until || svr_sock_ == INVALID_SOCKET) return false;
      if (table_.queued > 0 && Clock::now() - c.since > std::chrono::milliseconds(opt_.busy_read_ms)) {
        table_.cut_crowded++;
        return false;
      }
    }
  }

  ConnTable& table_;
  const ServerOptions& opt_;
};

// Marks this thread's connection busy: its request was read and a handler runs.
void conn_busy() {
  if (tl_conn) tl_conn->busy = true;
}

// The client of this thread's connection has closed (or reset) it.
bool peer_gone() {
  if (!tl_conn) return false;
  char b;
  const ssize_t n = ::recv(tl_conn->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}
}  // namespace

struct HttpServer::Impl {
  genai::Scheduler& sched;
  ServerOptions opt;
  ConnTable conns;
  GuardedServer svr{conns, opt};
  RequestCounter counter;
  int bound_port = 0;
  std::atomic<uint64_t> next_id{1};
  std::mt19937_64 seed_rng{std::random_device{}()};
  std::mutex seed_mu;

  Impl(genai::Scheduler& s, ServerOptions o) : sched(s), opt(std::move(o)) {
    const genai::SchedulerStatus st = sched.status();
    int threads = opt.http_threads;
    if (threads <= 0) threads = static_cast<int>(std::min<int64_t>(512, 2 * static_cast<int64_t>(st.slots.size()) + 64 + 16));
    svr.new_task_queue = [this, threads] { return new Pool(static_cast<size_t>(threads), conns); };
    svr.set_payload_max_length(opt.max_body_bytes);
    svr.set_keep_alive_timeout(opt.keep_alive_timeout_s);
    svr.set_keep_alive_max_count(static_cast<size_t>(std::max(1, opt.keep_alive_max)));
    svr.set_read_timeout(opt.read_timeout_s, 0);
    svr.set_write_timeout(opt.write_timeout_s, 0);
    routes();
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (opt.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (h.rfind(prefix, 0) == 0 && same_key(h.substr(prefix.size()), opt.api_key)) return true;
    send_error(res, ApiError{401, h.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key",
                             "invalid_request_error", "", "invalid_api_key"});
    return false;
  }

  uint64_t fresh_seed() {
    std::lock_guard lk(seed_mu);
    return seed_rng();
  }

  void routes() {
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
      conn_busy();
      res.set_content(kIndexHtml, "text/html; charset=utf-8");
    });
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      conn_busy();
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      conn_busy();
      if (!authorized(req, res)) return;
      json data = json::array({{{"id", sched.model_name()}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "npullm"}}});
      res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      conn_busy();
      if (!authorized(req, res)) return;
      res.set_content(prometheus_text(sched.status(), counter.snapshot(), sched.runtime().slots(), sched.slot_capacity()),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    svr.Get("/slots", [this](const httplib::Request& req, httplib::Response& res) {
      conn_busy();
      if (!authorized(req, res)) return;
      res.set_content(dump(slots_json()), "application/json");
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    // Routes and statuses that have no body of their own (unknown route, 413, ...) get an
    // OpenAI-style error object; responses that already carry one are left alone.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      ApiError e{res.status, "", "invalid_request_error", "", ""};
      switch (res.status) {
        case 404: e.message = fmt::format("no route {} {}", req.method, req.path); e.code = "not_found"; break;
        case 405: e.message = fmt::format("method {} is not allowed on {}", req.method, req.path); break;
        case 413:
          e.message = fmt::format("the request body is larger than {} bytes", opt.max_body_bytes);
          e.code = "request_too_large";
          break;
        default:
          e.message = fmt::format("HTTP error {}", res.status);
          if (res.status >= 500) e.type = "server_error";
      }
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError{500, what, "server_error", "", ""});
    });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      static const char* known[] = {"/", "/health", "/v1/models", "/metrics", "/slots", "/v1/chat/completions", "/v1/completions"};
      std::string route = "other";
      for (const char* k : known)
        if (req.path == k) route = k;
      counter.add(route, res.status);
      // A large body (a hostile stop list, say) leaves its parse's many small blocks free in this
      // thread's malloc arena; hand them back, so that resident memory stays bounded by the live
      // requests rather than by the largest bodies each arena has seen.
      if (req.body.size() > (256u << 10)) ::malloc_trim(0);
    });
  }

  json slots_json() {
    const genai::SchedulerStatus st = sched.status();
    const npuw::LlmRuntime& rt = sched.runtime();
    json slots = json::array();
    for (const genai::SlotStatus& s : st.slots)
      slots.push_back({{"id", s.id}, {"state", s.state}, {"kv_rows", s.kv_rows}, {"capacity", s.capacity}, {"variant", s.variant},
                       {"cached_tokens", s.cached_tokens}, {"prompt_tokens", s.prompt_tokens}, {"generated", s.generated}, {"tps", s.tps}});
    return {{"model", sched.model_name()},
            {"parallel", rt.slots()},
            {"capacities", rt.variants()},
            {"batch_sizes", rt.batch_sizes()},
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

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    conn_busy();
    if (!authorized(req, res)) return;
    if (nested_deeper_than(req.body, opt.max_json_depth))
      return send_error(res, bad_request(fmt::format("the request body nests arrays or objects deeper than {} levels", opt.max_json_depth)));
    RequestLimits limits{opt.max_tokens_limit, sched.runtime().n_vocab()};
    auto parsed = parse_request(req.body, chat, limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    ApiRequest r = std::get<ApiRequest>(std::move(parsed));
    for (const std::string& s : r.gen.stop_strings)
      if (s.size() > opt.max_stop_bytes)
        return send_error(res, bad_request(fmt::format("a stop string is {} bytes long; at most {} are allowed", s.size(), opt.max_stop_bytes), "stop"));
    if (!r.model.empty() && r.model != sched.model_name())
      return send_error(res, ApiError{404, fmt::format("the model '{}' does not exist; this server serves '{}'", r.model, sched.model_name()),
                                      "invalid_request_error", "model", "model_not_found"});
    std::vector<int32_t> ids;
    std::shared_ptr<ToolCallParser> tool_parser;  // set when the reply may hold tool calls
    std::string structured_param = r.structured_param;
    try {
      if (chat && std::get<ChatRequest>(r.body).uses_tools()) {
        // Tools, calls and results through the model's own template (genai/tools), the reply
        // constrained to the family's call JSON as tool_choice asks, and parsed back.
        const ChatRequest& c = std::get<ChatRequest>(r.body);
        const genai::tools::Family family = genai::tools::detect_family(sched.chat_template_source());
        const genai::tools::TemplateInput in = genai::tools::template_input(family, c.messages, c.tools, c.tool_choice);
        ids = sched.encode_chat(in.messages, in.extra);
        if (c.tool_choice.mode != genai::tools::ToolChoice::Mode::None) {
          r.gen.structured = genai::tools::tool_constraint(family, c.tools, c.tool_choice, c.parallel_tool_calls);
          structured_param = "tools";
          std::vector<std::string> names;
          for (const auto& t : c.tools) names.push_back(t.name);
          const bool required = c.tool_choice.mode != genai::tools::ToolChoice::Mode::Auto;
          tool_parser = std::make_shared<ToolCallParser>(family, required ? ToolCallParser::Mode::Required : ToolCallParser::Mode::Auto,
                                                         std::move(names), c.parallel_tool_calls, fmt::format("call_{:016x}_", fresh_seed()));
        }
      } else if (chat) {
        std::vector<ChatMessage> plain;
        for (const auto& m : std::get<ChatRequest>(r.body).messages) plain.push_back({m.role, m.content});
        ids = sched.encode_chat(plain);
      } else if (!std::get<CompletionRequest>(r.body).prompt_ids.empty()) ids = std::get<CompletionRequest>(r.body).prompt_ids;
      else ids = sched.encode_prompt(std::get<CompletionRequest>(r.body).prompt);
    } catch (const Error& e) {
      return send_error(res, bad_request(fmt::format("cannot render the prompt: {}", e.what()), chat ? "messages" : "prompt"));
    }
    if (static_cast<int64_t>(ids.size()) >= sched.slot_capacity())
      return send_error(res, bad_request(fmt::format("the prompt has {} tokens, but a sequence holds at most {} (prompt and reply together)",
                                                     ids.size(), sched.slot_capacity()),
                                         chat ? "messages" : "prompt", "context_length_exceeded"));
    // Without max_tokens the reply may use every row its slot has left.
    if (!r.has_max_tokens) r.gen.max_new_tokens = sched.slot_capacity();
    if (!r.has_seed) r.gen.seed = fresh_seed();

    auto ch = std::make_shared<Channel>();
    genai::ServeRequest sr;
    sr.prompt_ids = std::move(ids);
    sr.gen = r.gen;
    // A chat's reasoning (gpt-oss's analysis channel) stays out of `content`: it is sent as
    // `reasoning_content`, as llama.cpp's and vLLM's servers do.
    sr.split_reasoning = chat;
    sr.on_reasoning = [ch](std::string_view piece) {
      std::lock_guard lk(ch->m);
      ch->reasoning.emplace_back(piece);
      ch->cv.notify_all();
      return !ch->gone.load();
    };
    sr.on_text = [ch](std::string_view piece) {
      std::lock_guard lk(ch->m);
      ch->pieces.emplace_back(piece);
      ch->cv.notify_all();
      return !ch->gone.load();
    };
    sr.on_done = [ch](const genai::ServeResult& result) {
      std::lock_guard lk(ch->m);
      ch->result = result;
      ch->done = true;
      ch->cv.notify_all();
    };
    try {
      ch->id = sched.submit(std::move(sr));
    } catch (const genai::QueueFull& e) {
      return send_error(res, ApiError{503, e.what(), "server_error", "", "server_overloaded"});
    } catch (const Error& e) {
      // Among them a schema or grammar genai/grammar cannot compile: the message names the keyword.
      return send_error(res, bad_request(e.what(), r.gen.structured.kind != StructuredOutput::Kind::None ? structured_param : ""));
    }
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
    const int64_t created = unix_now();
    if (r.stream) return stream(res, ch, chat, id, created, r.include_usage, tool_parser);

    // Until it is done; a client that hangs up meanwhile cancels its request (freeing the slot).
    std::unique_lock lk(ch->m);
    while (!ch->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return ch->done; })) {
      if (!ch->gone && peer_gone()) {
        ch->gone = true;
        sched.cancel(ch->id);
      }
    }
    const genai::ServeResult& out = ch->result;
    if (!out.error.empty()) return send_error(res, ApiError{500, out.error, "server_error", "", ""});
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_name(out.finish)}};
    if (tool_parser) {
      // The same parser the stream uses, fed the whole text: streamed and not give the same calls.
      tool_parser->feed(out.text);
      tool_parser->finish();
      choice["message"] = tool_reply_message(*tool_parser);
      choice["finish_reason"] = finish_name(out.finish, !tool_parser->calls().empty());
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", out.text}};
    } else {
      choice["text"] = out.text;
    }
    if (chat && !out.reasoning.empty()) choice["message"]["reasoning_content"] = out.reasoning;
    json body = {{"id", id},
                 {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", created},
                 {"model", sched.model_name()},
                 {"choices", json::array({choice})},
                 {"usage", usage_json(out)}};
    res.set_content(dump(body), "application/json");
  }

  // Server-sent events: one "data: {chunk}" event per piece of text as the scheduler produces it.
  // With tool calls (`tools` non-null) the text goes through the parser: content as it is said,
  // each call once complete (tool_reply_deltas).
  void stream(httplib::Response& res, std::shared_ptr<Channel> ch, bool chat, const std::string& id, int64_t created, bool usage,
              std::shared_ptr<ToolCallParser> tools) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    const std::string model = sched.model_name();
    auto chunk = [=](json choice_fields, const char* finish) {
      json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
      for (auto& [k, v] : choice_fields.items()) choice[k] = v;
      json j = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created}, {"model", model},
                {"choices", json::array({choice})}};
      if (usage) j["usage"] = nullptr;
      return "data: " + dump(j) + "\n\n";
    };
    auto started = std::make_shared<bool>(false);
    auto calls_said = std::make_shared<size_t>(0);
    genai::Scheduler* sched_ptr = &sched;
    res.set_chunked_content_provider(
        "text/event-stream",
        [=](size_t, httplib::DataSink& sink) {
          auto gone = [&] {
            ch->gone = true;
            sched_ptr->cancel(ch->id);
            return false;
          };
          if (!*started) {
            *started = true;
            if (chat) {
              const std::string first = chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}}, nullptr);
              if (!sink.write(first.data(), first.size())) return gone();
            }
          }
          std::deque<std::string> pieces, thoughts;
          bool done = false;
          genai::ServeResult result;
          {
            std::unique_lock lk(ch->m);
            ch->cv.wait_for(lk, std::chrono::milliseconds(100),
                            [&] { return !ch->pieces.empty() || !ch->reasoning.empty() || ch->done; });
            pieces.swap(ch->pieces);
            thoughts.swap(ch->reasoning);
            done = ch->done;
            if (done) result = ch->result;
          }
          std::string evs;
          auto say = [&](const ToolCallParser::Delta& d) {
            for (json& delta : tool_reply_deltas(d, *calls_said)) evs += chunk({{"delta", std::move(delta)}}, nullptr);
          };
          // A harmony reply's reasoning comes before its content.
          for (const std::string& t : thoughts) evs += chunk({{"delta", {{"reasoning_content", t}}}}, nullptr);
          for (const std::string& p : pieces) {
            if (tools) say(tools->feed(p));
            else evs += chat ? chunk({{"delta", {{"content", p}}}}, nullptr) : chunk({{"text", p}}, nullptr);
          }
          if (done && tools && result.error.empty()) say(tools->finish());
          if (!evs.empty() && !sink.write(evs.data(), evs.size())) return gone();
          if (!done) return sink.is_writable() ? true : gone();
          std::string tail;
          if (!result.error.empty()) {
            tail += "data: " + dump(ApiError{500, result.error, "server_error", "", ""}.body()) + "\n\n";
          } else {
            const char* why = finish_name(result.finish, tools && !tools->calls().empty());
            tail += chat ? chunk({{"delta", json::object()}}, why) : chunk({{"text", ""}}, why);
            if (usage) {
              json u = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                        {"model", model}, {"choices", json::array()}, {"usage", usage_json(result)}};
              tail += "data: " + dump(u) + "\n\n";
            }
          }
          tail += "data: [DONE]\n\n";
          if (!sink.write(tail.data(), tail.size())) return gone();
          sink.done();
          return true;
        },
        [ch, sched_ptr](bool success) {
          // The connection ended before the stream did (the client went away): stop generating.
          std::lock_guard lk(ch->m);
          if (!ch->done) {
            ch->gone = true;
            sched_ptr->cancel(ch->id);
          }
        });
  }
};

HttpServer::HttpServer(genai::Scheduler& sched, ServerOptions opt) : impl_(std::make_unique<Impl>(sched, std::move(opt))) {}
HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const ServerOptions& o = impl_->opt;
  if (o.port == 0) {
    impl_->bound_port = impl_->svr.bind_to_any_port(o.host);
    if (impl_->bound_port < 0) fail("cannot listen on {}: no free port", o.host);
  } else {
    if (!impl_->svr.bind_to_port(o.host, o.port)) fail("cannot listen on {}:{} (address in use, or not an address of this machine)", o.host, o.port);
    impl_->bound_port = o.port;
  }
  impl_->svr.widen_backlog();
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::run() {
  if (!impl_->svr.listen_after_bind()) fail("the HTTP server stopped with an error");
}

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace npullm::server
