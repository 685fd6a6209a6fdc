// npullm: the command-line tool. Each subcommand lives in its own file (cmd_*.cpp) and registers
// itself here; errors from any layer are printed as "npullm: error: ..." with exit code 1.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/error.h"
#include "common/trace.h"

int main(int argc, char** argv) {
  CLI::App app{"npullm: run GGUF language models through ahead-of-time compiled, static-shape blobs"};
  app.require_subcommand(1);
  std::vector<std::function<int()>> actions;
  npullm::cli::add_run(app, actions);
  npullm::cli::add_chat(app, actions);
  npullm::cli::add_chat_template(app, actions);
  npullm::cli::add_compile(app, actions);
  npullm::cli::add_inspect(app, actions);
  npullm::cli::add_logits(app, actions);
  npullm::cli::add_tokenize(app, actions);
  npullm::cli::add_bench(app, actions);
  npullm::cli::add_synth(app, actions);
  npullm::cli::add_serve(app, actions);
  npullm::cli::add_cache(app, actions);
  npullm::cli::add_grammar(app, actions);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (npullm::cli::trace_options().file.empty() && npullm::cli::trace_options().events_given) {
    fmt::print(stderr, "npullm: error: --trace-events needs --trace FILE (no trace is recorded without it)\n");
    return 1;
  }
  if (!npullm::cli::trace_options().file.empty()) {
    npullm::trace::start(npullm::cli::trace_options().events);
    npullm::trace::name_thread("main");
  }
  // The trace is written however the command ends (an error's trace shows where it stopped).
  struct TraceAtExit {
    ~TraceAtExit() { npullm::cli::write_trace(); }
  } trace_at_exit;
  try {
    for (auto& a : actions)
      if (int rc = a(); rc >= 0) return rc;  // -1: that subcommand was not chosen
  } catch (const npullm::Error& e) {
    fmt::print(stderr, "npullm: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "npullm: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}
