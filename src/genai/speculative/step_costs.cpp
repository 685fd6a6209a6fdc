#include "genai/speculative/step_costs.h"

#include <cmath>

namespace npullm::genai {

namespace {

// Exponential moving averages: recent steps weigh most (the machine's load moves), a first sample
// is taken as it is.
constexpr double kKeep = 0.8;
void blend(double& ema, double x) { ema = ema == 0 ? x : kKeep * ema + (1 - kKeep) * x; }

}  // namespace

double expected_tokens(double a, double k) { return a >= 1.0 ? k + 1.0 : (1.0 - std::pow(a, k + 1.0)) / (1.0 - a); }

StepCosts::StepCosts(std::vector<int64_t> verify_sizes) : sizes_(std::move(verify_sizes)), verify_s_(sizes_.size(), 0.0) {}

void StepCosts::decode_took(double seconds) { blend(decode_s_, seconds); }

void StepCosts::verify_took(int64_t rows, double seconds) {
  const int64_t b = blob(rows);
  if (b >= 0) blend(verify_s_[static_cast<size_t>(b)], seconds);
}

void StepCosts::draft_took(int64_t steps, double seconds) {
  if (steps > 0) blend(draft_s_, seconds / static_cast<double>(steps));
}

int64_t StepCosts::blob(int64_t rows) const {
  for (size_t i = 0; i < sizes_.size(); ++i)
    if (sizes_[i] >= rows) return static_cast<int64_t>(i);
  return -1;
}

double StepCosts::ratio(int64_t rows) const {
  const int64_t b = blob(rows);
  if (b < 0 || decode_s_ == 0) return 0.0;
  return verify_s_[static_cast<size_t>(b)] / decode_s_;
}

double StepCosts::draft_cost() const { return decode_s_ == 0 ? 0.0 : draft_s_ / decode_s_; }

int64_t StepCosts::best_k(int64_t k_max, double a) const {
  if (k_max <= 1) return k_max;
  if (decode_s_ == 0) return 0;  // no decode step timed yet: this step is one (without guesses)
  // Candidates: each blob's largest K below k_max, and k_max; a blob not yet timed is tried first.
  std::vector<int64_t> ks;
  for (int64_t s : sizes_)
    if (s - 1 >= 1 && s - 1 < k_max) ks.push_back(s - 1);
  ks.push_back(k_max);
  for (int64_t k : ks)
    if (ratio(k + 1) == 0) return k;
  const double c = draft_cost();
  int64_t best = k_max;
  double best_v = -1;
  for (int64_t k : ks) {
    const double v = expected_tokens(a, static_cast<double>(k)) / (ratio(k + 1) + c * static_cast<double>(k + 1));
    if (v > best_v) best = k, best_v = v;
  }
  return best;
}

}  // namespace npullm::genai
