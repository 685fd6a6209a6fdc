// npullm serve: the OpenAI-compatible server (src/server) over the continuous-batching scheduler.
// SIGINT / SIGTERM end it cleanly: running requests are cancelled (their streams end with
// [DONE]), the listener closes, and the process exits 0.
#include <csignal>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>
#include <thread>

#include "cli/commands.h"
#include "common/error.h"
#include "genai/serving/scheduler.h"
#include "server/http_server.h"

namespace npullm::cli {

namespace {

struct ServeOptions {
  std::string model;
  GenerateOptions go;  // runtime options and --chat-template (sampling comes with each request)
  server::ServerOptions http;
  genai::SchedulerConfig sched;
};

int serve(const ServeOptions& o) {
  // The signals are taken by a thread of ours (sigwait), never by a handler in the middle of a
  // step: block them before any thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that goes away is a failed write, not the end of the server
  // Every connection is a descriptor: allow as many as the hard limit does, so that --max-connections
  // (not EMFILE, which stalls accept()) is what bounds them.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }

  PipelineConfig pc = o.go.pipeline_config();
  genai::Scheduler sched(o.model, pc, o.sched);
  server::HttpServer http(sched, o.http);
  http.bind();
  fmt::print(stderr, "npullm: serving {} on http://{}:{} (OpenAI API under /v1, chat page at /){}\nnpullm: {}\n", sched.model_name(),
             o.http.host, http.port(), o.http.api_key.empty() ? "" : ", API key required", sched.description());
  std::fflush(stderr);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fmt::print(stderr, "npullm: {} received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    sched.shutdown();  // running requests end (cancelled); their streams close with [DONE]
    http.stop();
  });
  try {
    http.run();
  } catch (...) {
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    throw;
  }
  waiter.join();
  fmt::print(stderr, "npullm: stopped\n");
  return 0;
}

}  // namespace

void add_serve(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a web chat page, many requests batched at once");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--host", o->http.host, "address to listen on (default loopback only)")->capture_default_str();
  cmd->add_option("--port", o->http.port, "TCP port (0: any free port)")->capture_default_str();
  cmd->add_option("--parallel", o->sched.parallel, "sequence slots decoded together (batched generate blobs for 1, 2, 4, ... up to N)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--max-queue", o->sched.max_queue, "requests that may wait for a slot; beyond them a request gets 503")->capture_default_str();
  cmd->add_option("--api-key", o->http.api_key, "require 'Authorization: Bearer KEY' on /v1/*, /slots and /metrics");
  cmd->add_option("--max-body", o->http.max_body_bytes, "largest request body in bytes (larger: 413)")->capture_default_str();
  cmd->add_option("--http-threads", o->http.http_threads, "connections served at once (0: enough for every slot and queued request)")
      ->capture_default_str();
  cmd->add_option("--read-timeout", o->http.read_timeout_s,
                  "seconds a client has to send a whole request (line, headers, body); slower ones are disconnected")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--write-timeout", o->http.write_timeout_s,
                  "seconds a client may take no bytes before it is dropped (its stream cancelled, its slot freed)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--keep-alive-timeout", o->http.keep_alive_timeout_s, "seconds an idle kept-alive connection stays open")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--keep-alive-max", o->http.keep_alive_max, "requests served on one connection before it is closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max-connections", o->http.max_connections,
                  "open connections (served or waiting for a thread); beyond them a new one gets 503 at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--busy-read-ms", o->http.busy_read_ms,
                  "while connections wait for a thread, close those that have not sent a whole request after this many ms")
      ->capture_default_str()
      ->check(CLI::Range(10, 3600000));
  cmd->add_option("--max-json-depth", o->http.max_json_depth, "deepest nesting of arrays/objects in a request body (deeper: 400)")
      ->capture_default_str()
      ->check(CLI::Range(4, 10000));
  cmd->add_option("--max-stop-bytes", o->http.max_stop_bytes, "longest stop string in bytes (at most 4 of them, as OpenAI; longer: 400)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  o->go.rt.add_to(cmd);
  cmd->add_option("--chat-template", o->go.chat_template,
                  "chat template: a built-in name (llama2, llama3, chatml, mistral, zephyr, phi3, ...), a file, or Jinja source; default: the model's own");
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? serve(*o) : -1; });
}

}  // namespace npullm::cli
