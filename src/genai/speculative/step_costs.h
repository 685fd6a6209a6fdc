// What speculation's steps cost, learnt from the steps a pipeline runs, and the number of guesses
// that gives the most tokens for that cost.
//
// A verify step of K guesses runs the smallest verify blob of at least K + 1 rows, and costs r of
// that blob (its time over a decode step's): on a CPU whose 8-row matmuls are bound by arithmetic
// (Zen 5: r(3) about 1.1, r(7) about 2.2) three guesses often beat seven, while where the weights'
// stream bounds every size (r near 1) the most guesses win. With acceptance a per guess a step
// yields (1 - a^(K+1)) / (1 - a) tokens; a draft model adds K + 1 of its decode steps of cost c
// (K - 1 to guess, and the last guess and the model's own token to catch up with). The K chosen
// is the one of the most tokens per cost among the blobs' largest K up to the schedule's, after
// each blob has run once (a blob not yet timed is tried first, its K then) and a decode step has.
#pragma once
#include <cstdint>
#include <vector>

namespace npullm::genai {

// Expected tokens of a verify step of k guesses at acceptance a per guess, its own token included:
// (1 - a^(k+1)) / (1 - a), or k + 1 at a = 1.
double expected_tokens(double a, double k);

class StepCosts {
 public:
  explicit StepCosts(std::vector<int64_t> verify_sizes);  // the runtime's verify blob sizes (rows)

  void decode_took(double seconds);
  void verify_took(int64_t rows, double seconds);  // a verify step of `rows` rows (the blob holding them)
  void draft_took(int64_t steps, double seconds);  // a draft model running `steps` decode steps (a prompt's prefill: 0)

  // r of the blob that runs `rows` rows (0: not timed yet, or no decode step timed yet).
  double ratio(int64_t rows) const;
  double draft_cost() const;  // c: a draft decode step in the model's decode steps (0 until timed)

  // The guesses to make, at most k_max (>= 1), for acceptance a; 0 (a plain decode step) while no
  // decode step has been timed, since every r is relative to one.
  int64_t best_k(int64_t k_max, double a) const;

 private:
  int64_t blob(int64_t rows) const;  // index of the smallest size >= rows, or -1

  std::vector<int64_t> sizes_;
  std::vector<double> verify_s_;  // EMA of each blob's step time (0: none yet)
  double decode_s_ = 0, draft_s_ = 0;  // EMA of a decode step, of a draft decode step
};

}  // namespace npullm::genai
