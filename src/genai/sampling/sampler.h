// Picks the next token from logits. One Sampler serves one generation (or is reset() between
// generations); it owns a seeded generator and the recent token history the penalties need.
//
// The chain, in llama.cpp's default order (each step sees only what the previous one kept):
//
//   penalties -> top-k -> typical-p -> top-p -> min-p -> temperature -> draw
//
//   penalties    rewrite the logits of tokens seen in the last `penalty_last_n` accepted tokens
//                (repetition: positive logits / r, negative logits * r; then
//                 logit -= count * frequency_penalty + presence_penalty).
//   top-k        keeps the k highest logits (ties: the lower id wins).
//   typical-p    keeps the tokens whose surprisal -log p is closest to the entropy, the smallest
//                such set whose probability mass reaches typical_p (Meier et al., "Locally typical
//                sampling").
//   top-p        keeps the smallest set of most likely tokens whose mass reaches top_p.
//   min-p        keeps the tokens with p >= min_p * p(most likely token).
//   temperature  softmax(logit / T) over what is left; the draw uses these probabilities.
//
// Because the temperature comes after the filters, typical-p, top-p and min-p measure
// probabilities at temperature 1 (softmax of the penalised logits over the current survivors):
// the set they keep does not depend on T, as in llama.cpp. Every filter keeps at least one token.
//
// Greedy (temperature <= 0) applies the penalties, then takes the argmax (ties: the lowest id);
// the filters cannot change the argmax, so they are skipped, and no random numbers are used.
//
// Determinism: the same config and the same sequence of accept()/sample() calls give the same
// tokens on every run, machine and thread count. The generator is mt19937_64 (its output is fixed
// by the standard) turned into a uniform double by hand — no std distributions, whose outputs
// differ between standard libraries — and the draw walks the survivors in an order fixed by the
// logits alone (sorts use total orders with ties broken by id; no unordered containers), never
// one that an unspecified standard algorithm happened to leave behind.
//
// Allocation: buffers are sized on the first call and reused; after that, sample() and
// accept() do not touch the heap.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace npullm::genai {

struct SamplerConfig {
  // The first four members keep their historical order so positional initialisers stay valid.
  float temperature = 0.0f;  // <= 0: greedy (argmax after penalties, ties to the lowest id)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // in [0, 1]; 1: off
  uint64_t seed = 0;
  float min_p = 0.0f;                // in [0, 1]; 0: off
  float typical_p = 1.0f;            // in [0, 1]; 1: off
  float repetition_penalty = 1.0f;   // > 0; 1: off
  float presence_penalty = 0.0f;     // 0: off (negative values encourage repeats)
  float frequency_penalty = 0.0f;    // 0: off
  int32_t penalty_last_n = 64;       // how many recent accepted tokens the penalties look at; 0: off
};

// One surviving token of the chain and the probability the draw gives it.
struct Candidate {
  int32_t id;
  float logit;  // after the penalties, before the temperature
  double p;     // final probability (the survivors' p sum to 1)
};

class Sampler {
 public:
  // Throws npullm::Error when a setting is out of range (says which one and why).
  explicit Sampler(SamplerConfig cfg);

  // The next token. Advances the generator by one step unless greedy.
  int32_t sample(std::span<const float> logits);
  // The same over the tokens whose bit is set in `allowed` (bit id % 64 of word id / 64) alone:
  // the others are out before the chain runs. The mask hook of constrained decoding; the sampler
  // does not know why a token is allowed. At least one allowed token is required.
  int32_t sample(std::span<const float> logits, std::span<const uint64_t> allowed);

  // The survivors of the chain with their final probabilities, in the order the draw walks them
  // (greedy: the argmax alone, p = 1). Uses no random numbers. Valid until the next call.
  std::span<const Candidate> distribution(std::span<const float> logits);
  std::span<const Candidate> distribution(std::span<const float> logits, std::span<const uint64_t> allowed);

  // Speculative decoding's acceptance rule for a guess made without randomness (prompt lookup, a
  // prediction, a greedy draft model: the draft distribution q is all on `guess`). The standard
  // rule (Leviathan et al.; Chen et al.) accepts x ~ q with probability min(1, p(x) / q(x)) and
  // otherwise draws from max(0, p - q), normalised; with q one-hot that is: accept the guess with
  // probability p(guess), else draw from p with the guess taken out, renormalised. Then
  //   P(y) = p(guess) [y = guess] + (1 - p(guess)) p(y) / (1 - p(guess)) [y != guess] = p(y),
  // so the output keeps the sampler's distribution exactly. Greedy: the guess is accepted when it
  // is the token sample() would give, and that token is returned either way (no random numbers).
  // p is the final distribution of the chain (penalties and filters as in sample()).
  struct Verdict {
    int32_t id = 0;         // the token chosen: the guess when accepted
    bool accepted = false;
  };
  Verdict verify(std::span<const float> logits, int32_t guess);

  // Adds a token to the history the penalties look at (the pipeline decides which prompt and
  // generated tokens count). Ids outside the logits' range are kept but never penalise anything.
  void accept(int32_t id);
  // Back to the state right after construction: empty history, generator re-seeded.
  void reset();

  // The penalty step alone, in place (what sample() does to its copy of the logits).
  void apply_penalties(std::span<float> logits);

  const SamplerConfig& config() const { return cfg_; }

 private:
  bool penalties_on() const;
  float penalised(float logit, int32_t count) const;
  void count_history();  // fills counts_ with (id, occurrences) from the history window

  void load(std::span<const float> logits);  // cand_ := all tokens in id order, penalised
  void keep_allowed(std::span<const uint64_t> allowed);  // drops the tokens not in the mask, order kept
  void keep_top_k();
  void keep_typical();
  void keep_top_p();
  void keep_min_p();
  // Sets p over the survivors; returns log(sum of exp(logit / temperature)), the log normaliser.
  double softmax(double temperature);
  double max_logit() const;
  // Keeps the shortest run of survivors, in ascending `key` order (ties: lower id), whose mass
  // reaches `mass`; p must be set. `key` is in logit units.
  template <typename Key>
  void keep_prefix_reaching(double mass, Key key);
  // Moves the survivors in [from, n_) that satisfy pred to position `from` onwards, keeping their
  // order; returns the end of that run.
  template <typename Pred>
  size_t move_to_front(size_t from, Pred pred);

  double uniform();  // [0, 1) from 53 random bits

  SamplerConfig cfg_;
  std::mt19937_64 rng_;

  // History: a ring of the last penalty_last_n accepted ids.
  std::vector<int32_t> history_;
  size_t hist_next_ = 0, hist_size_ = 0;
  std::vector<int32_t> hist_sorted_;                  // scratch for counting
  std::vector<std::pair<int32_t, int32_t>> counts_;   // (id, count), ids ascending

  // Candidates: [0, n_) are the survivors, always in an order fixed by the logits alone (id order,
  // or the result of a sort under a total order, or of our own stable moves), never one an
  // unspecified std algorithm left behind.
  std::vector<Candidate> cand_;
  size_t n_ = 0;
  std::vector<double> bucket_mass_;  // scratch for keep_prefix_reaching
};

int32_t argmax(std::span<const float> logits);  // ties: the lowest id
// The k best (logit, id) pairs, best first, in (logit descending, id ascending) order: the argmax
// and its runners-up, for constrained decoding's "the next best allowed token" (out is replaced).
void top_logits(std::span<const float> logits, size_t k, std::vector<std::pair<float, int32_t>>& out);

}  // namespace npullm::genai
