#include "genai/grammar/matcher.h"

#include <algorithm>

namespace npullm::genai::grammar {

namespace {

constexpr uint64_t kEmpty = ~uint64_t{0};

uint64_t key_of(int32_t pos, int32_t parent) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
}

size_t hash_of(uint64_t key, size_t mask) { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask; }

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) { reset(); }

void Matcher::reset() {
  nodes_.clear();
  node_slot_.clear();
  keys_.assign(1024, kEmpty);
  ids_.assign(1024, -1);
  table_used_ = 0;
  heads_.clear();
  seg_start_.assign(1, 0);
  seg_nodes_.assign(1, 0);
  complete_.assign(1, 0);
  seen_.clear();
  ++stamp_;
  out_complete_ = false;
  for (int32_t alt : g_->alts[static_cast<size_t>(g_->root)]) close(intern(alt, -1));
  std::sort(heads_.begin(), heads_.end());
  complete_[0] = out_complete_;
  seg_nodes_[0] = nodes_.size();
}

void Matcher::table_insert(uint64_t key, int32_t id) {
  const size_t mask = keys_.size() - 1;
  size_t i = hash_of(key, mask);
  while (keys_[i] != kEmpty) i = (i + 1) & mask;
  keys_[i] = key;
  ids_[i] = id;
  node_slot_[static_cast<size_t>(id)] = i;
  ++table_used_;
}

void Matcher::table_grow() {
  std::vector<uint64_t> old = std::move(keys_);
  keys_.assign(old.size() * 2, kEmpty);
  ids_.assign(old.size() * 2, -1);
  table_used_ = 0;
  // Re-inserting in node order keeps "newer nodes probe past older ones", which pop() relies on.
  for (size_t id = 0; id < nodes_.size(); ++id) table_insert(key_of(nodes_[id].pos, nodes_[id].parent), static_cast<int32_t>(id));
}

int32_t Matcher::intern(int32_t pos, int32_t parent) {
  const uint64_t key = key_of(pos, parent);
  const size_t mask = keys_.size() - 1;
  for (size_t i = hash_of(key, mask);; i = (i + 1) & mask) {
    if (keys_[i] == key) return ids_[i];
    if (keys_[i] == kEmpty) break;
  }
  const auto id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pos, parent});
  node_slot_.push_back(0);
  seen_.push_back(0);
  if ((table_used_ + 1) * 2 > keys_.size()) table_grow();  // table_grow re-inserts the new node too
  else table_insert(key, id);
  return id;
}

// Expands one stack configuration until its top expects a byte. Tail references (a rule at the
// end of an alternative) push nothing, so right recursion (x*) runs in constant stack.
void Matcher::close(int32_t node) {
  if (seen_[static_cast<size_t>(node)] == stamp_) return;
  seen_[static_cast<size_t>(node)] = stamp_;
  const Node n = nodes_[static_cast<size_t>(node)];
  const Elem& e = g_->elems[static_cast<size_t>(n.pos)];
  switch (e.kind) {
    case Elem::Bytes: heads_.push_back(node); return;
    case Elem::End:
      if (n.parent < 0) out_complete_ = true;
      else close(n.parent);
      return;
    case Elem::Ref: {
      const int32_t ret = n.pos + 1;
      const int32_t parent = g_->elems[static_cast<size_t>(ret)].kind == Elem::End ? n.parent : intern(ret, n.parent);
      for (int32_t alt : g_->alts[static_cast<size_t>(e.value)]) close(intern(alt, parent));
      return;
    }
  }
}

std::span<const int32_t> Matcher::frontier() const {
  const size_t s = seg_start_.back();
  return {heads_.data() + s, heads_.size() - s};
}

bool Matcher::push(uint8_t b) {
  const size_t from = seg_start_.back(), to = heads_.size();
  const size_t nodes_before = nodes_.size();
  ++stamp_;
  out_complete_ = false;
  for (size_t k = from; k < to; ++k) {
    const Node n = nodes_[static_cast<size_t>(heads_[k])];
    if (g_->sets[static_cast<size_t>(g_->elems[static_cast<size_t>(n.pos)].value)].test(b)) close(intern(n.pos + 1, n.parent));
  }
  if (heads_.size() == to && !out_complete_) {
    // Dead: drop what the attempt interned.
    seg_start_.push_back(to);
    seg_nodes_.push_back(nodes_before);
    complete_.push_back(0);
    pop();
    return false;
  }
  std::sort(heads_.begin() + static_cast<ptrdiff_t>(to), heads_.end());
  seg_start_.push_back(to);
  seg_nodes_.push_back(nodes_before);
  complete_.push_back(out_complete_);
  return true;
}

void Matcher::pop() {
  const size_t keep = seg_nodes_.back();
  heads_.resize(seg_start_.back());
  seg_start_.pop_back();
  seg_nodes_.pop_back();
  complete_.pop_back();
  // Newest first: see the table's comment in matcher.h.
  while (nodes_.size() > keep) {
    keys_[node_slot_.back()] = kEmpty;
    --table_used_;
    nodes_.pop_back();
    node_slot_.pop_back();
    seen_.pop_back();
  }
}

void Matcher::commit() {
  // The nodes stay (the new frontier refers to them); only the older frontiers go.
  const size_t s = seg_start_.back();
  heads_.erase(heads_.begin(), heads_.begin() + static_cast<ptrdiff_t>(s));
  const char c = complete_.back();
  seg_start_.assign(1, 0);
  seg_nodes_.assign(1, nodes_.size());
  complete_.assign(1, c);
}

bool Matcher::accept(std::string_view bytes) {
  const size_t d = depth();
  for (unsigned char b : bytes) {
    if (!push(b)) {
      while (depth() > d) pop();
      return false;
    }
  }
  commit();
  return true;
}

bool Matcher::can_accept(std::string_view bytes) {
  const size_t d = depth();
  bool ok = true;
  for (unsigned char b : bytes)
    if (!push(b)) { ok = false; break; }
  while (depth() > d) pop();
  return ok;
}

ByteSet Matcher::next_bytes() const {
  ByteSet s;
  for (int32_t id : frontier()) s |= g_->sets[static_cast<size_t>(g_->elems[static_cast<size_t>(nodes_[static_cast<size_t>(id)].pos)].value)];
  return s;
}

}  // namespace npullm::genai::grammar
