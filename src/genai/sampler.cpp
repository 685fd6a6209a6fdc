#include "genai/sampler.h"

#include <algorithm>
#include <cmath>

namespace npullm::genai {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<const float> logits) {
  if (cfg_.temperature <= 0.0f) return argmax(logits);
  cand_.clear();
  for (size_t i = 0; i < logits.size(); ++i) cand_.emplace_back(logits[i], static_cast<int32_t>(i));
  // Highest logit first; ties by id so the order never depends on the sort's stability.
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = cand_.size();
  if (cfg_.top_k > 0 && static_cast<size_t>(cfg_.top_k) < keep) {
    keep = static_cast<size_t>(cfg_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<ptrdiff_t>(keep), cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(keep);
  // Softmax at the temperature (in double: the sums below decide which tokens survive top-p).
  std::vector<double> p(keep);
  const double mx = cand_[0].first;
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((cand_[i].first - mx) / cfg_.temperature);
  for (double& x : p) x /= sum;
  if (cfg_.top_p < 1.0f) {
    // The smallest prefix whose mass reaches top_p.
    double mass = 0.0;
    size_t n = 0;
    while (n < keep && mass < cfg_.top_p) mass += p[n++];
    keep = std::max<size_t>(n, 1);
    p.resize(keep);
    sum = mass;
    for (double& x : p) x /= sum;
  }
  double r = uniform(), acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (r < acc) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace npullm::genai
