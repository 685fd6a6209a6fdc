#include "genai/serving/scheduler.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/trace.h"
#include "genai/chat/harmony_parser.h"
#include "genai/chat_format.h"
#include "genai/configs.h"
#include "genai/open_model.h"
#include "genai/grammar/structured.h"
#include "genai/sampling/sampler.h"
#include "genai/sampling/stop_rules.h"
#include "genai/speculative/speculator.h"
#include "genai/tokenizer/tokenizer.h"
#include "npuw/llm_runtime.h"

namespace npullm::genai {

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// Bucket bounds in milliseconds: first-token times span queueing and prefill (up to seconds),
// per-token times a decode step (a few ms to a few hundred).
std::vector<double> ttft_bounds() { return {5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}; }
std::vector<double> token_bounds() { return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}; }

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

void Histogram::add(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  counts[i]++;
  sum += v;
  count++;
}

// A request from submission to its last callback.
struct Scheduler::Active {
  uint64_t id = 0;
  ServeRequest r;
  Clock::time_point submitted, admitted, first_token, last_token;
  size_t prefilled = 0;              // prompt tokens whose rows are in the slot (cached + prefilled)
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<grammar::StructuredDecoder> structured;  // null: free text
  std::unique_ptr<StopTokens> stop_ids;
  std::unique_ptr<StopMatcher> stop;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<HarmonyParser> harmony;  // split_reasoning in a harmony chat: splits the reply
  ServeResult res;
  int32_t next = -1;                 // sampled, to be run by the next decode step
  std::vector<int32_t> jump;         // jump-forward: a sampled token and the tokens the grammar forces after it, for one prefill run
  std::vector<int32_t> queued;       // the same forced tokens (taken already) for the decode steps to run, one a step, beside other requests
  std::unique_ptr<Speculator> spec;  // speculative decoding: where this request's guesses come from (null: none)
  int64_t step_drafted = 0, step_taken = 0;  // the verify step being taken in (recorded at its end or the request's)
  bool decoding = false;             // the prompt is in; decode steps run it
  bool cancelled = false;

  // Generated text -> the request: as is, or split by the harmony parser into the visible reply
  // (on_text, res.text) and the reasoning (on_reasoning, res.reasoning). A call (a message to a
  // recipient) is part of the reply, not reasoning: it is handed on in the visible reply as a
  // harmony call message (HarmonyParser::render_call), which genai/tools' harmony tool-call parser
  // turns into a tool call. `at_end`: the reply ended.
  void say(std::string_view text, bool at_end = false) {
    std::string content(text), reasoning;
    if (harmony) {
      HarmonyParser::Delta d = harmony->feed(text);
      if (at_end) {
        HarmonyParser::Delta rest = harmony->finish();
        d.content += rest.content;
        d.reasoning += rest.reasoning;
        for (auto& c : rest.calls) d.calls.push_back(std::move(c));
      }
      for (const HarmonyParser::Call& c : d.calls) d.content += HarmonyParser::render_call(c);
      content = std::move(d.content);
      reasoning = std::move(d.reasoning);
    }
    if (!reasoning.empty()) {
      res.reasoning += reasoning;
      if (r.on_reasoning && !cancelled && !r.on_reasoning(reasoning)) cancelled = true;
    }
    if (!content.empty()) {
      res.text += content;
      if (r.on_text && !cancelled && !r.on_text(content)) cancelled = true;
    }
  }
};

struct Scheduler::Slot {
  int64_t id = 0;
  std::vector<int32_t> tokens;       // the ids whose K/V rows the slot holds, in order
  // SpecMode::Draft: the draft runtime's slot of the same index, made by the first request that
  // wants it and kept, so that a later request sharing a prefix with the rows it holds reuses them.
  std::unique_ptr<DraftModel> draft;
  std::unique_ptr<Active> req;       // null: free (tokens kept for prefix reuse)
  Clock::time_point last_used{};
  int64_t cached = 0, prompt = 0, generated = 0;  // of the current / last request
  double tps = 0;
};

Scheduler::Scheduler(const std::string& model_path, const PipelineConfig& cfg, const SchedulerConfig& sc)
    : cfg_(cfg), sc_(sc) {
  if (sc_.max_queue < 0) fail("the request queue cannot hold {} requests", sc_.max_queue);
  OpenedModel m = open_model(model_path, runtime_config(cfg, sc.parallel));
  tok_ = std::move(m.tok);
  rt_ = std::move(m.rt);
  if (!cfg.draft_model.empty()) draft_rt_ = open_draft(cfg, sc.parallel, rt_->n_vocab());  // a slot per sequence slot
  if (!rt_->config().verify_sizes.empty()) step_costs_ = std::make_unique<StepCosts>(rt_->config().verify_sizes);
  try {
    format_ = std::make_unique<ChatFormat>(cfg.chat_template, *tok_);
  } catch (const Error& e) {
    // Completions still work; chat requests get this message.
    format_error_ = e.what();
  }
  model_name_ = std::filesystem::path(model_path).stem().string();
  for (int64_t i = 0; i < rt_->slots(); ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  work_.ttft_ms = Histogram(ttft_bounds());
  work_.token_latency_ms = Histogram(token_bounds());
  publish();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

int64_t Scheduler::slot_capacity() const { return rt_->capacity(); }

int64_t Scheduler::n_vocab() const { return rt_->n_vocab(); }

std::string Scheduler::description() const {
  const auto& hp = rt_->hparams();
  return fmt::format("{} ({}, {} layers, {} dim, vocab {}), {} slots x K/V capacities [{}], batch sizes [{}], {}", hp.name, hp.arch,
                     hp.n_layer, hp.n_embd, hp.n_vocab, rt_->slots(), fmt::join(rt_->variants(), ","),
                     fmt::join(rt_->batch_sizes(), ","), rt_->device_name());
}

std::vector<int32_t> Scheduler::encode_chat(const std::vector<ChatMessage>& messages) const {
  if (!format_) fail("{}", format_error_);
  return format_->encode(*tok_, format_->render(messages, true));
}

std::vector<int32_t> Scheduler::encode_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& extra) const {
  if (!format_) fail("{}", format_error_);
  return format_->encode(*tok_, format_->render(messages, true, extra));
}

std::string Scheduler::chat_template_source() const { return format_ ? format_->source() : std::string(); }

std::vector<int32_t> Scheduler::encode_prompt(const std::string& text) const { return tok_->encode(text, true); }

uint64_t Scheduler::submit(ServeRequest r) {
  const int64_t n = static_cast<int64_t>(r.prompt_ids.size());
  if (n == 0) fail("the prompt has no tokens");
  if (n >= rt_->capacity())
    fail("the prompt has {} tokens, but a sequence slot holds {} (prompt and reply together)", n, rt_->capacity());
  if (r.gen.max_new_tokens < 1) fail("max_tokens must be at least 1");
  Sampler check(sampler_config(r.gen));  // throws on settings out of range, before queueing
  const Speculation& sp = r.gen.speculative;
  if (sp.mode == SpecMode::Draft && !draft_rt_) fail("speculative decoding with a draft model needs a draft model (serve --draft-model)");
  if (sp.max_k < 1) fail("speculative decoding: max_k must be at least 1 (got {})", sp.max_k);
  if (sp.ngram_min < 1 || sp.ngram_max < sp.ngram_min)
    fail("speculative decoding: n-gram lengths must satisfy 1 <= ngram_min <= ngram_max (got {} and {})", sp.ngram_min, sp.ngram_max);
  for (int32_t id : sp.prediction_ids)
    if (id < 0 || id >= rt_->n_vocab()) fail("speculative decoding: prediction id {} is not a token of this model", id);
  auto a = std::make_unique<Active>();
  // The grammar is compiled here, on the caller's thread (cached by source), never on the decode
  // loop's; a refused schema or grammar throws before anything is queued.
  if (r.gen.structured.kind != StructuredOutput::Kind::None) {
    std::vector<int32_t> ends = r.gen.stop_token_ids;
    if (!r.gen.ignore_eos && tok_->eos() >= 0) ends.push_back(tok_->eos());
    a->structured = grammar::StructuredDecoder::make(r.gen.structured, token_trie(), std::move(ends));
  }
  a->r = std::move(r);
  a->submitted = Clock::now();
  std::lock_guard lk(mu_);
  if (stopping_) fail("the server is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= sc_.max_queue)
    throw QueueFull(fmt::format("all {} slots are busy and {} requests are waiting; retry later", rt_->slots(), queue_.size()));
  a->id = next_id_++;
  const uint64_t id = a->id;
  queue_.push_back(std::move(a));
  cv_.notify_all();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard lk(mu_);
  cancelled_.push_back(id);
  cv_.notify_all();
}

SchedulerStatus Scheduler::status() const {
  std::lock_guard lk(mu_);
  SchedulerStatus s = status_;
  s.queue = static_cast<int64_t>(queue_.size());
  return s;
}

void Scheduler::shutdown() {
  {
    std::lock_guard lk(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

bool Scheduler::admit() {
  bool any = false;
  while (!queue_.empty()) {
    const std::vector<int32_t>& prompt = queue_.front()->r.prompt_ids;
    // The free slot sharing the longest prefix with the prompt; among equals, the least recently used.
    Slot* best = nullptr;
    size_t best_len = 0;
    for (auto& s : slots_) {
      if (s->req) continue;
      size_t len = common_prefix(s->tokens, prompt);
      // A sliding-window ring may have overwritten what a shorter prefix needs: then nothing is reused.
      if (len > 0 && !rt_->can_truncate(s->id, static_cast<int64_t>(std::min(len, prompt.size() - 1)))) len = 0;
      if (!best || len > best_len || (len == best_len && s->last_used < best->last_used)) {
        best = s.get();
        best_len = len;
      }
    }
    if (!best) break;
    std::unique_ptr<Active> a = std::move(queue_.front());
    queue_.pop_front();
    // At least the last prompt token is run: its logits give the first token.
    size_t keep = std::min(best_len, prompt.size() - 1);
    // Another slot, busy or free, may hold a longer prefix (a system prompt that every request
    // starts with, a conversation still running): its rows are copied in, far cheaper than
    // prefilling them (a row's bytes against a row's matmuls).
    const size_t copied = copy_prefix(*best, prompt, keep);
    if (copied == keep) {
      rt_->truncate(best->id, static_cast<int64_t>(keep));
      best->tokens.resize(keep);
    }
    keep = copied;
    a->prefilled = keep;
    a->res.cached_tokens = static_cast<int64_t>(keep);
    a->res.prompt_tokens = static_cast<int64_t>(prompt.size());
    a->res.slot = best->id;
    a->admitted = Clock::now();
    a->res.queue_ms = ms_between(a->submitted, a->admitted);
    const GenerationConfig& g = a->r.gen;
    a->sampler = std::make_unique<Sampler>(sampler_config(g));
    // The penalties look at the prompt too, as LLMPipeline's do.
    const size_t window = static_cast<size_t>(std::max(0, g.penalty_last_n));
    for (size_t i = prompt.size() > window ? prompt.size() - window : 0; i < prompt.size(); ++i) a->sampler->accept(prompt[i]);
    a->stop_ids = std::make_unique<StopTokens>(g.stop_token_ids);
    if (!g.ignore_eos && tok_->eos() >= 0) a->stop_ids->add(tok_->eos());
    a->stop = std::make_unique<StopMatcher>(g.stop_strings);
    // Speculation where the request asks for it and the runtime has verify blobs; never with a
    // grammar (a server-wide --spec steps aside for structured requests: it changes no text).
    const Speculation& sp = g.speculative;
    if (sp.requested() && !a->structured && rt_->max_verify_rows(best->id) > 1) {
      std::vector<int32_t> pred;
      if (!sp.prediction_ids.empty()) pred = sp.prediction_ids;
      else if (!sp.prediction.empty()) pred = tok_->encode(sp.prediction, /*add_bos=*/false);
      if (sp.mode == SpecMode::Draft && !best->draft) best->draft = std::make_unique<DraftModel>(draft_rt_, best->id);
      a->spec = std::make_unique<Speculator>(sp, std::min(sp.max_k, rt_->max_verify_rows(best->id) - 1),
                                             static_cast<int64_t>(prompt.size()), std::move(pred),
                                             sp.mode == SpecMode::Draft ? best->draft.get() : nullptr, step_costs_.get());
    }
    // After BOS alone, SPM's dummy-prefix space of the first piece is not text.
    a->decoder = std::make_unique<StreamDecoder>(*tok_, prompt.size() == 1 && prompt[0] == tok_->bos());
    if (a->r.split_reasoning && format_ && format_->harmony()) {
      a->harmony = std::make_unique<HarmonyParser>();
      for (int32_t id : format_->reply_end_ids(*tok_)) a->stop_ids->add(id);
    }
    best->cached = a->res.cached_tokens;
    best->prompt = a->res.prompt_tokens;
    best->generated = 0;
    best->tps = 0;
    best->req = std::move(a);
    work_.cached_tokens += keep;
    work_.prompt_tokens += prompt.size();
    any = true;
  }
  return any;
}

void Scheduler::loop() {
  if (trace::on()) trace::name_thread("scheduler");
  for (;;) {
    std::vector<std::unique_ptr<Active>> dropped;  // cancelled while waiting
    bool stop_now = false;
    {
      std::unique_lock lk(mu_);
      auto busy = [&] {
        for (auto& s : slots_)
          if (s->req) return true;
        return false;
      };
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !cancelled_.empty() || busy(); });
      if (stopping_) {
        for (auto& a : queue_) dropped.push_back(std::move(a));
        queue_.clear();
        for (auto& s : slots_)
          if (s->req) s->req->cancelled = true;
        stop_now = !busy();
      }
      for (uint64_t id : cancelled_) {
        auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& a) { return a->id == id; });
        if (it != queue_.end()) {
          dropped.push_back(std::move(*it));
          queue_.erase(it);
        }
        for (auto& s : slots_)
          if (s->req && s->req->id == id) s->req->cancelled = true;
      }
      cancelled_.clear();
      // Published at once, so that status() never shows a request in neither the queue nor a slot.
      if (!stopping_ && admit()) publish();
    }
    for (auto& a : dropped) {
      a->res.finish = FinishReason::Cancelled;
      work_.requests_cancelled++;
      if (a->r.on_done) a->r.on_done(a->res);
    }
    for (auto& s : slots_)
      if (s->req && s->req->cancelled) finish(*s, FinishReason::Cancelled);
    if (stop_now) {
      std::lock_guard lk(mu_);
      publish();
      return;
    }
    prefill_step();
    decode_step();
    std::lock_guard lk(mu_);
    publish();
  }
}

size_t Scheduler::copy_prefix(Slot& to, const std::vector<int32_t>& prompt, size_t have) {
  // At least the last prompt token is run: its logits give the first token.
  Slot* donor = nullptr;
  size_t most = have;
  for (auto& s : slots_) {
    if (s.get() == &to) continue;
    const size_t k = std::min(common_prefix(s->tokens, prompt), prompt.size() - 1);
    if (k >= most + kMinCopiedRows) {
      donor = s.get();
      most = k;
    }
  }
  if (!donor || !rt_->copy_rows(donor->id, to.id, static_cast<int64_t>(most))) return have;
  to.tokens.assign(prompt.begin(), prompt.begin() + static_cast<long>(most));
  // Counted as the rows gained: the `have` rows were the slot's own (kept, or prefilled by this
  // request), so copied_prefix_rows stays a part of cached_tokens.
  work_.copied_prefix_rows += most - have;
  return most;
}

void Scheduler::prefill_step() {
  // The earliest admitted request still prefilling gets one chunk.
  Slot* pick = nullptr;
  for (auto& s : slots_)
    if (s->req && !s->req->decoding && (!pick || s->req->id < pick->req->id)) pick = s.get();
  if (!pick) return;
  Active& a = *pick->req;
  trace::Scope span("genai", a.jump.empty() ? "prefill step" : "jump-forward step");
  if (span.active())
    span.set_args(fmt::format(R"({{"request":{},"slot":{},"prefilled":{},"prompt":{}}})", a.id, pick->id, a.prefilled, a.r.prompt_ids.size()));
  if (!a.jump.empty()) {  // a reply's forced stretch, run like a prompt chunk
    std::span<const float> logits;
    try {
      logits = rt_->prefill_slot(pick->id, a.jump);
    } catch (const Error& e) {
      finish(*pick, FinishReason::Length, e.what());
      return;
    }
    pick->tokens.insert(pick->tokens.end(), a.jump.begin(), a.jump.end());
    a.jump.clear();
    take_token(*pick, logits);
    return;
  }
  const std::vector<int32_t>& prompt = a.r.prompt_ids;
  // A request admitted beside one that was still prefilling the same prefix (a system prompt that
  // two clients sent at once) takes those rows once they are in, rather than prefilling them too.
  // Prefill goes to the earliest request first, so by now the other has run the shared part.
  if (const size_t now = copy_prefix(*pick, prompt, a.prefilled); now != a.prefilled) {
    work_.cached_tokens += now - a.prefilled;
    a.res.cached_tokens = static_cast<int64_t>(now);
    pick->cached = a.res.cached_tokens;
    a.prefilled = now;
  }
  const size_t n = std::min(prompt.size() - a.prefilled, static_cast<size_t>(rt_->config().prefill_chunk));
  const std::span<const int32_t> chunk(prompt.data() + a.prefilled, n);
  std::span<const float> logits;
  try {
    logits = rt_->prefill_slot(pick->id, chunk);
  } catch (const Error& e) {
    finish(*pick, FinishReason::Length, e.what());
    return;
  }
  work_.prefill_chunks++;
  pick->tokens.insert(pick->tokens.end(), chunk.begin(), chunk.end());
  a.prefilled += n;
  if (a.prefilled == prompt.size()) take_token(*pick, logits);
}

void Scheduler::decode_step() {
  std::vector<npuw::SlotToken> batch;
  std::vector<Slot*> rows;
  for (auto& s : slots_)
    if (s->req && s->req->decoding) {
      batch.push_back({s->id, s->req->next});
      rows.push_back(s.get());
    }
  const auto start = Clock::now();
  if (batch.empty()) {
    decoding_before_ = false;
    return;
  }
  trace::Scope span("genai", "decode step");
  if (span.active()) {
    std::string slots;
    for (const npuw::SlotToken& t : batch) slots += fmt::format("{}{}", slots.empty() ? "" : ",", t.slot);
    span.set_args(fmt::format(R"({{"slots":[{}]}})", slots));
  }
  if (decoding_before_) work_.longest_decode_stall_ms = std::max(work_.longest_decode_stall_ms, ms_between(last_decode_end_, start));
  if (static_cast<int64_t>(rows.size()) <= sc_.spec_max_sequences && speculative_step(rows)) return;
  std::span<const float> logits;
  try {
    logits = rt_->decode_batch(batch);
  } catch (const Error& e) {
    for (Slot* s : rows) finish(*s, FinishReason::Length, e.what());
    decoding_before_ = false;
    return;
  }
  // The cost a verify step's is measured against: steps of as few sequences as speculate (one or two
  // rows read the weights once, as a verify step does).
  if (step_costs_ && static_cast<int64_t>(batch.size()) <= sc_.spec_max_sequences)
    step_costs_->decode_took(ms_between(start, Clock::now()) / 1e3);
  const size_t V = static_cast<size_t>(rt_->n_vocab());
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r]->tokens.push_back(batch[r].id);
    take_next(*rows[r], logits.subspan(r * V, V));
  }
  const auto end = Clock::now();
  last_decode_end_ = end;
  decoding_before_ = true;
  work_.decode_steps++;
  work_.padded_rows += static_cast<uint64_t>(rt_->stats().last_batch - rt_->stats().last_active);
  recent_.emplace_back(end, static_cast<int64_t>(batch.size()));
}

// A decode step that also checks guesses: each decoding slot runs its next token and the guesses
// its speculator makes (none for a slot without one) in one verify run, and takes, row by row, the
// guesses its sampler accepts (Sampler::verify, in order, the sampler's history growing as in
// LLMPipeline), then one token more (the replacement of the first refused guess, or the token after
// the last one). The rows of refused guesses are given up by moving the write position back. False
// (nothing run) when no slot has a guess: the caller runs a plain decode step.
bool Scheduler::speculative_step(const std::vector<Slot*>& rows) {
  const std::vector<int64_t>& sizes = rt_->config().verify_sizes;  // ascending
  const int64_t total_rows = sizes.empty() ? 0 : sizes.back();
  if (total_rows <= static_cast<int64_t>(rows.size())) return false;
  std::vector<std::vector<int32_t>> runs(rows.size());
  int64_t left = total_rows - static_cast<int64_t>(rows.size());  // verify rows left for guesses
  bool any = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    Slot& s = *rows[r];
    Active& a = *s.req;
    runs[r].assign(1, a.next);
    if (!a.spec || left <= 0) continue;
    // Room: the verify blob's rows, the slot's capacity (the next token's row first), the tokens
    // still to generate (the last row's logits give one more).
    const int64_t room = std::min({left, rt_->max_verify_rows(s.id) - 1,
                                   a.r.gen.max_new_tokens - static_cast<int64_t>(a.res.ids.size()) - 1});
    if (room <= 0) continue;
    std::vector<int32_t> seq = s.tokens;
    seq.push_back(a.next);
    const std::vector<int32_t> guesses = a.spec->propose(seq, room);
    runs[r].insert(runs[r].end(), guesses.begin(), guesses.end());
    left -= static_cast<int64_t>(guesses.size());
    any = any || !guesses.empty();
  }
  if (!any) return false;
  trace::Scope span("genai", "verify step");
  const auto start = Clock::now();
  std::vector<npuw::SlotRun> slot_runs;
  for (size_t r = 0; r < rows.size(); ++r) slot_runs.push_back({rows[r]->id, runs[r]});
  std::span<const float> verified;
  try {
    verified = rt_->verify_batch(slot_runs);
  } catch (const Error& e) {
    for (Slot* s : rows) finish(*s, FinishReason::Length, e.what());
    decoding_before_ = false;
    return true;
  }
  if (step_costs_) {  // the blob that held all the step's rows
    size_t total = 0;
    for (const auto& run : runs) total += run.size();
    step_costs_->verify_took(static_cast<int64_t>(total), ms_between(start, Clock::now()) / 1e3);
  }
  if (decoding_before_) work_.longest_decode_stall_ms = std::max(work_.longest_decode_stall_ms, ms_between(last_decode_end_, start));
  const size_t V = static_cast<size_t>(rt_->n_vocab());
  size_t off = 0;
  int64_t made = 0;
  work_.spec_verify_steps++;
  for (size_t r = 0; r < rows.size(); ++r) {
    Slot& s = *rows[r];
    const std::vector<int32_t>& run = runs[r];
    const uint64_t id = s.req->id;
    const size_t guesses = run.size() - 1;
    s.tokens.push_back(run[0]);  // the next token's row is in
    s.req->step_drafted = static_cast<int64_t>(guesses);
    s.req->step_taken = 0;
    work_.spec_drafted += guesses;
    for (size_t j = 0;; ++j) {
      Active& a = *s.req;
      const std::span<const float> logits = verified.subspan((off + j) * V, V);
      ++made;
      if (j == guesses) {  // past the guesses (or none): one token sampled as usual
        take_next(s, logits);
        break;
      }
      Sampler::Verdict v;
      {
        trace::Scope sample("genai", "sample");
        v = a.sampler->verify(logits, run[j + 1]);
      }
      if (!v.accepted) {
        take_id(s, v.id);
        break;
      }
      a.step_taken++;
      work_.spec_accepted++;
      if (work_.spec_accepted_at.size() <= j) work_.spec_accepted_at.resize(j + 1, 0);
      work_.spec_accepted_at[j]++;
      s.tokens.push_back(run[j + 1]);  // its row is in
      take_id(s, run[j + 1]);
      if (!s.req || s.req->id != id) break;  // the request ended with it
    }
    if (s.req && s.req->id == id && s.req->spec) {  // the step is over: the schedule learns from it
      s.req->spec->record(s.req->step_drafted, s.req->step_taken);
      s.req->step_drafted = 0;
    }
    // The rows of refused guesses (and, for a request that ended, of those it never reached).
    if (rt_->position(s.id) > static_cast<int64_t>(s.tokens.size())) rt_->rollback(s.id, static_cast<int64_t>(s.tokens.size()));
    off += run.size();
  }
  const auto end = Clock::now();
  last_decode_end_ = end;
  decoding_before_ = true;
  work_.decode_steps++;
  recent_.emplace_back(end, made);
  return true;
}

std::shared_ptr<const grammar::TokenTrie> Scheduler::token_trie() {
  std::call_once(trie_once_, [&] { trie_ = grammar::make_token_trie(*tok_); });
  return trie_;
}

void Scheduler::take_next(Slot& s, std::span<const float> logits) {
  Active& a = *s.req;
  if (a.queued.empty()) return take_token(s, logits);
  a.next = a.queued.front();  // a forced token, taken already: only its row is still to run
  a.queued.erase(a.queued.begin());
}

void Scheduler::take_token(Slot& s, std::span<const float> logits) {
  Active& a = *s.req;
  if (a.structured && a.structured->must_end()) return finish(s, FinishReason::Eos);  // nothing may follow
  int32_t id;
  try {
    trace::Scope span("genai", "sample");
    id = a.structured ? a.structured->sample(*a.sampler, logits) : a.sampler->sample(logits);
  } catch (const Error& e) {
    return finish(s, FinishReason::Length, e.what());
  }
  take_id(s, id);
}

void Scheduler::take_id(Slot& s, int32_t id) {
  Active& a = *s.req;
  const auto now = Clock::now();
  if (a.res.ids.empty() && a.first_token == Clock::time_point{}) {
    a.first_token = now;
    a.res.ttft_ms = ms_between(a.submitted, now);
    work_.ttft_ms.add(a.res.ttft_ms);
  } else {
    work_.token_latency_ms.add(ms_between(a.last_token, now));
  }
  a.last_token = now;
  a.decoding = false;
  if (a.stop_ids->contains(id)) {
    finish(s, id == tok_->eos() && !a.r.gen.ignore_eos ? FinishReason::Eos : FinishReason::StopToken);
    return;
  }
  if (a.structured) a.structured->accept(id);
  a.sampler->accept(id);
  a.res.ids.push_back(id);
  s.generated = static_cast<int64_t>(a.res.ids.size());
  work_.generated_tokens++;
  const StopStep step = a.stop->push(a.decoder->push(id));
  a.say(step.text);
  if (step.stopped) return finish(s, FinishReason::StopString);
  if (a.cancelled) return finish(s, FinishReason::Cancelled);
  if (static_cast<int64_t>(a.res.ids.size()) >= a.r.gen.max_new_tokens) return finish(s, FinishReason::Length);
  // The slot is full. (Its rows are its tokens; a verify step's rows past them are not yet given up.)
  if (static_cast<int64_t>(s.tokens.size()) >= rt_->capacity()) return finish(s, FinishReason::Length);
  // Jump-forward (as LLMPipeline does): the tokens the grammar forces after this one are taken now
  // and go with it into one prefill run (prefill_step) instead of a decode step each, while no
  // other request holds a slot. A prefill run is this slot's alone: the other rows would wait through
  // it, and it costs several batched decode steps, each of which gives every decoding row a token
  // (TinyLlama-shape Q4_0, bench/schemas/invoice.json, four sequences: 75 % of free decode with
  // every stretch jumped). Beside others, the same tokens are queued for the decode steps instead,
  // one a step with no sampling: the same ids either way, so the reply does not depend on the load.
  if (a.structured && a.r.gen.structured.jump_forward) {
    std::vector<int32_t> forced = a.structured->forced_tokens(*tok_);
    const auto left = static_cast<size_t>(std::max<int64_t>(0, a.r.gen.max_new_tokens - static_cast<int64_t>(a.res.ids.size()) - 1));
    if (forced.size() > left) forced.resize(left);
    if (static_cast<int64_t>(s.tokens.size()) + 1 + static_cast<int64_t>(forced.size()) > rt_->capacity()) forced.clear();
    std::vector<int32_t> run{id};
    for (int32_t f : forced) {
      if (!a.structured->accept(f)) break;
      a.sampler->accept(f);
      a.res.ids.push_back(f);
      a.res.forced_tokens++;
      run.push_back(f);
      work_.generated_tokens++;
      const StopStep fs = a.stop->push(a.decoder->push(f));
      a.say(fs.text);
      if (fs.stopped) return finish(s, FinishReason::StopString);
      if (a.cancelled) return finish(s, FinishReason::Cancelled);
    }
    s.generated = static_cast<int64_t>(a.res.ids.size());
    const auto alone = [&] { return std::none_of(slots_.begin(), slots_.end(), [&](const auto& o) { return o.get() != &s && o->req; }); };
    if (run.size() > 1 && alone()) {
      a.jump = std::move(run);
      return;  // decoding stays false: prefill_step runs it
    }
    a.queued.assign(run.begin() + 1, run.end());
  }
  a.next = id;
  a.decoding = true;
}

void Scheduler::finish(Slot& s, FinishReason why, const std::string& error) {
  Active& a = *s.req;
  if (why != FinishReason::StopString && error.empty()) {
    a.say(a.stop->push(a.decoder->flush()).text);
    a.say(a.stop->flush().text);
  }
  if (error.empty()) a.say("", /*at_end=*/true);
  a.res.finish = why;
  a.res.error = error;
  if (a.spec) {
    if (a.step_drafted > 0) a.spec->record(a.step_drafted, a.step_taken);  // a verify step it ended in
    a.step_drafted = 0;
    a.res.spec_drafted = a.spec->drafted;
    a.res.spec_accepted = a.spec->accepted;
    a.res.prediction_accepted = a.spec->prediction_accepted;
    a.res.prediction_rejected = a.spec->prediction_rejected;
  }
  const double span_ms = ms_between(a.first_token, a.last_token);
  a.res.decode_tps = a.res.ids.size() > 1 && span_ms > 0 ? static_cast<double>(a.res.ids.size() - 1) * 1000.0 / span_ms : 0.0;
  s.tps = a.res.decode_tps;
  s.last_used = Clock::now();
  if (!error.empty()) {
    // The slot's rows may be half written: forget them.
    rt_->reset(s.id);
    s.tokens.clear();
    work_.requests_failed++;
  } else if (why == FinishReason::Cancelled) {
    work_.requests_cancelled++;
  } else {
    work_.requests_done++;
  }
  if (trace::on()) trace_request(a, s.last_used);
  std::unique_ptr<Active> done = std::move(s.req);
  {
    // Whoever learns of the end from on_done sees it in status() too.
    std::lock_guard lk(mu_);
    publish();
  }
  if (done->r.on_done) done->r.on_done(done->res);
}

// A finished request's spans on its own track of the trace: waiting for a slot, prefilling (to
// its first token) and decoding (to its end).
void Scheduler::trace_request(const Active& a, Clock::time_point end) {
  const auto ns = [](Clock::time_point t) { return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count(); };
  const Clock::time_point first = a.first_token == Clock::time_point{} ? end : a.first_token;
  trace::request_span(a.id, "queue", ns(a.submitted), ns(a.admitted), fmt::format(R"({{"slot":{}}})", a.res.slot));
  trace::request_span(a.id, "prefill", ns(a.admitted), ns(first),
                      fmt::format(R"({{"prompt_tokens":{},"cached_tokens":{}}})", a.res.prompt_tokens, a.res.cached_tokens));
  trace::request_span(a.id, "decode", ns(first), ns(end),
                      fmt::format(R"({{"tokens":{},"forced_tokens":{},"finish":"{}"}})", a.res.ids.size(), a.res.forced_tokens,
                                  finish_reason_name(a.res.finish)));
}

void Scheduler::publish() {
  const auto now = Clock::now();
  while (!recent_.empty() && ms_between(recent_.front().first, now) > 1000.0) recent_.pop_front();
  int64_t recent_tokens = 0;
  for (const auto& r : recent_) recent_tokens += r.second;
  const double window_ms = recent_.empty() ? 0.0 : std::max(ms_between(recent_.front().first, now), 250.0);
  SchedulerStatus& st = status_;
  st = work_;
  st.decode_tps = window_ms > 0 ? static_cast<double>(recent_tokens) * 1000.0 / window_ms : 0.0;
  const npuw::RuntimeStats& rs = rt_->stats();
  st.last_batch = rs.last_batch;
  st.last_capacity = rs.last_capacity;
  st.last_active = rs.last_active;
  st.parallel = rt_->slots();
  st.slot_capacity = rt_->capacity();
  st.capacities = rt_->variants();
  st.batch_sizes = rt_->batch_sizes();
  st.slots.clear();
  st.busy_slots = 0;
  st.kv_rows_in_use = 0;
  for (auto& s : slots_) {
    SlotStatus v;
    v.id = s->id;
    v.state = !s->req ? "idle" : s->req->decoding ? "decode" : "prefill";
    v.kv_rows = rt_->position(s->id);
    v.capacity = rt_->capacity();
    v.variant = rt_->variant_capacity(std::min(v.kv_rows + 1, v.capacity));
    v.cached_tokens = s->cached;
    v.prompt_tokens = s->prompt;
    v.generated = s->generated;
    v.tps = s->tps;
    if (s->req) {
      st.busy_slots++;
      st.kv_rows_in_use += v.kv_rows;
      const double ms = ms_between(s->req->first_token, s->req->last_token);
      if (s->req->res.ids.size() > 1 && ms > 0) v.tps = static_cast<double>(s->req->res.ids.size() - 1) * 1000.0 / ms;
    }
    st.slots.push_back(v);
  }
}

}  // namespace npullm::genai
