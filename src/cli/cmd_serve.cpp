// npullm serve: the OpenAI-compatible server (src/server) over the continuous-batching scheduler.
//
// Its life, for a supervisor or a Kubernetes rollout: it listens first and loads the model after
// (GET /health answers 503 meanwhile, 200 once ready). On SIGTERM or SIGINT it drains: new requests
// get 503 with Retry-After, /health 503, and what runs or waits goes on to its end for up to
// --drain-timeout seconds; then what still runs is ended (finish_reason "abort", streams closed with
// [DONE]), the listener closes, and the process exits 0. A second signal ends the drain at once;
// a signal while the model loads exits at once.
//
// --print-memory loads the model as serve would, prints what a container needs ((file + K/V) x 1.1
// + 32 MiB for the process) and exits.
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fmt/format.h>
#include <mutex>
#include <pthread.h>
#include <sys/resource.h>
#include <thread>

#include "cli/commands.h"
#include "common/error.h"
#include "genai/serving/scheduler.h"
#include "npuw/llm_runtime.h"
#include "server/http_server.h"

namespace npullm::cli {

namespace {

struct ServeOptions {
  std::string model;
  GenerateOptions go;  // runtime options and --chat-template (sampling comes with each request)
  server::ServerOptions http;
  genai::SchedulerConfig sched;
  int drain_timeout_s = 30;
  bool print_memory = false;
  std::string spec = "off";  // --spec lookup|draft: speculative decoding for every request that allows it
  std::string draft_model;   // --draft-model FILE (for --spec draft)
  int64_t spec_k = 7;
  bool spec_k_given = false;  // --spec-k was on the command line
  bool spec_max_sequences_given = false;
};

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// The process without a model: the binary, its libraries, the HTTP and worker threads (20 MiB
// resident with stories260K, a 1 MB file, under load).
constexpr int64_t kProcessBytes = int64_t{32} << 20;

// What a container running this server needs: the model file (mapped or repacked, it is resident
// either way), the K/V allocation of every slot, 10 % over them for the scratch arena, repacking
// and the requests' own memory, and the process itself. (Without that last term a 0.5B model at
// --parallel 4, (283 + 54) MiB x 1.1 = 371 MiB, was measured at 380.5 MiB resident.) Printed as a
// Kubernetes resources block.
int print_memory(const ServeOptions& o, genai::Scheduler& sched) {
  const npuw::RuntimeStats& rs = sched.runtime().stats();
  const int64_t file = static_cast<int64_t>(std::filesystem::file_size(o.model));
  const int64_t need = (file + rs.kv_bytes) * 11 / 10 + kProcessBytes;
  const int64_t need_mi = (need + (1 << 20) - 1) >> 20;
  const int threads = o.go.rt.cfg.threads;
  fmt::print("# npullm serve --print-memory: {}\n", o.model);
  fmt::print("#   model file  {:>12}\n", mib(file));
  fmt::print("#   K/V         {:>12}  ({} slots x {} rows x {} bytes{})\n", mib(rs.kv_bytes), rs.slots, rs.kv_capacity, rs.kv_row_bytes,
             rs.kv_ring_bytes ? fmt::format(", + {} of sliding-window rings per slot", mib(rs.kv_ring_bytes)) : "");
  fmt::print("#   scratch     {:>12}  (inside the 10 % margin{})\n", mib(rs.scratch_bytes),
             rs.scratch_bytes * 10 > file + rs.kv_bytes ? ": it is larger, raise the request" : "");
  fmt::print("#   process     {:>12}  (binary, libraries, threads)\n", mib(kProcessBytes));
  fmt::print("#   request     {:>12}  = (file + K/V) x 1.1 + process\n", mib(need));
  fmt::print("resources:\n  requests:\n");
  if (threads > 0) fmt::print("    cpu: \"{}\"\n", threads);
  else fmt::print("    # cpu: one per worker thread; -t 0 uses every core the node has (set -t N and request N)\n");
  fmt::print("    memory: {}Mi\n  limits:\n    memory: {}Mi\n", need_mi, need_mi);
  return 0;
}

// The signals, taken by a thread of ours (sigwait), never by a handler in the middle of a step.
struct Signals {
  sigset_t set;
  std::mutex m;
  std::condition_variable cv;
  int received = 0;
  bool loading = true;
};

int serve(const ServeOptions& o) {
  // Block the signals before any thread starts, so every thread inherits the mask.
  auto sig = std::make_shared<Signals>();
  sigemptyset(&sig->set);
  sigaddset(&sig->set, SIGINT);
  sigaddset(&sig->set, SIGTERM);
  sigaddset(&sig->set, SIGUSR1);  // --trace: write the trace now (the newest --trace-events spans)
  pthread_sigmask(SIG_BLOCK, &sig->set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that goes away is a failed write, not the end of the server
  // Every connection is a descriptor: allow as many as the hard limit does, so that --max-connections
  // (not EMFILE, which stalls accept()) is what bounds them.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }

  if (o.spec_k_given && o.spec == "off") fail("--spec-k needs --spec lookup or draft (speculative decoding is off)");
  if (o.spec_max_sequences_given && o.spec == "off")
    fail("--spec-max-sequences needs --spec lookup or draft (speculative decoding is off)");
  if (o.spec == "draft" && o.draft_model.empty()) fail("--spec draft needs --draft-model FILE");
  if (!o.draft_model.empty() && o.spec != "draft") fail("--draft-model needs --spec draft");
  PipelineConfig pc = o.go.pipeline_config();
  if (o.spec != "off") pc.spec_max_k = o.spec_k;  // verify blobs of up to spec_k + 1 rows
  pc.draft_model = o.draft_model;
  if (o.print_memory) {
    genai::Scheduler sched(o.model, pc, o.sched);
    return print_memory(o, sched);
  }

  server::ServerOptions hopt = o.http;
  hopt.parallel = o.sched.parallel;
  hopt.spec_k = o.spec != "off" ? o.spec_k : 0;
  hopt.spec_mode = o.spec == "draft" ? SpecMode::Draft : SpecMode::Lookup;
  server::HttpServer http(hopt);
  http.bind();
  fmt::print(stderr, "npullm: listening on http://{}:{}; loading {} (GET /health answers 503 until it is ready)\n", o.http.host,
             http.port(), o.model);
  std::fflush(stderr);
  std::exception_ptr http_error;  // under sig->m
  bool http_ended = false;        // under sig->m
  std::thread http_thread([&] {
    std::exception_ptr e;
    try {
      http.run();
    } catch (...) {
      e = std::current_exception();
    }
    std::lock_guard lk(sig->m);
    http_error = e;
    http_ended = true;
    sig->cv.notify_all();
  });
  // Listening before the model loads (a stop() before that would be lost).
  for (;;) {
    if (http.running()) break;
    {
      std::lock_guard lk(sig->m);
      if (http_ended) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Detached: it may still wait in sigwait when serve() returns (it owns `sig` with us).
  std::thread([sig] {
    for (;;) {
      int s = 0;
      if (sigwait(&sig->set, &s) != 0) continue;
      if (s == SIGUSR1) {
        if (trace_options().file.empty()) fmt::print(stderr, "npullm: SIGUSR1 received; no --trace file to write\n");
        write_trace();
        std::fflush(stderr);
        continue;
      }
      std::lock_guard lk(sig->m);
      sig->received++;
      fmt::print(stderr, "npullm: {} received{}\n", s == SIGINT ? "SIGINT" : "SIGTERM",
                 sig->loading ? " while loading the model: exiting" : sig->received == 1 ? ", draining" : ", ending the drain now");
      std::fflush(stderr);
      // Nothing was admitted yet: no request to finish, nothing to save.
      if (sig->loading) std::_Exit(0);
      sig->cv.notify_all();
    }
  }).detach();

  std::unique_ptr<genai::Scheduler> sched;
  try {
    sched = std::make_unique<genai::Scheduler>(o.model, pc, o.sched);
  } catch (...) {
    http.stop();
    http_thread.join();
    throw;
  }
  {
    std::lock_guard lk(sig->m);
    sig->loading = false;
  }
  http.set_scheduler(*sched);
  fmt::print(stderr, "npullm: serving {} on http://{}:{} (OpenAI API under /v1, chat page at /){}\nnpullm: {}\n", sched->model_name(),
             o.http.host, http.port(), o.http.api_key.empty() ? "" : ", API key required", sched->description());
  std::fflush(stderr);

  std::unique_lock lk(sig->m);
  sig->cv.wait(lk, [&] { return sig->received > 0 || http_ended; });
  if (!http_ended) {
    // The drain: admit nothing new, let what was admitted finish, up to the time-out.
    http.drain();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.drain_timeout_s);
    for (;;) {
      const genai::SchedulerStatus st = sched->status();
      const int64_t left = st.queue + st.busy_slots;
      if (left == 0) break;
      if (sig->received > 1 || std::chrono::steady_clock::now() >= until) {
        fmt::print(stderr, "npullm: {} request(s) still running: ended (finish_reason \"abort\")\n", left);
        break;
      }
      sig->cv.wait_for(lk, std::chrono::milliseconds(20));
    }
  }
  const bool ended_by_itself = http_ended;
  lk.unlock();
  sched->shutdown();  // ends what still runs; its streams close with [DONE]
  http.stop();        // run() returns once every connection has written its last bytes
  http_thread.join();
  if (http_error) std::rethrow_exception(http_error);
  if (ended_by_itself) fail("the HTTP server stopped by itself");
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
  cmd->add_option("--drain-timeout", o->drain_timeout_s,
                  "seconds that running requests have to finish after SIGTERM (new ones get 503) before they are ended")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  cmd->add_flag("--print-memory", o->print_memory,
                "load the model as serve would, print the memory a container needs ((file + K/V) x 1.1 + 32 MiB) as a "
                "Kubernetes resources block, and exit");
  cmd->add_option("--max-stop-bytes", o->http.max_stop_bytes, "longest stop string in bytes (at most 4 of them, as OpenAI; longer: 400)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  o->go.rt.add_to(cmd);
  cmd->add_option("--spec", o->spec,
                  "speculative decoding for requests without structured output: lookup (guesses from each request's own "
                  "prompt and reply), draft (a draft model's, --draft-model; its own runtime with a slot per sequence "
                  "slot), checked in verify steps while at most 2 sequences decode; either also honours a request's "
                  "`prediction`; or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "lookup", "draft"}));
  cmd->add_option("--draft-model", o->draft_model, "--spec draft: a GGUF draft model sharing the model's vocabulary")
      ->check(CLI::ExistingFile);
  cmd->add_option("--spec-max-sequences", o->sched.spec_max_sequences,
                  "speculative decoding runs while at most this many sequences decode (a fuller batch already reads each "
                  "weight once for several tokens)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->each([o](const std::string&) { o->spec_max_sequences_given = true; });
  cmd->add_option("--spec-k", o->spec_k, "speculative decoding: the most guesses one verify step checks (adaptive below it)")
      ->capture_default_str()
      ->check(CLI::Range(1, 63))
      ->each([o](const std::string&) { o->spec_k_given = true; });
  cmd->add_option("--chat-template", o->go.chat_template,
                  "chat template: a built-in name (llama2, llama3, chatml, mistral, zephyr, phi3, ...), a file, or Jinja source; default: the model's own");
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? serve(*o) : -1; });
}

}  // namespace npullm::cli
