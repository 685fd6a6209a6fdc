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
//
// Its life, as a readiness probe and a rolling update need it: it serves from bind(), before the
// model is loaded (loading: GET /health and the API answer 503), then set_scheduler() makes it ready
// (200), and drain() stops admitting (new completion requests and /health get 503 with Retry-After,
// every response closes its connection) while the requests already admitted run on to their end.
// GET /livez answers 200 in every phase: the process is up and serving HTTP.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <npullm/llm_pipeline.h>

namespace npullm::genai {
class Scheduler;
}

namespace npullm::server {

// Limits and time-outs: every one has a default that keeps a loopback server answering under abuse
// (tests/server/abuse.mjs): slow or silent clients lose their connection, not the server its threads.
struct ServerOptions {
  std::string host = "127.0.0.1";    // loopback unless told otherwise
  int port = 8080;                   // 0: any free port (see HttpServer::port)
  std::string api_key;               // non-empty: /v1/*, /slots and /metrics need "Authorization: Bearer KEY"
  size_t max_body_bytes = 4u << 20;  // larger bodies get 413
  int http_threads = 0;              // connections served at once; 0: enough for every slot and queued request
  int64_t max_tokens_limit = 1000000;  // a larger max_tokens is refused as absurd
  // > 0 (serve --spec lookup|draft): every request without structured output guesses up to spec_k tokens
  // a step from its own text (prompt lookup), and a request's `prediction` is honoured; the
  // scheduler needs verify blobs for it (PipelineConfig::spec_max_k >= spec_k).
  int64_t spec_k = 0;
  SpecMode spec_mode = SpecMode::Lookup;  // where those guesses come from (serve --spec lookup|draft)
  // A request's line, headers and body must all arrive within this many seconds of its first
  // byte being awaited (a client trickling them, or sending less body than it announced, is cut).
  int read_timeout_s = 10;
  // A client that takes no bytes for this long is dropped (a stream it stopped reading is cancelled).
  int write_timeout_s = 10;
  int keep_alive_timeout_s = 2;      // an idle kept-alive connection is closed after this
  int keep_alive_max = 100;          // requests on one connection before it is closed
  // Open connections (served or waiting for a thread); beyond them a connection gets 503 at once.
  int max_connections = 1000;
  // While connections wait for a thread, one that has not delivered a whole request after this
  // many milliseconds (idle, or slow) is closed to make room.
  int busy_read_ms = 500;
  int max_json_depth = 64;           // bodies nested deeper (arrays/objects) get 400, before parsing
  size_t max_stop_bytes = 1024;      // a longer stop string gets 400 (at most 4 of them, as OpenAI)
  int64_t parallel = 4;              // the scheduler's slots: sizes http_threads' default before it is loaded
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions opt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket; throws npullm::Error when it cannot (address in use, bad host).
  void bind();
  int port() const;
  // Serves until stop() (from another thread); returns then, once every connection has ended.
  void run();
  void stop();
  bool running() const;  // run() has begun to accept connections

  // The model is loaded: requests go to `sched` (which must outlive the server) from now on.
  void set_scheduler(genai::Scheduler& sched);
  // Stops admitting: completion requests and /health answer 503 with Retry-After from now on.
  // What the scheduler already holds runs on; the caller decides how long (npullm serve's
  // --drain-timeout) before it shuts the scheduler down and stops the server.
  void drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace npullm::server
