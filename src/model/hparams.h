// Model hyper-parameters read from GGUF metadata (`<arch>.*` keys), checked for consistency.
#pragma once
#include <cstdint>
#include <string>

namespace npullm {
class GgufFile;
}

namespace npullm::model {

struct HParams {
  std::string arch;          // general.architecture ("llama" or "qwen2")
  std::string name;          // general.name, for display
  int64_t n_layer = 0;       // <arch>.block_count
  int64_t n_embd = 0;        // <arch>.embedding_length
  int64_t n_head = 0;        // <arch>.attention.head_count
  int64_t n_head_kv = 0;     // <arch>.attention.head_count_kv (defaults to n_head)
  int64_t n_ff = 0;          // <arch>.feed_forward_length
  int64_t n_vocab = 0;       // rows of token_embd.weight
  int64_t n_ctx_train = 0;   // <arch>.context_length
  int64_t head_dim = 0;      // n_embd / n_head
  int64_t n_rot = 0;         // <arch>.rope.dimension_count (defaults to head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;     // <arch>.attention.layer_norm_rms_epsilon
  bool tied_output = false;  // no output.weight: the embedding table doubles as the classifier
  int rope_mode = 0;         // 0 adjacent pairs (llama), 2 NeoX halves

  // Throws npullm::Error naming the key that is missing, has the wrong type or an impossible value,
  // or naming the architecture when it is not supported.
  static HParams from_gguf(const GgufFile& f);
};

}  // namespace npullm::model
