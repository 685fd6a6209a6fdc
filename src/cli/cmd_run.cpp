// npullm run: generate text from a prompt, streamed to stdout; --json prints one report instead.
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/error.h"

namespace npullm::cli {

namespace {

struct RunOptions {
  std::string model, prompt, system, tokens;
  bool json = false, chat = false;
  GenerateOptions go;
  StructuredOptions so;
};

int run(const RunOptions& o) {
  GenerationConfig gen = o.go.generation_config();
  gen.structured = o.so.resolve();
  LLMPipeline pipe(o.model, o.go.pipeline_config());
  // With a chat template the prompt is one user turn; otherwise it is continued as it is.
  if (!o.tokens.empty() && !o.prompt.empty()) fail("--tokens and --prompt exclude each other");
  const bool as_chat = o.tokens.empty() && (o.chat || !o.go.chat_template.empty());
  if (as_chat) pipe.start_chat(o.system);
  const bool stream = !o.json;
  if (stream && !as_chat && o.tokens.empty()) {
    fmt::print("{}", o.prompt);
    std::fflush(stdout);
  }
  Streamer streamer;
  if (stream)
    streamer = [](std::string_view piece) {
      fmt::print("{}", piece);
      std::fflush(stdout);
      return true;
    };
  // --tokens: exactly these ids, no tokenizer and no template in the way (as `logits` takes them).
  const GenerationResult r = o.tokens.empty() ? pipe.generate(o.prompt, gen, streamer)
                                              : pipe.generate_ids(parse_token_ids(o.tokens), gen, streamer);
  const GenerationMetrics& m = r.metrics;
  if (o.json) {
    nlohmann::json j;
    j["prompt_ids"] = r.prompt_ids;
    j["ids"] = r.ids;
    j["text"] = r.text;
    j["finish_reason"] = finish_reason_name(r.finish);
    j["metrics"] = metrics_json(m);
    // `stats` is the spine's name for the runtime counters; kept for scripts that read it.
    j["stats"] = {{"compiled_blobs", m.compiled_blobs}, {"cached_blobs", m.cached_blobs},
                  {"packed_weights", m.packed_weights}, {"cached_packed_weights", m.cached_packed_weights},
                  {"prefill_chunks", m.prefill_chunks}, {"variants_used", m.variants_used},
                  {"kv_bytes_copied", m.kv_bytes_copied}, {"padded_positions", m.padded_positions},
                  {"kv_bytes", m.kv_bytes}, {"kv_bytes_per_position", m.kv_bytes_per_position}, {"kv_ring_bytes", m.kv_ring_bytes}};
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("\n");
    std::fflush(stdout);
    fmt::print(stderr, "npullm: {} prompt tokens ({:.1f} t/s), {} generated ({:.1f} t/s), first token after {:.1f} ms "
               "(prefill {:.1f} ms); loaded in {:.1f} ms; finish: {}; blobs compiled {} / cached {}; weights repacked {} / "
               "cached {}; {}\n",
               m.prefill_tokens, m.prefill_tps, m.generated_tokens, m.decode_tps, m.ttft_ms, m.prefill_ms, m.load_ms,
               finish_reason_name(r.finish), m.compiled_blobs, m.cached_blobs, m.packed_weights, m.cached_packed_weights,
               pipe.description());
    if (m.spec_verify_steps > 0)
      fmt::print(stderr, "npullm: speculation: {} verify steps, {} guesses, {} accepted ({:.0f}%), {:.2f} tokens per verify step{}\n",
                 m.spec_verify_steps, m.spec_drafted, m.spec_accepted,
                 m.spec_drafted > 0 ? 100.0 * static_cast<double>(m.spec_accepted) / static_cast<double>(m.spec_drafted) : 0.0,
                 1.0 + static_cast<double>(m.spec_accepted) / static_cast<double>(m.spec_verify_steps),
                 m.prediction_accepted + m.prediction_rejected > 0
                     ? fmt::format("; prediction tokens accepted {} / rejected {}", m.prediction_accepted, m.prediction_rejected)
                     : std::string());
  }
  return 0;
}

}  // namespace

void add_run(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt (streamed to stdout)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--prompt", o->prompt, "prompt text (empty: start from BOS alone)");
  cmd->add_option("--tokens", o->tokens, "start from these token ids (e.g. 1,2,3) instead of a prompt: no tokenizer, no template");
  cmd->add_flag("--chat", o->chat, "treat the prompt as one user turn of the chat template");
  cmd->add_option("--system", o->system, "system message (with --chat or --chat-template)");
  cmd->add_flag("--json", o->json, "print one JSON object (prompt_ids, ids, text, finish_reason, metrics) instead of streaming");
  o->go.add_to(cmd);
  o->so.add_to(cmd);
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? run(*o) : -1; });
}

}  // namespace npullm::cli
