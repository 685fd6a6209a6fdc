// Synthetic models (`npullm synth`): presets, llama-quantize's per-tensor type rules, the seeded
// value generator, a generated tokenizer, and the streaming writer. See synth.h for the outline.
#include "model/synth.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <thread>
#include <unordered_set>

#include "common/error.h"
#include "formats/gguf.h"

namespace npullm::model {

namespace {

// =============================================================================================
// Presets

struct Preset {
  const char* name;
  SynthShape shape;
};

SynthShape make_shape(const char* arch, const char* name, int64_t n_embd, int64_t n_layer, int64_t n_head,
                      int64_t n_head_kv, int64_t n_ff, int64_t n_vocab, int64_t n_ctx, float rope_base,
                      float rms_eps, bool tied) {
  SynthShape s;
  s.arch = arch;
  s.name = name;
  s.n_embd = n_embd;
  s.n_layer = n_layer;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.n_ff = n_ff;
  s.n_vocab = n_vocab;
  s.n_ctx = n_ctx;
  s.rope_base = rope_base;
  s.rms_eps = rms_eps;
  s.tied = tied;
  return s;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      // The golden llama-spm model's shape with a 4096-token vocabulary: ~5M parameters, 5 MB at
      // Q8_0. Every row length is a multiple of 256, so every k-quant rule applies.
      {"tiny", make_shape("llama", "synth-tiny", 256, 4, 8, 2, 768, 4096, 2048, 10000.0f, 1e-5f, false)},
      {"tinyllama-1.1b",
       make_shape("llama", "synth-tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f, false)},
      // Qwen2.5-0.5B's shape, but with a 50257-token vocabulary (the real one has 151936); 896 is
      // not a multiple of 256, so k-quant files fall back to Q5_0/Q5_1/Q8_0/IQ4_NL as llama.cpp does.
      {"qwen2.5-0.5b",
       make_shape("qwen2", "synth-qwen2.5-0.5b", 896, 24, 14, 2, 4864, 50257, 32768, 1000000.0f, 1e-6f, true)},
      // Llama-3.2-1B's shape with a generated SentencePiece vocabulary (the real one is BPE) and a
      // 4096 context: the real 131072 needs llama3 RoPE scaling (rope_freqs), which synth does not write.
      {"llama-3.2-1b",
       make_shape("llama", "synth-llama-3.2-1b", 2048, 16, 32, 8, 8192, 128256, 4096, 500000.0f, 1e-5f, true)},
  };
  return p;
}

// =============================================================================================
// File types (llama.cpp's LLAMA_FTYPE_MOSTLY_* ids)

const std::vector<SynthFileType>& file_types() {
  static const std::vector<SynthFileType> t = {
      {"F32", 0, GgmlType::F32},     {"F16", 1, GgmlType::F16},       {"BF16", 32, GgmlType::BF16},
      {"Q8_0", 7, GgmlType::Q8_0},   {"Q4_0", 2, GgmlType::Q4_0},     {"Q4_1", 3, GgmlType::Q4_1},
      {"Q5_0", 8, GgmlType::Q5_0},   {"Q5_1", 9, GgmlType::Q5_1},     {"Q2_K", 10, GgmlType::Q2_K},
      {"Q3_K_S", 11, GgmlType::Q3_K}, {"Q3_K_M", 12, GgmlType::Q3_K}, {"Q3_K_L", 13, GgmlType::Q3_K},
      {"Q4_K_S", 14, GgmlType::Q4_K}, {"Q4_K_M", 15, GgmlType::Q4_K}, {"Q5_K_S", 16, GgmlType::Q5_K},
      {"Q5_K_M", 17, GgmlType::Q5_K}, {"Q6_K", 18, GgmlType::Q6_K},   {"IQ4_NL", 25, GgmlType::IQ4_NL},
      {"IQ4_XS", 30, GgmlType::IQ4_XS},
  };
  return t;
}

// =============================================================================================
// Per-tensor types: llama-quantize's rules (llama_tensor_get_type in llama.cpp's llama-quant.cpp,
// without an importance matrix and without --pure), for the tensors a dense llama/qwen2 has.

enum class Role { TokenEmbd, Output, Norm, Bias, AttnQ, AttnK, AttnV, AttnOutput, FfnGate, FfnUp, FfnDown };

// The layers that get more bits in the *_M mixtures: the first and last eighth, and every third
// layer in between.
bool use_more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

GgmlType mixture_type(const SynthShape& s, const SynthFileType& ft, Role role, int64_t layer) {
  const std::string& f = ft.name;
  GgmlType t = ft.base;
  const int64_t n_gqa = s.n_head / s.n_head_kv;
  const bool iq4 = f == "IQ4_NL" || f == "IQ4_XS";
  // The output matrix (or the embedding when it doubles as the output) gets 6 bits unless the base
  // is already 8-bit; rows that are not whole 256-blocks take Q8_0.
  if (role == Role::Output || (role == Role::TokenEmbd && s.tied)) {
    if (s.n_embd % 256 != 0) return GgmlType::Q8_0;
    return t == GgmlType::Q8_0 ? t : GgmlType::Q6_K;
  }
  switch (role) {
    case Role::AttnV:
      if (f == "Q2_K") t = n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
      else if (f == "Q3_K_M") t = layer < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
      else if (f == "Q3_K_L") t = GgmlType::Q5_K;
      else if (iq4 && n_gqa >= 4) t = GgmlType::Q5_K;
      else if ((f == "Q4_K_M" || f == "Q5_K_M") && use_more_bits(layer, s.n_layer)) t = GgmlType::Q6_K;
      else if (f == "Q4_K_S" && layer < 4) t = GgmlType::Q5_K;
      break;
    case Role::FfnDown:
      if (f == "Q2_K") t = GgmlType::Q3_K;
      else if (f == "Q3_K_M") t = layer < s.n_layer / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
      else if (f == "Q3_K_L") t = GgmlType::Q5_K;
      else if (f == "Q4_K_M" && use_more_bits(layer, s.n_layer)) t = GgmlType::Q6_K;
      else if (iq4 && layer < s.n_layer / 8) t = GgmlType::Q5_K;
      else if (f == "Q5_K_M" && use_more_bits(layer, s.n_layer)) t = GgmlType::Q6_K;
      else if (f == "Q4_K_S" && layer < s.n_layer / 8) t = GgmlType::Q5_K;
      break;
    case Role::AttnOutput:
      if (f == "Q2_K") t = GgmlType::Q3_K;
      else if (f == "Q3_K_M") t = GgmlType::Q4_K;
      else if (f == "Q3_K_L") t = GgmlType::Q5_K;
      break;
    default: break;  // token_embd (untied), attn_q/k, ffn_gate/up: the base type
  }
  return t;
}

// llama-quantize's fallback for a row length that is not a whole number of blocks of `t`.
GgmlType fallback_type(const std::string& tensor, GgmlType t, int64_t ne0) {
  const auto fits = [&](GgmlType x) { return ne0 % ggml_type_traits(x).block_size == 0; };
  if (fits(t)) return t;
  GgmlType f;
  switch (t) {
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_XS: f = GgmlType::IQ4_NL; break;
    case GgmlType::Q4_K: f = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: f = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: f = GgmlType::Q8_0; break;
    default:
      fail("synth: tensor '{}': row length {} is not a multiple of the {} block size {} "
           "(llama-quantize refuses this too; choose another --type or shape)",
           tensor, ne0, ggml_type_name(t), ggml_type_traits(t).block_size);
  }
  return fits(f) ? f : GgmlType::F16;
}

GgmlType tensor_type(const SynthShape& s, const SynthFileType& ft, const std::string& name, Role role,
                     int64_t layer, int64_t ne0) {
  if (role == Role::Norm || role == Role::Bias) return GgmlType::F32;  // 1-D: never quantised
  const GgmlTypeTraits& base = ggml_type_traits(ft.base);
  if (base.block_size == 1) return ft.base;  // F32/F16/BF16 files: no mixture
  return fallback_type(name, mixture_type(s, ft, role, layer), ne0);
}

// llama-quantize writes tensors sorted by layer (non-layer tensors first), then by name.
int64_t layer_of(const std::string& name) {
  int64_t layer = -1;
  if (name.rfind("blk.", 0) == 0) layer = std::stoll(name.substr(4));
  return layer;
}

void check_shape(const SynthShape& s) {
  if (s.arch != "llama" && s.arch != "qwen2") fail("synth: architecture '{}' (expected llama or qwen2)", s.arch);
  const std::pair<const char*, int64_t> dims[] = {{"n-embd", s.n_embd}, {"n-layer", s.n_layer},
                                                  {"n-head", s.n_head}, {"n-head-kv", s.n_head_kv},
                                                  {"n-ff", s.n_ff},     {"n-vocab", s.n_vocab},
                                                  {"n-ctx", s.n_ctx}};
  for (const auto& [what, v] : dims)
    if (v < 1 || v > (int64_t{1} << 31)) fail("synth: --{} = {} is out of range", what, v);
  if (s.n_embd % s.n_head) fail("synth: n-embd {} is not a multiple of n-head {}", s.n_embd, s.n_head);
  if (s.n_head % s.n_head_kv) fail("synth: n-head {} is not a multiple of n-head-kv {}", s.n_head, s.n_head_kv);
  if (s.head_dim() % 2) fail("synth: head size {} is odd (RoPE rotates pairs)", s.head_dim());
  if (!(s.rope_base > 0.0f)) fail("synth: rope base {} must be positive", s.rope_base);
  if (!(s.rms_eps > 0.0f)) fail("synth: rms eps {} must be positive", s.rms_eps);
}

// =============================================================================================
// Values

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio: SplitMix64's increment

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills out[0..n) with elements first..first+n of a tensor (the inner loop of synth_value).
//
// The recipe's z = (((u0 + u1) + u2) + u3 - 2) * sqrt(3), u_j = (k_j + 0.5) / 65536, is computed
// here as (k0 + k1 + k2 + k3 - 131070) * (sqrt(3) / 65536) in integers first: every u_j, every
// partial sum and the difference are exact in double (at most 20 significant bits), and scaling by
// a power of two is exact, so the result is the same double — bit for bit — at half the cost.
void fill_values(uint64_t key, int64_t first, int64_t n, double mean, double std, float* out) {
  constexpr double kScale = 1.7320508075688772 / 65536.0;  // exact: a power-of-two scaling
  uint64_t counter = key + static_cast<uint64_t>(first + 1) * kGolden;
  for (int64_t j = 0; j < n; ++j, counter += kGolden) {
    const uint64_t r = mix64(counter);
    const int64_t k = static_cast<int64_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    const double z = static_cast<double>(k - 131070) * kScale;  // Irwin-Hall(4): unit variance, |z| < 3.47
    out[j] = static_cast<float>(mean + std * z);
  }
}

// =============================================================================================
// Tokenizer. A generated vocabulary is enough for llama.cpp and npullm to load and run the model;
// its pieces are English-looking fragments so that prompts tokenize into something other than bytes.

// Pieces in order of "frequency" (merge priority): common words, then syllables and pairs of them.
// Every prefix of a piece comes before it (a piece of more than one character is always its prefix
// plus one character), so each piece is reachable by merging and a BPE merge list is immediate.
// `space` is the word-boundary character: U+2581 for SentencePiece, U+0120 'Ġ' for byte-level BPE.
// `singles` adds the single characters first (SentencePiece has no byte-level alphabet).
std::vector<std::string> make_pieces(size_t count, const std::string& space, bool singles) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  auto add_one = [&](const std::string& p) {
    if (out.size() < count && seen.insert(p).second) out.push_back(p);
  };
  // Adds `chars` (a sequence of characters, each one string) and every prefix of it first.
  auto add = [&](const std::vector<std::string>& chars) {
    std::string p;
    for (size_t k = 0; k < chars.size() && out.size() < count; ++k) {
      p += chars[k];
      if (k > 0 || singles) add_one(p);
    }
  };
  auto letters = [&](const std::string& word, bool with_space) {
    std::vector<std::string> c;
    if (with_space) c.push_back(space);
    for (char ch : word) c.emplace_back(1, ch);
    return c;
  };
  if (singles) {
    add_one(space);
    for (char ch = 'a'; ch <= 'z'; ++ch) add_one(std::string(1, ch));
    for (char ch = 'A'; ch <= 'Z'; ++ch) add_one(std::string(1, ch));
    for (char ch = '0'; ch <= '9'; ++ch) add_one(std::string(1, ch));
    for (char ch : std::string(".,!?'\";:-()")) add_one(std::string(1, ch));
  }
  static const char* const kWords[] = {
      "the", "of", "and", "to", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are", "with",
      "as", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "not", "word",
      "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when", "up", "use",
      "your", "how", "said", "an", "each", "she", "which", "do", "their", "time", "if", "will", "way",
      "about", "many", "then", "them", "write", "would", "like", "so", "these", "her", "long", "make",
      "thing", "see", "him", "two", "has", "look", "more", "day", "could", "go", "come", "did", "number",
      "sound", "no", "most", "people", "my", "over", "know", "water", "than", "call", "first", "who",
      "may", "down", "side", "been", "now", "find", "once", "upon", "little", "girl", "boy", "dog", "cat",
      "happy", "big", "named", "play", "saw", "went", "very", "tree", "sun", "friend", "mom", "ball"};
  for (const char* w : kWords) {
    add(letters(w, true));
    add(letters(w, false));
  }
  for (const char* w : kWords) {  // Capitalised, as at the start of a sentence
    std::string c = w;
    c[0] = static_cast<char>(c[0] - 'a' + 'A');
    add(letters(c, true));
  }
  // Syllables: consonant + vowel (+ consonant), then words of two of them.
  static const std::string kCons = "tnsrhldcmfpgwybvkjxqz", kVow = "eaoiu";
  std::vector<std::string> syll;
  for (char c : kCons)
    for (char v : kVow) syll.push_back(std::string{c, v});
  const size_t n_cv = syll.size();
  for (size_t i = 0; i < n_cv; ++i)
    for (char c : kCons) syll.push_back(syll[i] + c);
  for (const std::string& s1 : syll) {
    add(letters(s1, true));
    add(letters(s1, false));
  }
  for (size_t i = 0; i < syll.size() && out.size() < count; ++i)
    for (size_t j = 0; j < syll.size() && out.size() < count; ++j) add(letters(syll[i] + syll[j], true));
  if (out.size() < count) fail("synth: cannot generate {} vocabulary pieces", count);
  return out;
}

// Characters of a piece (pieces hold ASCII plus the one multi-byte word-boundary character).
std::pair<std::string, std::string> split_last_char(const std::string& p) {
  size_t k = p.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(p[k]) & 0xC0) == 0x80) --k;  // back to a UTF-8 lead byte
  return {p.substr(0, k), p.substr(k)};
}

// SentencePiece-style vocabulary (tokenizer.ggml.model = llama), laid out like Llama 2's:
// <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then the pieces.
void add_spm_vocab(GgufWriter& w, int64_t n_vocab) {
  constexpr int64_t kFixed = 3 + 256;
  if (n_vocab < kFixed + 128)
    fail("synth: n-vocab {} is too small for a SentencePiece vocabulary (at least {})", n_vocab, kFixed + 128);
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores(static_cast<size_t>(n_vocab), 0.0f);
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);  // byte
  }
  const std::vector<std::string> pieces = make_pieces(static_cast<size_t>(n_vocab - kFixed), "\xE2\x96\x81", true);
  for (size_t k = 0; k < pieces.size(); ++k) {
    scores[tokens.size()] = -static_cast<float>(k);  // earlier pieces merge first
    tokens.push_back(pieces[k]);
    types.push_back(1);  // normal
  }
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

// GPT-2's byte-to-character map: printable bytes stand for themselves, the others (controls,
// space, 127..160, 173) for U+0100 onwards, in byte order.
bool gpt2_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

std::vector<std::string> gpt2_byte_chars() {  // the UTF-8 text of each byte's character
  std::vector<std::string> out(256);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const int cp = gpt2_printable(b) ? b : 256 + extra++;
    if (cp < 0x80) out[b] = std::string(1, static_cast<char>(cp));
    else out[b] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  }
  return out;
}

// Byte-level BPE vocabulary (tokenizer.ggml.model = gpt2, pre-tokenizer qwen2): the 256 byte
// characters in GPT-2's order, one piece per merge, then <|endoftext|> (BOS and EOS),
// <|im_start|> and <|im_end|>.
void add_bpe_vocab(GgufWriter& w, int64_t n_vocab) {
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  const int64_t fixed = 256 + static_cast<int64_t>(specials.size());
  if (n_vocab < fixed + 128)
    fail("synth: n-vocab {} is too small for a BPE vocabulary (at least {})", n_vocab, fixed + 128);
  const std::vector<std::string> bytes = gpt2_byte_chars();
  std::vector<std::string> tokens;  // GPT-2 lists the printable bytes first, then the remapped ones
  for (int b = 0; b < 256; ++b)
    if (gpt2_printable(b)) tokens.push_back(bytes[b]);
  for (int b = 0; b < 256; ++b)
    if (!gpt2_printable(b)) tokens.push_back(bytes[b]);
  std::vector<int32_t> types(tokens.size(), 1);
  const std::string space = bytes[' '];  // "Ġ"
  std::vector<std::string> merges;
  for (const std::string& p : make_pieces(static_cast<size_t>(n_vocab - fixed), space, false)) {
    const auto [left, right] = split_last_char(p);
    merges.push_back(left + " " + right);
    tokens.push_back(p);
    types.push_back(1);
  }
  const auto eot = static_cast<uint32_t>(tokens.size());
  for (const std::string& s : specials) {
    tokens.push_back(s);
    types.push_back(3);  // control
  }
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.bos_token_id", eot);
  w.add_u32("tokenizer.ggml.eos_token_id", eot);
  w.add_u32("tokenizer.ggml.padding_token_id", eot);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
}

// =============================================================================================
// Writing

// Runs body(begin, end) over [0, n) split into `threads` contiguous ranges; rethrows the first error.
template <typename Body>
void parallel_ranges(int64_t n, int threads, const Body& body) {
  if (threads <= 1 || n <= 1) {
    body(int64_t{0}, n);
    return;
  }
  const int64_t parts = std::min<int64_t>(threads, n);
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  for (int64_t p = 0; p < parts; ++p) {
    pool.emplace_back([&, p] {
      try {
        body(n * p / parts, n * (p + 1) / parts);
      } catch (...) {
        errors[static_cast<size_t>(p)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// Generates and quantises one tensor a slab of rows at a time, handing each slab to `sink`.
void stream_tensor(const SynthTensor& t, uint64_t seed, int threads, const GgufWriter::TensorSink& sink) {
  constexpr int64_t kSlabElements = int64_t{1} << 22;  // 4M values: 16 MB of floats in flight
  // Below this a slab is not worth threads (norms, biases, small matrices).
  constexpr int64_t kMinParallelElements = int64_t{1} << 16;
  const uint64_t key = synth_tensor_key(t.name, seed);
  const int64_t ne0 = t.dims[0];
  const int64_t rows = t.n_elements() / ne0;
  const size_t row_bytes = ggml_row_bytes(t.type, ne0);
  const int64_t slab_rows = std::clamp<int64_t>(kSlabElements / ne0, 1, rows);
  std::vector<uint8_t> out(static_cast<size_t>(slab_rows) * row_bytes);
  for (int64_t r0 = 0; r0 < rows; r0 += slab_rows) {
    const int64_t nr = std::min(slab_rows, rows - r0);
    const int n_threads = nr * ne0 >= kMinParallelElements ? threads : 1;
    parallel_ranges(nr, n_threads, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(ne0));
      for (int64_t r = begin; r < end; ++r) {
        fill_values(key, (r0 + r) * ne0, ne0, t.mean, t.std, row.data());
        quantize_row(t.type, row.data(), out.data() + static_cast<size_t>(r) * row_bytes, ne0);
      }
    });
    sink(out.data(), static_cast<size_t>(nr) * row_bytes);
  }
}

}  // namespace

// =============================================================================================
// Public API

SynthShape synth_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) return p.shape;
  fail("synth: unknown preset '{}' (known: {})", name, fmt::join(synth_preset_names(), ", "));
}

const std::vector<std::string>& synth_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Preset& p : presets()) n.emplace_back(p.name);
    return n;
  }();
  return names;
}

SynthFileType synth_file_type(const std::string& name) {
  for (const SynthFileType& t : file_types())
    if (name == t.name) return t;
  fail("synth: unknown type '{}' (known: {})", name, fmt::join(synth_file_type_names(), ", "));
}

const std::vector<std::string>& synth_file_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const SynthFileType& t : file_types()) n.push_back(t.name);
    return n;
  }();
  return names;
}

int64_t SynthTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<SynthTensor> synth_plan(const SynthShape& s, const SynthFileType& ft) {
  check_shape(s);
  constexpr double kLogitStd = 5.5;  // L: the std of the logits, which sets how peaked outputs are
  const double D = static_cast<double>(s.n_embd);
  std::vector<SynthTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> dims, Role role, int64_t layer, double mean, double std) {
    SynthTensor t;
    t.name = name;
    t.type = tensor_type(s, ft, name, role, layer, dims[0]);
    t.dims = std::move(dims);
    t.mean = mean;
    t.std = std;
    out.push_back(std::move(t));
  };
  add("token_embd.weight", {s.n_embd, s.n_vocab}, Role::TokenEmbd, -1, 0.0, kLogitStd / std::sqrt(D));
  add("output_norm.weight", {s.n_embd}, Role::Norm, -1, 1.0, 0.2);
  if (!s.tied) add("output.weight", {s.n_embd, s.n_vocab}, Role::Output, -1, 0.0, kLogitStd / std::sqrt(D));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    add(p + "attn_norm.weight", {s.n_embd}, Role::Norm, l, 1.0, 0.2);
    add(p + "attn_q.weight", {s.n_embd, s.n_embd}, Role::AttnQ, l, 0.0, 1.4 / std::sqrt(D));
    add(p + "attn_k.weight", {s.n_embd, s.kv_dim()}, Role::AttnK, l, 0.0, 1.4 / std::sqrt(D));
    add(p + "attn_v.weight", {s.n_embd, s.kv_dim()}, Role::AttnV, l, 0.0, 1.0 / std::sqrt(D));
    if (s.qkv_bias()) {
      add(p + "attn_q.bias", {s.n_embd}, Role::Bias, l, 0.0, 0.5);
      add(p + "attn_k.bias", {s.kv_dim()}, Role::Bias, l, 0.0, 0.5);
      add(p + "attn_v.bias", {s.kv_dim()}, Role::Bias, l, 0.0, 0.2);
    }
    add(p + "attn_output.weight", {s.n_embd, s.n_embd}, Role::AttnOutput, l, 0.0,
        6.0 / std::sqrt(static_cast<double>(s.n_head * s.head_dim())));
    add(p + "ffn_norm.weight", {s.n_embd}, Role::Norm, l, 1.0, 0.2);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, Role::FfnGate, l, 0.0, 1.0 / std::sqrt(D));
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, Role::FfnUp, l, 0.0, 1.0 / std::sqrt(D));
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, Role::FfnDown, l, 0.0,
        6.0 / std::sqrt(static_cast<double>(s.n_ff)));
  }
  std::stable_sort(out.begin(), out.end(), [](const SynthTensor& a, const SynthTensor& b) {
    const int64_t la = layer_of(a.name), lb = layer_of(b.name);
    return la != lb ? la < lb : a.name < b.name;
  });
  return out;
}

uint64_t synth_tensor_key(const std::string& name, uint64_t seed) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return h ^ (seed * kGolden);
}

float synth_value(uint64_t key, int64_t i, double mean, double std) {
  float v;
  fill_values(key, i, 1, mean, std, &v);
  return v;
}

SynthReport synth_write(const SynthOptions& o, const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  SynthReport report;
  report.shape = o.shape;
  SynthShape& s = report.shape;

  // With --vocab-from, the vocabulary file decides n_vocab.
  std::unique_ptr<GgufFile> vocab_file;
  if (!o.vocab_from.empty()) {
    vocab_file = GgufFile::open(o.vocab_from);
    const GgufValue* tokens = vocab_file->find("tokenizer.ggml.tokens");
    if (!tokens || !tokens->is_array())
      fail("{}: no tokenizer.ggml.tokens array to copy the vocabulary from", o.vocab_from);
    const auto n = static_cast<int64_t>(tokens->as_array("tokenizer.ggml.tokens").size());
    if (s.n_vocab != 0 && s.n_vocab != n)
      fail("synth: n-vocab {} does not match the {} tokens of {}", s.n_vocab, n, o.vocab_from);
    s.n_vocab = n;
  }
  const std::vector<SynthTensor> plan = synth_plan(s, o.type);  // validates the shape

  // Keys in the order of a converted model: general.*, <arch>.*, tokenizer.*.
  GgufWriter w;
  const std::string& a = s.arch;
  w.add_string("general.architecture", a);
  w.add_string("general.name", s.name);
  w.add_string("general.description",
               o.description.empty() ? "synthetic random weights (no training): npullm synth" : o.description);
  w.add_u32("general.file_type", o.type.llama_ftype);
  w.add_u32("general.quantization_version", 2);
  w.add_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(s.head_dim()));
  w.add_f32(a + ".rope.freq_base", s.rope_base);
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", s.rms_eps);
  w.add_u32(a + ".vocab_size", static_cast<uint32_t>(s.n_vocab));
  if (vocab_file) {
    for (const auto& [key, value] : vocab_file->metadata())
      if (key.rfind("tokenizer.", 0) == 0) w.add(key, value);
    report.vocab = fmt::format("copied from {}", o.vocab_from);
  } else if (s.arch == "qwen2") {
    add_bpe_vocab(w, s.n_vocab);
    report.vocab = "generated byte-level BPE (gpt2, pre-tokenizer qwen2)";
  } else {
    add_spm_vocab(w, s.n_vocab);
    report.vocab = "generated SentencePiece (llama)";
  }

  for (const SynthTensor& t : plan) {
    w.add_tensor_info(t.name, t.dims, t.type);
    report.n_params += t.n_elements();
  }
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  report.file_bytes = w.write_streaming(path, [&](size_t index, const GgufWriter::TensorSink& sink) {
    stream_tensor(plan[index], o.seed, threads, sink);
  });
  report.tensors = plan;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace npullm::model
