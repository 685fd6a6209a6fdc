#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fmt/format.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "common/error.h"
#include "genai/serving/scheduler.h"
#include "npuw/llm_runtime.h"
#include "server/metrics.h"
#include "server/openai_request.h"

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

const char* finish_name(FinishReason r) { return r == FinishReason::Length ? "length" : "stop"; }

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

}  // namespace

struct HttpServer::Impl {
  genai::Scheduler& sched;
  ServerOptions opt;
  httplib::Server svr;
  RequestCounter counter;
  int bound_port = 0;
  std::atomic<uint64_t> next_id{1};
  std::mt19937_64 seed_rng{std::random_device{}()};
  std::mutex seed_mu;

  Impl(genai::Scheduler& s, ServerOptions o) : sched(s), opt(std::move(o)) {
    const genai::SchedulerStatus st = sched.status();
    int threads = opt.http_threads;
    if (threads <= 0) threads = static_cast<int>(std::min<int64_t>(512, 2 * static_cast<int64_t>(st.slots.size()) + 64 + 16));
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_payload_max_length(opt.max_body_bytes);
    svr.set_keep_alive_timeout(2);
    svr.set_read_timeout(30, 0);
    svr.set_write_timeout(30, 0);
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
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kIndexHtml, "text/html; charset=utf-8"); });
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content(R"({"status":"ok"})", "application/json"); });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      json data = json::array({{{"id", sched.model_name()}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "npullm"}}});
      res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(prometheus_text(sched.status(), counter.snapshot(), sched.runtime().slots(), sched.slot_capacity()),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    svr.Get("/slots", [this](const httplib::Request& req, httplib::Response& res) {
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
            {"slots", slots}};
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!authorized(req, res)) return;
    RequestLimits limits{opt.max_tokens_limit, sched.runtime().n_vocab()};
    auto parsed = parse_request(req.body, chat, limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    ApiRequest r = std::get<ApiRequest>(std::move(parsed));
    if (!r.model.empty() && r.model != sched.model_name())
      return send_error(res, ApiError{404, fmt::format("the model '{}' does not exist; this server serves '{}'", r.model, sched.model_name()),
                                      "invalid_request_error", "model", "model_not_found"});
    std::vector<int32_t> ids;
    try {
      if (chat) ids = sched.encode_chat(std::get<ChatRequest>(r.body).messages);
      else if (!std::get<CompletionRequest>(r.body).prompt_ids.empty()) ids = std::get<CompletionRequest>(r.body).prompt_ids;
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
      return send_error(res, bad_request(e.what()));
    }
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
    const int64_t created = unix_now();
    if (r.stream) return stream(res, ch, chat, id, created, r.include_usage);

    std::unique_lock lk(ch->m);
    ch->cv.wait(lk, [&] { return ch->done; });
    const genai::ServeResult& out = ch->result;
    if (!out.error.empty()) return send_error(res, ApiError{500, out.error, "server_error", "", ""});
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_name(out.finish)}};
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", out.text}};
    else choice["text"] = out.text;
    json body = {{"id", id},
                 {"object", chat ? "chat.completion" : "text_completion"},
                 {"created", created},
                 {"model", sched.model_name()},
                 {"choices", json::array({choice})},
                 {"usage", usage_json(out)}};
    res.set_content(dump(body), "application/json");
  }

  // Server-sent events: one "data: {chunk}" event per piece of text as the scheduler produces it.
  void stream(httplib::Response& res, std::shared_ptr<Channel> ch, bool chat, const std::string& id, int64_t created, bool usage) {
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
          std::deque<std::string> pieces;
          bool done = false;
          genai::ServeResult result;
          {
            std::unique_lock lk(ch->m);
            ch->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return !ch->pieces.empty() || ch->done; });
            pieces.swap(ch->pieces);
            done = ch->done;
            if (done) result = ch->result;
          }
          for (const std::string& p : pieces) {
            const std::string ev = chat ? chunk({{"delta", {{"content", p}}}}, nullptr) : chunk({{"text", p}}, nullptr);
            if (!sink.write(ev.data(), ev.size())) return gone();
          }
          if (!done) return sink.is_writable() ? true : gone();
          std::string tail;
          if (!result.error.empty()) {
            tail += "data: " + dump(ApiError{500, result.error, "server_error", "", ""}.body()) + "\n\n";
          } else {
            tail += chat ? chunk({{"delta", json::object()}}, finish_name(result.finish)) : chunk({{"text", ""}}, finish_name(result.finish));
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
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::run() {
  if (!impl_->svr.listen_after_bind()) fail("the HTTP server stopped with an error");
}

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace npullm::server
