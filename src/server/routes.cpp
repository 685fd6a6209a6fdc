// The routes: which handler answers what, the API key, the error objects of routes and statuses that
// have no body of their own, and the count of answers by route and status (/metrics).
#include <malloc.h>

#include <chrono>
#include <fmt/format.h>

#include "server/http_server_impl.h"

namespace npullm::server {

namespace {

// The chat page (src/server/web/index.html), embedded at build time.
constexpr char kIndexHtml[] =
#include "server_web_page.inc"
    ;

bool same_key(const std::string& a, const std::string& b) {
  // Compares every byte whatever the first difference, so timing says nothing of the key.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump(e.body()), "application/json");
}

HttpServer::Impl::Impl(ServerOptions o) : opt(std::move(o)) {
  int threads = opt.http_threads;
  if (threads <= 0) threads = static_cast<int>(std::min<int64_t>(512, 2 * std::max<int64_t>(1, opt.parallel) + 64 + 16));
  svr.new_task_queue = [this, threads] { return new_connection_pool(static_cast<size_t>(threads), conns); };
  svr.set_payload_max_length(opt.max_body_bytes);
  svr.set_keep_alive_timeout(opt.keep_alive_timeout_s);
  svr.set_keep_alive_max_count(static_cast<size_t>(std::max(1, opt.keep_alive_max)));
  svr.set_read_timeout(opt.read_timeout_s, 0);
  svr.set_write_timeout(opt.write_timeout_s, 0);
  routes();
}

bool HttpServer::Impl::authorized(const httplib::Request& req, httplib::Response& res) {
  if (opt.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (h.rfind(prefix, 0) == 0 && same_key(h.substr(prefix.size()), opt.api_key)) return true;
  send_error(res, ApiError{401, h.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key",
                           "invalid_request_error", "", "invalid_api_key"});
  return false;
}

genai::Scheduler* HttpServer::Impl::loaded(httplib::Response& res) {
  genai::Scheduler* s = sched.load();
  if (!s) send_error(res, ApiError{503, "the model is still loading; retry shortly", "server_error", "", "model_loading"});
  return s;
}

uint64_t HttpServer::Impl::fresh_seed() {
  std::lock_guard lk(seed_mu);
  return seed_rng();
}

void HttpServer::Impl::routes() {
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
    conn_busy();
    res.set_content(kIndexHtml, "text/html; charset=utf-8");
  });
  // Readiness: 200 only while requests are admitted (a readiness probe, a load balancer's check).
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    conn_busy();
    const Phase p = phase;
    if (p == Phase::Ready) return res.set_content(R"({"status":"ok"})", "application/json");
    res.status = 503;
    res.set_header("Retry-After", "1");
    res.set_content(p == Phase::Loading ? R"({"status":"loading"})" : R"({"status":"draining"})", "application/json");
  });
  // Liveness: the process serves HTTP, whatever its phase.
  svr.Get("/livez", [](const httplib::Request&, httplib::Response& res) {
    conn_busy();
    res.set_content(R"({"status":"alive"})", "application/json");
  });
  svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    conn_busy();
    if (!authorized(req, res)) return;
    const genai::Scheduler* s = loaded(res);
    if (!s) return;
    json data = json::array({{{"id", s->model_name()}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "npullm"}}});
    res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    conn_busy();
    if (!authorized(req, res)) return;
    const genai::Scheduler* s = loaded(res);
    if (!s) return;
    res.set_content(prometheus_text(s->status(), counter.snapshot(), s->model_name()), "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Get("/slots", [this](const httplib::Request& req, httplib::Response& res) {
    conn_busy();
    if (!authorized(req, res)) return;
    const genai::Scheduler* s = loaded(res);
    if (!s) return;
    res.set_content(dump(slots_json(*s)), "application/json");
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
    static const char* known[] = {"/", "/health", "/livez", "/v1/models", "/metrics", "/slots", "/v1/chat/completions", "/v1/completions"};
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

}  // namespace npullm::server
