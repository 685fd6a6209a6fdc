// LLMPipeline: the public API (include/npullm/llm_pipeline.h) over npuw's LlmRuntime.
//
// The conversation is a token sequence: `kv_ids` are the tokens whose K/V rows are in the runtime's
// state (rows [0, position())), `pending` the tokens that belong to the conversation but have not
// been run yet (the last sampled token of a reply). A chat turn renders the template, takes the
// text that is new since the previous turn, tokenizes only that, and prefills pending + new.
// genai decides *when* to shift or re-prefill; npuw does the K/V work.
#include <npullm/llm_pipeline.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/trace.h"
#include "genai/chat/harmony_parser.h"
#include "genai/chat_format.h"
#include "genai/configs.h"
#include "genai/grammar/compile.h"
#include "genai/grammar/structured.h"
#include "genai/open_model.h"
#include "genai/sampling/sampler.h"
#include "genai/sampling/stop_rules.h"
#include "genai/speculative/speculator.h"
#include "genai/tokenizer/tokenizer.h"
#include "npuw/llm_runtime.h"

namespace npullm {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Eos: return "eos";
    case FinishReason::StopToken: return "stop_token";
    case FinishReason::StopString: return "stop_string";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

void warn(const std::string& msg) { fmt::print(stderr, "npullm: warning: {}\n", msg); }

}  // namespace

struct LLMPipeline::Impl {
  PipelineConfig cfg;
  std::unique_ptr<npuw::LlmRuntime> rt;
  std::unique_ptr<genai::Tokenizer> tok;
  std::unique_ptr<genai::ChatFormat> format;  // created on start_chat
  std::unique_ptr<genai::DraftModel> draft;   // PipelineConfig::draft_model: guesses for SpecMode::Draft
  std::unique_ptr<genai::StepCosts> step_costs;  // with verify blobs: what decode and verify steps cost here

  std::vector<int32_t> kv_ids, pending;
  std::shared_ptr<const genai::grammar::TokenTrie> token_trie;  // built on the first structured request
  bool chatting = false;
  bool history_dirty = false;                 // set_history(): the next turn renders and prefills all
  std::vector<ChatMessage> messages;
  int64_t n_keep = 1;

  // Per-call accounting.
  double prefill_ms = 0, decode_ms = 0;
  int64_t decoded = 0, reprefills = 0;
  int64_t forced_tokens = 0, forced_prefill_tokens = 0;  // jump-forward: tokens forced, tokens it prefilled

  double load_ms = 0;  // construction: model opened, blobs loaded or compiled, tokenizer built

  Impl(const std::string& path, const PipelineConfig& c) : cfg(c) {
    const auto t0 = Clock::now();
    genai::OpenedModel m = genai::open_model(path, genai::runtime_config(c));
    tok = std::move(m.tok);
    rt = std::move(m.rt);
    if (!c.draft_model.empty()) draft = std::make_unique<genai::DraftModel>(genai::open_draft(c, 1, rt->n_vocab()));
    load_ms = ms_between(t0, Clock::now());
  }

  int64_t cap() const { return rt->capacity(); }

  // The chat format, built on first use (it throws for a model without a template).
  genai::ChatFormat& chat_format() {
    if (!format) format = std::make_unique<genai::ChatFormat>(cfg.chat_template, *tok);
    return *format;
  }

  void clear_state() {
    rt->reset();
    kv_ids.clear();
    pending.clear();
  }

  // Chat text -> ids: BOS is added unless the template already wrote it; special tokens parsed.
  std::vector<int32_t> encode_chat(const std::string& text) const {
    return format ? format->encode(*tok, text) : tok->encode(text, /*add_bos=*/true, /*parse_special=*/true);
  }

  int64_t keep_for(const std::vector<int32_t>& ids) const {
    const int64_t k = cfg.n_keep >= 0 ? cfg.n_keep : n_keep;
    return std::clamp<int64_t>(k, 0, std::min<int64_t>(static_cast<int64_t>(ids.size()), cap() / 2));
  }

  // Rows worth keeping free for the reply before a turn starts.
  int64_t reserve(const GenerationConfig& g) const { return std::min<int64_t>(std::max<int64_t>(g.max_new_tokens, 1), cap() / 4); }

  void prefill(const std::vector<int32_t>& ids, std::span<const float>& logits) {
    const auto t0 = Clock::now();
    {
      trace::Scope span("genai", "prefill");
      if (span.active()) span.set_args(fmt::format(R"({{"tokens":{}}})", ids.size()));
      logits = rt->prefill(ids);
    }
    prefill_ms += ms_between(t0, Clock::now());
    kv_ids.insert(kv_ids.end(), ids.begin(), ids.end());
  }

  // Replaces the whole state by `ids` (a re-prefill); returns the logits after the last one.
  void reprefill(const std::vector<int32_t>& ids, std::span<const float>& logits) {
    clear_state();
    ++reprefills;
    prefill(ids, logits);
  }

  // Keeps the first `keep` and the last `room - keep` ids of a sequence too long for `room` rows.
  static std::vector<int32_t> cut(const std::vector<int32_t>& ids, int64_t keep, int64_t room) {
    std::vector<int32_t> out(ids.begin(), ids.begin() + keep);
    out.insert(out.end(), ids.end() - (room - keep), ids.end());
    return out;
  }

  // Makes room for `incoming` more rows plus the reply reserve, by the context policy.
  // May rewrite `incoming` (a re-prefill or a cut prompt).
  void make_room(std::vector<int32_t>& incoming, const GenerationConfig& g) {
    const int64_t room = cap();
    const int64_t want = static_cast<int64_t>(kv_ids.size() + incoming.size()) + reserve(g);
    if (want <= room) return;
    if (cfg.context_policy == ContextPolicy::Truncate && chatting) {
      truncate_turns(incoming, g);
    } else if (cfg.context_policy == ContextPolicy::Shift && !kv_ids.empty()) {
      const int64_t keep = keep_for(kv_ids);
      const int64_t movable = static_cast<int64_t>(kv_ids.size()) - keep;
      const int64_t drop = std::min(movable, std::max(want - room, movable / 2));
      if (drop > 0) shift(keep, drop);
    } else if (!kv_ids.empty()) {
      // Truncate outside a chat: keep the first tokens and the most recent half, re-prefilled with
      // the new ones.
      std::vector<int32_t> all = kv_ids;
      all.insert(all.end(), incoming.begin(), incoming.end());
      clear_state();
      ++reprefills;
      incoming = all;
    }
    // Whatever is still too long is cut, keeping its start (BOS, system prompt) and its end.
    const int64_t free_rows = room - static_cast<int64_t>(kv_ids.size()) - reserve(g);
    if (static_cast<int64_t>(incoming.size()) > free_rows) {
      if (!cfg.cut_long_prompts)
        throw ContextLengthError(fmt::format("the prompt has {} tokens but only {} of the {} K/V rows are free for it ({} kept for the reply)",
                                             incoming.size(), std::max<int64_t>(free_rows, 0), room, reserve(g)));
      const int64_t keep = kv_ids.empty() ? keep_for(incoming) : 0;
      warn(fmt::format("the prompt has {} tokens but only {} fit; keeping the first {} and the last {}", incoming.size(),
                       free_rows, keep, free_rows - keep));
      incoming = cut(incoming, keep, free_rows);
    }
  }

  void shift(int64_t keep, int64_t drop) {
    if (rt->can_shift(keep, drop)) {
      rt->shift(keep, drop);
      kv_ids.erase(kv_ids.begin() + keep, kv_ids.begin() + keep + drop);
      return;
    }
    // A sliding-window ring no longer holds rows the shifted sequence would see (the kept start
    // inside the window after a large drop): the kept ids are prefilled again instead.
    std::vector<int32_t> ids = kv_ids;
    ids.erase(ids.begin() + keep, ids.begin() + keep + drop);
    std::span<const float> logits;
    reprefill(ids, logits);
  }

  // Truncate policy in a chat: drop the oldest whole turns (the system message stays) until the
  // rendered conversation fits, and start the state again from it.
  void truncate_turns(std::vector<int32_t>& incoming, const GenerationConfig& g) {
    const size_t first = !messages.empty() && messages.front().role == "system" ? 1 : 0;
    std::vector<int32_t> ids;
    for (;;) {
      ids = encode_chat(format->render(messages, true));
      const bool fits = static_cast<int64_t>(ids.size()) + reserve(g) <= cap();
      // Only whole older turns go: never the message being answered.
      if (fits || messages.size() <= first + 1) break;
      size_t end = first + 1;  // drop one user message and the replies that follow it
      while (end < messages.size() - 1 && messages[end].role != "user") ++end;
      messages.erase(messages.begin() + static_cast<long>(first), messages.begin() + static_cast<long>(end));
    }
    clear_state();
    ++reprefills;
    incoming = ids;
  }

  // The state is full in the middle of a reply.
  void overflow(std::span<const float>& logits, const std::vector<int32_t>& reply) {
    if (cfg.context_policy == ContextPolicy::Shift) {
      const int64_t keep = keep_for(kv_ids);
      shift(keep, std::max<int64_t>(1, (static_cast<int64_t>(kv_ids.size()) - keep) / 2));
      return;
    }
    std::vector<int32_t> ids;
    if (chatting && messages.size() > 2) {
      // Drop the oldest turn and re-prefill the rest with the reply so far.
      const size_t first = messages.front().role == "system" ? 1 : 0;
      size_t end = first + 1;
      while (end < messages.size() - 1 && messages[end].role != "user") ++end;
      if (end < messages.size()) messages.erase(messages.begin() + static_cast<long>(first), messages.begin() + static_cast<long>(end));
      ids = encode_chat(format->render(messages, true));
      // `reply` minus its last token (still to be decoded) follows the prompt.
      ids.insert(ids.end(), reply.begin(), reply.end() - 1);
    }
    if (ids.empty() || static_cast<int64_t>(ids.size()) >= cap()) {
      const int64_t keep = keep_for(kv_ids);
      ids.assign(kv_ids.begin(), kv_ids.begin() + keep);
      ids.insert(ids.end(), kv_ids.end() - (static_cast<int64_t>(kv_ids.size()) - keep) / 2, kv_ids.end());
    }
    reprefill(ids, logits);
  }

  // The request's grammar state (null for free text). End tokens: EOS (unless ignored) and the
  // stop tokens, allowed only where the text is complete.
  std::unique_ptr<genai::grammar::StructuredDecoder> structured_for(const GenerationConfig& g) {
    if (g.structured.kind == StructuredOutput::Kind::None) return nullptr;
    if (!token_trie) token_trie = genai::grammar::make_token_trie(*tok);
    std::vector<int32_t> ends = g.stop_token_ids;
    if (!g.ignore_eos && tok->eos() >= 0) ends.push_back(tok->eos());
    return genai::grammar::StructuredDecoder::make(g.structured, token_trie, std::move(ends));
  }

  // The speculation of one generation, or null when it is off. Refused by name when it was asked
  // for and the pipeline cannot: no verify blobs, or SpecMode::Draft without a draft model.
  std::unique_ptr<genai::Speculator> speculator_for(const GenerationConfig& g, bool structured, int64_t prompt_len) {
    const Speculation& sp = g.speculative;
    if (!sp.requested()) return nullptr;
    if (structured)  // refused before anything runs (run() asks first); never silently dropped
      fail("speculative decoding (GenerationConfig::speculative) together with structured output is not implemented: "
           "turn one of them off");
    if (cfg.spec_max_k <= 0)
      fail("speculative decoding needs verify blobs: make the pipeline with PipelineConfig::spec_max_k > 0 (--spec-k)");
    if (sp.max_k < 1) fail("speculative decoding: max_k must be at least 1 (got {})", sp.max_k);
    if (sp.ngram_min < 1 || sp.ngram_max < sp.ngram_min)
      fail("speculative decoding: n-gram lengths must satisfy 1 <= ngram_min <= ngram_max (got {} and {})", sp.ngram_min, sp.ngram_max);
    if (sp.mode == SpecMode::Draft && !draft) fail("speculative decoding with a draft model needs PipelineConfig::draft_model (--draft-model)");
    for (int32_t id : sp.prediction_ids)
      if (id < 0 || id >= rt->n_vocab()) fail("speculative decoding: prediction id {} is not a token of this model", id);
    std::vector<int32_t> pred;
    if (!sp.prediction_ids.empty()) pred = sp.prediction_ids;
    else if (!sp.prediction.empty()) pred = tok->encode(sp.prediction, /*add_bos=*/false);
    if (!step_costs) step_costs = std::make_unique<genai::StepCosts>(rt->config().verify_sizes);
    return std::make_unique<genai::Speculator>(sp, std::min(sp.max_k, cfg.spec_max_k), prompt_len, std::move(pred), draft.get(),
                                               step_costs.get());
  }

  GenerationResult run(std::vector<int32_t> incoming, const GenerationConfig& g, const Streamer& streamer) {
    const auto t_start = Clock::now();
    std::unique_ptr<genai::grammar::StructuredDecoder> so = structured_for(g);
    if (so) speculator_for(g, true, 0);  // refuses speculation with a grammar before the state changes
    prefill_ms = decode_ms = 0;
    decoded = reprefills = forced_tokens = forced_prefill_tokens = 0;
    const npuw::RuntimeStats before = rt->stats();
    rt->clear_variants_used();

    GenerationResult res;
    make_room(incoming, g);
    if (incoming.empty()) fail("nothing to generate from: the prompt has no tokens");
    res.prompt_ids = incoming;
    std::span<const float> logits;
    prefill(incoming, logits);
    pending.clear();
    res.context_ids = kv_ids;
    std::unique_ptr<genai::Speculator> spec = speculator_for(g, so != nullptr, static_cast<int64_t>(kv_ids.size()));

    genai::Sampler sampler(genai::sampler_config(g));
    const size_t window = static_cast<size_t>(std::max(0, g.penalty_last_n));
    for (size_t i = kv_ids.size() > window ? kv_ids.size() - window : 0; i < kv_ids.size(); ++i) sampler.accept(kv_ids[i]);

    genai::StopTokens stop_ids(g.stop_token_ids);
    if (!g.ignore_eos && tok->eos() >= 0) stop_ids.add(tok->eos());
    genai::StopMatcher stop(g.stop_strings);
    // After BOS alone, SPM's dummy-prefix space of the first piece is not text.
    genai::StreamDecoder decoder(*tok, /*strip_leading_space=*/kv_ids.size() == 1 && kv_ids[0] == tok->bos());
    bool cancelled = false;
    auto emit = [&](const std::string& text) {
      if (text.empty()) return;
      res.text += text;
      if (streamer && !cancelled && !streamer(text)) cancelled = true;
    };

    // Speculation: `guesses` follow the token that row 0 of the last verify step ran; `logits` is
    // row `at` of that step, and guesses[at] the guess for the token sampled from it. An accepted
    // guess's row is already in the state; at a rejection (or the end) the rows past kv_ids are
    // given up by moving the write position back (rollback: no K/V copied).
    const size_t V = static_cast<size_t>(rt->n_vocab());
    std::vector<int32_t> guesses, run_ids, seq;
    std::span<const float> verified;  // the last verify step's logits, a row per token it ran
    size_t at = 0;
    int64_t taken = 0;  // guesses of the current step accepted
    auto close_step = [&] {
      if (!guesses.empty()) spec->record(static_cast<int64_t>(guesses.size()), taken);
      guesses.clear();
      at = 0;
      taken = 0;
      if (rt->position() > static_cast<int64_t>(kv_ids.size())) rt->rollback(0, static_cast<int64_t>(kv_ids.size()));
    };

    res.finish = FinishReason::Length;
    for (int64_t i = 0; i < g.max_new_tokens; ++i) {
      if (so && so->must_end()) {  // the grammar is complete and nothing may follow
        res.finish = FinishReason::Eos;
        break;
      }
      int32_t id;
      bool accepted = false;
      if (at < guesses.size()) {
        const genai::Sampler::Verdict v = sampler.verify(logits, guesses[at]);
        id = v.id;
        accepted = v.accepted;
        if (accepted) ++taken;
      } else {
        trace::Scope span("genai", "sample");
        id = so ? so->sample(sampler, logits) : sampler.sample(logits);
      }
      if (i == 0) res.metrics.ttft_ms = ms_between(t_start, Clock::now());
      if (stop_ids.contains(id)) {
        res.finish = id == tok->eos() && !g.ignore_eos ? FinishReason::Eos : FinishReason::StopToken;
        break;
      }
      if (so) so->accept(id);
      sampler.accept(id);
      res.ids.push_back(id);
      const genai::StopStep step = stop.push(decoder.push(id));
      emit(step.text);
      if (step.stopped || cancelled || i + 1 == g.max_new_tokens) {
        pending.push_back(id);  // part of the conversation, not yet run
        if (step.stopped) res.finish = FinishReason::StopString;
        else if (cancelled) res.finish = FinishReason::Cancelled;
        break;
      }
      if (accepted) {  // the verify step ran it: its logits are the next row
        kv_ids.push_back(id);
        ++decoded;
        ++at;
        logits = verified.subspan(at * V, V);
        continue;
      }
      const auto t0 = Clock::now();
      if (spec) close_step();
      if (rt->position() >= cap()) overflow(logits, res.ids);
      // Guesses to follow id: as many as the verify blobs, the capacity and the tokens still to
      // generate leave room for (the last row's logits give one more token).
      std::vector<int32_t> next;
      if (spec) {
        const int64_t room = std::min(rt->max_verify_rows(0) - 1, g.max_new_tokens - i - 2);
        if (room > 0) {
          seq = kv_ids;
          seq.push_back(id);
          next = spec->propose(seq, room);
        }
      }
      // Jump-forward (structured output, never with speculation): the tokens the grammar forces
      // after id join it in one prefill run, kept below max_new_tokens so that a sampled token
      // still follows, and only with room.
      std::vector<int32_t> forced;
      if (so && g.structured.jump_forward && next.empty()) {
        forced = so->forced_tokens(*tok);
        const auto left = static_cast<size_t>(std::max<int64_t>(0, g.max_new_tokens - (i + 1) - 1));
        if (forced.size() > left) forced.resize(left);
        if (rt->position() + 1 + static_cast<int64_t>(forced.size()) > cap()) forced.clear();
        size_t n = 0;
        bool ended = false;
        for (; n < forced.size() && !ended; ++n) {
          if (!so->accept(forced[n])) break;
          sampler.accept(forced[n]);
          res.ids.push_back(forced[n]);
          ++i;
          const genai::StopStep fs = stop.push(decoder.push(forced[n]));
          emit(fs.text);
          if (fs.stopped || cancelled) {
            res.finish = fs.stopped ? FinishReason::StopString : FinishReason::Cancelled;
            ended = true;
          }
        }
        forced.resize(n);
        forced_tokens += static_cast<int64_t>(n);
        if (ended) {  // the forced stretch is part of the conversation, not yet run
          pending.push_back(id);
          pending.insert(pending.end(), forced.begin(), forced.end());
          break;
        }
      }
      if (!forced.empty()) {
        run_ids.assign(1, id);
        run_ids.insert(run_ids.end(), forced.begin(), forced.end());
        logits = rt->prefill(run_ids);
        forced_prefill_tokens += static_cast<int64_t>(run_ids.size());
        decode_ms += ms_between(t0, Clock::now());
        decoded += static_cast<int64_t>(run_ids.size());
        kv_ids.insert(kv_ids.end(), run_ids.begin(), run_ids.end());
        continue;
      }
      const auto t_run = Clock::now();
      if (next.empty()) {
        logits = rt->decode(id);
        if (spec) step_costs->decode_took(std::chrono::duration<double>(Clock::now() - t_run).count());
      } else {
        run_ids.assign(1, id);
        run_ids.insert(run_ids.end(), next.begin(), next.end());
        verified = rt->verify(0, run_ids);
        step_costs->verify_took(static_cast<int64_t>(run_ids.size()), std::chrono::duration<double>(Clock::now() - t_run).count());
        logits = verified.subspan(0, V);
        guesses = std::move(next);
      }
      decode_ms += ms_between(t0, Clock::now());
      ++decoded;
      kv_ids.push_back(id);
    }
    if (spec) close_step();
    if (res.finish != FinishReason::StopString) {
      emit(stop.push(decoder.flush()).text);
      emit(stop.flush().text);
    }

    const npuw::RuntimeStats& after = rt->stats();
    GenerationMetrics& m = res.metrics;
    m.prefill_tokens = after.prefill_tokens - before.prefill_tokens - forced_prefill_tokens;
    m.forced_tokens = forced_tokens;
    m.generated_tokens = static_cast<int64_t>(res.ids.size());
    m.prefill_tps = prefill_ms > 0 ? static_cast<double>(m.prefill_tokens) * 1000.0 / prefill_ms : 0.0;
    m.decode_tps = decode_ms > 0 ? static_cast<double>(decoded) * 1000.0 / decode_ms : 0.0;
    m.variants_used.assign(after.variants_used.begin(), after.variants_used.end());
    m.kv_utilization = static_cast<double>(rt->position()) / static_cast<double>(cap());
    m.padded_positions = after.padded_positions - before.padded_positions;
    m.kv_bytes_copied = after.kv_bytes_copied - before.kv_bytes_copied;
    m.context_shifts = after.context_shifts - before.context_shifts;
    m.reprefills = reprefills;
    m.prefill_chunks = after.prefill_chunks - before.prefill_chunks;
    m.compiled_blobs = after.compiled_blobs;
    m.cached_blobs = after.cached_blobs;
    m.packed_weights = after.packed_weights_built;
    m.cached_packed_weights = after.packed_weights_cached;
    m.load_ms = load_ms;
    m.prefill_ms = prefill_ms;
    m.kv_bytes_per_position = after.kv_row_bytes;
    m.kv_ring_bytes = after.kv_ring_bytes;
    m.kv_bytes = after.kv_bytes;
    if (spec) {
      m.spec_drafted = spec->drafted;
      m.spec_accepted = spec->accepted;
      m.spec_verify_steps = spec->verify_steps;
      m.prediction_accepted = spec->prediction_accepted;
      m.prediction_rejected = spec->prediction_rejected;
      m.spec_draft_steps = spec->draft_steps();
      m.spec_steps_by_guesses = spec->steps_by_guesses;
    }
    return res;
  }

  // The text a new turn adds after the tokens already in the conversation, or nullopt when the
  // template does not render the conversation so far as a prefix of the new one (then the whole
  // conversation is prefilled again). The previous reply is located in the template's own rendering
  // of it, so templates that reformat content (a space after "assistant:", trimming) still match.
  std::optional<std::string> new_text(const std::string& full) const {
    if (history_dirty || kv_ids.empty() || messages.size() < 2 || messages[messages.size() - 2].role != "assistant")
      return std::nullopt;
    const std::vector<ChatMessage> before(messages.begin(), messages.end() - 1);
    std::string closed;
    try {
      closed = format->render(before, false);
    } catch (const Error&) {
      return std::nullopt;
    }
    if (full.compare(0, closed.size(), closed) != 0) return std::nullopt;
    std::string_view reply = before.back().content;
    while (!reply.empty() && std::isspace(static_cast<unsigned char>(reply.front()))) reply.remove_prefix(1);
    while (!reply.empty() && std::isspace(static_cast<unsigned char>(reply.back()))) reply.remove_suffix(1);
    if (reply.empty()) return std::nullopt;
    const size_t at = closed.rfind(reply);
    if (at == std::string::npos) return std::nullopt;
    return full.substr(at + reply.size());
  }

  GenerationResult chat_turn(const std::string& user, const GenerationConfig& g, const Streamer& streamer) {
    messages.push_back({"user", user});
    const std::string full = format->render(messages, true);
    std::vector<int32_t> incoming;
    int64_t extra_reprefill = 0;
    if (std::optional<std::string> delta = new_text(full)) {
      // Only what is new since the last turn: the pending reply token and the template's new text.
      incoming = pending;
      const std::vector<int32_t> ids = tok->encode(*delta, false, true, /*continues_text=*/true);
      incoming.insert(incoming.end(), ids.begin(), ids.end());
    } else {
      extra_reprefill = kv_ids.empty() ? 0 : 1;
      clear_state();
      incoming = encode_chat(full);
      n_keep = system_tokens();
    }
    history_dirty = false;
    // A harmony reply (gpt-oss) streams its reasoning first: only the final channel is shown, kept
    // in the history and returned as the text (the template drops earlier turns' reasoning anyway).
    GenerationConfig gc = g;
    std::optional<genai::HarmonyParser> harmony;
    Streamer shown = streamer;
    if (format->harmony()) {
      harmony.emplace();
      for (int32_t id : format->reply_end_ids(*tok)) gc.stop_token_ids.push_back(id);
      shown = [&](std::string_view piece) {
        const std::string content = harmony->feed(piece).content;
        return content.empty() || !streamer || streamer(content);
      };
    }
    GenerationResult r;
    try {
      r = run(std::move(incoming), gc, shown);
    } catch (const ContextLengthError&) {
      messages.pop_back();  // the turn did not happen; the state was only shifted or re-prefilled
      throw;
    }
    if (harmony) {
      const std::string rest = harmony->finish().content;
      if (!rest.empty() && streamer && r.finish != FinishReason::Cancelled) streamer(rest);
      r.text = harmony->content();
    }
    r.metrics.reprefills += extra_reprefill;
    messages.push_back({"assistant", r.text});
    return r;
  }

  // Tokens of BOS + the system message's rendering, when that is where every render starts.
  int64_t system_tokens() const {
    if (messages.empty() || messages.front().role != "system") return tok->vocab().add_bos ? 1 : 0;
    try {
      const std::string sys = format->render({messages.front()}, false);
      const std::string all = format->render(messages, true);
      if (all.compare(0, sys.size(), sys) == 0) return static_cast<int64_t>(encode_chat(sys).size());
    } catch (const Error&) {
      // A template that refuses a lone system message: keep BOS only.
    }
    return tok->vocab().add_bos ? 1 : 0;
  }
};

LLMPipeline::LLMPipeline(const std::string& model_path, const PipelineConfig& cfg)
    : impl_(std::make_unique<Impl>(model_path, cfg)) {}
LLMPipeline::~LLMPipeline() = default;

GenerationResult LLMPipeline::generate(const std::string& prompt, const GenerationConfig& cfg, const Streamer& streamer) {
  genai::grammar::compile(cfg.structured);  // a refused schema / grammar throws here, before the state changes
  if (impl_->chatting) return impl_->chat_turn(prompt, cfg, streamer);
  impl_->clear_state();
  std::vector<int32_t> ids = impl_->tok->encode(prompt, /*add_bos=*/true);
  impl_->n_keep = !ids.empty() && ids[0] == impl_->tok->bos() ? 1 : 0;
  return impl_->run(std::move(ids), cfg, streamer);
}

GenerationResult LLMPipeline::generate_ids(const std::vector<int32_t>& ids, const GenerationConfig& cfg, const Streamer& streamer) {
  genai::grammar::compile(cfg.structured);
  impl_->clear_state();
  impl_->n_keep = !ids.empty() && ids[0] == impl_->tok->bos() ? 1 : 0;
  return impl_->run(ids, cfg, streamer);
}

void LLMPipeline::start_chat(const std::string& system_message) {
  impl_->chat_format();
  impl_->chatting = true;
  impl_->messages.clear();
  if (!system_message.empty()) impl_->messages.push_back({"system", system_message});
  impl_->history_dirty = false;
  impl_->clear_state();
}

void LLMPipeline::finish_chat() {
  impl_->chatting = false;
  impl_->messages.clear();
  impl_->clear_state();
}

bool LLMPipeline::in_chat() const { return impl_->chatting; }
const std::vector<ChatMessage>& LLMPipeline::history() const { return impl_->messages; }

void LLMPipeline::set_history(const std::vector<ChatMessage>& messages) {
  if (!impl_->chatting) start_chat();
  impl_->messages = messages;
  impl_->history_dirty = true;
}

KvSnapshot LLMPipeline::kv_snapshot() const {
  const Impl& m = *impl_;
  KvSnapshot kv;
  if (!m.chatting || m.history_dirty || m.kv_ids.empty() || static_cast<int64_t>(m.kv_ids.size()) != m.rt->position()) return kv;
  kv.rows = m.rt->save_rows();
  if (kv.rows.empty()) return kv;  // rings: nothing to save
  kv.key = m.rt->state_key();
  kv.ids = m.kv_ids;
  kv.pending = m.pending;
  kv.n_keep = m.n_keep;
  return kv;
}

bool LLMPipeline::restore_chat(const std::vector<ChatMessage>& messages, const KvSnapshot& kv) {
  Impl& m = *impl_;
  if (kv.key != m.rt->state_key() || kv.ids.empty() || static_cast<int64_t>(kv.ids.size() + kv.pending.size()) > m.cap()) return false;
  const int64_t n_vocab = m.tok->n_vocab();
  auto valid = [&](int32_t id) { return id >= 0 && id < n_vocab; };
  if (!std::all_of(kv.ids.begin(), kv.ids.end(), valid) || !std::all_of(kv.pending.begin(), kv.pending.end(), valid)) return false;
  if (kv.n_keep < 0 || kv.n_keep > static_cast<int64_t>(kv.ids.size())) return false;
  m.chat_format();
  if (!m.rt->restore_rows(0, static_cast<int64_t>(kv.ids.size()), kv.rows)) return false;
  m.chatting = true;
  m.messages = messages;
  m.history_dirty = false;
  m.kv_ids = kv.ids;
  m.pending = kv.pending;
  m.n_keep = kv.n_keep;
  return true;
}

std::vector<int32_t> LLMPipeline::conversation_ids() const {
  std::vector<int32_t> out = impl_->kv_ids;
  out.insert(out.end(), impl_->pending.begin(), impl_->pending.end());
  return out;
}

std::vector<int32_t> LLMPipeline::tokenize(const std::string& text, bool add_bos, bool parse_special) const {
  return impl_->tok->encode(text, add_bos, parse_special);
}

std::string LLMPipeline::detokenize(const std::vector<int32_t>& ids) const { return impl_->tok->decode(ids); }
int64_t LLMPipeline::capacity() const { return impl_->cap(); }
int64_t LLMPipeline::kv_position() const { return impl_->rt->position(); }
int64_t LLMPipeline::n_vocab() const { return impl_->tok->n_vocab(); }
int32_t LLMPipeline::bos_id() const { return impl_->tok->bos(); }
int32_t LLMPipeline::eos_id() const { return impl_->tok->eos(); }
std::vector<int64_t> LLMPipeline::variants() const { return impl_->rt->variants(); }
int64_t LLMPipeline::last_variant() const { return impl_->rt->stats().last_capacity; }

std::string LLMPipeline::apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return impl_->chat_format().render(messages, add_generation_prompt);
}

std::string LLMPipeline::description() const {
  const auto& hp = impl_->rt->hparams();
  return fmt::format("{} ({}, {} layers, {} dim, vocab {}), K/V capacities [{}], {}", hp.name, hp.arch, hp.n_layer,
                     hp.n_embd, hp.n_vocab, fmt::join(impl_->rt->variants(), ","), impl_->rt->device_name());
}

}  // namespace npullm
