// SentencePiece-style BPE (tokenizer.ggml.model = llama), matching llama.cpp's SPM tokenizer token
// for token: spaces become U+2581, a dummy-prefix U+2581 goes in front of the first fragment and of
// every fragment after a special token, then the adjacent pair whose concatenation is the
// highest-scoring token merges, repeatedly; a symbol left without a token is spelled in bytes
// through the <0xNN> byte tokens.
//
// A vocab from a SentencePiece-style HF tokenizer.json brings a merges list instead of scores;
// then a pair merges only when the list has it, lower rank first (HF's BPE with byte_fallback),
// which is the same loop with the rank as the (negated) score.
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "common/error.h"
#include "genai/tokenizer/tokenizer_encoder.h"
#include "genai/utf8.h"

namespace npullm::genai::detail {

namespace {

// U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's stand-in for a space inside token texts.
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";
// U+2585 LOWER FIVE EIGHTHS BLOCK: what llama.cpp prints for a token of type Unknown (e.g. <unk>).
constexpr std::string_view kUnknownPiece = "\xE2\x96\x85";

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

class SpmEncoder final : public Encoder {
 public:
  explicit SpmEncoder(VocabView v) : v_(v) {
    for (const std::string& t : v_.vocab.tokens) max_token_len_ = std::max(max_token_len_, t.size());
    // Byte fallback: prefer the <0xNN> token; some vocabs instead hold a raw single-byte token.
    for (int b = 0; b < 256; ++b) {
      byte_token_[b] = v_.find(fmt::format("<0x{:02X}>", b));
      if (byte_token_[b] < 0) byte_token_[b] = v_.find(std::string(1, static_cast<char>(b)));
    }
    // On a duplicate pair the first (best) rank wins; rules naming texts that are not tokens can
    // never apply and are dropped.
    std::string joined;
    for (size_t rank = 0; rank < v_.vocab.merges.size(); ++rank) {
      const auto& [a, b] = v_.vocab.merges[rank];
      const int32_t left = v_.find(a), right = v_.find(b);
      if (left < 0 || right < 0 || v_.find(joined.assign(a).append(b)) < 0) continue;
      merge_rank_.try_emplace(pair_key(left, right), static_cast<int32_t>(rank));
    }
  }

  void encode(std::string_view text, bool after_special, std::vector<int32_t>& out) const override {
    // Normalise: every ' ' becomes U+2581, with one more in front for the dummy prefix (so that a
    // word at the start of the text tokenizes like the same word after a space).
    std::string s;
    s.reserve(text.size() + 3 + 2 * static_cast<size_t>(std::count(text.begin(), text.end(), ' ')));
    if (v_.vocab.add_space_prefix && after_special) s.append(kSpaceMark);
    for (char c : text) {
      if (c == ' ')
        s.append(kSpaceMark);
      else
        s.push_back(c);
    }
    if (s.size() > static_cast<size_t>(INT32_MAX))
      fail("text of {} bytes is too long to tokenize in one piece", text.size());

    // Initial symbols: one per UTF-8 character, in a doubly linked list over `s`. Merging absorbs
    // the right symbol into the left one, which keeps the list order and makes symbol 0 the head.
    struct Symbol {
      int prev, next;
      size_t start, len;  // len == 0: absorbed into its left neighbour
    };
    std::vector<Symbol> sym;
    sym.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
      const size_t len = std::min(utf8_char_len(static_cast<uint8_t>(s[pos])), s.size() - pos);
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, -1, pos, len});
      if (idx > 0) sym[idx - 1].next = idx;
      pos += len;
    }

    // Candidate merges, best first: higher score, then the leftmost. Entries are never removed
    // when a neighbour changes; instead a popped entry is ignored when its symbols no longer have
    // the lengths it was made from (lengths only grow, or drop to 0 when absorbed).
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
      const std::string_view joined = std::string_view(s).substr(sym[left].start, len);
      if (v_.vocab.merges.empty()) {
        const int32_t id = v_.find(joined);
        if (id >= 0) queue.push({v_.vocab.scores[id], left, right, len});
        return;
      }
      const int32_t l = v_.find(joined.substr(0, sym[left].len));
      const int32_t r = v_.find(joined.substr(sym[left].len));
      if (l < 0 || r < 0) return;
      const auto it = merge_rank_.find(pair_key(l, r));
      // Ranks stay exact as floats up to 2^24 merges.
      if (it != merge_rank_.end()) queue.push({-static_cast<float>(it->second), left, right, len});
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

    for (int i = 0; i >= 0 && !sym.empty(); i = sym[i].next)
      emit_symbol(std::string_view(s).substr(sym[i].start, sym[i].len), out);
  }

  std::string piece(int32_t id) const override {
    const std::string& text = v_.vocab.tokens[id];
    switch (v_.vocab.types[id]) {
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

 private:
  // Appends the id of one final symbol, or its bytes through the byte tokens when it has none.
  void emit_symbol(std::string_view text, std::vector<int32_t>& out) const {
    if (const int32_t id = v_.find(text); id >= 0) {
      out.push_back(id);
      return;
    }
    // A merged symbol always has a token (merges only form vocab texts), so this is a single
    // character the vocab lacks: spell it in bytes.
    for (char c : text) {
      const int32_t id = byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0) {
        out.push_back(id);
      } else if (v_.vocab.unk >= 0) {
        out.push_back(v_.vocab.unk);
      } else {
        fail("cannot encode byte 0x{:02X}: the vocab has no byte token for it and no unknown token",
             static_cast<uint8_t>(c));
      }
    }
  }

  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  VocabView v_;
  std::unordered_map<uint64_t, int32_t> merge_rank_;  // (left id, right id) -> rank
  int32_t byte_token_[256];
  size_t max_token_len_ = 0;  // longest token text in bytes: no merge can produce anything longer
};

}  // namespace

std::unique_ptr<Encoder> make_spm_encoder(VocabView v) { return std::make_unique<SpmEncoder>(v); }

}  // namespace npullm::genai::detail
