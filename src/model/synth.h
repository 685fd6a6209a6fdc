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
// Scales (L = 5.5): token_embd and output L/√n_embd, so that logits have a std of about L;
// attn_q/k 1.4/√n_embd; attn_v, ffn_gate/up 1/√n_embd; attn_output 6/√n_embd and ffn_down
// 6/√n_ff (large gains keep the residual stream moving, so outputs differ per position); norms
// 1 ± 0.2; qwen2's q/k biases ± 0.5, v bias ± 0.2.
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
struct SynthShape {
  std::string arch = "llama";  // "llama" or "qwen2" (qwen2 adds q/k/v biases; NeoX RoPE is implied)
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

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_dim() const { return n_head_kv * head_dim(); }
  bool qkv_bias() const { return arch == "qwen2"; }
};

// Presets: "tiny" (a few-MB llama for demos and tests), "tinyllama-1.1b", "qwen2.5-0.5b",
// "llama-3.2-1b" (shapes of the real models; see synth.cpp for the details that differ).
SynthShape synth_preset(const std::string& name);  // throws npullm::Error listing the names
const std::vector<std::string>& synth_preset_names();

// A llama-quantize file type: "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
// "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
// "IQ4_NL", "IQ4_XS".
struct SynthFileType {
  std::string name;
  uint32_t llama_ftype = 0;  // general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_* value
  GgmlType base = GgmlType::F32;  // the type of most matrices
};
SynthFileType synth_file_type(const std::string& name);  // throws npullm::Error listing the names
const std::vector<std::string>& synth_file_type_names();

// One tensor of the model: its GGUF name and dims (ne0 first), its type, and the distribution of
// its values.
struct SynthTensor {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type = GgmlType::F32;
  double mean = 0.0;
  double std = 0.0;

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
