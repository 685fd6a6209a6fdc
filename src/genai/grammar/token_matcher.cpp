#include "genai/grammar/token_matcher.h"

#include "genai/grammar/mask_pool.h"
#include "genai/grammar/token_classes.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace npullm::genai::grammar {

namespace {
constexpr size_t kCachedMasks = TokenMatcher::kCachedMasks;
constexpr size_t kMaxStates = 20000;  // of a request's matcher (about 1 KiB each once stepped from)
constexpr size_t kMaxWarmStates = 2048;  // of a matcher offered as a warm start (copied at each request's start)
}

// ---------------------------------------------------------------------------------------------
// the trie: built from the pieces sorted by their bytes, so each node's tokens form one run and
// its children are the runs that share the next byte

TokenTrie::TokenTrie(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (!pieces_[i].empty()) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)] || (pieces_[static_cast<size_t>(a)] == pieces_[static_cast<size_t>(b)] && a < b);
  });
  nodes_.push_back({});
  // build(node, [a, b), depth): every piece in the range has the node's `depth` bytes as prefix.
  std::function<void(uint32_t, size_t, size_t, size_t)> build = [&](uint32_t node, size_t a, size_t b, size_t depth) {
    size_t i = a;
    nodes_[node].first_token = static_cast<uint32_t>(tokens_.size());
    while (i < b && pieces_[static_cast<size_t>(order[i])].size() == depth) tokens_.push_back(order[i++]);
    nodes_[node].n_tokens = static_cast<uint32_t>(tokens_.size()) - nodes_[node].first_token;
    // Children: runs of equal byte at `depth`. Their edges are contiguous, made before recursing.
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t j = i; j < b;) {
      const char c = pieces_[static_cast<size_t>(order[j])][depth];
      size_t k = j;
      while (k < b && pieces_[static_cast<size_t>(order[k])][depth] == c) ++k;
      runs.push_back({j, k});
      j = k;
    }
    nodes_[node].first_child = static_cast<uint32_t>(edges_.size());
    nodes_[node].n_children = static_cast<uint32_t>(runs.size());
    for (const auto& [j, k] : runs) {
      edges_.push_back({static_cast<uint8_t>(pieces_[static_cast<size_t>(order[j])][depth]), static_cast<uint32_t>(nodes_.size())});
      nodes_.push_back({});
    }
    for (size_t r = 0; r < runs.size(); ++r)
      build(edges_[nodes_[node].first_child + r].child, runs[r].first, runs[r].second, depth + 1);
    nodes_[node].end_token = static_cast<uint32_t>(tokens_.size());
  };
  build(0, 0, order.size(), 0);
  sorted_offsets_.reserve(tokens_.size() + 1);
  sorted_offsets_.push_back(0);
  for (int32_t id : tokens_) {
    sorted_bytes_ += pieces_[static_cast<size_t>(id)];
    sorted_offsets_.push_back(static_cast<uint32_t>(sorted_bytes_.size()));
  }
}

bool TokenTrie::extends(int32_t id) const {
  uint32_t node = 0;
  for (unsigned char b : piece(id)) {
    const Node& n = nodes_[node];
    uint32_t next = 0;
    for (uint32_t e = n.first_child; e < n.first_child + n.n_children && !next; ++e)
      if (edges_[e].byte == b) next = edges_[e].child;
    if (!next) return false;
    node = next;
  }
  return nodes_[node].n_children > 0;
}

// ---------------------------------------------------------------------------------------------

TokenMatcher::TokenMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> end_ids,
                           std::string trigger, std::shared_ptr<TokenClasses> classes)
    : classes_(std::move(classes)), m_(std::move(g)), trie_(std::move(trie)), end_ids_(std::move(end_ids)), trigger_(std::move(trigger)), triggered_(trigger_.empty()) {
  if (!classes_) return;
  if (const std::shared_ptr<const WarmStart> w = classes_->warm_start(); w && w->dfa.grammar_ptr() == m_.grammar_ptr()) {
    m_ = w->dfa;
    m_.restart();
    for (const auto& [state, bits] : w->masks) {
      cache_.push_back({state, mask_pool::take(bits.size())});
      std::copy(bits.begin(), bits.end(), cache_.back().bits.begin());
    }
  }
}

TokenMatcher::~TokenMatcher() {
  // (moved from: classes_ is null) Only a matcher that went further than the warm start offers
  // its own; a copy is taken only then.
  if (classes_ && m_.state_count() <= kMaxWarmStates && m_.state_count() > classes_->warm_states()) {
    auto w = std::make_shared<WarmStart>(WarmStart{m_, {}});
    for (const Cached& c : cache_) w->masks.emplace_back(c.state, c.bits);
    classes_->offer_warm_start(std::move(w));
  }
  for (Cached& c : cache_) mask_pool::give(std::move(c.bits));
  mask_pool::give(std::move(scratch_));
  mask_pool::give(std::move(checked_));
}

bool TokenMatcher::is_end(int32_t id) const { return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end(); }

size_t TokenMatcher::trigger_end(std::string_view bytes) const {
  const std::string s = text_ + std::string(bytes);
  const size_t at = s.find(trigger_);
  return at == std::string::npos ? std::string::npos : at + trigger_.size();
}

bool TokenMatcher::allowed(int32_t id) {
  if (is_end(id)) return complete();
  if (id < 0 || static_cast<size_t>(id) >= trie_->n_vocab()) return false;
  const std::string& p = trie_->piece(id);
  if (!triggered_) {
    const size_t end = trigger_end(p);
    if (end == std::string::npos) return true;
    return m_.can_accept(std::string_view(text_ + p).substr(end));
  }
  if (p.empty()) return false;
  return m_.can_accept(p);
}

bool TokenMatcher::accept(int32_t id) {
  if (is_end(id)) return complete();
  if (!allowed(id)) return false;
  const std::string& p = trie_->piece(id);
  if (!triggered_) {
    const size_t end = trigger_end(p);
    if (end == std::string::npos) {
      text_ += p;
      // Only the last trigger-length - 1 bytes can still begin a trigger.
      if (text_.size() >= trigger_.size()) text_.erase(0, text_.size() - (trigger_.size() - 1));
      return true;
    }
    const std::string rest = (text_ + p).substr(end);
    triggered_ = true;
    text_.clear();
    if (!m_.accept(rest)) return false;
    constrained_ += rest;
    return true;
  }
  if (!m_.accept(p)) return false;
  constrained_ += p;
  return true;
}

std::string TokenMatcher::forced_bytes(size_t max) {
  std::string out;
  if (!triggered_) return out;
  for (int32_t s = m_.state(); out.size() < max && !m_.complete(s);) {
    const ByteSet& next = m_.next_bytes(s);
    if (next.count() != 1) break;
    size_t b = 0;
    while (!next.test(b)) ++b;
    out += static_cast<char>(b);
    if ((s = m_.step(s, static_cast<uint8_t>(b))) < 0) break;  // cannot happen: the byte is the one allowed
  }
  return out;
}

// Depth-first over the trie; a subtree is entered only when its byte is allowed in `state`.
void TokenMatcher::walk(uint32_t node, int32_t state, std::vector<uint64_t>& bits) {
  const auto& nodes = trie_->nodes();
  const auto& edges = trie_->edges();
  const auto& tokens = trie_->tokens();
  const TokenTrie::Node& n = nodes[node];
  const ByteSet next = m_.next_bytes(state);  // a copy: stepping may add states (and move them)
  for (uint32_t e = n.first_child; e < n.first_child + n.n_children; ++e) {
    if (!next.test(edges[e].byte)) continue;
    const int32_t to = m_.step(state, edges[e].byte);
    if (to < 0) continue;
    const TokenTrie::Node& c = nodes[edges[e].child];
    for (uint32_t t = c.first_token; t < c.first_token + c.n_tokens; ++t)
      bits[static_cast<size_t>(tokens[t]) / 64] |= uint64_t{1} << (tokens[t] % 64);
    if (c.n_children) walk(edges[e].child, to, bits);
  }
}

// The union over the state's stacks of their contexts' accepted tokens, then each context's
// uncertain tokens checked against the whole state. A context that leaves many tokens uncertain
// is looked at again one entry deeper.
void TokenMatcher::assemble(int32_t state, std::vector<uint64_t>& bits) {
  const uint32_t n = m_.head_count(state);
  std::vector<const TokenClasses::Context*> ctx(n);
  for (uint32_t i = 0; i < n; ++i) {
    const TokenClasses::Context* c = nullptr;
    for (size_t depth = 2; depth <= TokenClasses::kMaxDepth; ++depth) {
      m_.head_chain(state, i, depth, chain_);
      if (c && chain_.size() < depth) break;  // the stack is no deeper
      c = &classes_->at(chain_);
      if (c->uncertain.size() <= TokenClasses::kDeepen) break;
    }
    ctx[i] = c;
    if (!c->accepted_bits.empty()) {
      for (size_t w = 0; w < bits.size(); ++w) bits[w] |= c->accepted_bits[w];
    } else {
      for (int32_t id : c->accepted_ids) bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
    }
  }
  // A context's uncertain tokens come in the trie's order (sorted by bytes), so each check starts
  // from the state after the bytes it shares with the previous token. A check is against the whole
  // state, so it settles the token for every head: one already allowed (by a head's accepted
  // class or an earlier check), or refused by an earlier check, is not walked again (the heads of
  // one state often share most of their uncertain tokens: the same string rule at several places).
  std::vector<int32_t>& at = walk_states_;
  std::vector<uint64_t>& seen = checked_;
  if (seen.capacity() < bits.size()) seen = mask_pool::take(bits.size());
  seen.assign(bits.size(), 0);
  const std::vector<int32_t>& tokens = trie_->tokens();
  for (const TokenClasses::Context* c : ctx) {
    std::string_view prev;
    at.assign(1, state);  // at[k]: the state after the first k bytes of prev (-1: refused)
    for (int32_t rank : c->uncertain) {
      const int32_t id = tokens[static_cast<size_t>(rank)];
      const size_t w = static_cast<size_t>(id) / 64;
      const uint64_t bit = uint64_t{1} << (id % 64);
      if ((bits[w] | seen[w]) & bit) continue;
      seen[w] |= bit;
      const std::string_view p = trie_->piece_at(static_cast<uint32_t>(rank));
      size_t k = 0;
      while (k < prev.size() && k < p.size() && k + 1 < at.size() && prev[k] == p[k]) ++k;
      at.resize(k + 1);
      int32_t st = at[k];
      for (; k < p.size() && st >= 0; ++k) at.push_back(st = m_.step(st, static_cast<uint8_t>(p[k])));
      prev = p;
      if (st >= 0 && k == p.size()) bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
    }
  }
}

std::span<const uint64_t> TokenMatcher::mask() {
  const size_t words = (trie_->n_vocab() + 63) / 64;
  if (scratch_.capacity() < words) scratch_ = mask_pool::take(words);
  scratch_.assign(words, 0);
  if (!triggered_) {
    for (size_t id = 0; id < trie_->n_vocab(); ++id)
      if (allowed(static_cast<int32_t>(id))) scratch_[id / 64] |= uint64_t{1} << (id % 64);
  } else {
    if (m_.state_count() > kMaxStates) {
      // The lazily built DFA keeps every state a mask walk explored; past the bound, start a fresh
      // one from the text so far (its masks are rebuilt as needed).
      m_ = Matcher(m_.grammar_ptr());
      m_.accept(constrained_);
      for (Cached& c : cache_) mask_pool::give(std::move(c.bits));
      cache_.clear();
    }
    const int32_t state = m_.state();
    auto hit = std::find_if(cache_.begin(), cache_.end(), [&](const Cached& c) { return c.state == state; });
    if (hit != cache_.end()) {
      cache_.splice(cache_.begin(), cache_, hit);
    } else {
      ++masks_built_;
      Cached c{state, mask_pool::take(words)};
      if (classes_) assemble(state, c.bits);
      else walk(0, state, c.bits);
      cache_.push_front(std::move(c));
      if (cache_.size() > kCachedMasks) {
        mask_pool::give(std::move(cache_.back().bits));
        cache_.pop_back();
      }
    }
    std::copy(cache_.front().bits.begin(), cache_.front().bits.end(), scratch_.begin());
  }
  for (int32_t id : end_ids_)
    if (id >= 0 && static_cast<size_t>(id) < trie_->n_vocab()) {
      if (complete()) scratch_[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
      else scratch_[static_cast<size_t>(id) / 64] &= ~(uint64_t{1} << (id % 64));
    }
  return scratch_;
}

}  // namespace npullm::genai::grammar
