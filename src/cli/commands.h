// Subcommand registration. Each add_* adds its CLI11 subcommand and pushes the action to run when
// that subcommand was chosen (the action returns the exit code).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

#include "npuw/llm_runtime.h"

namespace npullm::cli {

using Actions = std::vector<std::function<int()>>;

void add_run(CLI::App& app, Actions& actions);
void add_compile(CLI::App& app, Actions& actions);
void add_inspect(CLI::App& app, Actions& actions);
void add_logits(CLI::App& app, Actions& actions);

// Options shared by every command that builds a runtime (chunk, variants, threads, cache).
struct RuntimeOptions {
  npuw::RuntimeConfig cfg;
  std::string variants;  // "64,128,256"
  bool no_cache = false;
  bool chunk_given = false;  // --prefill-chunk was on the command line
  void add_to(CLI::App* cmd);
  npuw::RuntimeConfig resolve() const;  // parses `variants`, applies no_cache
};

}  // namespace npullm::cli
