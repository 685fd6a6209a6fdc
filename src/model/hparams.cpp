#include "model/hparams.h"

#include <cmath>
#include <fmt/ranges.h>

#include "common/error.h"
#include "formats/gguf.h"

namespace npullm::model {

namespace {

int64_t require_positive(const GgufFile& f, const std::string& key) {
  std::optional<int64_t> v = f.get_int(key);
  if (!v) fail("{}: missing key '{}'", f.path(), key);
  if (*v <= 0 || *v > (int64_t{1} << 31)) fail("{}: key '{}' = {} is out of range", f.path(), key, *v);
  return *v;
}

// The experts of an MoE file, and a refusal by name of every routing variant npullm does not run
// (it would compute something else): shared experts, expert groups, other gating functions.
void read_moe(const GgufFile& f, const std::string& p, HParams& h) {
  h.n_expert = require_positive(f, p + "expert_count");
  h.n_expert_used = require_positive(f, p + "expert_used_count");
  if (h.n_expert_used > h.n_expert)
    fail("{}: expert_used_count {} is more than expert_count {}", f.path(), h.n_expert_used, h.n_expert);
  h.n_ff_exp = require_positive(f, p + "expert_feed_forward_length");
  if (f.get_int(p + "expert_shared_count").value_or(0) > 0)
    fail("{}: shared experts ({}expert_shared_count = {}) are not supported", f.path(), p, *f.get_int(p + "expert_shared_count"));
  if (f.get_int(p + "expert_group_count").value_or(0) > 1)
    fail("{}: expert groups ({}expert_group_count = {}) are not supported", f.path(), p, *f.get_int(p + "expert_group_count"));
  // llama.cpp's gating enum: 1 softmax, 2 sigmoid, 3 softmax over the chosen weights.
  if (auto g = f.get_int(p + "expert_gating_func"); g && *g != 1)
    fail("{}: expert gating function {} ({}expert_gating_func) is not supported for {} (only softmax, 1)", f.path(),
         *g == 2 ? "sigmoid" : std::to_string(*g), p, h.arch);
  h.moe_gating = 0;
}

// YaRN's correction range (ggml_rope_yarn_corr_dims): the pair index whose wavelength fits
// `rotations` times into the original context, rounded outwards as llama.cpp does.
void read_yarn(const GgufFile& f, const std::string& p, HParams& h) {
  const double factor = f.get_float(p + "rope.scaling.factor").value_or(0.0);
  if (!(factor >= 1.0)) fail("{}: YaRN needs {}rope.scaling.factor >= 1, got {}", f.path(), p, factor);
  const int64_t orig = require_positive(f, p + "rope.scaling.original_context_length");
  // llama.cpp's defaults are what npullm computes with (beta fast 32, slow 1, ramp 1, and the
  // factor m on cos / sin); a file that sets another value would be run wrong, so it is refused.
  for (const auto& [key, want] : {std::pair<const char*, double>{"rope.scaling.yarn_beta_fast", 32.0},
                                  {"rope.scaling.yarn_beta_slow", 1.0}, {"rope.scaling.yarn_ext_factor", 1.0},
                                  {"rope.scaling.yarn_attn_factor", 1.0}})
    if (auto v = f.get_float(p + key); v && *v != want)
      fail("{}: {}{} = {} is not supported (npullm's YaRN uses {})", f.path(), p, key, *v, want);
  const double n = static_cast<double>(h.n_rot), base = h.rope_freq_base;
  auto corr_dim = [&](double rotations) {
    return n * std::log(static_cast<double>(orig) / (rotations * 2.0 * 3.14159265358979323846)) / (2.0 * std::log(base));
  };
  h.yarn_low = static_cast<int32_t>(std::max(0.0, std::floor(corr_dim(32.0))));
  h.yarn_high = static_cast<int32_t>(std::min(n - 1.0, std::ceil(corr_dim(1.0))));
  h.yarn_ext = 1.0f;
  h.rope_freq_scale = static_cast<float>(1.0 / factor);
  const float m = 1.0f + 0.1f * std::log(static_cast<float>(factor));
  h.attn_scale *= m * m;
}

}  // namespace

HParams HParams::from_gguf(const GgufFile& f) {
  HParams h;
  std::optional<std::string> arch = f.get_string("general.architecture");
  if (!arch) fail("{}: missing key 'general.architecture'", f.path());
  h.arch = *arch;
  if (h.arch != "llama" && h.arch != "qwen2" && h.arch != "qwen3" && h.arch != "qwen3moe" && h.arch != "gpt-oss" &&
      h.arch != "phi3" && h.arch != "gemma3")
    fail("{}: architecture '{}' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gpt-oss, phi3, gemma3)",
         f.path(), h.arch);
  // Llama rotates adjacent pairs; the others rotate split halves (NeoX), as llama.cpp does for them.
  h.rope_mode = h.arch == "llama" ? 0 : 2;
  h.name = f.get_string("general.name").value_or(h.arch);
  const std::string p = h.arch + ".";
  h.n_layer = require_positive(f, p + "block_count");
  h.n_embd = require_positive(f, p + "embedding_length");
  h.n_head = require_positive(f, p + "attention.head_count");
  h.n_head_kv = f.find(p + "attention.head_count_kv") ? require_positive(f, p + "attention.head_count_kv") : h.n_head;
  // (An MoE file writes feed_forward_length too, for a dense layer it does not have.)
  const bool moe = h.arch == "qwen3moe" || h.arch == "gpt-oss";
  h.n_ff = f.find(p + "feed_forward_length") || !moe ? require_positive(f, p + "feed_forward_length") : 0;
  if (moe) read_moe(f, p, h);
  if (h.arch == "gpt-oss") {
    // Sliding-window attention on the even layers (llama.cpp: period 2 unless the file says
    // otherwise), with the global layers' RoPE; attention sinks; top-k, then softmax of the k.
    h.n_swa = require_positive(f, p + "attention.sliding_window");
    h.swa_pattern = f.find(p + "attention.sliding_window_pattern") ? require_positive(f, p + "attention.sliding_window_pattern") : 2;
    h.attn_sinks = true;
    h.moe_gating = 1;
  }
  h.n_ctx_train = require_positive(f, p + "context_length");
  if (h.n_head % h.n_head_kv) fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), h.n_head, h.n_head_kv);
  // The head size: key_length where the file gives it (Qwen3, Gemma 3: not n_embd / n_head).
  if (f.find(p + "attention.key_length")) {
    h.head_dim = require_positive(f, p + "attention.key_length");
    if (f.find(p + "attention.value_length") && require_positive(f, p + "attention.value_length") != h.head_dim)
      fail("{}: attention.value_length {} differs from key_length {} (not supported)", f.path(),
           require_positive(f, p + "attention.value_length"), h.head_dim);
  } else {
    if (h.n_embd % h.n_head) fail("{}: embedding_length {} is not a multiple of head_count {}", f.path(), h.n_embd, h.n_head);
    h.head_dim = h.n_embd / h.n_head;
  }
  h.n_rot = f.find(p + "rope.dimension_count") ? require_positive(f, p + "rope.dimension_count") : h.head_dim;
  if (h.n_rot > h.head_dim || h.n_rot % 2) fail("{}: rope.dimension_count {} does not fit head size {}", f.path(), h.n_rot, h.head_dim);
  if ((h.arch == "qwen3" || h.arch == "qwen3moe") && h.n_rot != h.head_dim)
    fail("{}: qwen3 rotates whole heads, but rope.dimension_count {} differs from the head size {}", f.path(), h.n_rot, h.head_dim);
  h.attn_scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim));
  if (h.arch == "gemma3") {
    // Gemma's norms are stored as (1 + w) by the converter and used as stored; what differs at
    // run time: local layers, their RoPE base, the embedding scale and the optional soft-cap.
    if (f.find(p + "attn_logit_softcapping")) fail("{}: gemma3 attention logit soft-capping is not supported", f.path());
    if (f.find(p + "attention.sliding_window")) h.n_swa = require_positive(f, p + "attention.sliding_window");
    h.swa_pattern = f.find(p + "attention.sliding_window_pattern") ? require_positive(f, p + "attention.sliding_window_pattern") : 6;
    if (auto v = f.get_float(p + "rope.freq_base_swa")) h.rope_freq_base_swa = static_cast<float>(*v);
    if (h.rope_freq_base_swa <= 0) fail("{}: rope.freq_base_swa must be positive", f.path());
    if (auto v = f.get_float(p + "final_logit_softcapping")) h.final_softcap = static_cast<float>(*v);
    if (h.final_softcap < 0) fail("{}: final_logit_softcapping must not be negative", f.path());
    h.embd_scale = std::sqrt(static_cast<float>(h.n_embd));
    if (h.n_layer == 62) h.attn_scale = 1.0f / std::sqrt(static_cast<float>(h.n_embd / h.n_head));  // Gemma 3 27B
  }
  if (auto v = f.get_float(p + "rope.freq_base")) h.rope_freq_base = static_cast<float>(*v);
  if (h.arch == "gpt-oss") h.rope_freq_base_swa = h.rope_freq_base;  // one base for both kinds of layer
  if (auto v = f.get_float(p + "attention.layer_norm_rms_epsilon")) h.rms_eps = static_cast<float>(*v);
  if (h.rope_freq_base <= 0) fail("{}: rope.freq_base must be positive", f.path());
  // Rope scaling: linear divides positions by the factor; Llama 3.1's per-frequency factors come as
  // the rope_freqs.weight tensor (the graph reads it). Anything else would compute wrong numbers.
  const std::string scaling = f.get_string(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    const double factor = f.get_float(p + "rope.scaling.factor").value_or(1.0);
    if (factor <= 0) fail("{}: rope.scaling.factor must be positive", f.path());
    h.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling == "yarn") {
    read_yarn(f, p, h);
  } else if (scaling != "none" && scaling != "llama3") {
    fail("{}: rope scaling type '{}' is not supported (supported: none, linear, yarn, llama3 via rope_freqs)", f.path(), scaling);
  }

  const GgufTensorInfo& embd = f.tensor("token_embd.weight");
  if (embd.dims.size() != 2 || embd.dims[0] != h.n_embd)
    fail("{}: token_embd.weight has shape [{}] but embedding_length is {}", f.path(),
         fmt::join(embd.dims, ","), h.n_embd);
  h.n_vocab = embd.dims[1];
  h.tied_output = f.find_tensor("output.weight") == nullptr;
  return h;
}

}  // namespace npullm::model
