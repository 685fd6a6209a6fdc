// npullm's public C++ API: text in, text out, over ahead-of-time compiled static-shape blobs.
//
//   npullm::LLMPipeline pipe("model.gguf");
//   npullm::GenerationConfig g;
//   g.max_new_tokens = 64;
//   auto r = pipe.generate("Once upon a time", g, [](std::string_view piece) {
//     std::cout << piece << std::flush;
//     return true;  // false cancels
//   });
//
// Chat: start_chat(system) makes generate() take user turns. Each turn renders the model's chat
// template for the new messages only and prefills just those tokens on top of the K/V state the
// previous turns left, so a turn costs its own tokens, not the whole history. When history +
// prompt + reply would not fit in the largest K/V capacity, the context policy decides:
//   Truncate  drop the oldest whole turns (the system message stays) and re-prefill, as the NPU
//             stack does, but automatically;
//   Shift     keep the first n_keep tokens, drop the oldest block after them and move the rest
//             down, re-rotating the moved keys: no re-prefill.
// A single prompt longer than the capacity is cut (with a warning) rather than refused, unless
// PipelineConfig::cut_long_prompts is false: then generate() throws ContextLengthError.
//
// Threading: one LLMPipeline serves one conversation; calls must not overlap.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace npullm {

enum class ContextPolicy { Truncate, Shift };

// Element type of the K/V cache. F16 halves the memory of F32 (and is llama.cpp's default); Q8_0
// (blocks of 32 int8 with an fp16 scale, 34 bytes per 32 values) needs a head size that is a
// multiple of 32 and is refused otherwise.
enum class KvType { F16, F32, Q8_0 };

struct PipelineConfig {
  int64_t prefill_chunk = 64;               // tokens per prefill blob run
  std::vector<int64_t> variants;            // generate-variant K/V capacities; empty = defaults
  int64_t max_prompt_len = 1024;            // defaults: capacities up to min(max_prompt_len +
  int64_t min_response_len = 128;           //   min_response_len, the model's context length)
  int threads = 0;                          // 0 = all hardware threads
  std::string cache_dir;                    // blob cache; empty = the default folder
  bool use_cache = true;
  uint64_t cache_max_bytes = 0;             // bound on the whole cache folder; 0 = a tenth of its filesystem (<= 64 GiB)
  KvType kv_type = KvType::F16;             // K/V cache element type
  bool repack_weights = true;               // int8 matmul weights in the layout the CPU reads fastest
                                            //   (packed once, kept beside the blob cache); false: as in GGUF
  ContextPolicy context_policy = ContextPolicy::Shift;
  int64_t n_keep = -1;                      // Shift: tokens kept at the start; -1 = BOS + system prompt
  std::string chat_template;                // name of a built-in template, a file, or Jinja source;
                                            //   empty = the model's own
  bool cut_long_prompts = true;             // a prompt that does not fit beside the reply's reserve
                                            //   (after the context policy) is cut; false: refused
  // Speculative decoding (docs/speculative.md): the largest number of guessed tokens one verify
  // step checks. > 0 compiles verify blobs of 2, 4, 8, ... rows up to spec_max_k + 1 (per
  // capacity) at load; 0 (the default) compiles none and GenerationConfig::speculative must stay off.
  int64_t spec_max_k = 0;
  std::string draft_model;                  // a GGUF of the same vocabulary for SpecMode::Draft;
                                            //   loaded with its own runtime and K/V rows
};

// Thrown by generate() when cut_long_prompts is false and the prompt cannot fit. In a chat the user
// message is not added to the history (the context policy may already have shifted or re-prefilled).
class ContextLengthError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Structured output: the generated text is constrained to a language (genai/grammar). A schema,
// grammar or expression that cannot be compiled, or that uses a feature not implemented, is refused
// (npullm::Error naming it) before anything is generated: never silently ignored.
struct StructuredOutput {
  // PrefixedJsonSchemas: one of several literal texts, then a JSON value of that text's schema
  // (source: a JSON array of {"prefix": text, "schema": schema}); what a gpt-oss tool call under
  // tool_choice "required" is: its header naming the function, then that function's arguments.
  enum class Kind { None, JsonObject, JsonSchema, Gbnf, Regex, PrefixedJsonSchemas };
  Kind kind = Kind::None;
  std::string source;   // JsonSchema: the schema as JSON text; Gbnf: llama.cpp grammar text; Regex: the expression
  // Non-empty: the output is free until this text appears in it, and the constraint applies to
  // what follows it (lazy constraining, e.g. a tool call's "<tool_call>" under tool_choice auto).
  std::string trigger;
  // Jump-forward: where the grammar allows one continuation only (a key, `":`, closing brackets),
  // its tokens are appended in one prefill run instead of one decode step each
  // (GenerationMetrics::forced_tokens counts them). The forced text is tokenized canonically, so
  // what the model writes after it may differ from a run without jump-forward.
  bool jump_forward = true;
};

// Speculative decoding: cheap guesses of the next tokens, checked by one run of the model over
// all of them (a verify blob); the longest correct prefix is kept and the rejected rows given up
// by moving the write position back. Greedy output is the same token for token as without it;
// with sampling, each guess is accepted with the probability the model gives it and a rejection
// draws from the rest, so the output keeps the model's distribution (docs/speculative.md).
enum class SpecMode {
  Off,      // no guesses (a prediction, when given, is still used)
  Lookup,   // prompt lookup: the continuation of the latest earlier occurrence of the last n tokens
  Draft,    // a draft model (PipelineConfig::draft_model) guesses greedily
};

struct Speculation {
  SpecMode mode = SpecMode::Off;
  int64_t max_k = 7;                        // the most guesses per verify step (capped by spec_max_k)
  bool adaptive = true;                     // K per sequence from its recent acceptance (else max_k)
  int32_t ngram_max = 3, ngram_min = 1;     // Lookup (and prediction): suffix lengths matched
  // The text the caller expects the reply to be mostly (OpenAI's Predicted Outputs, e.g. the file
  // being edited): guesses are taken from it first, aligned by n-gram matching; used whenever set.
  std::string prediction;
  // C++ only: the prediction as token ids, used instead of `prediction` when not empty (a caller
  // holding the ids of an earlier reply: text tokenized again gives the tokenizer's own split,
  // which differs from a reply written in another split, as a random-weight model's is).
  std::vector<int32_t> prediction_ids;
  // C++ only: a draft source of one's own (an oracle in benchmarks), tried before the others. It
  // gets the sequence so far (prompt and reply, the token just chosen last) and the most guesses
  // wanted; it returns up to that many (none: no verify step).
  std::function<std::vector<int32_t>(const std::vector<int32_t>& sequence, int64_t max_guesses)> draft_fn;

  // Whether a generation with this setting speculates (a prediction is used even with the mode off).
  bool requested() const { return mode != SpecMode::Off || !prediction.empty() || !prediction_ids.empty() || draft_fn; }
};

struct GenerationConfig {
  int64_t max_new_tokens = 256;
  float temperature = 0.0f;                 // 0 = greedy
  int32_t top_k = 0;                        // 0 = off
  float top_p = 1.0f;                       // 1 = off
  float min_p = 0.0f;                       // 0 = off
  float typical_p = 1.0f;                   // 1 = off
  float repetition_penalty = 1.0f;          // 1 = off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;              // look-back window of the penalties
  uint64_t seed = 0;
  std::vector<std::string> stop_strings;    // output ends before the first one (not printed)
  std::vector<int32_t> stop_token_ids;      // besides EOS
  bool ignore_eos = false;
  StructuredOutput structured;              // kind None: free text
  Speculation speculative;                  // off by default; refused (npullm::Error) with structured output
};

enum class FinishReason { Eos, StopToken, StopString, Length, Cancelled };
const char* finish_reason_name(FinishReason r);

struct GenerationMetrics {
  double ttft_ms = 0;                       // call start to first token sampled
  int64_t prefill_tokens = 0;               // tokens prefilled by this call (re-prefills included)
  int64_t generated_tokens = 0;
  double prefill_tps = 0, decode_tps = 0;
  std::vector<int64_t> variants_used;       // capacities of the generate variants that ran
  double kv_utilization = 0;                // K/V rows in use / largest capacity, at the end
  int64_t padded_positions = 0;             // padding computed by prefill chunks
  int64_t kv_bytes_copied = 0;              // K/V bytes moved (context shifts only)
  int64_t context_shifts = 0;
  int64_t reprefills = 0;                   // times the history was prefilled again
  int64_t forced_tokens = 0;                // structured output: tokens appended by jump-forward (in generated_tokens, not prefill_tokens)
  int64_t prefill_chunks = 0;
  int64_t compiled_blobs = 0, cached_blobs = 0;  // at load (the same for every call)
  int64_t packed_weights = 0, cached_packed_weights = 0;  // weights repacked at load / mapped from the cache
  double load_ms = 0;                       // pipeline construction: model, blobs, tokenizer (same for every call)
  double prefill_ms = 0;                    // time this call spent in prefill
  // The K/V allocation (fixed at load): bytes per position of the full-length (global) layers, the
  // fixed rings of sliding-window layers (Gemma 3's local layers; 0 without), and the whole.
  int64_t kv_bytes_per_position = 0, kv_ring_bytes = 0, kv_bytes = 0;
  // Speculative decoding: guesses checked, of them accepted, verify steps run (each also yields
  // the model's own next token), and of the guesses those taken from the prediction (OpenAI's
  // accepted / rejected_prediction_tokens).
  int64_t spec_drafted = 0, spec_accepted = 0, spec_verify_steps = 0;
  int64_t prediction_accepted = 0, prediction_rejected = 0;
  int64_t spec_draft_steps = 0;             // decode steps of the draft model (SpecMode::Draft)
  std::vector<int64_t> spec_steps_by_guesses;  // [k]: verify steps that checked k guesses
};

struct GenerationResult {
  std::string text;                         // generated text (stop string excluded)
  std::vector<int32_t> ids;                 // generated ids (EOS / stop token excluded)
  std::vector<int32_t> prompt_ids;          // ids this call prefilled as its prompt
  std::vector<int32_t> context_ids;         // the whole sequence generation started from
  FinishReason finish = FinishReason::Length;
  GenerationMetrics metrics;
};

// Receives UTF-8-complete pieces of text as they are generated; return false to cancel.
using Streamer = std::function<bool(std::string_view piece)>;

struct ChatMessage {
  std::string role;                         // "system", "user", "assistant"
  std::string content;
};

// A chat's K/V state, so that a saved conversation resumes where it stopped instead of being
// prefilled again (the C API's session files hold one).
struct KvSnapshot {
  std::string key;                          // what the rows fit: the model, the K/V type, the state layout
  std::vector<int32_t> ids;                 // the tokens whose rows the state holds, in order
  std::vector<int32_t> pending;             // tokens of the conversation not yet run (a reply's last)
  int64_t n_keep = 0;                       // tokens a context shift keeps (BOS, the system prompt)
  std::vector<uint8_t> rows;                // ids.size() rows of every K/V state variable, as stored
};

class LLMPipeline {
 public:
  explicit LLMPipeline(const std::string& model_path, const PipelineConfig& cfg = {});
  ~LLMPipeline();
  LLMPipeline(const LLMPipeline&) = delete;
  LLMPipeline& operator=(const LLMPipeline&) = delete;

  // Outside a chat: generates a continuation of `prompt` (BOS added when the model wants it),
  // from an empty state. In a chat: `prompt` is the next user message.
  GenerationResult generate(const std::string& prompt, const GenerationConfig& cfg = {}, const Streamer& streamer = {});
  // Generates from exactly these token ids, from an empty state, in one prefill (no template).
  GenerationResult generate_ids(const std::vector<int32_t>& ids, const GenerationConfig& cfg = {}, const Streamer& streamer = {});

  void start_chat(const std::string& system_message = "");
  void finish_chat();
  bool in_chat() const;
  const std::vector<ChatMessage>& history() const;
  // Replaces the conversation (e.g. loaded from a file); its tokens are prefilled on the next turn.
  void set_history(const std::vector<ChatMessage>& messages);
  // The chat's K/V state. Empty (no key, no rows) when there is none to save: outside a chat,
  // after set_history until the next turn prefills it, or with a model whose sliding-window layers
  // keep rings (Gemma 3: not in position order).
  KvSnapshot kv_snapshot() const;
  // Replaces the conversation by `messages` together with its K/V state `kv` (kv_snapshot of the
  // same model with the same K/V type), so the next turn prefills only its own tokens. Returns false
  // and changes nothing when `kv` does not fit: another key (model, K/V type, state layout), more
  // rows than the largest capacity, or not ids.size() rows of bytes. Callers then use set_history.
  bool restore_chat(const std::vector<ChatMessage>& messages, const KvSnapshot& kv);
  // The token sequence of the conversation so far (in the K/V state or about to be).
  std::vector<int32_t> conversation_ids() const;

  std::vector<int32_t> tokenize(const std::string& text, bool add_bos = false, bool parse_special = false) const;
  std::string detokenize(const std::vector<int32_t>& ids) const;
  int64_t capacity() const;                 // largest K/V capacity (rows)
  int64_t kv_position() const;              // rows in use
  int64_t n_vocab() const;
  int32_t bos_id() const;                   // -1 when the vocabulary has none
  int32_t eos_id() const;                   // -1 when the vocabulary has none
  std::vector<int64_t> variants() const;    // the generate variants' K/V capacities, ascending
  int64_t last_variant() const;             // capacity of the variant the last decode step ran in (0: none yet)
  // The chat template (PipelineConfig::chat_template, else the model's) rendered over `messages`.
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;
  std::string description() const;         // model, architecture, device, threads

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace npullm
