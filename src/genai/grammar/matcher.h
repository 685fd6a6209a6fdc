// Walks a Grammar byte by byte: the per-request state (the Grammar itself is shared and immutable).
//
// The state is a set of parse stacks, as in llama.cpp's grammar sampler: each stack's top is a
// position in Grammar::elems that expects one byte, the entries below it the positions to return
// to when a rule ends. A byte keeps the stacks whose top accepts it, moves them on, and expands
// rule references and rule ends until every top expects a byte again (the closure).
//
// Stacks are persistent and hash-consed: a stack entry is a node (position, parent node), and the
// same (position, parent) is always the same node. So stacks share their tails, a set of stacks is
// a sorted list of node ids (equal sets are equal lists), and the closure stops at a node it has
// already expanded in this step (which also ends loops through rules that match "").
//
// Sets of stacks are interned too: a "state" is an id, and the step (state, byte) -> state is
// remembered the first time it is computed. The matcher is therefore a DFA built lazily, as far
// as the text and the token masks explore it: inside a string or a number the state after a byte
// is the state before it, and a whole vocabulary walk costs one table lookup per trie edge.
// Nothing is ever removed (a request's states live as long as its matcher).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "genai/grammar/grammar.h"

namespace npullm::genai::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);
  // A matcher for walks that start inside the grammar (TokenClasses): no start state of its own;
  // context_state() makes them. Its "complete" means "the stack given has run out".
  struct Detached {};
  Matcher(std::shared_ptr<const Grammar> g, Detached);
  // A copy holds the same states with the same ids and the steps found so far (a warm start for
  // another request of the grammar: TokenClasses::warm_start).
  Matcher(const Matcher& o);
  Matcher& operator=(const Matcher& o);
  Matcher(Matcher&&) = default;
  Matcher& operator=(Matcher&&) = default;
  ~Matcher();  // hands its row blocks back to mask_pool
  // The words of one block of rows of steps (taken from mask_pool; see step_word() below).
  static constexpr size_t kRowBlockWords = 16 * 128;
  // Back to the start of the text (the start state: the first the constructor made).
  void restart() { state_ = 0; }

  // Takes all of `bytes`, or none of them (returns false and keeps the state).
  bool accept(std::string_view bytes);
  // Whether accept(bytes) would succeed; the state does not change.
  bool can_accept(std::string_view bytes);
  // The input so far is a whole sentence of the language (the root rule can end here).
  bool is_complete() const { return complete(state_); }
  // Complete, and no byte may follow: the only thing left to generate is the end.
  bool is_terminated() const { return complete(state_) && states_[static_cast<size_t>(state_)].n_heads == 0; }
  // The bytes that may come next.
  const ByteSet& next_bytes() const { return next_bytes(state_); }

  // The state machine itself (for walks over a vocabulary): the current state, one step (-1: the
  // byte is refused), and what a state allows.
  int32_t state() const { return state_; }
  int32_t step(int32_t state, uint8_t b);
  bool complete(int32_t state) const { return states_[static_cast<size_t>(state)].complete; }
  const ByteSet& next_bytes(int32_t state) const { return states_[static_cast<size_t>(state)].next; }
  size_t state_count() const { return states_.size(); }
  bool can_accept_from(int32_t state, std::string_view bytes);

  // A state's stack tops: head i's top `depth` entries, the position that expects a byte first,
  // then the positions the rules return to (fewer where the stack is shallower).
  uint32_t head_count(int32_t state) const { return states_[static_cast<size_t>(state)].n_heads; }
  void head_chain(int32_t state, uint32_t i, size_t depth, std::vector<int32_t>& out) const {
    out.clear();
    for (int32_t n = static_cast<int32_t>(head(state, i)); n >= 0 && out.size() < depth; n = nodes_[static_cast<size_t>(n)].parent)
      out.push_back(nodes_[static_cast<size_t>(n)].pos);
  }
  // The state of the one stack `chain` (top first), below which nothing is known: the state is
  // complete where that stack runs out.
  int32_t context_state(std::span<const int32_t> chain);

  const Grammar& grammar() const { return *g_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }

 private:
  struct Node {
    int32_t pos, parent;
  };
  struct State {
    uint32_t first_head, n_heads;  // into heads_
    bool complete;
    ByteSet next;
  };
  int32_t intern(int32_t pos, int32_t parent);
  void close(int32_t node);           // expands node into out_
  int32_t intern_state();             // out_ (+ out_complete_) as a state id
  size_t head(int32_t state, uint32_t i) const {
    return static_cast<size_t>(heads_[states_[static_cast<size_t>(state)].first_head + i]);
  }

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<uint32_t> seen_;        // per node: the closure stamp it was expanded in
  uint32_t stamp_ = 0;

  std::vector<int32_t> heads_;        // every state's stack tops, state after state
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_ids_;  // heads (as bytes) + completion -> state
  // Per state: its row of steps (byte -> state, -2 unknown, -1 refused), or -1 before its first
  // step. Rows are carved from blocks of kRowsPerBlock taken from mask_pool, not allocated one by
  // one: fresh memory is what a new state cost (its pages faulted in, 10-20 us a page on the VM
  // these figures come from), and pooled blocks were touched before.
  // A row is 128 words, two steps a word (byte 2i in the low half, 2i + 1 in the high half): the
  // pool's buffers are words, and reading them through another type would be undefined.
  uint64_t& step_word(int32_t r, uint8_t b) {
    return row_blocks_[static_cast<size_t>(r) / kRowsPerBlock][static_cast<size_t>(r % kRowsPerBlock) * 128 + b / 2];
  }
  int32_t step_of(int32_t r, uint8_t b) {
    return static_cast<int32_t>(static_cast<uint32_t>(step_word(r, b) >> (b % 2 * 32)));
  }
  void set_step(int32_t r, uint8_t b, int32_t to) {
    uint64_t& w = step_word(r, b);
    const int shift = b % 2 * 32;
    w = (w & ~(uint64_t{0xFFFFFFFFu} << shift)) | (uint64_t{static_cast<uint32_t>(to)} << shift);
  }
  static constexpr int32_t kRowsPerBlock = kRowBlockWords / 128;
  std::vector<int32_t> row_of_;
  std::vector<std::vector<uint64_t>> row_blocks_;  // each kRowBlockWords words
  int32_t n_rows_ = 0;

  std::vector<int32_t> out_;
  bool out_complete_ = false;
  int32_t state_ = 0;
};

}  // namespace npullm::genai::grammar
