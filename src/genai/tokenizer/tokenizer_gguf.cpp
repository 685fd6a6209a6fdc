// Vocab::from_gguf: reads tokenizer.ggml.* the way llama.cpp's llama_vocab::load does, with the
// same defaults, so that a GGUF tokenizes here as it does there.
#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "formats/gguf.h"
#include "genai/tokenizer/pretokenizer.h"
#include "genai/tokenizer/special_tokens.h"
#include "genai/tokenizer/tokenizer.h"

namespace npullm::genai {

namespace {

// The special-id keys store uint32 with 0xFFFFFFFF meaning "none"; some writers use int32 -1.
int32_t read_special_id(const GgufFile& f, const std::string& key, int32_t fallback,
                        size_t n_vocab) {
  const GgufValue* v = f.find(key);
  if (!v) return fallback < static_cast<int64_t>(n_vocab) ? fallback : -1;
  const int64_t id = v->as_int(key);
  if (id < 0 || id == 0xFFFFFFFFll) return -1;
  if (id >= static_cast<int64_t>(n_vocab))
    fail("{}: {} = {} is out of range (the vocab has {} tokens)", f.path(), key, id, n_vocab);
  return static_cast<int32_t>(id);
}

// Pre-tokenizers after which llama.cpp skips merging a piece that is already a token, and adds BOS
// unless the GGUF says otherwise.
bool pre_ignores_merges(std::string_view pre) {
  for (std::string_view p : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                             "midm-2.0", "lfm2", "tekken"})
    if (pre == p) return true;
  return false;
}
bool pre_adds_bos(std::string_view pre) { return pre_ignores_merges(pre) || pre == "chameleon"; }

// Texts that llama.cpp recognises as end-of-turn / fill-in-the-middle markers and turns into
// CONTROL tokens when a converter left them USER_DEFINED, so that user text cannot produce them.
bool control_looking(std::string_view t) {
  static constexpr std::string_view kTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
      "<EOT>", "_<EOT>", "<|eom_id|>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
      "<end_of_utterance>", "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>",
      "\xE2\x96\x81<PRE>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<|fim_suffix|>",
      "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>",
      "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<|fim_middle|>", "<fim-middle>",
      "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
      "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>",
      "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"};
  return std::find(std::begin(kTexts), std::end(kTexts), t) != std::end(kTexts);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

Vocab Vocab::from_gguf(const GgufFile& f) {
  Vocab v;
  v.model = f.get("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  if (v.model != "llama" && v.model != "gpt2" && v.model != "bert" && v.model != "gemma4")
    fail("{}: tokenizer model '{}' is not supported (supported: llama, gpt2, bert, gemma4)", f.path(),
         v.model);
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("");

  const std::string tokens_key = "tokenizer.ggml.tokens";
  const auto& tokens = f.get(tokens_key).as_array(tokens_key);
  if (tokens.empty()) fail("{}: {} is empty", f.path(), tokens_key);
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    fail("{}: {} has {} entries, more than token ids can address", f.path(), tokens_key,
         tokens.size());
  const size_t n = tokens.size();
  v.tokens.reserve(n);
  for (size_t i = 0; i < n; ++i)
    v.tokens.push_back(tokens[i].as_string(fmt::format("{}[{}]", tokens_key, i)));

  // Scores and types are optional, as in llama.cpp: without scores every merge ties (leftmost
  // wins); without types every token is normal. When present they must cover every token.
  const std::string scores_key = "tokenizer.ggml.scores";
  if (const GgufValue* s = f.find(scores_key)) {
    const auto& arr = s->as_array(scores_key);
    if (arr.size() != n)
      fail("{}: {} has {} entries but {} has {}", f.path(), scores_key, arr.size(), tokens_key, n);
    v.scores.reserve(n);
    for (size_t i = 0; i < n; ++i)
      v.scores.push_back(static_cast<float>(arr[i].as_float(fmt::format("{}[{}]", scores_key, i))));
  } else {
    v.scores.assign(n, 0.0f);
  }

  const std::string types_key = "tokenizer.ggml.token_type";
  if (const GgufValue* t = f.find(types_key)) {
    const auto& arr = t->as_array(types_key);
    if (arr.size() != n)
      fail("{}: {} has {} entries but {} has {}", f.path(), types_key, arr.size(), tokens_key, n);
    v.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string what = fmt::format("{}[{}]", types_key, i);
      const int64_t type = arr[i].as_int(what);
      if (type < 0 || type > static_cast<int64_t>(TokenType::Byte))
        fail("{}: {} = {} is not a known token type (0..6)", f.path(), what, type);
      v.types.push_back(static_cast<TokenType>(type));
    }
  } else {
    v.types.assign(n, TokenType::Normal);
  }

  // gemma4 is SentencePiece-style BPE by merge rank (spaces as U+2581, byte fallback, no dummy
  // prefix unless the file asks): the SPM encoder's merges mode, with the merges of the file.
  if (v.model == "gpt2" || v.model == "gemma4") {
    // Merges are "left right" with the two token texts; a byte-level text never holds a raw
    // space, but like llama.cpp search from index 1 so that a leading one would stay in `left`.
    const std::string merges_key = "tokenizer.ggml.merges";
    const auto& merges = f.get(merges_key).as_array(merges_key);
    v.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string what = fmt::format("{}[{}]", merges_key, i);
      const std::string& m = merges[i].as_string(what);
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size())
        fail("{}: {} = '{}' is not two token texts separated by a space", f.path(), what, m);
      v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    // Refuse an unknown pre-tokenizer now, naming it and the file.
    if (v.model == "gpt2") try {
        detail::pretokenizer_regexes(v.pre);
      } catch (const Error& e) {
        fail("{}: {}", f.path(), e.what());
      }
  }

  // Defaults are llama.cpp's for each model; BPE vocabs have no fixed special ids.
  const bool spm = v.model == "llama" || v.model == "gemma4";
  const bool bert = v.model == "bert";
  v.bos = read_special_id(f, "tokenizer.ggml.bos_token_id", spm ? 1 : bert ? 101 : -1, n);
  v.eos = read_special_id(f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n);
  // BERT ends a sequence with [SEP] (llama.cpp's key is spelt "seperator"); it stands in for EOS.
  if (bert) v.eos = read_special_id(f, "tokenizer.ggml.seperator_token_id", 102, n);
  v.unk = read_special_id(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : bert ? 100 : -1, n);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || bert || pre_adds_bos(v.pre));
  v.add_eos = f.get_bool(bert ? "tokenizer.ggml.add_sep_token" : "tokenizer.ggml.add_eos_token")
                  .value_or(bert);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(v.model == "llama");
  v.ignore_merges = v.model == "gpt2" && pre_ignores_merges(v.pre);
  v.chat_template = f.get_string("tokenizer.chat_template").value_or("");

  for (size_t i = 0; i < n; ++i)
    if (v.types[i] == TokenType::UserDefined && control_looking(v.tokens[i]))
      v.types[i] = TokenType::Control;

  // gpt-oss's harmony markers are printed in generated text (special_tokens.h).
  for (size_t i = 0; i < n; ++i)
    if (v.types[i] == TokenType::Control && detail::is_printed_harmony_marker(v.tokens[i]))
      v.types[i] = TokenType::UserDefined;

  // Phi-3's added tokens swallow the whitespace after them (HF rstrip); GGUF does not store that,
  // so llama.cpp recognises the model by name, and so does this.
  const std::string name = lower(f.get_string("general.name").value_or(""));
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    v.strip.assign(n, kStripNone);
    for (size_t i = 0; i < n; ++i) {
      const TokenType t = v.types[i];
      const std::string& s = v.tokens[i];
      const bool special = t == TokenType::Control || t == TokenType::UserDefined ||
                           t == TokenType::Unknown || s == "</s>";
      if (special && s != "<unk>" && s != "<s>" && s != "<|endoftext|>") v.strip[i] = kStripRight;
    }
  }
  return v;
}

}  // namespace npullm::genai
