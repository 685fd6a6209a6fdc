#include "model/hparams.h"

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

}  // namespace

HParams HParams::from_gguf(const GgufFile& f) {
  HParams h;
  std::optional<std::string> arch = f.get_string("general.architecture");
  if (!arch) fail("{}: missing key 'general.architecture'", f.path());
  h.arch = *arch;
  if (h.arch != "llama" && h.arch != "qwen2")
    fail("{}: architecture '{}' is not supported (supported: llama, qwen2)", f.path(), h.arch);
  h.rope_mode = h.arch == "qwen2" ? 2 : 0;  // Qwen2 rotates split halves (NeoX), Llama adjacent pairs
  h.name = f.get_string("general.name").value_or(h.arch);
  const std::string p = h.arch + ".";
  h.n_layer = require_positive(f, p + "block_count");
  h.n_embd = require_positive(f, p + "embedding_length");
  h.n_head = require_positive(f, p + "attention.head_count");
  h.n_head_kv = f.find(p + "attention.head_count_kv") ? require_positive(f, p + "attention.head_count_kv") : h.n_head;
  h.n_ff = require_positive(f, p + "feed_forward_length");
  h.n_ctx_train = require_positive(f, p + "context_length");
  if (h.n_embd % h.n_head) fail("{}: embedding_length {} is not a multiple of head_count {}", f.path(), h.n_embd, h.n_head);
  if (h.n_head % h.n_head_kv) fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), h.n_head, h.n_head_kv);
  h.head_dim = h.n_embd / h.n_head;
  h.n_rot = f.find(p + "rope.dimension_count") ? require_positive(f, p + "rope.dimension_count") : h.head_dim;
  if (h.n_rot > h.head_dim || h.n_rot % 2) fail("{}: rope.dimension_count {} does not fit head size {}", f.path(), h.n_rot, h.head_dim);
  if (auto v = f.get_float(p + "rope.freq_base")) h.rope_freq_base = static_cast<float>(*v);
  if (auto v = f.get_float(p + "attention.layer_norm_rms_epsilon")) h.rms_eps = static_cast<float>(*v);
  if (h.rope_freq_base <= 0) fail("{}: rope.freq_base must be positive", f.path());
  // Rope scaling: linear divides positions by the factor; Llama 3.1's per-frequency factors come as
  // the rope_freqs.weight tensor (the graph reads it). Anything else would compute wrong numbers.
  const std::string scaling = f.get_string(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    const double factor = f.get_float(p + "rope.scaling.factor").value_or(1.0);
    if (factor <= 0) fail("{}: rope.scaling.factor must be positive", f.path());
    h.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && scaling != "llama3") {
    fail("{}: rope scaling type '{}' is not supported (supported: none, linear, llama3 via rope_freqs)", f.path(), scaling);
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
