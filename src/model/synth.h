// Synthetic models: GGUF files of a given architecture and shape with seeded random weights,
// quantised the way llama-quantize would quantise them (`npullm synth`).
//
// Every machine can make the same benchmark model from a preset name, a type and a seed, with no
// download. The weights are random (no training): the text such a model generates is gibberish,
// but its size, shapes, tensor types and compute are those of the real model, and its next-token
// distributions are peaked (a clear top-1), not flat, so greedy decoding behaves like a real model's.
//
// How values are made. Element i (flat index, ne0 fastest) of a tensor is a function of (seed,
// tensor name, i) alone — a counter-based generator — so any slice of any tensor can be made on
// its own, in parallel, and two runs give identical bytes. The recipe is the one that made the
// synthetic models of ../shared/golden (README §8): with the same shape and seed, synth reproduces
// their F32 weights bit for bit, and with the same type llama-quantize's quantised files too.
//   key   = fnv1a64(name) ^ (seed * 0x9E3779B97F4A7C15)
//   r     = splitmix64_mix(key + (i + 1) * 0x9E3779B97F4A7C15)
//   u_j   = (((r >> 16j) & 0xFFFF) + 0.5) / 65536, j = 0..3     (four uniforms in (0, 1))
//   z     = (u_0 + u_1 + u_2 + u_3 - 2) * sqrt(3)                (≈ normal, unit variance, |z| < 3.5)
//   value = float(mean + std * z)                                 (in double, then rounded)
// Scales (L = 5.5, gemma3 7.0): token_embd and output L/√n_embd, so that logits have a std of
// about L; attn_q/k 1.4/√n_embd; attn_v, ffn_gate/up 1/√n_embd; attn_output 6/√(n_head·head_dim)
// and ffn_down 6/√n_ff (large gains keep the residual stream moving, so outputs differ per
// position); norms 1 ± 0.2; qwen2's q/k biases ± 0.5, v bias ± 0.2; qwen3/gemma3 q/k norms
// 1.5 ± 0.2; gemma3 post norms 40 ± 8 (golden/arch README §8 says why); phi3's fused attn_qkv takes
// the Q/K scale on its Q and K rows and the V scale on its V rows, its fused ffn_up 1/√n_embd.
//
// Tensor types follow llama-quantize's per-tensor rules for the chosen file type (see
// synth_plan()); tensors are written in llama-quantize's order, one slab of rows at a time, so
// memory stays bounded whatever the model size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/ggml_types.h"

namespace npullm::model {

// The hyper-parameters of a synthetic model (written as `<arch>.*` keys).
//   llama   dense Llama (adjacent-pair RoPE).
//   qwen2   + q/k/v biases, NeoX RoPE.
//   qwen3   per-head RMSNorm on Q and K (attn_q_norm/attn_k_norm), no biases; the head size is
//           written as attention.key_length/value_length (it need not be n_embd / n_head).
//   gemma3  qwen3's tensors plus post_attention_norm and post_ffw_norm; sliding-window (local)
//           layers with their own RoPE base on a period of swa_pattern layers (the last of each
//           period global); GELU FFN and √n_embd embedding scale are implied by the arch.
//   phi3    fused attn_qkv (Q, K, V stacked) and fused ffn_up (gate, up stacked), no ffn_gate;
//           partial rotary through n_rot. No LongRoPE factor tensors (npullm refuses them).
//   qwen3moe qwen3's attention; every FFN is n_expert experts of width n_ff_exp (3-D
//           ffn_{gate,up,down}_exps, one slab per expert) and a router ffn_gate_inp (F32, as
//           llama-quantize leaves it), n_expert_used of them per token. n_ff is written, unused.
//   gpt-oss  qwen3moe's experts with biases (and a router bias), q/k/v/output biases, attention
//           sinks, post_attention_norm as the FFN's norm, an untied output; sliding-window attention on
//           even layers (n_swa) and YaRN RoPE (yarn_factor, yarn_orig_ctx). Gains of
//           ../shared/golden/moe's gpt-oss model (README §8).
struct SynthShape {
  std::string arch = "llama";  // llama, qwen2, qwen3, qwen3moe, gpt-oss, gemma3 or phi3 (see above)
  std::string name = "synth";  // general.name
  int64_t n_embd = 256;
  int64_t n_layer = 4;
  int64_t n_head = 8;
  int64_t n_head_kv = 2;
  int64_t n_ff = 768;
  int64_t n_vocab = 4096;      // rows of token_embd (0: take it from SynthOptions::vocab_from)
  int64_t n_ctx = 2048;        // <arch>.context_length (metadata only)
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied = false;           // no output.weight: token_embd doubles as the classifier
  int64_t head_size = 0;       // head size (0: n_embd / n_head); qwen3/gemma3 write it as key_length
  int64_t n_rot = 0;           // rope.dimension_count: RoPE on the first n_rot dims of a head (0: all)
  // gemma3 only.
  int64_t n_swa = 0;           // attention.sliding_window (0: every layer global)
  int64_t swa_pattern = 6;     // layer il is local iff il % swa_pattern < swa_pattern - 1 (6: no key written)
  float rope_base_swa = 10000.0f;  // rope.freq_base_swa: the local layers' RoPE base
  float final_softcap = 0.0f;  // final_logit_softcapping (0: none, as in real Gemma 3)
  std::string vocab;           // generated tokenizer: "spm" or "bpe" (empty: bpe for qwen2/qwen3, else spm)
  // qwen3moe and gpt-oss.
  int64_t n_expert = 0;        // expert_count
  int64_t n_expert_used = 0;   // expert_used_count
  int64_t n_ff_exp = 0;        // expert_feed_forward_length
  // gpt-oss only: YaRN (rope.scaling.factor, rope.scaling.original_context_length).
  float yarn_factor = 0.0f;
  int64_t yarn_orig_ctx = 0;

  int64_t head_dim() const { return head_size > 0 ? head_size : n_embd / n_head; }
  int64_t q_dim() const { return n_head * head_dim(); }
  int64_t kv_dim() const { return n_head_kv * head_dim(); }
  int64_t rot_dims() const { return n_rot > 0 ? n_rot : head_dim(); }
  bool qkv_bias() const { return arch == "qwen2"; }
  bool qk_norm() const { return arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3"; }
  bool moe() const { return arch == "qwen3moe" || arch == "gpt-oss"; }
  bool bpe_vocab() const {
    return vocab.empty() ? (arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe" || arch == "gpt-oss") : vocab == "bpe";
  }
};

// Presets: "tiny" (a few-MB llama for demos and tests), "tinyllama-1.1b", "qwen2.5-0.5b",
// "llama-3.2-1b", "qwen3-0.6b", "gemma-3-1b", "phi-4-mini" (shapes of the real models; see synth.cpp
// for the details that differ), and "tiny-qwen3", "tiny-gemma3", "tiny-phi3" (the shapes of the
// golden models of ../shared/golden/arch with a 4096-token vocabulary); "qwen3-30b-a3b" (Qwen3-30B-A3B's
// mixture of experts), "gpt-oss-20b", and "tiny-qwen3moe" / "tiny-gpt-oss" (the shapes of
// ../shared/golden/moe's models).
SynthShape synth_preset(const std::string& name);  // throws npullm::Error listing the names
const std::vector<std::string>& synth_preset_names();

// A llama-quantize file type: "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
// "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
// "IQ4_NL", "IQ4_XS", "MXFP4_MOE" (expert tensors MXFP4, the other matrices Q8_0).
struct SynthFileType {
  std::string name;
  uint32_t llama_ftype = 0;  // general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_* value
  GgmlType base = GgmlType::F32;  // the type of most matrices
};
SynthFileType synth_file_type(const std::string& name);  // throws npullm::Error listing the names
const std::vector<std::string>& synth_file_type_names();

// One tensor of the model: its GGUF name and dims (ne0 first), its type, and the distribution of
// its values. A fused tensor may change its std part way: rows from split_row on (element i is in
// row i / ne0) have std_after (phi3's attn_qkv: the V rows).
struct SynthTensor {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type = GgmlType::F32;
  double mean = 0.0;
  double std = 0.0;
  int64_t split_row = -1;  // -1: one std for the whole tensor
  double std_after = 0.0;

  int64_t n_elements() const;
};

// The tensors in file order, each with the type llama-quantize gives it for `ft` (without an
// importance matrix, without --pure). Throws for shapes that cannot be built.
std::vector<SynthTensor> synth_plan(const SynthShape& s, const SynthFileType& ft);

// The generator above: the key of a tensor, and its element i.
uint64_t synth_tensor_key(const std::string& name, uint64_t seed);
float synth_value(uint64_t key, int64_t i, double mean, double std);

struct SynthOptions {
  SynthShape shape;
  SynthFileType type;
  uint64_t seed = 1;
  // Copy every tokenizer.* key from this GGUF instead of generating a vocabulary; n_vocab then
  // follows its token count (shape.n_vocab must be 0 or equal to it).
  std::string vocab_from;
  int threads = 0;           // 0 = all hardware threads
  std::string description;   // general.description (say how the file was made)
};

struct SynthReport {
  std::vector<SynthTensor> tensors;  // as written, in file order
  SynthShape shape;                  // as written (n_vocab resolved)
  std::string vocab;                 // where the tokenizer came from, in words
  uint64_t file_bytes = 0;
  int64_t n_params = 0;
  double seconds = 0.0;
};

// Writes the model to `path` (atomically: a temp file renamed into place). Throws npullm::Error
// for a bad shape, type or vocabulary file, or an I/O failure.
SynthReport synth_write(const SynthOptions& o, const std::string& path);

}  // namespace npullm::model
