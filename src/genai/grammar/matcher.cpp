#include "genai/grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "genai/grammar/mask_pool.h"

namespace npullm::genai::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  ++stamp_;
  out_.clear();
  out_complete_ = false;
  for (int32_t alt : g_->alts[static_cast<size_t>(g_->root)]) close(intern(alt, -1));
  state_ = intern_state();
}

Matcher::Matcher(std::shared_ptr<const Grammar> g, Detached) : g_(std::move(g)) {}

Matcher::Matcher(const Matcher& o)
    : g_(o.g_), nodes_(o.nodes_), node_ids_(o.node_ids_), seen_(o.seen_), stamp_(o.stamp_), heads_(o.heads_),
      states_(o.states_), state_ids_(o.state_ids_), row_of_(o.row_of_), n_rows_(o.n_rows_), state_(o.state_) {
  row_blocks_.reserve(o.row_blocks_.size());
  for (const auto& b : o.row_blocks_) {
    row_blocks_.push_back(mask_pool::take(b.size()));
    std::copy(b.begin(), b.end(), row_blocks_.back().begin());
  }
}

Matcher::~Matcher() {
  for (auto& b : row_blocks_) mask_pool::give(std::move(b));
}

Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) *this = Matcher(o);
  return *this;
}

int32_t Matcher::context_state(std::span<const int32_t> chain) {
  ++stamp_;
  out_.clear();
  out_complete_ = false;
  int32_t node = -1;
  for (size_t k = chain.size(); k-- > 0;) node = intern(chain[k], node);
  close(node);
  return intern_state();
}

int32_t Matcher::intern(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, fresh] = node_ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) {
    nodes_.push_back({pos, parent});
    seen_.push_back(0);
  }
  return it->second;
}

// Expands one stack configuration until its top expects a byte. Tail references (a rule at the
// end of an alternative) push nothing, so right recursion (x*) runs in constant stack.
void Matcher::close(int32_t node) {
  if (seen_[static_cast<size_t>(node)] == stamp_) return;
  seen_[static_cast<size_t>(node)] = stamp_;
  const Node n = nodes_[static_cast<size_t>(node)];
  const Elem& e = g_->elems[static_cast<size_t>(n.pos)];
  switch (e.kind) {
    case Elem::Bytes: out_.push_back(node); return;
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

int32_t Matcher::intern_state() {
  std::sort(out_.begin(), out_.end());
  std::string key(out_.size() * sizeof(int32_t) + 1, '\0');
  if (!out_.empty()) std::memcpy(key.data(), out_.data(), out_.size() * sizeof(int32_t));
  key.back() = out_complete_ ? 1 : 0;
  auto [it, fresh] = state_ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (fresh) {
    State s{static_cast<uint32_t>(heads_.size()), static_cast<uint32_t>(out_.size()), out_complete_, {}};
    for (int32_t id : out_) s.next |= g_->sets[static_cast<size_t>(g_->elems[static_cast<size_t>(nodes_[static_cast<size_t>(id)].pos)].value)];
    heads_.insert(heads_.end(), out_.begin(), out_.end());
    states_.push_back(s);
    row_of_.push_back(-1);
  }
  return it->second;
}

int32_t Matcher::step(int32_t state, uint8_t b) {
  const State& s = states_[static_cast<size_t>(state)];
  if (!s.next.test(b)) return -1;
  if (const int32_t r = row_of_[static_cast<size_t>(state)]; r >= 0)
    if (const int32_t to = step_of(r, b); to != -2) return to;
  ++stamp_;
  out_.clear();
  out_complete_ = false;
  const uint32_t first = s.first_head, n = s.n_heads;  // s may move when states_ grows
  for (uint32_t k = first; k < first + n; ++k) {
    const Node nd = nodes_[static_cast<size_t>(heads_[k])];
    if (g_->sets[static_cast<size_t>(g_->elems[static_cast<size_t>(nd.pos)].value)].test(b)) close(intern(nd.pos + 1, nd.parent));
  }
  const int32_t to = out_.empty() && !out_complete_ ? -1 : intern_state();
  int32_t& r = row_of_[static_cast<size_t>(state)];  // (row_of_ may have grown)
  if (r < 0) {
    if (n_rows_ % kRowsPerBlock == 0) row_blocks_.push_back(mask_pool::take(kRowBlockWords));
    r = n_rows_++;
    const uint64_t unknown = uint64_t{static_cast<uint32_t>(-2)} * 0x100000001u;  // -2 in both halves
    std::fill_n(&step_word(r, 0), 128, unknown);
  }
  set_step(r, b, to);
  return to;
}

bool Matcher::accept(std::string_view bytes) {
  int32_t s = state_;
  for (unsigned char b : bytes)
    if ((s = step(s, b)) < 0) return false;
  state_ = s;
  return true;
}

bool Matcher::can_accept(std::string_view bytes) { return can_accept_from(state_, bytes); }

bool Matcher::can_accept_from(int32_t state, std::string_view bytes) {
  int32_t s = state;
  for (unsigned char b : bytes)
    if ((s = step(s, b)) < 0) return false;
  return true;
}

}  // namespace npullm::genai::grammar
