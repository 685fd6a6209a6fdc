// Walks a Grammar byte by byte: the per-request state (the Grammar itself is shared and immutable).
//
// The state is a set of parse stacks, as in llama.cpp's grammar sampler: each stack's top is a
// position in Grammar::elems that expects one byte, the entries below it the positions to return
// to when a rule ends. A byte keeps the stacks whose top accepts it, moves them on, and expands
// rule references and rule ends until every top expects a byte again (the closure).
//
// Stacks are persistent and hash-consed: a stack entry is a node (position, parent node), and the
// same (position, parent) is always the same node. So stacks share their tails, a set of stacks is
// a set of node ids (equal stacks are equal ids: no duplicates), and the closure stops at a node
// it has already expanded in this step (which also ends loops through rules that match "").
//
// Checking a byte string without taking it (a token's bytes, a whole token trie) advances and then
// pops: each advance pushes a frontier, pop() drops it together with the nodes it created, so a
// walk over the vocabulary's trie costs no copies of stacks.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "genai/grammar/grammar.h"

namespace npullm::genai::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);

  // Takes all of `bytes`, or none of them (returns false and keeps the state).
  bool accept(std::string_view bytes);
  // Whether accept(bytes) would succeed; the state does not change.
  bool can_accept(std::string_view bytes);
  // The input so far is a whole sentence of the language (the root rule can end here).
  bool is_complete() const { return complete_.back() != 0; }
  // Complete, and no byte may follow: the only thing left to generate is the end.
  bool is_terminated() const { return is_complete() && frontier().empty(); }
  // The bytes that may come next.
  ByteSet next_bytes() const;
  void reset();

  // One byte onto a new frontier (false: not allowed, nothing pushed); pop() undoes the last push.
  bool push(uint8_t b);
  void pop();
  size_t depth() const { return seg_start_.size(); }
  // The current stacks (node ids, ascending). Equal spans mean equal states, as long as no pop()
  // went below the point where the nodes were made (token masks are cached on this).
  std::span<const int32_t> frontier() const;

  const Grammar& grammar() const { return *g_; }

 private:
  struct Node {
    int32_t pos, parent;
  };
  int32_t intern(int32_t pos, int32_t parent);
  void close(int32_t node);  // expands node into out_ (the frontier being built)
  void table_insert(uint64_t key, int32_t id);
  void table_grow();
  void commit();             // keeps only the current frontier (after accept)

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  // (pos, parent) -> node: open addressing, linear probing. Nodes are only ever removed newest
  // first (pop), and such a key's slot lies on no older key's probe path, so emptying it is exact.
  std::vector<uint64_t> keys_;
  std::vector<int32_t> ids_;
  std::vector<uint64_t> node_slot_;  // per node: its slot in the table
  size_t table_used_ = 0;

  // Frontiers, newest last: heads_[seg_start_[k] ...] with completion flags and node counts.
  std::vector<int32_t> heads_;
  std::vector<size_t> seg_start_;
  std::vector<size_t> seg_nodes_;
  std::vector<char> complete_;

  std::vector<uint32_t> seen_;  // per node: the closure stamp it was expanded in
  uint32_t stamp_ = 0;
  bool out_complete_ = false;
};

}  // namespace npullm::genai::grammar
