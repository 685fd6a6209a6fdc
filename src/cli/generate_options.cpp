#include "cli/commands.h"
#include "common/error.h"

#include <fstream>
#include <sstream>

namespace npullm::cli {

void GenerateOptions::add_to(CLI::App* cmd) {
  rt.add_to(cmd);
  cmd->add_option("-n,--n-predict", gen.max_new_tokens, "maximum number of tokens to generate")->capture_default_str();
  cmd->add_option("--temp", gen.temperature, "sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", gen.top_k, "keep only the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", gen.top_p, "keep the smallest set of tokens whose probability reaches p (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", gen.min_p, "drop tokens less likely than min-p times the most likely (0 = off)")->capture_default_str();
  cmd->add_option("--typical-p", gen.typical_p, "locally typical sampling mass (1 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", gen.repetition_penalty, "penalise recently seen tokens (1 = off)")->capture_default_str();
  cmd->add_option("--presence-penalty", gen.presence_penalty, "subtract from the logit of every recently seen token")->capture_default_str();
  cmd->add_option("--frequency-penalty", gen.frequency_penalty, "subtract per occurrence of a recently seen token")->capture_default_str();
  cmd->add_option("--repeat-last-n", gen.penalty_last_n, "how many recent tokens the penalties look at")->capture_default_str();
  cmd->add_option("--seed", gen.seed, "random seed for sampling")->capture_default_str();
  cmd->add_option("--stop", gen.stop_strings, "stop before this text (repeatable); it is not printed");
  cmd->add_flag("--ignore-eos", gen.ignore_eos, "keep generating after the end-of-sequence token");
  cmd->add_option("--context-policy", policy, "when the K/V state is full: truncate (drop oldest turns, re-prefill) or shift (drop the oldest block, no re-prefill)")
      ->check(CLI::IsMember({"truncate", "shift"}))
      ->capture_default_str();
  cmd->add_option("--keep", keep, "tokens a context shift keeps at the start (-1 = BOS + system prompt)")->capture_default_str();
  cmd->add_option("--spec", spec, "speculative decoding: lookup (guesses from the prompt and reply so far), draft (a draft "
                  "model, --draft-model) or off; greedy output is the same either way")
      ->check(CLI::IsMember({"lookup", "draft", "off"}))
      ->capture_default_str();
  cmd->add_option("--spec-k", spec_k, "speculative decoding: the most guesses one verify step checks (adaptive below it)")
      ->check(CLI::Range(1, 63))
      ->capture_default_str();
  cmd->add_option("--draft-model", draft_model, "GGUF draft model sharing the vocabulary (for --spec draft)")->check(CLI::ExistingFile);
  cmd->add_option("--prediction", prediction_file, "a file with the text the reply is expected to be mostly (OpenAI's "
                  "Predicted Outputs): guesses are taken from it")->check(CLI::ExistingFile);
  cmd->add_option("--chat-template", chat_template, "chat template: a built-in name (llama2, llama3, chatml, mistral, zephyr, phi3, ...), a file, or Jinja source; default: the model's own");
}

PipelineConfig GenerateOptions::pipeline_config() const {
  const npuw::RuntimeConfig r = rt.resolve();
  PipelineConfig p;
  p.prefill_chunk = r.prefill_chunk;
  p.variants = r.variants;
  p.max_prompt_len = r.max_prompt_len;
  p.min_response_len = r.min_response_len;
  p.threads = r.threads;
  p.cache_dir = r.cache_dir;
  p.use_cache = r.use_cache;
  p.cache_max_bytes = r.cache_max_bytes;
  p.repack_weights = r.repack_weights;
  p.kv_type = r.kv_type == GgmlType::F32 ? KvType::F32 : r.kv_type == GgmlType::Q8_0 ? KvType::Q8_0 : KvType::F16;
  p.context_policy = policy == "truncate" ? ContextPolicy::Truncate : ContextPolicy::Shift;
  p.n_keep = keep;
  p.chat_template = chat_template;
  if (spec == "draft" && draft_model.empty()) fail("--spec draft needs --draft-model FILE");
  if (spec != "draft" && !draft_model.empty()) fail("--draft-model needs --spec draft");
  if (spec != "off" || !prediction_file.empty()) p.spec_max_k = spec_k;
  if (spec == "draft") p.draft_model = draft_model;
  return p;
}

GenerationConfig GenerateOptions::generation_config() const {
  GenerationConfig g = gen;
  g.speculative.mode = spec == "lookup" ? SpecMode::Lookup : spec == "draft" ? SpecMode::Draft : SpecMode::Off;
  g.speculative.max_k = spec_k;
  if (!prediction_file.empty()) {
    std::ifstream in(prediction_file, std::ios::binary);
    if (!in) fail("--prediction {}: cannot be read", prediction_file);
    std::stringstream ss;
    ss << in.rdbuf();
    g.speculative.prediction = ss.str();
  }
  return g;
}

nlohmann::json metrics_json(const GenerationMetrics& m) {
  return {{"ttft_ms", m.ttft_ms}, {"prefill_tokens", m.prefill_tokens}, {"generated_tokens", m.generated_tokens},
          {"prefill_tps", m.prefill_tps}, {"decode_tps", m.decode_tps}, {"variants_used", m.variants_used},
          {"kv_utilization", m.kv_utilization}, {"padded_positions", m.padded_positions},
          {"kv_bytes_copied", m.kv_bytes_copied}, {"context_shifts", m.context_shifts}, {"reprefills", m.reprefills}, {"forced_tokens", m.forced_tokens},
          {"prefill_chunks", m.prefill_chunks}, {"compiled_blobs", m.compiled_blobs}, {"cached_blobs", m.cached_blobs},
          {"packed_weights", m.packed_weights}, {"cached_packed_weights", m.cached_packed_weights}, {"load_ms", m.load_ms}, {"prefill_ms", m.prefill_ms},
          {"kv_bytes_per_position", m.kv_bytes_per_position}, {"kv_ring_bytes", m.kv_ring_bytes}, {"kv_bytes", m.kv_bytes},
          {"spec_drafted", m.spec_drafted}, {"spec_accepted", m.spec_accepted}, {"spec_verify_steps", m.spec_verify_steps},
          {"prediction_accepted", m.prediction_accepted}, {"prediction_rejected", m.prediction_rejected},
          {"spec_draft_steps", m.spec_draft_steps}, {"spec_steps_by_guesses", m.spec_steps_by_guesses}};
}

}  // namespace npullm::cli
