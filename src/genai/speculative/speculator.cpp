#include "genai/speculative/speculator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"

namespace npullm::genai {

int64_t ngram_continuation(std::span<const int32_t> text, std::span<const int32_t> seq, int32_t nmax, int32_t nmin, int64_t near) {
  const int64_t T = static_cast<int64_t>(text.size()), S = static_cast<int64_t>(seq.size());
  for (int64_t n = std::min<int64_t>(nmax, S); n >= std::max<int32_t>(nmin, 1); --n) {
    const int32_t* tail = seq.data() + (S - n);
    int64_t best = -1;
    // An occurrence [s, s + n) needs a token after it: s + n < T.
    for (int64_t s = T - n - 1; s >= 0; --s) {
      if (!std::equal(tail, tail + n, text.data() + s)) continue;
      const int64_t end = s + n;
      if (near < 0) {  // the latest
        best = end;
        break;
      }
      if (best < 0 || std::llabs(end - near) < std::llabs(best - near)) best = end;
      if (end < near && best >= 0 && near - end > std::llabs(best - near)) break;  // only farther from here on
    }
    if (best >= 0) return best;
  }
  return -1;
}

std::vector<int32_t> prompt_lookup(std::span<const int32_t> seq, int64_t k, int32_t nmax, int32_t nmin) {
  if (k <= 0 || seq.size() < 2) return {};
  const int64_t at = ngram_continuation(seq, seq, nmax, nmin);
  if (at < 0) return {};
  const int64_t end = std::min<int64_t>(static_cast<int64_t>(seq.size()), at + k);
  return {seq.begin() + at, seq.begin() + end};
}

// ---------------------------------------------------------------------------------------------
// prediction

PredictionDraft::PredictionDraft(std::vector<int32_t> prediction, int64_t prompt_len, int32_t nmax, int32_t nmin)
    : pred_(std::move(prediction)), prompt_len_(prompt_len), nmax_(nmax), nmin_(nmin) {}

std::vector<int32_t> PredictionDraft::propose(std::span<const int32_t> seq, int64_t k) {
  const int64_t P = static_cast<int64_t>(pred_.size());
  const int64_t reply = static_cast<int64_t>(seq.size()) - prompt_len_;
  if (k <= 0 || P == 0 || reply < 1) return {};
  // The reply grew by reply - reply_len_ tokens since the last call: the cursor follows them.
  cursor_ = std::min(P, cursor_ + reply - reply_len_);
  reply_len_ = reply;
  const int32_t last = seq.back();
  int64_t from = -1;
  if (cursor_ > 0 && pred_[static_cast<size_t>(cursor_ - 1)] == last) {
    from = cursor_;  // still on the prediction
  } else {
    const std::span<const int32_t> tail = seq.subspan(static_cast<size_t>(prompt_len_));
    from = ngram_continuation(pred_, tail, nmax_, std::max(nmin_, 2), cursor_);
    // Only the last token differs from the prediction (a substituted token): go on from here.
    if (from < 0 && cursor_ < P && (reply == 1 || (cursor_ >= 2 && seq[seq.size() - 2] == pred_[static_cast<size_t>(cursor_ - 2)])))
      from = cursor_;
    if (from < 0 && nmin_ <= 1) from = ngram_continuation(pred_, tail, 1, 1, cursor_);
  }
  if (from < 0 || from >= P) return {};
  cursor_ = from;
  return {pred_.begin() + from, pred_.begin() + std::min(P, from + k)};
}

// ---------------------------------------------------------------------------------------------
// draft model

DraftModel::DraftModel(std::shared_ptr<npuw::LlmRuntime> rt, int64_t slot) : rt_(std::move(rt)), slot_(slot) {
  rt_->reset(slot_);  // whatever an earlier request left in the slot is not this sequence's
}
DraftModel::~DraftModel() = default;

std::span<const float> DraftModel::step(int32_t id) {
  const npuw::SlotToken t{slot_, id};
  return rt_->decode_batch({&t, 1});
}

std::vector<int32_t> DraftModel::propose(std::span<const int32_t> seq, int64_t k) {
  if (k <= 0 || seq.empty() || static_cast<int64_t>(seq.size()) + k > rt_->capacity()) return {};
  // Keep the rows of the common prefix; the logits after the whole sequence need its last token
  // run again when the rows already hold all of it.
  size_t common = 0;
  while (common < ids_.size() && common < seq.size() && ids_[common] == seq[common]) ++common;
  if (common == seq.size()) --common;
  if (!rt_->can_truncate(slot_, static_cast<int64_t>(common))) common = 0;
  rt_->rollback(slot_, static_cast<int64_t>(common));
  ids_.resize(common);
  // After a verify step the draft lacks 1 or 2 tokens (its last guess, the model's own token): a
  // few tokens run as decode steps, since the smallest prefill blob (16 rows or more) costs
  // several of them; a longer stretch (the prompt) is prefilled.
  const std::span<const int32_t> missing = seq.subspan(common);
  std::span<const float> logits;
  if (missing.size() <= kDecodeCatchUp) {
    for (int32_t id : missing) logits = step(id);
    decode_steps_ += static_cast<int64_t>(missing.size());
  } else {
    logits = rt_->prefill_slot(slot_, missing);
  }
  ids_.insert(ids_.end(), missing.begin(), missing.end());
  tokens_run_ += static_cast<int64_t>(missing.size());
  std::vector<int32_t> out;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t d = argmax(logits);
    out.push_back(d);
    if (j + 1 == k) break;
    logits = step(d);
    ids_.push_back(d);
    ++tokens_run_;
    ++decode_steps_;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// schedule and the whole

int64_t KSchedule::next() {
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return k_;
}

void KSchedule::record(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  if (adaptive_) k_ = accepted == drafted ? std::min(max_k_, k_ + 2) : std::max<int64_t>(1, k_ - 1);
  if (accepted == 0) {
    backoff_ = backoff_ == 0 ? 1 : std::min<int64_t>(backoff_ * 2, 32);
    pause_ = backoff_;
  } else {
    backoff_ = 0;
  }
}

Speculator::Speculator(const Speculation& s, int64_t max_k, int64_t prompt_len, std::vector<int32_t> prediction, DraftModel* draft,
                       StepCosts* costs)
    : s_(s),
      sched_(max_k, s.adaptive),
      pred_(std::move(prediction), prompt_len, s.ngram_max, s.ngram_min),
      draft_(draft),
      costs_(costs),
      draft_steps_at_start_(draft ? draft->decode_steps() : 0) {}

std::vector<int32_t> Speculator::propose(std::span<const int32_t> seq, int64_t room) {
  last_from_prediction_ = false;
  int64_t k = std::min(room, sched_.next());
  if (k <= 0) return {};
  // Acceptance per guess so far: taken guesses against the steps that lost one (each such step
  // ends at its first wrong guess), from an even start.
  if (costs_ && s_.adaptive) {
    const double a = static_cast<double>(accepted + 1) / static_cast<double>(accepted + missed_steps_ + 2);
    k = costs_->best_k(k, a);
    if (k <= 0) return {};
  }
  std::vector<int32_t> out;
  if (s_.draft_fn) {
    out = s_.draft_fn(std::vector<int32_t>(seq.begin(), seq.end()), k);
    if (static_cast<int64_t>(out.size()) > k) out.resize(static_cast<size_t>(k));
  }
  if (out.empty() && !pred_.empty()) {
    out = pred_.propose(seq, k);
    last_from_prediction_ = !out.empty();
  }
  if (out.empty() && s_.mode == SpecMode::Lookup) out = prompt_lookup(seq, k, s_.ngram_max, s_.ngram_min);
  if (out.empty() && s_.mode == SpecMode::Draft && draft_) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t steps0 = draft_->decode_steps();
    out = draft_->propose(seq, k);
    if (costs_)
      costs_->draft_took(draft_->decode_steps() - steps0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

void Speculator::record(int64_t n_drafted, int64_t n_accepted) {
  if (n_drafted <= 0) return;
  drafted += n_drafted;
  accepted += n_accepted;
  ++verify_steps;
  if (steps_by_guesses.size() <= static_cast<size_t>(n_drafted)) steps_by_guesses.resize(static_cast<size_t>(n_drafted) + 1, 0);
  ++steps_by_guesses[static_cast<size_t>(n_drafted)];
  if (n_accepted < n_drafted) ++missed_steps_;
  if (last_from_prediction_) {
    prediction_accepted += n_accepted;
    prediction_rejected += n_drafted - n_accepted;
  }
  sched_.record(n_drafted, n_accepted);
}

}  // namespace npullm::genai
