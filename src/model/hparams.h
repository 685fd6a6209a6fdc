// Model hyper-parameters read from GGUF metadata (`<arch>.*` keys), checked for consistency.
#pragma once
#include <cstdint>
#include <string>

namespace npullm {
class GgufFile;
}

namespace npullm::model {

struct HParams {
  std::string arch;          // general.architecture: llama, qwen2, qwen3, phi3 or gemma3
  std::string name;          // general.name, for display
  int64_t n_layer = 0;       // <arch>.block_count
  int64_t n_embd = 0;        // <arch>.embedding_length
  int64_t n_head = 0;        // <arch>.attention.head_count
  int64_t n_head_kv = 0;     // <arch>.attention.head_count_kv (defaults to n_head)
  int64_t n_ff = 0;          // <arch>.feed_forward_length
  int64_t n_vocab = 0;       // rows of token_embd.weight
  int64_t n_ctx_train = 0;   // <arch>.context_length
  int64_t head_dim = 0;      // <arch>.attention.key_length (= value_length), else n_embd / n_head
  int64_t n_rot = 0;         // <arch>.rope.dimension_count (defaults to head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;     // <arch>.attention.layer_norm_rms_epsilon
  bool tied_output = false;  // no output.weight: the embedding table doubles as the classifier
  int rope_mode = 0;         // 0 adjacent pairs (llama), 2 NeoX halves
  float attn_scale = 0;      // scores = scale * q.k: 1/sqrt(head_dim) (gemma3 27B: 1/sqrt(n_embd/n_head))
  // gemma3: local (sliding-window) layers, their RoPE base, embedding scale, final soft-capping.
  int64_t n_swa = 0;             // <arch>.attention.sliding_window; 0: every layer is global
  int64_t swa_pattern = 0;       // layer il is local iff il % swa_pattern < swa_pattern - 1 (llama.cpp's default 6)
  float rope_freq_base_swa = 10000.0f;
  float embd_scale = 1.0f;       // token embeddings are multiplied by this (gemma3: sqrt(n_embd))
  float final_softcap = 0.0f;    // logits = c tanh(logits / c) when > 0

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  bool is_swa(int64_t il) const { return n_swa > 0 && swa_pattern > 0 && il % swa_pattern < swa_pattern - 1; }

  // Throws npullm::Error naming the key that is missing, has the wrong type or an impossible value,
  // or naming the architecture when it is not supported.
  static HParams from_gguf(const GgufFile& f);
};

}  // namespace npullm::model
