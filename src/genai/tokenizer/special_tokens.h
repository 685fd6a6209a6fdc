// Cuts special tokens out of a text before the model's encoder sees it (internal to genai/).
//
// Semantics are llama.cpp's tokenizer_st_partition: candidate tokens are taken longest text first
// (ties: lower id first); each claims every non-overlapping occurrence, leftmost first, in the
// text that longer tokens left unclaimed. USER_DEFINED tokens always take part; CONTROL and
// UNKNOWN tokens only with parse_special. A token with lstrip/rstrip swallows the ASCII whitespace
// next to it.
//
// Instead of llama.cpp's one full scan of the text per candidate token (thousands of tokens for
// some vocabs), each position's longest match is found with a byte trie and the matches are
// claimed from a priority queue in that same order, which gives the same result.
#pragma once
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "genai/tokenizer/tokenizer.h"

namespace npullm::genai::detail {

// gpt-oss's harmony markers (<|start|>, <|channel|>, <|message|>, <|constrain|>): special tokens that
// are printed in generated text, so that a reply's channels (reasoning, final answer, tool calls)
// can be told apart (genai/chat/harmony_parser.h); llama.cpp makes them USER_DEFINED for the same
// reason. <|end|>, <|return|> and <|call|> stay CONTROL: they end a message or the reply.
bool is_printed_harmony_marker(std::string_view text);

struct Fragment {
  std::string_view text;  // plain text (token < 0), or the special token's text
  int32_t token = -1;     // the special token, or -1 for plain text
};

class SpecialTokenMatcher {
 public:
  explicit SpecialTokenMatcher(const Vocab& v);
  // `text` as plain-text fragments (never empty) and special tokens, in order.
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Node {
    int32_t token = -1;    // a candidate token ends here
    int32_t rank = 0;      // its priority: 0 is tried first
    bool needs_parse_special = false;
  };
  struct Match {
    int32_t token = -1;
    int32_t rank = 0;
    size_t len = 0;
  };
  int32_t child(int32_t node, uint8_t byte) const;
  // The highest-priority eligible token that starts at text[p] and is at most `limit` bytes long.
  Match longest_match(std::string_view text, size_t p, size_t limit, bool parse_special) const;

  const Vocab& vocab_;
  std::vector<Node> nodes_;                           // nodes_[0] is the root
  std::vector<int32_t> root_children_;                // 256 entries, -1 = none
  std::unordered_map<uint64_t, int32_t> children_;    // (node << 8 | byte) -> child node
  bool any_user_defined_ = false;
  bool any_ = false;
};

}  // namespace npullm::genai::detail
