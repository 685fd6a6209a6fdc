// Byte-level BPE (tokenizer.ggml.model = gpt2, and HF tokenizer.json model BPE with a ByteLevel
// pre-tokenizer), matching llama.cpp's and HF's BPE:
//   1. the pre-tokenizer regexes cut the fragment into pieces (pretokenizer.cpp);
//   2. each piece starts as one symbol per byte, the token of that byte's GPT-2 char;
//   3. the adjacent pair with the best (lowest) merge rank merges, leftmost first on ties, until
//      no adjacent pair has a merge rule.
// Symbols carry token ids, so a merge rule is a lookup of (left id, right id) -> (rank, merged
// id), and the merge loop runs over a priority queue instead of rescanning all pairs.
#include <queue>

#include "common/error.h"
#include "genai/tokenizer/byte_level.h"
#include "genai/tokenizer/pretokenizer.h"
#include "genai/tokenizer/tokenizer_encoder.h"
#include "genai/utf8.h"

namespace npullm::genai::detail {

namespace {

class BpeEncoder final : public Encoder {
 public:
  explicit BpeEncoder(VocabView v)
      : v_(v),
        pre_(v.vocab.pre_regexes.empty() ? pretokenizer_regexes(v.vocab.pre)
                                          : v.vocab.pre_regexes) {
    for (int b = 0; b < 256; ++b)
      byte_token_[b] = v_.find(byte_to_chars(static_cast<uint8_t>(b)));

    // A merge whose parts or result are not tokens can never apply to token symbols; such a rule
    // is skipped (HF refuses the file; llama.cpp keeps the rule but never gets to use it either,
    // except in vocabs that lack their own merge results). On a duplicate pair the first rank wins.
    merges_.reserve(v.vocab.merges.size());
    std::string joined;
    for (size_t rank = 0; rank < v.vocab.merges.size(); ++rank) {
      const auto& [a, b] = v.vocab.merges[rank];
      const int32_t left = v_.find(a), right = v_.find(b);
      if (left < 0 || right < 0) continue;
      joined.assign(a).append(b);
      const int32_t merged = v_.find(joined);
      if (merged < 0) continue;
      merges_.try_emplace(pair_key(left, right), Merge{static_cast<int32_t>(rank), merged});
    }
  }

  void encode(std::string_view text, bool /*after_special*/, std::vector<int32_t>& out) const override {
    // HF ByteLevel(add_prefix_space): a fragment that does not start with a space gets one.
    std::string prefixed;
    if (v_.vocab.add_space_prefix && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed.append(" ").append(text);
      text = prefixed;
    }
    for (std::string_view word : pre_.split(text)) encode_word(word, out);
  }

  std::string piece(int32_t id) const override {
    switch (v_.vocab.types[id]) {
      case TokenType::Normal:
      case TokenType::Undefined:
        return byte_level_decode(v_.vocab.tokens[id]);
      case TokenType::UserDefined:
        // Added tokens are stored as the text itself, not in byte chars.
        return v_.vocab.tokens[id];
      case TokenType::Control:
      case TokenType::Unknown:
      case TokenType::Unused:
      case TokenType::Byte:
        break;  // like llama.cpp: printed as nothing
    }
    return "";
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    const auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (v_.vocab.ignore_merges) {
      if (const int32_t id = v_.find(byte_level_encode(word)); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    if (word.size() > static_cast<size_t>(INT32_MAX))
      fail("a pre-tokenized piece of {} bytes is too long to tokenize", word.size());

    // One symbol per byte, in a doubly linked list; merging absorbs the right symbol into the
    // left one, so symbol 0 stays the head.
    struct Symbol {
      int prev, next;
      int32_t id;    // token of the symbol's bytes, -1 when there is none
      size_t start;  // first byte in `word`
      size_t len;    // bytes; 0 once absorbed
    };
    std::vector<Symbol> sym(word.size());
    for (size_t i = 0; i < word.size(); ++i) {
      const int idx = static_cast<int>(i);
      sym[i] = {idx - 1, idx + 1 < static_cast<int>(word.size()) ? idx + 1 : -1,
                byte_token_[static_cast<uint8_t>(word[i])], i, 1};
    }

    // Candidate merges, best first: lower rank, then the leftmost. A popped entry is stale when
    // either symbol changed since it was queued (a symbol changes only by absorbing its right
    // neighbour, which changes its token) or they are no longer neighbours.
    struct Bigram {
      int32_t rank;
      int left, right;
      int32_t left_id, right_id, result;
    };
    auto lower_priority = [](const Bigram& a, const Bigram& b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower_priority)> queue(lower_priority);
    auto try_queue = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      if (const Merge* m = find_merge(sym[left].id, sym[right].id))
        queue.push({m->rank, left, right, sym[left].id, sym[right].id, m->result});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_queue(i - 1, i);

    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.len == 0 || r.len == 0 || l.next != b.right || l.id != b.left_id || r.id != b.right_id)
        continue;
      l.id = b.result;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_queue(l.prev, b.left);
      try_queue(b.left, l.next);
    }

    for (int i = 0; i >= 0 && !sym.empty(); i = sym[i].next) {
      const Symbol& s = sym[i];
      if (s.id >= 0) {
        out.push_back(s.id);
        continue;
      }
      // Only an unmerged byte lacks a token (the vocab misses that byte's char).
      if (v_.vocab.unk >= 0) {
        out.push_back(v_.vocab.unk);
      } else {
        fail("cannot encode byte 0x{:02X}: the vocab has no token for it and no unknown token",
             static_cast<uint8_t>(word[s.start]));
      }
    }
  }

  VocabView v_;
  PreTokenizer pre_;
  int32_t byte_token_[256];
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace

std::unique_ptr<Encoder> make_bpe_encoder(VocabView v) { return std::make_unique<BpeEncoder>(v); }

}  // namespace npullm::genai::detail
