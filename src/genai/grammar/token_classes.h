// What a grammar allows, token by token, worked out before decoding: the per-position
// precomputation that makes a full mask cheap (XGrammar's idea, on this matcher's stacks).
//
// A matcher state is a set of stacks; the tokens it allows are the union over its stacks. A stack
// is known at its top two entries without the rest: the position that expects a byte and the
// position its rule returns to. For such a "context", every token of the vocabulary falls into one
// of three classes, found by one walk of the token trie from the context alone:
//   accepted   the token's bytes are taken inside those two entries: allowed whatever lies below;
//   refused    some byte is refused before the stack could have run out: never allowed;
//   uncertain  the stack runs out (the outer rule ends) before the token does: only the full
//              state can tell (checked then, token by token).
// Two entries rather than one because rules here are small (a JSON string's character is a rule of
// its own, ending after each character): with the return position, the string's loop and the bytes
// that close it stay inside the context, and only tokens that run past the string's end are left
// uncertain.
//
// Where two entries are not enough (many uncertain tokens: a bounded string near its end, where the
// closing quote lies below), the mask looks again with three entries, then four; precompute()
// classifies those deeper contexts too, from the reference sites that can lie under them.
//
// The two-entry contexts a grammar can produce are known statically (each non-tail reference
// site, with the rules reachable from it through tail references), so precompute() classifies
// them all; token_classes() starts that on a thread of its own, so a request never waits for it
// (a context not classified yet is classified when a mask first needs it). One TokenClasses serves
// every request of the same grammar and vocabulary; it is safe to use from several threads.
#pragma once
#include <cstdint>
#include <memory>
#include <atomic>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "genai/grammar/matcher.h"
#include "genai/grammar/token_matcher.h"

namespace npullm::genai::grammar {

class TokenClasses {
 public:
  TokenClasses(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie);

  struct Context {
    std::vector<uint64_t> accepted_bits;  // dense: one bit per token (when many are accepted)
    std::vector<int32_t> accepted_ids;    // sparse: the accepted tokens (otherwise)
    std::vector<int32_t> uncertain;       // checked against the full state at mask time: ranks in
                                          // TokenTrie::tokens() (trie order), not ids
  };
  // The classes of the stack whose top entries are `chain` (the position that expects a byte,
  // then return positions; the stack ends under a chain shorter than it could be). Classified on
  // first use; the reference stays valid.
  const Context& at(std::span<const int32_t> chain);

  // Classifies every two-entry context the grammar can produce (unless stop() is called). Returns
  // the number of contexts held.
  size_t precompute();
  // The same on a thread of its own (joined by stop() and the destructor).
  void precompute_in_background();
  void stop();
  ~TokenClasses();

  // A context with more uncertain tokens than this is looked at again one entry deeper, up to
  // kMaxDepth entries.
  static constexpr size_t kDeepen = 1024;
  static constexpr size_t kMaxDepth = 4;

  // The warm start of this grammar's requests (token_matcher.h): the matcher states and masks of
  // the request that explored most so far (null before any ended). offer_warm_start() keeps `w`
  // when it holds more states than the one kept.
  std::shared_ptr<const WarmStart> warm_start() const;
  size_t warm_states() const;
  void offer_warm_start(std::shared_ptr<const WarmStart> w);

  const Grammar& grammar() const { return *g_; }
  const TokenTrie& trie() const { return *trie_; }
  size_t size() const;
  size_t bytes() const;  // memory the tables hold
  double build_ms() const { return build_ms_; }

 private:
  const Context& classify(std::span<const int32_t> chain, const std::string& key);  // under mu_
  void walk(uint32_t node, int32_t state, bool escaped, Context& c);
  std::vector<std::vector<int32_t>> static_contexts() const;
  std::vector<int32_t> returns_under(int32_t pos) const;

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenTrie> trie_;
  mutable std::mutex mu_;
  Matcher local_;  // stacks cut off below the context; complete = ran out
  std::unordered_map<std::string, std::unique_ptr<Context>> contexts_;  // by chain (its bytes)
  double build_ms_ = 0.0;
  std::atomic<bool> stop_{false};
  std::thread worker_;
  std::vector<int32_t> accepted_;  // walk scratch
  mutable std::mutex warm_mu_;
  std::shared_ptr<const WarmStart> warm_;
};

// The shared classes for (grammar, vocabulary), cached (the most recent few); a new one starts its
// precomputation in the background.
std::shared_ptr<TokenClasses> token_classes(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenTrie>& trie);

}  // namespace npullm::genai::grammar
