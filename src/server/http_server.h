// npullm serve: an OpenAI-compatible HTTP server over genai's scheduler.
//
// Routes: POST /v1/chat/completions, POST /v1/completions (both optionally streamed as server-sent
// events ending in "data: [DONE]"), GET /v1/models, GET /health, GET /metrics (Prometheus text),
// GET /slots (the runtime's live state, JSON), GET / (the chat page, compiled into the binary).
//
// HTTP itself is cpp-httplib's (Debian's libcpp-httplib-dev): a small, well-kept, blocking server
// with a thread pool, chunked responses with a pull-style content provider (what SSE needs),
// body size limits, and an error hook; it needs no event loop of ours, and its blocking model fits
// a server whose work happens on one scheduler thread anyway. Nothing here parses HTTP by hand.
//
// The server holds no model logic: it validates requests (openai_request.h), hands them to the
// scheduler, and turns the scheduler's callbacks into responses.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace npullm::genai {
class Scheduler;
}

namespace npullm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";    // loopback unless told otherwise
  int port = 8080;                   // 0: any free port (see HttpServer::port)
  std::string api_key;               // non-empty: /v1/*, /slots and /metrics need "Authorization: Bearer KEY"
  size_t max_body_bytes = 4u << 20;  // larger bodies get 413
  int http_threads = 0;              // connections served at once; 0: enough for every slot and queued request
  int64_t max_tokens_limit = 1000000;  // a larger max_tokens is refused as absurd
};

class HttpServer {
 public:
  HttpServer(genai::Scheduler& sched, ServerOptions opt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket; throws npullm::Error when it cannot (address in use, bad host).
  void bind();
  int port() const;
  // Serves until stop() (from another thread); returns then.
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace npullm::server
