// npullm synth: write a GGUF model of a given architecture and shape with seeded random weights,
// quantised like llama-quantize, so that every machine can make the same benchmark model.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>

#include "cli/commands.h"
#include "model/synth.h"

namespace npullm::cli {

namespace {

struct SynthCliOptions {
  std::string preset = "tiny", type = "Q8_0", out, vocab_from, name;
  uint64_t seed = 1;
  int threads = 0;
  bool verbose = false;
  // Shape overrides (applied over the preset when given).
  std::string arch;
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_ff = 0, n_vocab = 0, n_ctx = 0;
  int64_t head_dim = 0, n_rot = 0, n_swa = 0, swa_pattern = 0;
  float rope_base = 0.0f, rms_eps = 0.0f, rope_base_swa = 0.0f, softcap = 0.0f;
  std::string vocab;
  bool tied = false;
  std::string argv;  // the command line, for general.description
};

std::string human_bytes(uint64_t b) {
  const double x = static_cast<double>(b);
  if (x >= 1e9) return fmt::format("{:.2f} GB", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.1f} MB", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f} KB", x / 1e3);
  return fmt::format("{} B", b);
}

int synth(const SynthCliOptions& o, CLI::App* cmd) {
  model::SynthOptions so;
  so.shape = model::synth_preset(o.preset);
  model::SynthShape& s = so.shape;
  if (cmd->count("--arch")) s.arch = o.arch;
  if (cmd->count("--n-embd")) s.n_embd = o.n_embd;
  if (cmd->count("--n-layer")) s.n_layer = o.n_layer;
  if (cmd->count("--n-head")) s.n_head = o.n_head;
  if (cmd->count("--n-head-kv")) s.n_head_kv = o.n_head_kv;
  if (cmd->count("--n-ff")) s.n_ff = o.n_ff;
  if (cmd->count("--n-ctx")) s.n_ctx = o.n_ctx;
  if (cmd->count("--rope-base")) s.rope_base = o.rope_base;
  if (cmd->count("--rms-eps")) s.rms_eps = o.rms_eps;
  if (cmd->count("--head-dim")) s.head_size = o.head_dim;
  if (cmd->count("--n-rot")) s.n_rot = o.n_rot;
  if (cmd->count("--sliding-window")) s.n_swa = o.n_swa;
  if (cmd->count("--swa-pattern")) s.swa_pattern = o.swa_pattern;
  if (cmd->count("--rope-base-swa")) s.rope_base_swa = o.rope_base_swa;
  if (cmd->count("--softcap")) s.final_softcap = o.softcap;
  if (cmd->count("--vocab")) s.vocab = o.vocab;
  if (cmd->count("--tied") || cmd->count("--untied")) s.tied = o.tied;
  if (cmd->count("--name")) s.name = o.name;
  // With --vocab-from the vocabulary decides n_vocab, unless --n-vocab insists (then they must agree).
  if (cmd->count("--n-vocab")) s.n_vocab = o.n_vocab;
  else if (!o.vocab_from.empty()) s.n_vocab = 0;
  so.type = model::synth_file_type(o.type);
  so.seed = o.seed;
  so.vocab_from = o.vocab_from;
  so.threads = o.threads;
  so.description = "synthetic random weights (no training): npullm synth" + o.argv;

  const model::SynthReport r = model::synth_write(so, o.out);
  const model::SynthShape& w = r.shape;

  fmt::print("npullm synth: wrote {} ({}) in {:.1f} s\n", o.out, human_bytes(r.file_bytes), r.seconds);
  fmt::print("  {}: {}, {} layers, n_embd {}, {} heads / {} kv (head size {}), n_ff {}, context {}, rope base {:g}, "
             "rms eps {:g}, {} output\n",
             w.name, w.arch, w.n_layer, w.n_embd, w.n_head, w.n_head_kv, w.head_dim(), w.n_ff, w.n_ctx,
             w.rope_base, w.rms_eps, w.tied ? "tied" : "separate");
  if (w.rot_dims() != w.head_dim()) fmt::print("  partial rotary: RoPE on {} of {} dims per head\n", w.rot_dims(), w.head_dim());
  if (w.n_swa > 0)
    fmt::print("  sliding window {} on {} of every {} layers (local rope base {:g}){}\n", w.n_swa, w.swa_pattern - 1,
               w.swa_pattern, w.rope_base_swa,
               w.final_softcap > 0 ? fmt::format(", final logit soft-cap {:g}", w.final_softcap) : "");
  fmt::print("  vocabulary: {} tokens, {}\n", w.n_vocab, r.vocab);
  fmt::print("  type {} (general.file_type {}), seed {}, {:.3f} B parameters, {} tensors\n", so.type.name,
             so.type.llama_ftype, so.seed, static_cast<double>(r.n_params) / 1e9, r.tensors.size());
  struct Count { int tensors = 0; uint64_t bytes = 0; };
  std::map<std::string, Count> by_type;
  for (const model::SynthTensor& t : r.tensors) {
    Count& c = by_type[std::string(ggml_type_name(t.type))];
    ++c.tensors;
    c.bytes += ggml_row_bytes(t.type, t.dims[0]) * static_cast<uint64_t>(t.n_elements() / t.dims[0]);
  }
  for (const auto& [type, c] : by_type) fmt::print("    {:<7} {:>4} tensors  {:>10}\n", type, c.tensors, human_bytes(c.bytes));
  // The tensors that differ from the base type are what a mixture (or a fallback) chose: show them.
  for (const model::SynthTensor& t : r.tensors) {
    const bool special = t.dims.size() > 1 && t.type != so.type.base;
    if (o.verbose || special)
      fmt::print("    {:<28} {:<7} [{}]\n", t.name, ggml_type_name(t.type), fmt::join(t.dims, ", "));
  }
  fmt::print("  note: the weights are random (seeded, no training), so the text this model generates is "
             "gibberish; it is meant for benchmarks, tests and demos.\n");
  return 0;
}

}  // namespace

void add_synth(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<SynthCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "synth",
      "write a GGUF model with seeded random weights (a preset's shape, quantised like llama-quantize)");
  cmd->footer(fmt::format(
      "\nPresets: {}.\nTypes: {}.\n"
      "Shape options override the preset. The same preset, type and seed give the same bytes on every machine.\n"
      "Example: npullm synth --preset tinyllama-1.1b --type Q4_0 -o tinyllama-synth.gguf",
      fmt::join(model::synth_preset_names(), ", "), fmt::join(model::synth_file_type_names(), ", ")));
  cmd->add_option("-o,--output", o->out, "GGUF file to write")->required();
  cmd->add_option("--preset", o->preset, "shape to start from")->capture_default_str();
  cmd->add_option("--type", o->type, "llama-quantize file type (mixtures such as Q4_K_M follow its per-tensor rules)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the weights")->capture_default_str();
  cmd->add_option("--vocab-from", o->vocab_from, "copy the tokenizer (tokenizer.* keys) from this GGUF; n_vocab follows it")
      ->check(CLI::ExistingFile);
  cmd->add_option("--arch", o->arch,
                  "architecture: llama, qwen2 (q/k/v biases), qwen3 (q/k norms), gemma3 (q/k and post norms, "
                  "sliding window) or phi3 (fused qkv and gate/up)");
  cmd->add_option("--name", o->name, "general.name");
  cmd->add_option("--n-embd", o->n_embd, "embedding length");
  cmd->add_option("--n-layer", o->n_layer, "number of blocks");
  cmd->add_option("--n-head", o->n_head, "attention heads");
  cmd->add_option("--n-head-kv", o->n_head_kv, "key/value heads (grouped-query attention)");
  cmd->add_option("--n-ff", o->n_ff, "feed-forward length");
  cmd->add_option("--n-vocab", o->n_vocab, "vocabulary size");
  cmd->add_option("--n-ctx", o->n_ctx, "context length written to the metadata");
  cmd->add_option("--rope-base", o->rope_base, "RoPE frequency base");
  cmd->add_option("--rms-eps", o->rms_eps, "RMS norm epsilon");
  cmd->add_option("--head-dim", o->head_dim, "head size when it is not n-embd / n-head (qwen3, gemma3)");
  cmd->add_option("--n-rot", o->n_rot, "RoPE dimensions per head (phi3's partial rotary; 0 = the whole head)");
  cmd->add_option("--sliding-window", o->n_swa, "gemma3: window of the local layers (0 = every layer global)");
  cmd->add_option("--swa-pattern", o->swa_pattern, "gemma3: period of local/global layers (the last of each is global)");
  cmd->add_option("--rope-base-swa", o->rope_base_swa, "gemma3: RoPE base of the local layers");
  cmd->add_option("--softcap", o->softcap, "gemma3: final logit soft-capping (0 = none)");
  cmd->add_option("--vocab", o->vocab, "generated tokenizer: spm or bpe (default: bpe for qwen2/qwen3, else spm)")
      ->check(CLI::IsMember({"spm", "bpe"}));
  cmd->add_flag("--tied,!--untied", o->tied, "share the embedding as the output matrix (or not)");
  cmd->add_option("-t,--threads", o->threads, "worker threads (0 = all)")->capture_default_str();
  cmd->add_flag("-v,--verbose", o->verbose, "list every tensor with its type and shape");
  actions.push_back([cmd, o]() -> int {
    if (!cmd->parsed()) return -1;
    // Record how the file was made, in the file.
    o->argv = fmt::format(" --preset {} --type {} --seed {}", o->preset, o->type, o->seed);
    for (const CLI::Option* opt : cmd->get_options()) {
      const std::string name = opt->get_name();
      if (opt->count() == 0 || name == "--output" || name == "--threads" || name == "--verbose" || name == "--help" ||
          name == "--preset" || name == "--type" || name == "--seed")
        continue;
      if (name == "--tied") o->argv += o->tied ? " --tied" : " --untied";
      else o->argv += fmt::format(" {} {}", name, fmt::join(opt->results(), ","));
    }
    return synth(*o, cmd);
  });
}

}  // namespace npullm::cli
