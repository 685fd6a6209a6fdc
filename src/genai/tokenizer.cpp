// SentencePiece-style BPE tokenizer (tokenizer.ggml.model = llama), matching llama.cpp's SPM
// tokenizer token for token; see tokenizer.h for the outline.
#include "genai/tokenizer.h"

#include <algorithm>
#include <queue>

#include "common/error.h"
#include "formats/gguf.h"

namespace npullm::genai {

namespace {

// U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's stand-in for a space inside token texts.
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";
// U+FFFD REPLACEMENT CHARACTER, for bytes that are not (and can no longer become) valid UTF-8.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
// U+2585 LOWER FIVE EIGHTHS BLOCK: what llama.cpp prints for a token of type Unknown (e.g. <unk>).
constexpr std::string_view kUnknownPiece = "\xE2\x96\x85";

// Length of the UTF-8 character that starts with `lead`, judged from the lead byte alone. This is
// deliberately as lenient as llama.cpp (continuation bytes are not checked, a stray continuation
// byte counts as one character): encoding never rejects input, and whatever such a "character"
// turns out to be, it has no token and is emitted byte by byte anyway.
size_t utf8_char_len(uint8_t lead) {
  if (lead < 0xC0) return 1;  // ASCII, or a stray continuation byte
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// "<0xNN>" (either hex case) -> NN; -1 for any other text.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

// One step of strict UTF-8 validation at the start of `s` (non-empty), following the Unicode
// "maximal subpart" rule so that an invalid sequence costs exactly one U+FFFD.
struct Utf8Step {
  enum Kind { Complete, Incomplete, Invalid } kind;
  size_t len;  // Complete: the character; Incomplete: bytes present; Invalid: bytes to replace
};

Utf8Step utf8_step(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {Utf8Step::Complete, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte; later bytes are always 80..BF
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return {Utf8Step::Invalid, 1};  // continuation byte, C0/C1, F5..FF
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= s.size()) return {Utf8Step::Incomplete, k};
    const auto b = static_cast<uint8_t>(s[k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return {Utf8Step::Invalid, k};
  }
  return {Utf8Step::Complete, need};
}

// Moves the valid-UTF-8 prefix of `pending` to the result, replacing invalid sequences by U+FFFD.
// An incomplete sequence at the end stays in `pending` unless `final`, when it is replaced too.
std::string drain_utf8(std::string& pending, bool final) {
  std::string out;
  size_t pos = 0;
  while (pos < pending.size()) {
    const Utf8Step st = utf8_step(std::string_view(pending).substr(pos));
    if (st.kind == Utf8Step::Incomplete && !final) break;
    if (st.kind == Utf8Step::Complete)
      out.append(pending, pos, st.len);
    else
      out.append(kReplacement);
    pos += st.len;
  }
  pending.erase(0, pos);
  return out;
}

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// Vocab

Vocab Vocab::from_gguf(const GgufFile& f) {
  Vocab v;
  v.model = f.get("tokenizer.ggml.model").as_string("tokenizer.ggml.model");
  if (v.model != "llama")
    fail("{}: tokenizer model '{}' is not supported yet (only 'llama', SentencePiece BPE)",
         f.path(), v.model);

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

  // Defaults are llama.cpp's for SentencePiece vocabs.
  v.bos = read_special_id(f, "tokenizer.ggml.bos_token_id", 1, n);
  v.eos = read_special_id(f, "tokenizer.ggml.eos_token_id", 2, n);
  v.unk = read_special_id(f, "tokenizer.ggml.unknown_token_id", 0, n);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.tokens.size();
  if (vocab_.model != "llama")
    fail("tokenizer model '{}' is not supported yet (only 'llama', SentencePiece BPE)",
         vocab_.model);
  if (n > static_cast<size_t>(INT32_MAX)) fail("vocab has {} tokens, more than ids can address", n);
  // A hand-built Vocab may leave scores/types empty; fill them the way from_gguf would.
  if (vocab_.scores.empty()) vocab_.scores.assign(n, 0.0f);
  if (vocab_.types.empty()) vocab_.types.assign(n, TokenType::Normal);
  if (vocab_.scores.size() != n) fail("vocab has {} tokens but {} scores", n, vocab_.scores.size());
  if (vocab_.types.size() != n)
    fail("vocab has {} tokens but {} token types", n, vocab_.types.size());
  const std::pair<const char*, int32_t> specials[] = {
      {"bos", vocab_.bos}, {"eos", vocab_.eos}, {"unk", vocab_.unk}};
  for (auto [name, id] : specials)
    if (id < -1 || id >= static_cast<int64_t>(n))
      fail("vocab {} id {} is out of range (the vocab has {} tokens)", name, id, n);

  // On duplicate texts the later id wins, as in llama.cpp, so ties resolve to the same ids.
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    token_to_id_[vocab_.tokens[i]] = static_cast<int32_t>(i);
    max_token_len_ = std::max(max_token_len_, vocab_.tokens[i].size());
  }

  // Byte fallback: prefer the <0xNN> token; some vocabs instead hold a raw single-byte token.
  for (int b = 0; b < 256; ++b) {
    byte_token_[b] = -1;
    auto it = token_to_id_.find(fmt::format("<0x{:02X}>", b));
    if (it == token_to_id_.end()) it = token_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it != token_to_id_.end()) byte_token_[b] = it->second;
  }
}

void Tokenizer::emit_symbol(std::string_view text, std::vector<int32_t>& out) const {
  if (auto it = token_to_id_.find(std::string(text)); it != token_to_id_.end()) {
    out.push_back(it->second);
    return;
  }
  // A merged symbol always has a token (merges only form vocab texts), so this is a single
  // character the vocab lacks: spell it in bytes.
  for (char c : text) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (vocab_.unk >= 0) {
      out.push_back(vocab_.unk);
    } else {
      fail("cannot encode byte 0x{:02X}: the vocab has no byte token for it and no unknown token",
           static_cast<uint8_t>(c));
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  // llama.cpp does not tokenize empty text at all, so it gets no dummy-prefix token either.
  if (text.empty()) return out;

  // Normalise: every ' ' becomes U+2581, with one more in front for the dummy prefix (so that a
  // word at the start of the text tokenizes like the same word after a space).
  std::string s;
  s.reserve(text.size() + 3 + 2 * static_cast<size_t>(std::count(text.begin(), text.end(), ' ')));
  if (vocab_.add_space_prefix) s.append(kSpaceMark);
  for (char c : text) {
    if (c == ' ')
      s.append(kSpaceMark);
    else
      s.push_back(c);
  }

  // Initial symbols: one per UTF-8 character, in a doubly linked list over `s`. Merging absorbs
  // the right symbol into the left one, which keeps the list order and makes symbol 0 the head.
  struct Symbol {
    int prev, next;
    size_t start, len;  // len == 0: absorbed into its left neighbour
  };
  if (s.size() > static_cast<size_t>(INT32_MAX))
    fail("text of {} bytes is too long to tokenize in one piece", text.size());
  std::vector<Symbol> sym;
  sym.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t len = std::min(utf8_char_len(static_cast<uint8_t>(s[pos])), s.size() - pos);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, -1, pos, len});
    if (idx > 0) sym[idx - 1].next = idx;
    pos += len;
  }

  // Candidate merges, best first: higher score, then the leftmost. Entries are never removed when
  // a neighbour changes; instead a popped entry is ignored when its symbols no longer have the
  // lengths it was made from (lengths only grow, or drop to 0 when absorbed).
  struct Bigram {
    float score;
    int left, right;
    size_t len;  // combined length when queued
  };
  auto lower_priority = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower_priority)> queue(lower_priority);

  auto try_queue = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = sym[left].len + sym[right].len;
    if (len > max_token_len_) return;
    // Adjacent symbols are contiguous in `s`, so their concatenation is a substring.
    auto it = token_to_id_.find(s.substr(sym[left].start, len));
    if (it == token_to_id_.end()) return;
    queue.push({vocab_.scores[it->second], left, right, len});
  };

  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_queue(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_queue(l.prev, b.left);
    try_queue(b.left, l.next);
  }

  for (int i = 0; i >= 0; i = sym[i].next)
    emit_symbol(std::string_view(s).substr(sym[i].start, sym[i].len), out);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    fail("token id {} is out of range (the vocab has {} tokens)", id, n_vocab());
  const std::string& text = vocab_.tokens[id];
  switch (vocab_.types[id]) {
    case TokenType::Control:
    case TokenType::Unused:
      return "";
    case TokenType::Unknown:
      return std::string(kUnknownPiece);
    case TokenType::Byte:
      if (const int b = parse_byte_token(text); b >= 0) return std::string(1, static_cast<char>(b));
      break;  // a "byte" token that does not look like one: print its text
    case TokenType::Undefined:
    case TokenType::Normal:
    case TokenType::UserDefined:
      break;
  }
  std::string piece;
  piece.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
      piece.push_back(' ');
      pos += kSpaceMark.size();
    } else {
      piece.push_back(text[pos++]);
    }
  }
  return piece;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool strip_leading_space) const {
  std::string out;
  bool first = true;  // no text emitted yet (BOS and other control tokens print nothing)
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id);
    if (piece.empty()) continue;
    if (strip_leading_space && first && piece[0] == ' ') piece.erase(0, 1);
    first = false;
    out += piece;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// StreamDecoder

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id);
  if (piece.empty()) return "";
  // Same rule as Tokenizer::decode, so that the streamed text concatenates to decode()'s.
  if (strip_ && first_ && piece[0] == ' ') piece.erase(0, 1);
  first_ = false;
  pending_ += piece;
  return drain_utf8(pending_, /*final=*/false);
}

std::string StreamDecoder::flush() { return drain_utf8(pending_, /*final=*/true); }

}  // namespace npullm::genai
