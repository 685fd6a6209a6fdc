// Speculative decoding's guessing side: where guesses come from and how many to make.
//
// A sequence is the prompt and the reply so far, its last token just chosen (not yet run). A
// guess is a token the model is expected to write next; the pipeline runs the last token and the
// guesses in one verify step (npuw::LlmRuntime::verify), keeps the longest run of guesses the
// sampler accepts (Sampler::verify) and gives up the rest by moving the write position back.
//
// Sources, tried in order until one has guesses:
//   1. the caller's own (Speculation::draft_fn: an oracle in benchmarks);
//   2. the prediction (OpenAI's Predicted Outputs): the text the reply is expected to be mostly.
//      A cursor follows where the reply is in it: while the reply keeps to it the guesses are
//      what comes next there; after an edit the reply is found again by its last n tokens
//      (n-gram match nearest the cursor), or, when only its last token differs (a substitution),
//      at the same place;
//   3. prompt lookup: the latest earlier occurrence in the sequence itself of its last n tokens
//      (n from ngram_max down to ngram_min), and what followed it;
//   4. a draft model: a second, smaller runtime of the same vocabulary with its own K/V rows,
//      brought to the sequence (the rows past the common prefix given up, the rest prefilled)
//      and run greedily for K tokens.
//
// How many (adaptive K, per sequence): from max_k, +2 after a step whose guesses were all
// accepted, -1 after one that lost some (Hugging Face's and openvino.genai's schedule), at least 1.
// A step that accepted none also pauses guessing for 1, 2, 4, ... 32 steps (reset by any accepted
// guess), so a source that keeps guessing wrong costs a verify step now and then, not every step.
#pragma once
#include <npullm/llm_pipeline.h>

#include "genai/speculative/step_costs.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace npullm::npuw {
class LlmRuntime;
}

namespace npullm::genai {

// The position in `text` right after an occurrence of the last n tokens of `seq` (n from nmax down
// to nmin; the first n that occurs wins), followed there by at least one token; -1 when none.
// Among occurrences: the one ending nearest `near` (ties: the later), or with near < 0 the latest.
// `seq` may be `text` itself: the suffix's own place (at the very end) is not an occurrence.
int64_t ngram_continuation(std::span<const int32_t> text, std::span<const int32_t> seq, int32_t nmax, int32_t nmin,
                           int64_t near = -1);

// Guesses from the sequence's own earlier tokens (prompt lookup).
std::vector<int32_t> prompt_lookup(std::span<const int32_t> seq, int64_t k, int32_t nmax, int32_t nmin);

// Guesses from a prediction of the reply (see above); one per generation.
class PredictionDraft {
 public:
  PredictionDraft(std::vector<int32_t> prediction, int64_t prompt_len, int32_t nmax, int32_t nmin);
  std::vector<int32_t> propose(std::span<const int32_t> seq, int64_t k);
  bool empty() const { return pred_.empty(); }

 private:
  std::vector<int32_t> pred_;
  int64_t prompt_len_;
  int32_t nmax_, nmin_;
  int64_t cursor_ = 0;     // position in pred_ aligned with the end of the reply
  int64_t reply_len_ = 0;  // reply length at the last propose()
};

// A draft model: one slot of its own runtime and the tokens whose K/V rows that slot holds. A
// server's draft runtime has a slot per sequence slot, shared by the DraftModels of its requests.
class DraftModel {
 public:
  explicit DraftModel(std::shared_ptr<npuw::LlmRuntime> rt, int64_t slot = 0);
  ~DraftModel();
  std::vector<int32_t> propose(std::span<const int32_t> seq, int64_t k);
  npuw::LlmRuntime& runtime() { return *rt_; }
  int64_t tokens_run() const { return tokens_run_; }  // draft tokens run (prefill + decode)
  int64_t decode_steps() const { return decode_steps_; }  // of them, run as decode steps

  static constexpr size_t kDecodeCatchUp = 4;  // missing tokens run as decode steps, not a prefill

 private:
  std::span<const float> step(int32_t id);  // one decode step of the slot

  std::shared_ptr<npuw::LlmRuntime> rt_;
  int64_t slot_;
  std::vector<int32_t> ids_;  // the rows in the slot's state
  int64_t tokens_run_ = 0, decode_steps_ = 0;
};

// Adaptive K with back-off (see above).
class KSchedule {
 public:
  explicit KSchedule(int64_t max_k, bool adaptive) : max_k_(max_k), k_(max_k), adaptive_(adaptive) {}
  int64_t next();  // guesses wanted now (0: paused)
  void record(int64_t drafted, int64_t accepted);
  int64_t k() const { return k_; }

 private:
  int64_t max_k_, k_;
  bool adaptive_;
  int64_t pause_ = 0, backoff_ = 0;
};

// One generation's speculation: sources, schedule and counts.
class Speculator {
 public:
  // `prediction`: the prediction's tokens (may be empty); `draft`: the draft model for
  // SpecMode::Draft (may be null otherwise). max_k is already capped by the verify blobs.
  // `costs` (may be null): what the steps cost; then each step makes the guesses that give the most
  // tokens for their cost at this generation's acceptance so far (StepCosts::best_k), at most the
  // schedule's K, and the draft model's time is reported to it.
  Speculator(const Speculation& s, int64_t max_k, int64_t prompt_len, std::vector<int32_t> prediction, DraftModel* draft,
             StepCosts* costs = nullptr);
  // Guesses to follow `seq`, at most `room`.
  std::vector<int32_t> propose(std::span<const int32_t> seq, int64_t room);
  // After a verify step of `drafted` guesses of which the first `accepted` were taken.
  void record(int64_t drafted, int64_t accepted);

  int64_t drafted = 0, accepted = 0, verify_steps = 0;
  std::vector<int64_t> steps_by_guesses;  // [k]: verify steps that checked k guesses
  int64_t prediction_accepted = 0, prediction_rejected = 0;
  // The draft model's decode steps during this generation (0 without one).
  int64_t draft_steps() const { return draft_ ? draft_->decode_steps() - draft_steps_at_start_ : 0; }

 private:
  Speculation s_;
  KSchedule sched_;
  PredictionDraft pred_;
  DraftModel* draft_;
  StepCosts* costs_;
  int64_t missed_steps_ = 0;  // steps that lost a guess: with `accepted`, the acceptance estimate
  int64_t draft_steps_at_start_ = 0;
  bool last_from_prediction_ = false;
};

}  // namespace npullm::genai
