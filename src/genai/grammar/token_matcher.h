// Grammars at the level of tokens: what the sampler asks.
//
// TokenTrie: every token's bytes in one trie, built once per vocabulary and shared by every
// request (a mask walks the trie with the byte matcher, so tokens that share a prefix share the
// work, and a subtree is skipped as soon as its first byte is refused).
//
// TokenMatcher: one request's state. The cheap path is allowed(id) on the token the sampler chose
// (sample first, check after); mask() builds the full set of allowed tokens only when that token
// was refused. Masks are cached per matcher state (the matcher's states are canonical ids), so the
// same state (inside a string, between array items...) reuses its mask.
//
// End tokens (EOS, the request's stop tokens) are allowed only when the text is complete, and
// must_end() says when nothing but the end may come. With a trigger, text is free until the
// trigger appears; the constraint applies to what follows it.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "genai/grammar/matcher.h"

namespace npullm::genai::grammar {

class TokenTrie {
 public:
  // pieces[id]: the bytes token id stands for ("" for tokens that print nothing: never allowed).
  explicit TokenTrie(std::vector<std::string> pieces);
  size_t n_vocab() const { return pieces_.size(); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  // Some longer token starts with token id's bytes.
  bool extends(int32_t id) const;

  struct Node {
    uint32_t first_child, n_children;  // into edges_
    uint32_t first_token, n_tokens;    // into tokens_: the tokens that end here
    uint32_t end_token;                // into tokens_: one past the last token of the subtree (a subtree's tokens are one run)
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The bytes of tokens()[rank] (tokens() is in trie order: sorted by bytes), stored back to back in
  // that order, so a pass over ranks in order reads one stream instead of a string per token
  // scattered over the heap (a mask's check of its uncertain tokens; TokenClasses keeps ranks).
  std::string_view piece_at(uint32_t rank) const {
    return {sorted_bytes_.data() + sorted_offsets_[rank], sorted_offsets_[rank + 1] - sorted_offsets_[rank]};
  }

 private:
  std::vector<std::string> pieces_;
  std::string sorted_bytes_;
  std::vector<uint32_t> sorted_offsets_;  // tokens_.size() + 1
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> tokens_;
};

class TokenClasses;

// What a finished request leaves for the next one of the same grammar and vocabulary: its
// matcher's states and steps, and the masks it built, by state (TokenClasses keeps the largest).
struct WarmStart {
  Matcher dfa;
  std::vector<std::pair<int32_t, std::vector<uint64_t>>> masks;
};

class TokenMatcher {
 public:
  // `classes` (token_classes(g, trie)): the precomputed classes a full mask is assembled from;
  // without them a mask walks the trie.
  TokenMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_ids,
               std::string trigger = "", std::shared_ptr<TokenClasses> classes = nullptr);
  // With classes, a matcher starts from the warm start they hold, and offers its own back at the
  // end (when it explored more): states and masks are then built once per grammar, not per request.
  ~TokenMatcher();
  TokenMatcher(TokenMatcher&&) = default;
  TokenMatcher& operator=(TokenMatcher&&) = default;

  // Whether token `id` may come next (end tokens: whether the text may end here).
  bool allowed(int32_t id);
  // Takes token `id` (an end token changes nothing); false, and no change, when it is not allowed.
  bool accept(int32_t id);
  // One bit per token (bit id % 64 of word id / 64): the tokens allowed next.
  std::span<const uint64_t> mask();
  // Nothing may follow: the caller ends with EOS without sampling.
  bool must_end() const { return triggered_ && m_.is_terminated(); }
  // The text so far may end here.
  bool complete() const { return !triggered_ || m_.is_complete(); }
  bool is_end(int32_t id) const;
  const TokenTrie& trie() const { return *trie_; }
  // The bytes the grammar allows as the only continuation from here (none before the trigger,
  // none once the text may end), at most `max` of them.
  std::string forced_bytes(size_t max);
  bool triggered() const { return triggered_; }

  int64_t masks_built() const { return masks_built_; }  // full masks computed (cache misses)
  // Masks kept per request, by matcher state (the most recently used).
  static constexpr size_t kCachedMasks = 32;

 private:
  // Before the trigger: where, in text_ + bytes, the constrained part would start (npos: not yet).
  size_t trigger_end(std::string_view bytes) const;
  void walk(uint32_t node, int32_t state, std::vector<uint64_t>& bits);
  void assemble(int32_t state, std::vector<uint64_t>& bits);  // from classes_

  std::shared_ptr<TokenClasses> classes_;
  std::vector<int32_t> chain_, walk_states_;  // scratch
  std::vector<uint64_t> checked_;              // scratch: the uncertain tokens a mask has checked
  Matcher m_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> end_ids_;
  std::string trigger_;
  bool triggered_;
  std::string text_;  // before the trigger: the tail of the text that a trigger could still start in
  std::string constrained_;  // the text the grammar has taken (to rebuild the matcher from)

  // Masks by matcher state; a small LRU.
  struct Cached {
    int32_t state;
    std::vector<uint64_t> bits;
  };
  std::list<Cached> cache_;
  std::vector<uint64_t> scratch_;
  int64_t masks_built_ = 0;
};

}  // namespace npullm::genai::grammar
