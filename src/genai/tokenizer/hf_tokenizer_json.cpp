// HF tokenizer.json -> Vocab. See hf_tokenizer_json.h for what is supported.
#include "genai/tokenizer/hf_tokenizer_json.h"

#include <algorithm>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "genai/tokenizer/pretokenizer.h"
#include "genai/tokenizer/special_tokens.h"

namespace npullm::genai {

namespace {

using json = nlohmann::json;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// j[key] when present and not null.
const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& j, const char* key, bool fallback, const std::string& where) {
  const json* v = member(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail("{}: '{}' is not true/false", where, key);
  return v->get<bool>();
}

// j[key] when it is a string, else `fallback` (never throws: for optional fields).
std::string string_or(const json& j, const char* key, const std::string& fallback) {
  const json* v = member(j, key);
  return v && v->is_string() ? v->get<std::string>() : fallback;
}

std::string get_string(const json& j, const char* key, const std::string& where) {
  const json* v = member(j, key);
  if (!v || !v->is_string()) fail("{}: '{}' is missing or not a string", where, key);
  return v->get<std::string>();
}

// A token named in tokenizer_config.json: "text", {"content": "text", ...}, or null.
std::string token_content(const json* v) {
  if (!v) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() && v->contains("content") && (*v)["content"].is_string())
    return (*v)["content"].get<std::string>();
  return "";
}

// Text -> a regex that matches it literally (ASCII punctuation escaped; PCRE2 treats "\" before
// any non-alphanumeric character as that character).
std::string regex_literal(const std::string& s) {
  std::string r;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) r.push_back('\\');
    r.push_back(c);
  }
  return r;
}

// What the normalizer / pre-tokenizer / decoder sections say, reduced to what the encoders need.
struct Pipeline {
  std::vector<std::string> regexes;
  bool byte_level = false;         // a ByteLevel pre-tokenizer or decoder
  bool byte_level_prefix = false;  // ByteLevel add_prefix_space
  bool spm_space = false;          // spaces become U+2581 (Replace or Metaspace)
  bool spm_prefix = false;         // a U+2581 is prepended (Prepend or Metaspace)
};

void read_pre_tokenizer(const json& p, Pipeline& out, const std::string& where) {
  const std::string type = get_string(p, "type", where);
  const std::string here = where + " " + type;
  if (type == "Sequence") {
    const json* list = member(p, "pretokenizers");
    if (!list || !list->is_array()) fail("{}: 'pretokenizers' is not a list", here);
    for (const json& q : *list) read_pre_tokenizer(q, out, where);
  } else if (type == "Split") {
    const json* pattern = member(p, "pattern");
    std::string regex;
    if (pattern && member(*pattern, "Regex"))
      regex = get_string(*pattern, "Regex", here + " pattern");
    else if (pattern && member(*pattern, "String"))
      regex = regex_literal(get_string(*pattern, "String", here + " pattern"));
    else
      fail("{}: 'pattern' is neither {{\"Regex\": ...}} nor {{\"String\": ...}}", here);
    const std::string behavior = get_string(p, "behavior", here);
    if (behavior != "Isolated")
      fail("{}: behavior '{}' is not supported (only Isolated)", here, behavior);
    if (get_bool(p, "invert", false, here)) fail("{}: invert = true is not supported", here);
    out.regexes.push_back(std::move(regex));
  } else if (type == "ByteLevel") {
    out.byte_level = true;
    out.byte_level_prefix = get_bool(p, "add_prefix_space", true, here);
    if (get_bool(p, "use_regex", true, here)) out.regexes.emplace_back(detail::kGpt2Regex);
  } else if (type == "Digits") {
    // HF's Digits tests char::is_numeric, i.e. the Unicode categories Nd, Nl and No: \p{N}.
    out.regexes.emplace_back(get_bool(p, "individual_digits", false, here) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (type == "Metaspace") {
    if (const json* r = member(p, "replacement"); r && (!r->is_string() || r->get<std::string>() != kSpaceMark))
      fail("{}: only the replacement U+2581 is supported", here);
    // Every piece would become its own word: SentencePiece does not work that way, and neither
    // does the SPM encoder.
    if (get_bool(p, "split", true, here)) fail("{}: split = true is not supported", here);
    out.spm_space = true;
    if (const json* scheme = member(p, "prepend_scheme"); scheme && scheme->is_string())
      out.spm_prefix = scheme->get<std::string>() != "never";
    else
      out.spm_prefix = get_bool(p, "add_prefix_space", true, here);
  } else {
    fail("{}: pre-tokenizer type '{}' is not supported", where, type);
  }
}

void read_normalizer(const json& n, Pipeline& out, const std::string& where) {
  const std::string type = get_string(n, "type", where);
  const std::string here = where + " " + type;
  if (type == "Sequence") {
    const json* list = member(n, "normalizers");
    if (!list || !list->is_array()) fail("{}: 'normalizers' is not a list", here);
    for (const json& m : *list) read_normalizer(m, out, where);
  } else if (type == "NFC") {
    // Not applied (no Unicode tables here); llama.cpp does not apply it either. Prompts are
    // normally NFC already, and all test vectors are.
  } else if (type == "Prepend" && member(n, "prepend") && (*member(n, "prepend")) == kSpaceMark) {
    out.spm_prefix = true;
  } else if (type == "Replace" && member(n, "pattern") && member(*member(n, "pattern"), "String") &&
             (*member(n, "pattern"))["String"] == " " && member(n, "content") &&
             (*member(n, "content")) == kSpaceMark) {
    out.spm_space = true;
  } else {
    fail("{}: normalizer '{}' is not supported (supported: NFC, Prepend(\"\u2581\"), "
         "Replace(\" \", \"\u2581\"), Sequence)",
         where, n.dump().substr(0, 200));
  }
}

void read_decoder(const json& d, Pipeline& out, const std::string& where) {
  const std::string type = get_string(d, "type", where);
  if (type == "ByteLevel") out.byte_level = true;
  if (type == "Sequence")
    if (const json* list = member(d, "decoders"); list && list->is_array())
      for (const json& e : *list) read_decoder(e, out, where);
  // Other decoders (Replace, ByteFallback, Fuse, Strip) are what the SPM model's decoding does.
}

// Token id -> text, from model.vocab and added_tokens; the ids must cover 0..n-1.
void read_tokens(const json& model, const json& root, Vocab& v, const std::string& label) {
  const json* vocab = member(model, "vocab");
  if (!vocab || !vocab->is_object()) fail("{}: model.vocab is missing or not an object", label);
  std::vector<std::pair<int64_t, std::string>> entries;
  entries.reserve(vocab->size());
  for (const auto& [text, id] : vocab->items()) {
    if (!id.is_number_integer()) fail("{}: model.vocab[\"{}\"] is not an integer id", label, text);
    entries.emplace_back(id.get<int64_t>(), text);
  }
  struct Added {
    int64_t id;
    std::string text;
    bool special, lstrip, rstrip;
  };
  std::vector<Added> added;
  if (const json* list = member(root, "added_tokens")) {
    if (!list->is_array()) fail("{}: added_tokens is not a list", label);
    for (size_t i = 0; i < list->size(); ++i) {
      const json& a = (*list)[i];
      const std::string where = fmt::format("{}: added_tokens[{}]", label, i);
      const json* id = member(a, "id");
      if (!id || !id->is_number_integer()) fail("{}: 'id' is missing or not an integer", where);
      added.push_back({id->get<int64_t>(), get_string(a, "content", where),
                       get_bool(a, "special", false, where), get_bool(a, "lstrip", false, where),
                       get_bool(a, "rstrip", false, where)});
    }
  }

  int64_t max_id = -1;
  for (const auto& [id, text] : entries) max_id = std::max(max_id, id);
  for (const Added& a : added) max_id = std::max(max_id, a.id);
  if (max_id < 0) fail("{}: the vocabulary is empty", label);
  if (max_id >= std::numeric_limits<int32_t>::max()) fail("{}: token id {} is too large", label, max_id);
  // Ids run from 0 without gaps, so there cannot be more of them than ids given: checked before
  // allocating per id (a lone id of 2^31-2 would otherwise ask for tens of GB).
  if (static_cast<uint64_t>(max_id) >= entries.size() + added.size()) {
    std::vector<int64_t> ids;
    for (const auto& [id, text] : entries) {
      if (id < 0) fail("{}: model.vocab[\"{}\"] has the negative id {}", label, text, id);
      ids.push_back(id);
    }
    for (const Added& a : added) {
      if (a.id < 0) fail("{}: added token '{}' has the negative id {}", label, a.text, a.id);
      ids.push_back(a.id);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    int64_t gap = 0;
    while (gap < static_cast<int64_t>(ids.size()) && ids[static_cast<size_t>(gap)] == gap) ++gap;
    fail("{}: no token has id {} (ids must run from 0 to {} without gaps)", label, gap, max_id);
  }
  const size_t n = static_cast<size_t>(max_id) + 1;
  std::vector<bool> seen(n, false);
  v.tokens.assign(n, "");
  v.types.assign(n, TokenType::Normal);
  v.strip.assign(n, kStripNone);
  for (auto& [id, text] : entries) {
    if (id < 0) fail("{}: model.vocab[\"{}\"] has the negative id {}", label, text, id);
    v.tokens[id] = std::move(text);
    seen[id] = true;
  }
  // An added token may repeat a vocab entry (Llama 2's <s>) or extend the vocab (Qwen's <|im_start|>).
  for (Added& a : added) {
    if (a.id < 0) fail("{}: added token '{}' has the negative id {}", label, a.text, a.id);
    v.tokens[a.id] = std::move(a.text);
    // gpt-oss's harmony markers are printed in generated text (special_tokens.h).
    v.types[a.id] = a.special && !detail::is_printed_harmony_marker(v.tokens[a.id]) ? TokenType::Control : TokenType::UserDefined;
    v.strip[a.id] = (a.lstrip ? kStripLeft : kStripNone) | (a.rstrip ? kStripRight : kStripNone);
    seen[a.id] = true;
  }
  for (size_t i = 0; i < n; ++i)
    if (!seen[i]) fail("{}: no token has id {} (ids must run from 0 to {} without gaps)", label, i, n - 1);
}

void read_merges(const json& model, Vocab& v, const std::string& label) {
  const json* merges = member(model, "merges");
  if (!merges) return;
  if (!merges->is_array()) fail("{}: model.merges is not a list", label);
  v.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    if (m.is_string()) {
      // "left right": token texts hold no raw spaces (byte-level "Ġ", SentencePiece "▁").
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
        fail("{}: model.merges[{}] = '{}' is not two token texts separated by a space", label, i, s);
      v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", label, i);
    }
  }
}

int32_t id_of(const Vocab& v, const std::string& text) {
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == text) return static_cast<int32_t>(i);
  return -1;
}

// BOS/EOS from a TemplateProcessing post-processor: the special tokens around $A in "single".
void read_post_processor(const json& p, std::string& bos, std::string& eos) {
  const std::string type = string_or(p, "type", "");
  if (type == "Sequence") {
    if (const json* list = member(p, "processors"); list && list->is_array())
      for (const json& q : *list) read_post_processor(q, bos, eos);
    return;
  }
  if (type != "TemplateProcessing") return;
  const json* single = member(p, "single");
  if (!single || !single->is_array() || single->empty()) return;
  auto special_id = [](const json& item) -> std::string {
    const json* st = member(item, "SpecialToken");
    return st && member(*st, "id") && (*st)["id"].is_string() ? (*st)["id"].get<std::string>() : "";
  };
  if (const std::string first = special_id(single->front()); !first.empty()) bos = first;
  if (single->size() > 1)
    if (const std::string last = special_id(single->back()); !last.empty()) eos = last;
}

}  // namespace

Vocab vocab_from_hf_json(std::string_view json_text, std::string_view config_text,
                         const std::string& label) {
  json root, config;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", label, e.what());
  }
  if (!config_text.empty()) {
    try {
      config = json::parse(config_text);
    } catch (const json::exception& e) {
      fail("{} (tokenizer_config.json): not valid JSON: {}", label, e.what());
    }
  }
  if (!root.is_object()) fail("{}: the top level is not an object", label);
  const json* model = member(root, "model");
  if (!model || !model->is_object()) fail("{}: 'model' is missing", label);
  const std::string model_type = string_or(*model, "type", member(*model, "merges") ? "BPE" : "");
  if (model_type != "BPE")
    fail("{}: model type '{}' is not supported (only BPE)", label, model_type);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* s = member(*model, key); s && !(s->is_string() && s->get<std::string>().empty()))
      fail("{}: model.{} is not supported", label, key);

  Vocab v;
  read_tokens(*model, root, v, label);
  read_merges(*model, v, label);
  const size_t n = v.tokens.size();

  Pipeline pipe;
  if (const json* n_ = member(root, "normalizer")) read_normalizer(*n_, pipe, label + ": normalizer");
  if (const json* p = member(root, "pre_tokenizer")) read_pre_tokenizer(*p, pipe, label + ": pre_tokenizer");
  if (const json* d = member(root, "decoder")) read_decoder(*d, pipe, label + ": decoder");
  const bool byte_fallback = get_bool(*model, "byte_fallback", false, label + ": model");

  if (pipe.byte_level) {
    if (pipe.spm_space || pipe.spm_prefix)
      fail("{}: mixes ByteLevel with SentencePiece-style spaces, which is not supported", label);
    v.model = "gpt2";
    v.pre_regexes = pipe.regexes;
    v.pre = v.pre_regexes.empty() ? "none" : "tokenizer.json";
    v.add_space_prefix = pipe.byte_level_prefix;
    v.ignore_merges = get_bool(*model, "ignore_merges", false, label + ": model");
  } else if (pipe.spm_space || byte_fallback) {
    if (!pipe.regexes.empty())
      fail("{}: a Split/Digits pre-tokenizer on a SentencePiece-style vocab is not supported", label);
    v.model = "llama";
    v.add_space_prefix = pipe.spm_prefix;
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = v.tokens[i];
      if (v.types[i] == TokenType::Normal && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>')
        v.types[i] = TokenType::Byte;
    }
  } else {
    fail("{}: neither a byte-level BPE (ByteLevel pre-tokenizer) nor a SentencePiece-style BPE "
         "(Metaspace, byte_fallback); not supported",
         label);
  }
  v.scores.assign(n, 0.0f);

  v.unk = -1;
  if (const json* unk = member(*model, "unk_token"); unk && unk->is_string()) {
    v.unk = id_of(v, unk->get<std::string>());
    if (v.unk >= 0) v.types[v.unk] = TokenType::Unknown;
  }

  // BOS/EOS: tokenizer_config.json names them; otherwise the post-processor's template does.
  std::string bos, eos;
  if (const json* p = member(root, "post_processor")) read_post_processor(*p, bos, eos);
  const bool template_bos = !bos.empty(), template_eos = !eos.empty();
  if (const json* b = member(config, "bos_token")) bos = token_content(b);
  if (const json* e = member(config, "eos_token")) eos = token_content(e);
  v.bos = bos.empty() ? -1 : id_of(v, bos);
  v.eos = eos.empty() ? -1 : id_of(v, eos);
  if (!bos.empty() && v.bos < 0) fail("{}: the BOS token '{}' is not in the vocabulary", label, bos);
  if (!eos.empty() && v.eos < 0) fail("{}: the EOS token '{}' is not in the vocabulary", label, eos);
  v.add_bos = get_bool(config, "add_bos_token", template_bos, label + ": tokenizer_config.json");
  v.add_eos = get_bool(config, "add_eos_token", template_eos, label + ": tokenizer_config.json");

  if (const json* t = member(config, "chat_template")) {
    if (t->is_string()) {
      v.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      // A list of named templates: the one called "default".
      for (const json& e : *t)
        if (string_or(e, "name", "") == "default") v.chat_template = string_or(e, "template", "");
    }
  }
  return v;
}

Vocab load_hf_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  if (fs::is_directory(file)) file /= "tokenizer.json";
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail("{}: cannot open", p.string());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string json_text = slurp(file);
  const fs::path config_file = file.parent_path() / "tokenizer_config.json";
  const std::string config_text = fs::exists(config_file) ? slurp(config_file) : "";
  return vocab_from_hf_json(json_text, config_text, file.string());
}

}  // namespace npullm::genai
