// Model hyper-parameters read from GGUF metadata (`<arch>.*` keys), checked for consistency.
#pragma once
#include <cstdint>
#include <string>

namespace npullm {
class GgufFile;
}

namespace npullm::model {

struct HParams {
  std::string arch;          // general.architecture: llama, qwen2, qwen3, qwen3moe, gpt-oss, phi3 or gemma3
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
  // Mixture of experts (qwen3moe): every layer's FFN is n_expert experts of width n_ff_exp, of
  // which each token uses n_expert_used, chosen by the router ffn_gate_inp.
  int64_t n_expert = 0;          // <arch>.expert_count; 0: dense FFNs
  int64_t n_expert_used = 0;     // <arch>.expert_used_count
  int64_t n_ff_exp = 0;          // <arch>.expert_feed_forward_length
  int moe_gating = 0;            // cpu::MoeGating: 0 softmax over all, top-k, renormalised (qwen3moe);
                                 //   1 top-k of the biased logits, softmax over those k (gpt-oss)
  // gpt-oss: a learned per-head logit in every softmax's denominator (attn_sinks), and YaRN RoPE.
  bool attn_sinks = false;
  // YaRN (rope.scaling.type yarn): frequencies between the original context's "fast" and "slow"
  // dimensions are blended from extrapolated to interpolated ones: pair i keeps its own frequency
  // below yarn_low and is divided by the factor above yarn_high (llama.cpp rounds both outwards, beta
  // fast 32 and slow 1); q.k is scaled by m^2, m = 1 + 0.1 ln(factor), as ggml's rope scales
  // both cos and sin by m.
  float yarn_ext = 0.0f;         // 1: YaRN on (then rope_freq_scale = 1 / factor); 0: off
  int32_t yarn_low = 0, yarn_high = 0;

  bool is_moe() const { return n_expert > 0; }

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  bool is_swa(int64_t il) const { return n_swa > 0 && swa_pattern > 0 && il % swa_pattern < swa_pattern - 1; }

  // Throws npullm::Error naming the key that is missing, has the wrong type or an impossible value,
  // or naming the architecture when it is not supported.
  static HParams from_gguf(const GgufFile& f);
};

}  // namespace npullm::model
