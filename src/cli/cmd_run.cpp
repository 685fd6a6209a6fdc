// npullm run: generate text from a prompt, streamed to stdout; --json adds a machine-readable report.
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "genai/pipeline.h"

namespace npullm::cli {

namespace {

struct RunOptions {
  std::string model, prompt;
  int64_t n_predict = 128;
  genai::SamplerConfig sampling;
  bool json = false, ignore_eos = false;
  RuntimeOptions rt;
};

int run(const RunOptions& o) {
  genai::Pipeline pipe(o.model, o.rt.resolve());
  genai::GenerationConfig gc;
  gc.max_new_tokens = o.n_predict;
  gc.sampling = o.sampling;
  gc.ignore_eos = o.ignore_eos;
  // Text goes to stdout as it is generated, unless --json asks for one clean JSON object there.
  const bool stream = !o.json;
  if (stream) {
    fmt::print("{}", o.prompt);
    std::fflush(stdout);
  }
  genai::Streamer streamer;
  if (stream)
    streamer = [](const std::string& piece) {
      fmt::print("{}", piece);
      std::fflush(stdout);
      return true;
    };
  genai::GenerationResult r = pipe.generate(o.prompt, gc, streamer);
  const npuw::RuntimeStats& st = pipe.runtime().stats();
  if (stream) {
    fmt::print("\n");
    std::fflush(stdout);
  }
  if (r.stopped_at_capacity)
    fmt::print(stderr, "npullm: warning: stopped after {} tokens: the K/V state ({} rows) is full\n", r.ids.size(), pipe.runtime().capacity());
  const double decode_tps = r.decode_ms > 0 ? static_cast<double>(st.decode_tokens) * 1000.0 / r.decode_ms : 0.0;
  const double prefill_tps = r.prefill_ms > 0 ? static_cast<double>(st.prefill_tokens) * 1000.0 / r.prefill_ms : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = r.prompt_ids;
    j["ids"] = r.ids;
    j["text"] = r.text;
    j["stopped_at_eos"] = r.stopped_at_eos;
    j["stats"] = {{"compiled_blobs", st.compiled_blobs}, {"cached_blobs", st.cached_blobs},
                  {"prefill_chunks", st.prefill_chunks}, {"prefill_tokens", st.prefill_tokens},
                  {"padded_positions", st.padded_positions}, {"decode_tokens", st.decode_tokens},
                  {"variants_used", st.variants_used}, {"kv_bytes_copied", st.kv_bytes_copied},
                  {"kv_capacity", st.kv_capacity}, {"prefill_ms", r.prefill_ms}, {"decode_ms", r.decode_ms},
                  {"prefill_tps", prefill_tps}, {"decode_tps", decode_tps},
                  {"device", pipe.runtime().device_name()}};
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print(stderr, "npullm: {} prompt tokens in {:.1f} ms ({:.1f} t/s), {} generated in {:.1f} ms ({:.1f} t/s); "
               "blobs compiled {} / cached {}; device {}\n",
               r.prompt_ids.size(), r.prefill_ms, prefill_tps, r.ids.size(), r.decode_ms, decode_tps,
               st.compiled_blobs, st.cached_blobs, pipe.runtime().device_name());
  }
  return 0;
}

}  // namespace

void add_run(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt (streamed to stdout)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text (empty: start from BOS alone)");
  cmd->add_option("-n,--n-predict", o->n_predict, "maximum number of tokens to generate")->capture_default_str();
  cmd->add_option("--temp", o->sampling.temperature, "sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "keep only the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "keep the smallest set of tokens whose probability reaches p (1 = off)")->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "random seed for sampling")->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating after the end-of-sequence token");
  cmd->add_flag("--json", o->json, "print one JSON object (prompt_ids, ids, text, stats) instead of streaming");
  o->rt.add_to(cmd);
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? run(*o) : -1; });
}

}  // namespace npullm::cli
