// Continuous batching: many requests, one model, the sequence slots of one npuw runtime.
//
// A Scheduler owns an LlmRuntime with `parallel` slots and one thread that loops:
//   1. admit  waiting requests into free slots, in arrival order; a request goes to the free slot
//             whose kept tokens share the longest prefix with its prompt, keeps those rows and
//             prefills only the rest ("cached tokens"); a chat client that resends its history
//             pays for the new turn only;
//   2. prefill one chunk (the runtime's P tokens) of one admitted prompt, so a long prompt is
//             spread over several steps and never freezes the streams already decoding;
//   3. decode  the next token of every decoding slot in one batched step (npuw picks the smallest
//             batch size and capacity that hold them), then sample each row with its own sampler,
//             stream its text, apply its stop rules and max_tokens, and retire what finished.
// Requests join and leave between steps. A slot keeps its tokens after its request ends, so the
// next request that shares their prefix reuses them.
//
// Structured output (GenerationConfig::structured): each request has its own grammar state; its
// grammar is compiled in submit() on the caller's thread (cached), so a refused schema throws there.
//
// Each row's logits are bit for bit those of the sequence run alone (npuw's batched blobs), so a
// greedy request returns the same text whatever runs beside it.
//
// Threading: submit(), cancel(), status() and the encode helpers may be called from any thread.
// A request's callbacks run on the scheduler thread; they must be quick (queue the text, return).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <npullm/llm_pipeline.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace npullm::npuw {
class LlmRuntime;
}

namespace npullm::genai {

class Tokenizer;
class ChatFormat;
class StepCosts;
namespace grammar {
class TokenTrie;
}

// Thrown by submit() when the waiting queue is full (the caller should retry later).
class QueueFull : public Error {
 public:
  using Error::Error;
};

struct ServeResult {
  std::string text;                  // generated text (stop string excluded); with split_reasoning, the visible reply
  std::string reasoning;             // with split_reasoning: the reasoning the reply held (harmony's analysis channel)
  std::vector<int32_t> ids;          // generated ids
  FinishReason finish = FinishReason::Length;
  int64_t prompt_tokens = 0;         // tokens of the prompt
  int64_t cached_tokens = 0;         // of those, rows reused (kept by the slot or copied from another; not prefilled)
  int64_t slot = -1;
  double queue_ms = 0;               // submit to admission
  double ttft_ms = 0;                // submit to first token
  double decode_tps = 0;             // generated tokens / time from first to last
  int64_t forced_tokens = 0;         // structured output: generated tokens appended by jump-forward
  // Speculative decoding (GenerationConfig::speculative): guesses checked in verify steps, and the
  // ones the sampler took; of them, the guesses from the prediction (OpenAI's Predicted Outputs).
  int64_t spec_drafted = 0, spec_accepted = 0;
  int64_t prediction_accepted = 0, prediction_rejected = 0;
  std::string error;                 // non-empty: the request failed (runtime error)
};

struct ServeRequest {
  std::vector<int32_t> prompt_ids;   // from encode_chat() / encode_prompt()
  GenerationConfig gen;
  // Receives UTF-8-complete text pieces; returning false cancels the request (client gone).
  std::function<bool(std::string_view)> on_text;
  // A chat reply: when the chat template speaks harmony (gpt-oss, ChatFormat::harmony()), on_text
  // receives only the visible reply and on_reasoning (when set) the reasoning, split by
  // genai/chat/harmony_parser.h, and the reply also ends at the format's end tokens. Calls to a
  // recipient stay in the visible reply as harmony call messages (HarmonyParser::render_call), for
  // genai/tools' Family::Harmony parser. No effect for other templates.
  bool split_reasoning = false;
  std::function<bool(std::string_view)> on_reasoning;
  // Called once, last, with the outcome.
  std::function<void(const ServeResult&)> on_done;
};

// Cumulative histogram over fixed upper bounds (milliseconds), as Prometheus exposes them.
struct Histogram {
  std::vector<double> bounds;        // ascending; +Inf is implied
  std::vector<uint64_t> counts;      // per bound (not cumulative), plus one for +Inf
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void add(double v);
};

struct SlotStatus {
  int64_t id = 0;
  const char* state = "idle";        // idle, prefill, decode
  int64_t kv_rows = 0;               // K/V rows the slot holds (in use or kept for reuse)
  int64_t capacity = 0;              // rows a slot can hold (C_max)
  int64_t variant = 0;               // capacity of the generate variant that holds kv_rows + 1
  int64_t cached_tokens = 0;         // of the current / last request
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  double tps = 0;                    // decode tokens/s of the current / last request
};

struct SchedulerStatus {
  // The runtime's shape, fixed once the model is loaded: what a view of the slots (the server's
  // /slots and its page, /metrics) shows beside their state, so it need not reach below genai.
  int64_t parallel = 0;              // sequence slots
  int64_t slot_capacity = 0;         // K/V rows per slot (C_max)
  std::vector<int64_t> capacities;   // the generate variants' capacities, ascending
  std::vector<int64_t> batch_sizes;  // the batch sizes of the generate blobs
  std::vector<SlotStatus> slots;
  int64_t queue = 0;                 // requests waiting for a slot
  int64_t busy_slots = 0;
  int64_t kv_rows_in_use = 0;        // rows of busy slots
  int64_t last_batch = 0, last_capacity = 0, last_active = 0;  // the last decode step's blob
  double decode_tps = 0;             // aggregate decode tokens/s over the last ~second
  // Totals since start.
  uint64_t requests_done = 0, requests_cancelled = 0, requests_failed = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  uint64_t copied_prefix_rows = 0;   // of cached_tokens, rows copied in from another slot
  uint64_t decode_steps = 0, padded_rows = 0, prefill_chunks = 0;
  double longest_decode_stall_ms = 0;  // longest gap between decode steps while sequences were decoding
  // Speculative decoding: guesses checked, guesses taken, verify steps, and the guesses taken at
  // each place of a step's run of guesses (spec_accepted_at[i]: the (i+1)-th guess was taken).
  uint64_t spec_drafted = 0, spec_accepted = 0, spec_verify_steps = 0;
  std::vector<uint64_t> spec_accepted_at;
  Histogram ttft_ms, token_latency_ms;
};

struct SchedulerConfig {
  int64_t parallel = 4;              // sequence slots
  int64_t max_queue = 64;            // waiting requests beyond which submit() throws QueueFull
  // Speculative decoding (requests whose GenerationConfig::speculative asks for it, on a runtime
  // with verify blobs: PipelineConfig::spec_max_k > 0) runs while at most this many sequences
  // decode: a fuller batch already reads each weight once for several tokens.
  int64_t spec_max_sequences = 2;
};

class Scheduler {
 public:
  // A prefix another slot holds is copied in when it is at least this many rows longer than what
  // the chosen free slot keeps. A copy moves every row of the prefix, not only the gain, so for a
  // few rows more (a shared BOS or template header) it would cost about what it saves.
  static constexpr size_t kMinCopiedRows = 16;

  Scheduler(const std::string& model_path, const PipelineConfig& cfg, const SchedulerConfig& sc);
  ~Scheduler();  // shutdown()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Chat messages through the chat template (PipelineConfig::chat_template or the model's) with
  // the generation prompt, tokenized as LLMPipeline does; a prompt continued as it is (BOS added
  // when the model wants it). Throw npullm::Error (e.g. a template that refuses the messages).
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages) const;
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  // Messages as the template sees them (JSON objects, with tool calls and tool results) and extra
  // template variables (e.g. `tools`), as genai/tools prepares them; the same rules otherwise.
  std::vector<int32_t> encode_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& extra) const;
  // The chat template's Jinja source ("" when there is none), which says its tool-call syntax.
  std::string chat_template_source() const;

  // Queues a request and returns its id. Throws QueueFull when max_queue requests are waiting,
  // npullm::Error when the prompt is empty or cannot fit in a slot (with room for one token).
  uint64_t submit(ServeRequest r);
  // Ends a request (finish Cancelled) before the next step; its slot is free within a step.
  void cancel(uint64_t id);
  SchedulerStatus status() const;
  // Cancels everything queued or running, waits for their on_done, stops the thread.
  void shutdown();

  const std::string& model_name() const { return model_name_; }
  int64_t slot_capacity() const;                    // K/V rows per slot
  int64_t n_vocab() const;                          // token ids run from 0 to n_vocab() - 1
  const npuw::LlmRuntime& runtime() const { return *rt_; }
  std::string description() const;

 private:
  struct Active;
  struct Slot;
  using Clock = std::chrono::steady_clock;
  void loop();
  bool admit();                      // under mu_; true if something was admitted
  void prefill_step();
  void decode_step();
  // Copies into slot `to` the rows of another slot, busy or free, that holds at least
  // kMinCopiedRows more of `prompt` than the `have` tokens `to` keeps; returns the prompt tokens `to`
  // now holds (`have` when nothing was copied). Not with sliding-window rings (copy_rows refuses).
  size_t copy_prefix(Slot& to, const std::vector<int32_t>& prompt, size_t have);
  // Samples the next token of a slot from `logits`; retires the request when it is finished.
  void take_token(Slot& s, std::span<const float> logits);  // samples from logits, then take_id
  // After a decode step: the slot's next queued forced token (jump-forward beside other requests),
  // else take_token.
  void take_next(Slot& s, std::span<const float> logits);
  void take_id(Slot& s, int32_t id);                         // the slot's request takes token id
  bool speculative_step(const std::vector<Slot*>& rows);
  void finish(Slot& s, FinishReason why, const std::string& error = "");
  void publish();                    // refreshes status_ from the slots (under mu_)
  void trace_request(const Active& a, std::chrono::steady_clock::time_point end);  // common/trace.h
  // The vocabulary's byte trie for grammar masks, built by the first structured request.
  std::shared_ptr<const grammar::TokenTrie> token_trie();

  PipelineConfig cfg_;
  SchedulerConfig sc_;
  std::unique_ptr<npuw::LlmRuntime> rt_;
  // PipelineConfig::draft_model: the draft model's runtime, a slot per sequence slot (null: none).
  std::shared_ptr<npuw::LlmRuntime> draft_rt_;
  // With verify blobs: what a decode step of as few sequences as speculate and each verify blob's step
  // cost here (timed as they run), from which each request's speculator picks its K (StepCosts::best_k).
  std::unique_ptr<StepCosts> step_costs_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatFormat> format_;  // null when no template is available
  std::string format_error_;            // why there is none
  std::string model_name_;

  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Active>> queue_;
  std::vector<uint64_t> cancelled_;     // ids to cancel at the next step
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  SchedulerStatus status_;              // what status() returns, refreshed after every step (under mu_)
  SchedulerStatus work_;                // totals, kept by the scheduler thread alone
  std::deque<std::pair<Clock::time_point, int64_t>> recent_;  // (decode step end, tokens) for decode_tps
  Clock::time_point last_decode_end_{};
  std::once_flag trie_once_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  bool decoding_before_ = false;
  size_t prefill_turn_ = 0;             // round robin over prefilling slots
  std::thread thread_;
};

}  // namespace npullm::genai
