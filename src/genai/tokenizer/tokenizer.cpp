// The Tokenizer facade: picks the encoder for the vocab's model, cuts special tokens out of the
// text, adds BOS/EOS, and turns ids back into text. See tokenizer.h for the outline.
#include "genai/tokenizer/tokenizer.h"

#include "common/error.h"
#include "genai/tokenizer/special_tokens.h"
#include "genai/tokenizer/tokenizer_encoder.h"

namespace npullm::genai {

namespace {

// U+FFFD REPLACEMENT CHARACTER, for bytes that are not (and can no longer become) valid UTF-8.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// Tokenizer

struct Tokenizer::Impl {
  Vocab vocab;
  detail::TokenMap token_to_id;
  std::unique_ptr<detail::Encoder> encoder;
  std::unique_ptr<detail::SpecialTokenMatcher> special;
};

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_unique<Impl>()) {
  Vocab& v = impl_->vocab;
  v = std::move(vocab);
  const size_t n = v.tokens.size();
  if (n > static_cast<size_t>(INT32_MAX)) fail("vocab has {} tokens, more than ids can address", n);
  // A hand-built Vocab may leave scores/types empty; fill them the way from_gguf would.
  if (v.scores.empty()) v.scores.assign(n, 0.0f);
  if (v.types.empty()) v.types.assign(n, TokenType::Normal);
  if (v.scores.size() != n) fail("vocab has {} tokens but {} scores", n, v.scores.size());
  if (v.types.size() != n) fail("vocab has {} tokens but {} token types", n, v.types.size());
  if (!v.strip.empty() && v.strip.size() != n)
    fail("vocab has {} tokens but {} strip flags", n, v.strip.size());
  const std::pair<const char*, int32_t> specials[] = {{"bos", v.bos}, {"eos", v.eos}, {"unk", v.unk}};
  for (auto [name, id] : specials)
    if (id < -1 || id >= static_cast<int64_t>(n))
      fail("vocab {} id {} is out of range (the vocab has {} tokens)", name, id, n);

  // On duplicate texts the later id wins, as in llama.cpp, so ties resolve to the same ids.
  impl_->token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) impl_->token_to_id[v.tokens[i]] = static_cast<int32_t>(i);

  const detail::VocabView view{v, impl_->token_to_id};
  if (v.model == "llama" || v.model == "gemma4")  // gemma4: SentencePiece-style, merges by rank
    impl_->encoder = detail::make_spm_encoder(view);
  else if (v.model == "gpt2")
    impl_->encoder = detail::make_bpe_encoder(view);
  else if (v.model == "bert")
    impl_->encoder = detail::make_wpm_encoder(view);
  else
    fail("tokenizer model '{}' is not supported (supported: llama, gpt2, bert, gemma4)", v.model);
  impl_->special = std::make_unique<detail::SpecialTokenMatcher>(v);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

const Vocab& Tokenizer::vocab() const { return impl_->vocab; }

int32_t Tokenizer::find_token(std::string_view text) const {
  const auto it = impl_->token_to_id.find(text);
  return it == impl_->token_to_id.end() ? -1 : it->second;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special,
                                       bool continues_text) const {
  const Vocab& v = impl_->vocab;
  std::vector<int32_t> out;
  if (add_bos && v.add_bos && v.bos >= 0) out.push_back(v.bos);
  // llama.cpp does not tokenize empty text at all, so it gets no dummy-prefix token either.
  bool after_special = !continues_text;
  for (const detail::Fragment& f : impl_->special->split(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      impl_->encoder->encode(f.text, after_special, out);
      after_special = false;
    }
  }
  if (add_bos && v.add_eos && v.eos >= 0) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    fail("token id {} is out of range (the vocab has {} tokens)", id, n_vocab());
  return impl_->encoder->piece(id);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool strip_leading_space) const {
  strip_leading_space = strip_leading_space && strips_leading_space();
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
