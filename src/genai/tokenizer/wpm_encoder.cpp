// WordPiece (tokenizer.ggml.model = bert), matching HF's BertNormalizer + BertPreTokenizer +
// WordPiece, which is what the bert vectors come from:
//   normalise  drop NUL, U+FFFD and control characters; whitespace becomes a word break; strip
//              accents (NFD, then drop combining marks) and lower-case;
//   split      on whitespace, and every punctuation character and CJK ideograph is a word of its
//              own;
//   WordPiece  each word greedily, longest vocab piece first from the left; a word with a part no
//              piece matches (or longer than 100 characters) becomes the unknown token.
// llama.cpp's converter stores word-initial pieces as "▁word" and continuation pieces ("##ing"
// in HF) as plain "ing", so the lookups below use that spelling.
//
// Character data: general categories come from PCRE2 (\p{M}, \p{Zs}, \p{C}, \p{P}, \s); the
// accent-stripping + lower-casing map is the table in wpm_unicode_table.inc, generated with
// Python's unicodedata by:
//   for cp in all code points except Hangul syllables, surrogates and marks:
//     r = NFD(chr(cp)) without category-M characters, lower-cased
//     if r != chr(cp): record cp -> r   (r is always one code point)
// written as runs (same offset, same target, or same offset on every second code point).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>

#include "common/error.h"
#include "genai/tokenizer/tokenizer_encoder.h"
#include "genai/utf8.h"

namespace npullm::genai::detail {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581: word-initial pieces
constexpr size_t kMaxWordChars = 100;                     // HF WordPiece max_input_chars_per_word

struct Run {
  uint32_t first, last;
  int32_t value;
  uint8_t kind;  // 0: offset, 1: target, 2: offset on every second code point
};
constexpr Run kRuns[] = {
#include "genai/tokenizer/wpm_unicode_table.inc"
};

// Accent-stripped, lower-cased `cp` (a non-mark, non-Hangul code point).
uint32_t fold(uint32_t cp) {
  const Run* r = std::upper_bound(std::begin(kRuns), std::end(kRuns), cp,
                                  [](uint32_t c, const Run& run) { return c < run.first; });
  if (r == std::begin(kRuns)) return cp;
  --r;
  if (cp > r->last) return cp;
  switch (r->kind) {
    case 0: return static_cast<uint32_t>(static_cast<int64_t>(cp) + r->value);
    case 1: return static_cast<uint32_t>(r->value);
    default: return (cp - r->first) % 2 == 0 ? static_cast<uint32_t>(static_cast<int64_t>(cp) + r->value) : cp;
  }
}

// HF's _is_chinese_char: the CJK ideograph blocks (not Hangul, kana or CJK punctuation).
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

enum class CharClass : uint8_t { Other, Mark, Space, Control, Punct };

class WpmEncoder final : public Encoder {
 public:
  explicit WpmEncoder(VocabView v) : v_(v) {
    if (v_.vocab.unk < 0) fail("WordPiece vocab without an unknown token");
    for (const std::string& t : v_.vocab.tokens) max_token_len_ = std::max(max_token_len_, t.size());
    // Group order matters: \t \n \r are Cc but count as whitespace; ASCII symbols ($ + < = > ^ `
    // | ~) count as punctuation, as in HF's is_bert_punc.
    const char* pattern = R"((\p{M})|([\t\n\r\p{Zs}])|(\p{C})|([\p{P}!-/:-@\[-`{-~])|(\s))";
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
    if (!code_) fail("WordPiece character classes do not compile (PCRE2 error {})", err);
    const MatchData md = match_data();
    for (uint32_t c = 0; c < 128; ++c) ascii_class_[c] = classify_slow(c, md.get());
  }
  ~WpmEncoder() override { pcre2_code_free(code_); }

  void encode(std::string_view text, bool /*after_special*/, std::vector<int32_t>& out) const override {
    const MatchData md = match_data();  // per call: encode() may run on several threads
    std::string word;
    size_t word_chars = 0;
    auto finish_word = [&] {
      if (!word.empty()) encode_word(word, word_chars, out);
      word.clear();
      word_chars = 0;
    };
    for (size_t pos = 0; pos < text.size();) {
      const int32_t c = utf8_next(text, pos);
      if (c <= 0 || c == 0xFFFD) continue;  // NUL, U+FFFD and bytes that are not UTF-8 go
      const auto cp = static_cast<uint32_t>(c);
      if (cp >= 0xAC00 && cp <= 0xD7A3) {  // Hangul syllable: NFD gives its jamo (letters)
        const uint32_t s = cp - 0xAC00;
        utf8_append(word, 0x1100 + s / 588);
        utf8_append(word, 0x1161 + (s % 588) / 28);
        word_chars += 2;
        if (s % 28 != 0) utf8_append(word, 0x11A7 + s % 28), ++word_chars;
        continue;
      }
      switch (classify(cp, md.get())) {
        case CharClass::Mark:
        case CharClass::Control:
          continue;
        case CharClass::Space:
          finish_word();
          continue;
        case CharClass::Punct:
          finish_word();
          utf8_append(word, cp);
          word_chars = 1;
          finish_word();
          continue;
        case CharClass::Other:
          break;
      }
      const uint32_t f = fold(cp);
      if (is_cjk(f)) {
        finish_word();
        utf8_append(word, f);
        word_chars = 1;
        finish_word();
        continue;
      }
      utf8_append(word, f);
      ++word_chars;
    }
    finish_word();
  }

  std::string piece(int32_t id) const override {
    switch (v_.vocab.types[id]) {
      case TokenType::Control:
      case TokenType::Unused:
      case TokenType::Unknown:
        return "";
      default:
        break;
    }
    // "▁word" is a word start, printed with a space; a continuation piece is printed as it is.
    std::string text = v_.vocab.tokens[id];
    if (text.compare(0, kSpaceMark.size(), kSpaceMark) == 0) text.replace(0, kSpaceMark.size(), " ");
    return text;
  }

 private:
  using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
  MatchData match_data() const {
    MatchData md(pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    if (!md) fail("out of memory creating PCRE2 match data");
    return md;
  }

  CharClass classify(uint32_t cp, pcre2_match_data* md) const {
    return cp < 128 ? ascii_class_[cp] : classify_slow(cp, md);
  }

  CharClass classify_slow(uint32_t cp, pcre2_match_data* md) const {
    std::string s;
    utf8_append(s, cp);
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
    if (rc < 2) return CharClass::Other;  // no match (or an error: treat as a letter)
    static constexpr CharClass kByGroup[] = {CharClass::Other, CharClass::Mark, CharClass::Space,
                                             CharClass::Control, CharClass::Punct, CharClass::Space};
    return kByGroup[std::min(rc - 1, 5)];
  }

  // Greedy longest-first WordPiece over one normalised word.
  void encode_word(const std::string& word, size_t chars, std::vector<int32_t>& out) const {
    if (chars > kMaxWordChars) {
      out.push_back(v_.vocab.unk);
      return;
    }
    const size_t mark = out.size();
    std::string key;
    for (size_t start = 0; start < word.size();) {
      // Candidate ends, at character boundaries, longest first.
      size_t end = std::min(word.size(), start + max_token_len_);
      int32_t id = -1;
      for (; end > start; --end) {
        if (end < word.size() && (static_cast<uint8_t>(word[end]) & 0xC0) == 0x80) continue;
        key.assign(start == 0 ? kSpaceMark : std::string_view{}).append(word, start, end - start);
        if ((id = v_.find(key)) >= 0) break;
      }
      if (id < 0) {  // no piece fits here: the whole word is unknown
        out.resize(mark);
        out.push_back(v_.vocab.unk);
        return;
      }
      out.push_back(id);
      start = end;
    }
  }

  VocabView v_;
  pcre2_code* code_ = nullptr;
  std::array<CharClass, 128> ascii_class_{};
  size_t max_token_len_ = 0;
};

}  // namespace

std::unique_ptr<Encoder> make_wpm_encoder(VocabView v) { return std::make_unique<WpmEncoder>(v); }

}  // namespace npullm::genai::detail
