#include "genai/grammar/token_classes.h"

#include <algorithm>
#include <chrono>
#include <list>

#include "genai/grammar/mask_pool.h"

namespace npullm::genai::grammar {

namespace {

std::string key_of(std::span<const int32_t> chain) {
  return std::string(reinterpret_cast<const char*>(chain.data()), chain.size_bytes());
}

constexpr size_t kCachedTables = 16;

}  // namespace

TokenClasses::TokenClasses(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie)
    : g_(std::move(g)), trie_(std::move(trie)), local_(g_, Matcher::Detached{}) {}

TokenClasses::~TokenClasses() { stop(); }

void TokenClasses::stop() {
  stop_ = true;
  if (worker_.joinable()) worker_.join();
}

void TokenClasses::precompute_in_background() {
  worker_ = std::thread([this] { precompute(); });
}

const TokenClasses::Context& TokenClasses::at(std::span<const int32_t> chain) {
  const std::string key = key_of(chain);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(key);
  if (it != contexts_.end()) return *it->second;
  return classify(chain, key);
}

std::shared_ptr<const WarmStart> TokenClasses::warm_start() const {
  std::lock_guard<std::mutex> lock(warm_mu_);
  return warm_;
}

size_t TokenClasses::warm_states() const {
  std::lock_guard<std::mutex> lock(warm_mu_);
  return warm_ ? warm_->dfa.state_count() : 0;
}

void TokenClasses::offer_warm_start(std::shared_ptr<const WarmStart> w) {
  std::lock_guard<std::mutex> lock(warm_mu_);
  if (!warm_ || w->dfa.state_count() > warm_->dfa.state_count()) warm_ = std::move(w);
}

size_t TokenClasses::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return contexts_.size();
}

size_t TokenClasses::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [k, c] : contexts_)
    n += sizeof(Context) + 8 * c->accepted_bits.size() + 4 * (c->accepted_ids.size() + c->uncertain.size());
  return n;
}

// Depth-first over the trie from a context's state. `escaped`: on the way here the context's stack
// could have run out, so a byte refused from now on may still be taken by what lies below.
void TokenClasses::walk(uint32_t node, int32_t state, bool escaped, Context& c) {
  const auto& nodes = trie_->nodes();
  const auto& edges = trie_->edges();
  const auto& tokens = trie_->tokens();
  const TokenTrie::Node& n = nodes[node];
  for (uint32_t e = n.first_child; e < n.first_child + n.n_children; ++e) {
    const TokenTrie::Node& child = nodes[edges[e].child];
    const int32_t to = local_.step(state, edges[e].byte);
    if (to < 0) {
      if (escaped)  // (as ranks: the trie's order, which TokenTrie::piece_at reads in one stream)
        for (uint32_t r = child.first_token; r < child.end_token; ++r) c.uncertain.push_back(static_cast<int32_t>(r));
      continue;
    }
    accepted_.insert(accepted_.end(), tokens.begin() + child.first_token, tokens.begin() + child.first_token + child.n_tokens);
    if (child.n_children) walk(edges[e].child, to, escaped || local_.complete(to), c);
  }
}

const TokenClasses::Context& TokenClasses::classify(std::span<const int32_t> chain, const std::string& key) {
  const auto t0 = std::chrono::steady_clock::now();
  auto c = std::make_unique<Context>();
  accepted_.clear();
  const int32_t start = local_.context_state(chain);
  walk(0, start, local_.complete(start), *c);
  const size_t n_vocab = trie_->n_vocab();
  if (accepted_.size() * 32 > n_vocab) {
    c->accepted_bits.assign((n_vocab + 63) / 64, 0);
    for (int32_t id : accepted_) c->accepted_bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  } else {
    c->accepted_ids = accepted_;
  }
  c->uncertain.shrink_to_fit();
  build_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return *contexts_.emplace(key, std::move(c)).first->second;
}

std::vector<std::vector<int32_t>> TokenClasses::static_contexts() const {
  const Grammar& g = *g_;
  const size_t n_rules = g.alts.size();
  // Per rule: the Bytes positions of the rules it reaches through tail references (itself included):
  // the stack tops that can sit on one return position.
  std::vector<std::vector<int32_t>> tops(n_rules);
  std::vector<char> done(n_rules, 0);
  auto tops_of = [&](int32_t rule) -> const std::vector<int32_t>& {  // (memoised per rule)
    auto& out = tops[static_cast<size_t>(rule)];
    if (done[static_cast<size_t>(rule)]) return out;
    done[static_cast<size_t>(rule)] = 1;
    std::vector<char> seen(n_rules, 0);
    std::vector<int32_t> todo{rule};
    seen[static_cast<size_t>(rule)] = 1;
    while (!todo.empty()) {
      const int32_t r = todo.back();
      todo.pop_back();
      for (int32_t p : g.alts[static_cast<size_t>(r)])
        for (; g.elems[static_cast<size_t>(p)].kind != Elem::End; ++p) {
          const Elem& e = g.elems[static_cast<size_t>(p)];
          if (e.kind == Elem::Bytes) out.push_back(p);
          else if (g.elems[static_cast<size_t>(p) + 1].kind == Elem::End && !seen[static_cast<size_t>(e.value)]) {
            seen[static_cast<size_t>(e.value)] = 1;
            todo.push_back(e.value);
          }
        }
    }
    return out;
  };
  std::vector<std::vector<int32_t>> wanted;
  for (int32_t p : tops_of(g.root)) wanted.push_back({p});
  for (size_t p = 0; p + 1 < g.elems.size(); ++p)
    if (g.elems[p].kind == Elem::Ref && g.elems[p + 1].kind != Elem::End)
      for (int32_t top : tops_of(g.elems[p].value)) wanted.push_back({top, static_cast<int32_t>(p + 1)});
  return wanted;
}

// The return positions that can lie directly under a stack entry at `pos`: after each non-tail
// reference to a rule that reaches pos's rule through tail references.
std::vector<int32_t> TokenClasses::returns_under(int32_t pos) const {
  const Grammar& g = *g_;
  int32_t end = pos;
  while (g.elems[static_cast<size_t>(end)].kind != Elem::End) ++end;
  const int32_t rule = g.elems[static_cast<size_t>(end)].value;
  std::vector<char> callers(g.alts.size(), 0);  // rules that reach `rule` through tail references
  callers[static_cast<size_t>(rule)] = 1;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t r = 0; r < g.alts.size(); ++r) {
      if (callers[r]) continue;
      for (int32_t a : g.alts[r]) {
        int32_t p = a;
        while (g.elems[static_cast<size_t>(p)].kind != Elem::End) ++p;
        const Elem& last = g.elems[static_cast<size_t>(p) - 1];
        if (p > a && last.kind == Elem::Ref && callers[static_cast<size_t>(last.value)]) {
          callers[r] = grew = 1;
          break;
        }
      }
    }
  }
  std::vector<int32_t> out;
  for (size_t p = 0; p + 1 < g.elems.size(); ++p)
    if (g.elems[p].kind == Elem::Ref && g.elems[p + 1].kind != Elem::End && callers[static_cast<size_t>(g.elems[p].value)])
      out.push_back(static_cast<int32_t>(p + 1));
  return out;
}

size_t TokenClasses::precompute() {
  // Afterwards (the walks' own matcher takes blocks too): touched buffers for a request's mask
  // cache, its scratch and its first 128 matcher states' rows, before the first request needs them
  // (mask_pool.h: fresh pages cost more than the masks).
  struct Fill {
    size_t words;
    ~Fill() { mask_pool::fill(words, TokenMatcher::kCachedMasks + 2 + 8); }
  } fill{std::max((trie_->n_vocab() + 63) / 64, Matcher::kRowBlockWords)};
  // One context per lock: a mask that needs one meanwhile waits for one walk at most.
  auto ensure = [&](const std::vector<int32_t>& chain) -> size_t {  // its uncertain count
    const std::string key = key_of(chain);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(key);
    return (it != contexts_.end() ? *it->second : classify(chain, key)).uncertain.size();
  };
  std::vector<std::vector<int32_t>> wide;  // contexts the masks will look at more deeply
  for (const auto& chain : static_contexts()) {
    if (stop_) return size();
    if (ensure(chain) > kDeepen && chain.size() == 2) wide.push_back(chain);
  }
  while (!wide.empty()) {
    std::vector<std::vector<int32_t>> next;
    for (const auto& chain : wide)
      for (int32_t r : returns_under(chain.back())) {
        if (stop_) return size();
        std::vector<int32_t> deeper = chain;
        deeper.push_back(r);
        if (ensure(deeper) > kDeepen && deeper.size() < kMaxDepth) next.push_back(std::move(deeper));
      }
    wide = std::move(next);
  }
  return size();
}

std::shared_ptr<TokenClasses> token_classes(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenTrie>& trie) {
  struct Entry {
    std::shared_ptr<const Grammar> g;
    std::shared_ptr<const TokenTrie> trie;
    std::shared_ptr<TokenClasses> classes;
  };
  static std::mutex mu;
  static std::list<Entry> cache;  // most recently used first
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->g == g && it->trie == trie) {
        cache.splice(cache.begin(), cache, it);
        return it->classes;
      }
  }
  auto classes = std::make_shared<TokenClasses>(g, trie);
  classes->precompute_in_background();
  std::lock_guard<std::mutex> lock(mu);
  cache.push_front({g, trie, classes});
  if (cache.size() > kCachedTables) cache.pop_back();
  return classes;
}

}  // namespace npullm::genai::grammar
