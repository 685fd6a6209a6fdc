#include "genai/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "common/error.h"

namespace npullm::genai {

namespace {

// Highest logit first; ties by id, so this is a total order and every sort or selection under it
// has exactly one possible result, whatever the standard library's algorithm.
bool higher_logit(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Written so that NaN fails every range check.
bool in_range(float x, float lo, float hi) { return x >= lo && x <= hi; }

// Large vocabularies are scanned in two passes: first each block's maximum, a stream of vector
// instructions (GCC's vector extension: SSE on any x86-64, wider where the build allows) with one
// horizontal step per block; then only the blocks that can hold the answer, value by value. With
// a 152k vocabulary the argmax and its runners-up take a few tens of microseconds instead of
// ~200 (comparing every value in turn), on every step of greedy and constrained decoding.
constexpr size_t kBlock = 256;
using Vec4 = float __attribute__((vector_size(16)));  // (wider generic vectors lower badly without AVX)

// The largest of the n values at p, n a multiple of 16 (NaN ignored: -inf for n NaN), four
// vectors at a time with one horizontal step at the end.
float max_of(const float* p, size_t n) {
  constexpr float kLow = -std::numeric_limits<float>::infinity();
  Vec4 m[4] = {{kLow, kLow, kLow, kLow}, {kLow, kLow, kLow, kLow}, {kLow, kLow, kLow, kLow}, {kLow, kLow, kLow, kLow}};
  for (size_t i = 0; i < n; i += 16)
    for (int j = 0; j < 4; ++j) {
      Vec4 v;
      std::memcpy(&v, p + i + 4 * j, sizeof v);
      m[j] = v > m[j] ? v : m[j];  // (a NaN in v compares false: m stays)
    }
  const Vec4 a = m[0] > m[1] ? m[0] : m[1], c = m[2] > m[3] ? m[2] : m[3], d = a > c ? a : c;
  float x = d[0];
  for (int l = 1; l < 4; ++l) x = d[l] > x ? d[l] : x;
  return x;
}

// The largest value of each whole block of kBlock (NaN ignored: -inf for a block of NaN alone).
void block_maxima(std::span<const float> logits, std::vector<float>& out) {
  const size_t nb = logits.size() / kBlock;
  out.resize(nb);
  for (size_t b = 0; b < nb; ++b) out[b] = max_of(logits.data() + b * kBlock, kBlock);
}

thread_local std::vector<float> t_maxima, t_tops;

// Greedy under a mask: the first allowed id of the largest allowed value, as a scan in id order
// that keeps the first allowed id and then any strictly greater value would find (so a NaN first
// allowed value wins, and no other NaN ever does). A word of the mask that allows all its 64 ids
// (most of them, inside a string of a 152k vocabulary) is one vector pass; only the word that holds
// the answer is scanned value by value. 30-140 us a call -> about a tenth of that (bit by bit
// before, each value compared in turn).
int32_t masked_argmax(std::span<const float> logits, std::span<const uint64_t> allowed) {
  const size_t n = logits.size();
  int32_t first = -1;
  for (size_t w = 0; w < allowed.size() && first < 0; ++w)
    if (allowed[w]) first = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(allowed[w])));
  if (first < 0 || static_cast<size_t>(first) >= n) fail("sampler: the mask allows no token");
  if (logits[static_cast<size_t>(first)] != logits[static_cast<size_t>(first)]) return first;
  float best_v = logits[static_cast<size_t>(first)];
  size_t best_w = static_cast<size_t>(first) / 64;
  for (size_t w = best_w; w < allowed.size() && w * 64 < n; ++w) {
    float m;
    if (allowed[w] == ~uint64_t{0} && w * 64 + 64 <= n) {
      m = max_of(logits.data() + w * 64, 64);
    } else {
      m = -std::numeric_limits<float>::infinity();
      for (uint64_t bits = allowed[w]; bits; bits &= bits - 1) {
        const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        if (id >= n) break;
        m = logits[id] > m ? logits[id] : m;
      }
    }
    if (m > best_v) best_v = m, best_w = w;
  }
  for (uint64_t bits = allowed[best_w]; bits; bits &= bits - 1) {  // the first allowed id holding it
    const size_t id = best_w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
    if (id < n && logits[id] == best_v) return static_cast<int32_t>(id);
  }
  return first;  // not reached: best_v is the first allowed value or an allowed value of best_w
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  // The best value lives in a register: re-reading logits[best] every step chains each
  // comparison to the previous one through a load, about 6x slower on a large vocabulary.
  const auto scan = [&](size_t from, size_t to, size_t best) {
    float best_v = logits[best];
    for (size_t i = from; i < to; ++i)
      if (logits[i] > best_v) best_v = logits[best = i];
    return best;
  };
  if (logits.empty()) return 0;
  // A NaN first value wins the scan below (nothing compares greater): keep that rule.
  if (logits.size() < 4 * kBlock || logits[0] != logits[0]) return static_cast<int32_t>(scan(1, logits.size(), 0));
  // Otherwise the answer is the first place of the largest value: in the first block whose
  // maximum it is, or in the tail.
  std::vector<float>& bm = t_maxima;
  block_maxima(logits, bm);
  size_t best_b = 0;
  for (size_t b = 1; b < bm.size(); ++b)
    if (bm[b] > bm[best_b]) best_b = b;
  const float top = bm[best_b];
  if (top == -std::numeric_limits<float>::infinity()) return static_cast<int32_t>(scan(1, logits.size(), 0));
  size_t at = best_b * kBlock;
  while (logits[at] != top) ++at;  // (the block holds it)
  return static_cast<int32_t>(scan(bm.size() * kBlock, logits.size(), at));
}

void top_logits(std::span<const float> logits, size_t k, std::vector<std::pair<float, int32_t>>& out) {
  out.clear();
  if (k == 0) return;
  const auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  const auto consider = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const std::pair<float, int32_t> x{logits[i], static_cast<int32_t>(i)};
      if (x.first != x.first || (out.size() == k && !better(x, out.back()))) continue;
      out.insert(std::upper_bound(out.begin(), out.end(), x, better), x);
      if (out.size() > k) out.pop_back();
    }
  };
  std::vector<float>& bm = t_maxima;
  block_maxima(logits, bm);
  // The k blocks with the largest maxima each hold a value >= the k-th largest maximum, so the k
  // best values are all >= it: only blocks whose maximum reaches it can hold one.
  float floor = -std::numeric_limits<float>::infinity();
  if (bm.size() > k) {
    std::vector<float>& tops = t_tops;  // (scratch kept per thread: no allocation a token)
    tops.assign(bm.begin(), bm.end());
    std::nth_element(tops.begin(), tops.begin() + static_cast<long>(k - 1), tops.end(), std::greater<float>());
    floor = tops[k - 1];
  }
  for (size_t b = 0; b < bm.size(); ++b)
    if (bm[b] >= floor) consider(b * kBlock, (b + 1) * kBlock);
  consider(bm.size() * kBlock, logits.size());
}

Sampler::Sampler(SamplerConfig cfg) : cfg_(cfg), rng_(cfg.seed) {
  if (!std::isfinite(cfg_.temperature)) fail("sampler: temperature must be a finite number, got {}", cfg_.temperature);
  if (cfg_.top_k < 0) fail("sampler: top_k must be >= 0 (0 turns it off), got {}", cfg_.top_k);
  if (!in_range(cfg_.top_p, 0.0f, 1.0f)) fail("sampler: top_p must be in [0, 1] (1 turns it off), got {}", cfg_.top_p);
  if (!in_range(cfg_.min_p, 0.0f, 1.0f)) fail("sampler: min_p must be in [0, 1] (0 turns it off), got {}", cfg_.min_p);
  if (!in_range(cfg_.typical_p, 0.0f, 1.0f))
    fail("sampler: typical_p must be in [0, 1] (1 turns it off), got {}", cfg_.typical_p);
  if (!(cfg_.repetition_penalty > 0.0f) || !std::isfinite(cfg_.repetition_penalty))
    fail("sampler: repetition_penalty must be a finite number > 0 (1 turns it off), got {}", cfg_.repetition_penalty);
  if (!std::isfinite(cfg_.presence_penalty)) fail("sampler: presence_penalty must be finite, got {}", cfg_.presence_penalty);
  if (!std::isfinite(cfg_.frequency_penalty)) fail("sampler: frequency_penalty must be finite, got {}", cfg_.frequency_penalty);
  if (cfg_.penalty_last_n < 0)
    fail("sampler: penalty_last_n must be >= 0 (0 turns the penalties off; pass the context size for 'all'), got {}",
         cfg_.penalty_last_n);
  // The history window is the only state that depends on the config's size; allocate it now so
  // accept() never allocates.
  if (penalties_on()) {
    const auto n = static_cast<size_t>(cfg_.penalty_last_n);
    history_.resize(n);
    hist_sorted_.reserve(n);
    counts_.reserve(n);
  }
}

// ---------------------------------------------------------------------------------------------
// history and penalties

bool Sampler::penalties_on() const {
  return cfg_.penalty_last_n > 0 &&
         (cfg_.repetition_penalty != 1.0f || cfg_.presence_penalty != 0.0f || cfg_.frequency_penalty != 0.0f);
}

void Sampler::accept(int32_t id) {
  if (history_.empty()) return;  // penalties off: nothing looks at the history
  history_[hist_next_] = id;
  hist_next_ = (hist_next_ + 1) % history_.size();
  hist_size_ = std::min(hist_size_ + 1, history_.size());
}

void Sampler::reset() {
  hist_next_ = hist_size_ = 0;
  rng_.seed(cfg_.seed);
}

void Sampler::count_history() {
  // The ring fills from slot 0, so its first hist_size_ slots are exactly the window. Sorting a
  // copy (at most penalty_last_n ids) gives the counts in id order with no hash map, whose
  // iteration order would not be deterministic anyway.
  hist_sorted_.assign(history_.begin(), history_.begin() + static_cast<ptrdiff_t>(hist_size_));
  std::sort(hist_sorted_.begin(), hist_sorted_.end());
  counts_.clear();
  for (size_t i = 0; i < hist_sorted_.size();) {
    size_t j = i;
    while (j < hist_sorted_.size() && hist_sorted_[j] == hist_sorted_[i]) ++j;
    counts_.emplace_back(hist_sorted_[i], static_cast<int32_t>(j - i));
    i = j;
  }
}

float Sampler::penalised(float logit, int32_t count) const {
  // llama.cpp's rule: dividing a negative logit would make the token *more* likely, so negative
  // logits are multiplied instead; both push the token down by the same factor.
  float x = logit;
  if (cfg_.repetition_penalty != 1.0f) x = x > 0.0f ? x / cfg_.repetition_penalty : x * cfg_.repetition_penalty;
  x -= static_cast<float>(count) * cfg_.frequency_penalty + cfg_.presence_penalty;
  return x;
}

void Sampler::apply_penalties(std::span<float> logits) {
  if (!penalties_on()) return;
  count_history();
  for (const auto& [id, count] : counts_)
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = penalised(logits[static_cast<size_t>(id)], count);
}

// ---------------------------------------------------------------------------------------------
// the chain

void Sampler::load(std::span<const float> logits) {
  if (logits.empty()) fail("sampler: no logits to sample from (the vocabulary is empty)");
  cand_.resize(logits.size());  // allocates on the first call only (the vocabulary does not change)
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    // NaN would break the sort's ordering and +inf the softmax; both mean the model went wrong.
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
      fail("sampler: the logit of token {} is {}; the model produced an invalid value", i, x);
    cand_[i] = {static_cast<int32_t>(i), x, 0.0};
  }
  if (penalties_on()) {
    count_history();
    // cand_ is still in id order here, so cand_[id] is token id.
    for (const auto& [id, count] : counts_)
      if (id >= 0 && static_cast<size_t>(id) < cand_.size()) cand_[static_cast<size_t>(id)].logit = penalised(cand_[static_cast<size_t>(id)].logit, count);
  }
  n_ = cand_.size();
  if (max_logit() == -std::numeric_limits<float>::infinity())
    fail("sampler: every token's logit is -inf; there is nothing to sample");
}

double Sampler::max_logit() const {
  float mx = cand_[0].logit;
  for (size_t i = 1; i < n_; ++i) mx = std::max(mx, cand_[i].logit);
  return mx;
}

double Sampler::softmax(double temperature) {
  // In double: the cumulative sums of top-p and typical-p decide which tokens survive.
  const double mx = max_logit();
  double sum = 0.0;
  for (size_t i = 0; i < n_; ++i) sum += cand_[i].p = std::exp((static_cast<double>(cand_[i].logit) - mx) / temperature);
  for (size_t i = 0; i < n_; ++i) cand_[i].p /= sum;  // sum >= 1: the maximum contributes exp(0)
  return mx / temperature + std::log(sum);
}

void Sampler::keep_top_k() {
  const auto k = static_cast<size_t>(cfg_.top_k);
  if (k >= n_) return;
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<ptrdiff_t>(k), cand_.begin() + static_cast<ptrdiff_t>(n_),
                    higher_logit);
  n_ = k;
}

template <typename Pred>
size_t Sampler::move_to_front(size_t from, Pred pred) {
  // Like std::stable_partition for the selected elements, but in place with no allocation. Our
  // own loop, so the order the others are left in is the same with every standard library.
  size_t w = from;
  for (size_t i = from; i < n_; ++i)
    if (pred(cand_[i])) std::swap(cand_[w++], cand_[i]);
  return w;
}

template <typename Key>
void Sampler::keep_prefix_reaching(double mass, Key key) {
  // The plain way is to sort all survivors by key and walk; for a 150k vocabulary that costs
  // milliseconds per token, more than everything else in sampling. Instead: a histogram of the
  // mass over key buckets finds the bucket where the running mass reaches `mass`; everything
  // in the buckets before it is kept as it is, and only that one bucket is sorted and walked.
  // The result is exactly the sorted-prefix set: the bucket index is a non-decreasing function
  // of the key, so all of an earlier bucket comes before all of a later one.
  //
  // Keys are in logit units. Keys more than kSpan past the smallest share the last bucket: that
  // only costs speed if the walk ever reaches it (it is sorted like any other), and it does not,
  // since those tokens are negligible: for top-p their probability is below e^-64 of the best
  // one's; for typical-p, c lies within log(vocabulary) of the top logit, so below ~e^-50.
  // Tokens with p = 0 (-inf logits) have key +inf and land there too.
  constexpr size_t kBuckets = 2048;
  constexpr double kSpan = 64.0;
  double lo = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n_; ++i) lo = std::min(lo, key(cand_[i]));
  const auto bucket = [&](const Candidate& c) {
    const double d = (key(c) - lo) * (kBuckets / kSpan);
    return d < static_cast<double>(kBuckets - 1) ? static_cast<size_t>(d) : kBuckets - 1;
  };
  bucket_mass_.assign(kBuckets, 0.0);
  for (size_t i = 0; i < n_; ++i) bucket_mass_[bucket(cand_[i])] += cand_[i].p;
  size_t edge = 0;
  double acc = 0.0;
  while (edge + 1 < kBuckets && acc + bucket_mass_[edge] < mass) acc += bucket_mass_[edge++];

  const size_t front = move_to_front(0, [&](const Candidate& c) { return bucket(c) < edge; });
  const size_t end = move_to_front(front, [&](const Candidate& c) { return bucket(c) == edge; });
  std::sort(cand_.begin() + static_cast<ptrdiff_t>(front), cand_.begin() + static_cast<ptrdiff_t>(end),
            [&](const Candidate& a, const Candidate& b) {
              const double ka = key(a), kb = key(b);
              return ka < kb || (ka == kb && a.id < b.id);
            });
  size_t i = front;
  while (i < end) {
    acc += cand_[i++].p;
    if (acc >= mass) break;
  }
  n_ = i;  // >= 1: the edge bucket holds mass unless the total fell short by rounding (then all stay)
}

void Sampler::keep_typical() {
  const double log_z = softmax(1.0);
  double entropy = 0.0;
  for (size_t i = 0; i < n_; ++i)
    if (cand_[i].p > 0.0) entropy -= cand_[i].p * std::log(cand_[i].p);
  // -log p_i = logZ - logit_i, so the distance |-log p_i - H| equals |logit_i - c| with
  // c = logZ - H: ranking by the logit's distance from c ranks by typicality without a log per
  // token.
  const double c = log_z - entropy;
  keep_prefix_reaching(cfg_.typical_p, [c](const Candidate& x) { return std::fabs(static_cast<double>(x.logit) - c); });
}

void Sampler::keep_top_p() {
  softmax(1.0);
  keep_prefix_reaching(cfg_.top_p, [](const Candidate& x) { return -static_cast<double>(x.logit); });
}

void Sampler::keep_min_p() {
  // p_i >= min_p * p_max  <=>  exp(logit_i - max) >= min_p; the softmax's normaliser cancels.
  const double mx = max_logit();
  const double min_p = cfg_.min_p;
  // remove_if is stable, so the survivors keep their (deterministic) order.
  const auto end = std::remove_if(cand_.begin(), cand_.begin() + static_cast<ptrdiff_t>(n_), [&](const Candidate& x) {
    return std::exp(static_cast<double>(x.logit) - mx) < min_p;
  });
  n_ = static_cast<size_t>(end - cand_.begin());  // >= 1: the maximum has ratio 1
}

void Sampler::keep_allowed(std::span<const uint64_t> allowed) {
  if (allowed.empty()) return;
  size_t w = 0;
  for (size_t i = 0; i < n_; ++i) {
    const auto id = static_cast<size_t>(cand_[i].id);
    if (id / 64 < allowed.size() && (allowed[id / 64] >> (id % 64) & 1)) cand_[w++] = cand_[i];
  }
  if (w == 0) fail("sampler: the mask allows no token");
  n_ = w;
}

std::span<const Candidate> Sampler::distribution(std::span<const float> logits) { return distribution(logits, {}); }

std::span<const Candidate> Sampler::distribution(std::span<const float> logits, std::span<const uint64_t> allowed) {
  load(logits);
  keep_allowed(allowed);
  if (cfg_.temperature <= 0.0f) {
    // The filters always keep the most likely token, so greedy skips them. First maximum in id
    // order = the lowest id among ties, as argmax().
    size_t best = 0;
    for (size_t i = 1; i < n_; ++i)
      if (cand_[i].logit > cand_[best].logit) best = i;
    cand_[0] = cand_[best];
    cand_[0].p = 1.0;
    n_ = 1;
    return {cand_.data(), n_};
  }
  if (cfg_.top_k > 0) keep_top_k();
  if (cfg_.typical_p < 1.0f) keep_typical();
  if (cfg_.top_p < 1.0f) keep_top_p();
  if (cfg_.min_p > 0.0f) keep_min_p();
  softmax(cfg_.temperature);
  return {cand_.data(), n_};
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<const float> logits) { return sample(logits, {}); }

int32_t Sampler::sample(std::span<const float> logits, std::span<const uint64_t> allowed) {
  // Plain greedy needs no copy of the logits (with a mask: the first maximum among the allowed ids).
  if (cfg_.temperature <= 0.0f && !penalties_on()) {
    if (allowed.empty()) return argmax(logits);
    return masked_argmax(logits, allowed);
  }
  const std::span<const Candidate> c = distribution(logits, allowed);
  if (cfg_.temperature <= 0.0f) return c[0].id;
  // Inverse-CDF draw over the survivors in their deterministic order.
  const double r = uniform();
  double acc = 0.0;
  for (const Candidate& x : c) {
    acc += x.p;
    if (r < acc) return x.id;
  }
  // Rounding can leave the total a hair below 1 and r above it: that sliver goes to the last
  // token that has any probability (never to one with p = 0).
  for (size_t i = c.size(); i-- > 0;)
    if (c[i].p > 0.0) return c[i].id;
  return c[0].id;
}

Sampler::Verdict Sampler::verify(std::span<const float> logits, int32_t guess) {
  if (cfg_.temperature <= 0.0f) {
    const int32_t id = sample(logits);
    return {id, id == guess};
  }
  const std::span<const Candidate> c = distribution(logits);
  double p_guess = 0.0;
  for (const Candidate& x : c)
    if (x.id == guess) p_guess = x.p;
  // One uniform decides acceptance; a rejection takes a second for the residual draw.
  if (p_guess > 0.0 && uniform() < p_guess) return {guess, true};
  const double rest = 1.0 - p_guess;
  const double r = uniform() * rest;
  double acc = 0.0;
  int32_t last = -1;
  for (const Candidate& x : c) {
    if (x.id == guess || x.p <= 0.0) continue;
    acc += x.p;
    last = x.id;
    if (r < acc) return {x.id, false};
  }
  // Rounding: the sliver goes to the last token with probability; a guess that held all of it
  // (p = 1, accepted above unless uniform() was >= 1, which it never is) leaves nothing else.
  return {last >= 0 ? last : guess, last < 0};
}

}  // namespace npullm::genai
