// npullm chat: an interactive, streamed conversation (line editing and history from libedit), or,
// when stdin is not a terminal, one user turn per input line (--json: one JSON object per turn).
//
// Commands: /reset  /system TEXT  /stats  /save FILE  /load FILE  /help  /quit
#include <cstdio>
#include <editline/readline.h>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/commands.h"
#include "common/error.h"
#include "genai/session_file.h"

namespace npullm::cli {

namespace {

struct ChatOptions {
  std::string model, system;
  bool json = false;
  GenerateOptions go;
};

struct Totals {
  int64_t turns = 0, prefilled = 0, generated = 0, shifts = 0, reprefills = 0;
};

// Handles a /command; returns false to quit.
bool command(LLMPipeline& pipe, const ChatOptions& o, const std::string& line, Totals& t) {
  auto arg = [&](size_t n) { return line.size() > n ? line.substr(n) : std::string(); };
  if (line == "/quit" || line == "/exit") return false;
  if (line == "/reset") {
    pipe.start_chat(pipe.history().empty() || pipe.history().front().role != "system" ? "" : pipe.history().front().content);
    fmt::print(stderr, "(conversation reset)\n");
  } else if (line.rfind("/system", 0) == 0) {
    pipe.start_chat(arg(8));
    fmt::print(stderr, "(new conversation with that system message)\n");
  } else if (line == "/stats") {
    fmt::print(stderr, "turns {}, tokens prefilled {}, generated {}, K/V rows in use {} of {}, context shifts {}, re-prefills {}\n{}\n",
               t.turns, t.prefilled, t.generated, pipe.kv_position(), pipe.capacity(), t.shifts, t.reprefills, pipe.description());
  } else if (line.rfind("/save ", 0) == 0) {
    // A session file (genai/session_file.h): the history, then the K/V rows it is in.
    const std::string path = arg(6);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot write {}", path);
    const int64_t rows = genai::write_session(f, o.model, o.go.pipeline_config(), pipe);
    f.flush();
    if (!f) fail("cannot write {}", path);
    fmt::print(stderr, "(saved {} messages and {} K/V rows)\n", pipe.history().size(), rows);
  } else if (line.rfind("/load ", 0) == 0) {
    // A session file, or a bare JSON array of messages (what /save wrote before session files).
    const std::string path = arg(6);
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open {}", path);
    const genai::LoadedSession l = genai::read_session(f, path, pipe, /*bare_arrays=*/true);
    if (l.kv_restored) fmt::print(stderr, "(loaded {} messages with their K/V rows)\n", l.messages);
    else fmt::print(stderr, "(loaded {} messages; they are prefilled with the next turn)\n", l.messages);
  } else {
    fmt::print(stderr, "commands: /reset  /system TEXT  /stats  /save FILE  /load FILE  /quit\n");
  }
  return true;
}

int run(const ChatOptions& o) {
  LLMPipeline pipe(o.model, o.go.pipeline_config());
  pipe.start_chat(o.system);
  const bool interactive = ::isatty(STDIN_FILENO) && !o.json;
  if (interactive) fmt::print(stderr, "npullm chat: {}\n/help for commands, Ctrl-D to quit\n", pipe.description());
  Totals totals;
  for (;;) {
    std::string line;
    if (interactive) {
      char* raw = ::readline("> ");
      if (!raw) break;
      line = raw;
      std::free(raw);
      if (!line.empty()) ::add_history(line.c_str());
    } else if (!std::getline(std::cin, line)) {
      break;
    }
    if (line.empty()) continue;
    if (line[0] == '/') {
      try {
        if (!command(pipe, o, line, totals)) break;
      } catch (const Error& e) {
        fmt::print(stderr, "npullm: error: {}\n", e.what());  // a bad command loses nothing
      }
      continue;
    }
    Streamer streamer;
    if (!o.json)
      streamer = [](std::string_view piece) {
        fmt::print("{}", piece);
        std::fflush(stdout);
        return true;
      };
    const GenerationResult r = pipe.generate(line, o.go.generation_config(), streamer);
    totals.turns++;
    totals.prefilled += r.metrics.prefill_tokens;
    totals.generated += r.metrics.generated_tokens;
    totals.shifts += r.metrics.context_shifts;
    totals.reprefills += r.metrics.reprefills;
    if (o.json) {
      nlohmann::json j = {{"reply", r.text}, {"ids", r.ids}, {"finish_reason", finish_reason_name(r.finish)},
                          {"metrics", metrics_json(r.metrics)}};
      fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_chat(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "chat with a model (interactive; or one user turn per stdin line)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--system", o->system, "system message");
  cmd->add_flag("--json", o->json, "print one JSON object per turn (reply, ids, metrics)");
  o->go.add_to(cmd);
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? run(*o) : -1; });
}

}  // namespace npullm::cli
