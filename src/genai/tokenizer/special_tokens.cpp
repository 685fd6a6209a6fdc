// See special_tokens.h.
#include "genai/tokenizer/special_tokens.h"

#include <algorithm>
#include <map>

namespace npullm::genai::detail {

bool is_printed_harmony_marker(std::string_view t) {
  return t == "<|start|>" || t == "<|channel|>" || t == "<|message|>" || t == "<|constrain|>";
}

namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(const Vocab& v) : vocab_(v), root_children_(256, -1) {
  std::vector<int32_t> candidates;
  for (int32_t id = 0; id < static_cast<int32_t>(v.tokens.size()); ++id) {
    const TokenType t = v.types[id];
    if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) &&
        !v.tokens[id].empty())
      candidates.push_back(id);
  }
  // Priority: longer text first, then lower id (llama.cpp's sort leaves ties unspecified).
  std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });

  nodes_.emplace_back();
  for (size_t rank = 0; rank < candidates.size(); ++rank) {
    const int32_t id = candidates[rank];
    int32_t node = 0;
    for (char c : v.tokens[id]) {
      const auto b = static_cast<uint8_t>(c);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        if (node == 0)
          root_children_[b] = next;
        else
          children_[(static_cast<uint64_t>(node) << 8) | b] = next;
      }
      node = next;
    }
    // Duplicate texts: the first (higher-priority) candidate keeps the node.
    if (nodes_[node].token >= 0) continue;
    nodes_[node].token = id;
    nodes_[node].rank = static_cast<int32_t>(rank);
    nodes_[node].needs_parse_special = v.types[id] != TokenType::UserDefined;
    any_ = true;
    any_user_defined_ |= v.types[id] == TokenType::UserDefined;
  }
}

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  if (node == 0) return root_children_[byte];
  const auto it = children_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == children_.end() ? -1 : it->second;
}

SpecialTokenMatcher::Match SpecialTokenMatcher::longest_match(std::string_view text, size_t p,
                                                              size_t limit,
                                                              bool parse_special) const {
  Match best;
  int32_t node = 0;
  for (size_t q = p; q < text.size() && q - p < limit; ++q) {
    node = child(node, static_cast<uint8_t>(text[q]));
    if (node < 0) break;
    const Node& n = nodes_[node];
    if (n.token >= 0 && (parse_special || !n.needs_parse_special)) best = {n.token, n.rank, q + 1 - p};
  }
  return best;
}

std::vector<Fragment> SpecialTokenMatcher::split(std::string_view text, bool parse_special) const {
  if (text.empty()) return {};
  if (!any_ || (!parse_special && !any_user_defined_)) return {{text, -1}};

  // Candidates in priority order (rank, then leftmost). Each position holds only its best match
  // that can still be claimed; when a claim to its right cuts into it, the position falls back to
  // its longest match that still fits. Memory stays O(text) however many tokens overlap there.
  struct Candidate {
    int32_t rank;
    size_t start;
    Match m;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.start > b.start;
  };
  std::vector<Candidate> heap;
  const size_t no_limit = text.size();
  for (size_t p = 0; p < text.size(); ++p)
    if (const Match m = longest_match(text, p, no_limit, parse_special); m.token >= 0)
      heap.push_back({m.rank, p, m});
  if (heap.empty()) return {{text, -1}};
  std::make_heap(heap.begin(), heap.end(), later);

  std::vector<uint8_t> taken(text.size(), 0);
  std::map<size_t, Match> claimed;  // start -> match; claimed spans never overlap
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    if (taken[c.start]) continue;  // inside a span claimed earlier: nothing can start here
    const auto next = claimed.upper_bound(c.start);
    const size_t room = next == claimed.end() ? no_limit : next->first - c.start;
    if (c.m.len <= room) {
      claimed.emplace(c.start, c.m);
      std::fill(taken.begin() + c.start, taken.begin() + c.start + c.m.len, 1);
    } else if (const Match m = longest_match(text, c.start, room, parse_special); m.token >= 0) {
      heap.push_back({m.rank, c.start, m});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  }

  // Assemble, letting lstrip/rstrip tokens eat the whitespace of their neighbouring text.
  std::vector<Fragment> out;
  size_t pos = 0;
  bool strip_next_left = false;  // the previous special token has rstrip
  auto push_text = [&](size_t begin, size_t end, bool strip_right) {
    if (strip_next_left)
      while (begin < end && is_ascii_space(text[begin])) ++begin;
    if (strip_right)
      while (end > begin && is_ascii_space(text[end - 1])) --end;
    if (end > begin) out.push_back({text.substr(begin, end - begin), -1});
  };
  for (const auto& [start, m] : claimed) {
    const uint8_t strip = vocab_.strip.empty() ? uint8_t{kStripNone} : vocab_.strip[m.token];
    push_text(pos, start, (strip & kStripLeft) != 0);
    out.push_back({text.substr(start, m.len), m.token});
    strip_next_left = (strip & kStripRight) != 0;
    pos = start + m.len;
  }
  push_text(pos, text.size(), false);
  return out;
}

}  // namespace npullm::genai::detail
