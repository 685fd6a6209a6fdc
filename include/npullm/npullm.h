/* npullm's C API: a stable, C11 interface to the runtime, for programs in any language.
 *
 * npullm compiles every model ahead of time into static-shape blobs, and this API says what that
 * means instead of hiding it:
 *   - a model has a fixed K/V capacity per sequence (its largest "generate variant"); the variants
 *     are the capacities blobs were compiled for, and each decode step runs in the smallest variant
 *     that holds the rows in use (npullm_model_get_info, npullm_session_kv_state);
 *   - a session is one sequence: its own K/V rows (one slot of capacity rows), its own chat history.
 *
 *   npullm_model* model = NULL;
 *   if (npullm_model_open("model.gguf", NULL, &model) != NPULLM_OK) {
 *     fprintf(stderr, "%s\n", npullm_last_error());
 *     return 1;
 *   }
 *   npullm_session* s = NULL;
 *   npullm_session_create(model, &s);
 *   npullm_sampling sp = npullm_sampling_default();   // greedy, 256 new tokens
 *   npullm_result r;
 *   npullm_generate(s, "Once upon a time", &sp, print_piece, NULL, &r);
 *   npullm_result_free(&r);
 *   npullm_session_free(s);
 *   npullm_model_free(model);
 *
 * Conventions
 *   - Every function that can fail returns an npullm_status; NPULLM_OK is 0. On failure,
 *     npullm_last_error() holds a message saying what and where (per thread, until the next failing
 *     call on that thread). No C++ exception crosses this API and nothing aborts the process.
 *   - Handles are opaque. Output pointers are written only on success, except an npullm_result,
 *     which is zeroed first (so npullm_result_free is always safe on it).
 *   - Strings are UTF-8. Memory the library returns (text, id arrays, message lists) is released
 *     with the npullm_*_free function named beside it, or npullm_free for plain arrays and text.
 *   - Threads: a model may be used from several threads (tokenize, templates, info); one session must
 *     not be used by two threads at once, but different sessions run independently.
 *   - A session may outlive the model it was created from.
 *
 * Versioning: npullm_version() is the release ("0.1.0"); NPULLM_ABI_VERSION is the ABI number, also
 * the shared library's SONAME (libnpullm.so.<ABI>). Structs passed by value or filled by the library
 * change only with a new ABI number; npullm_abi_version() lets a program check what it loaded.
 *
 * Future: a session is one LLMPipeline today. A slot of a batched runtime (N sequences decoded
 * together, see npullm serve --parallel) is the planned extension: npullm_session_create would take
 * a runtime and a slot index, and the K/V state below already reports its slot (always 0 today).
 */
#ifndef NPULLM_NPULLM_H
#define NPULLM_NPULLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NPULLM_ABI_VERSION 1

/* ---- status and errors ---- */

typedef enum npullm_status {
  NPULLM_OK = 0,
  NPULLM_ERR_INVALID_ARGUMENT = 1, /* a NULL handle or pointer, an option out of range */
  NPULLM_ERR_IO = 2,               /* a file that cannot be opened, read or written */
  NPULLM_ERR_MODEL = 3,            /* the model (or a session file) was refused: format, architecture, template */
  NPULLM_ERR_CONTEXT = 4,          /* the prompt cannot fit in the K/V capacity */
  NPULLM_ERR_OUT_OF_MEMORY = 5,
  NPULLM_ERR_INTERNAL = 6          /* anything else; the message says what */
} npullm_status;

/* The release, e.g. "0.1.0". */
const char* npullm_version(void);
/* The ABI number of the loaded library (NPULLM_ABI_VERSION of the header it was built with). */
int npullm_abi_version(void);
/* The message of the last call that failed on this thread ("" if none). Valid until the next
 * failing call on this thread. */
const char* npullm_last_error(void);
/* "ok", "invalid_argument", "io", "model", "context", "out_of_memory", "internal" ("unknown" otherwise). */
const char* npullm_status_name(npullm_status status);
/* Releases memory returned by npullm_tokenize, npullm_detokenize, npullm_apply_chat_template,
 * npullm_session_conversation_ids. NULL is fine. */
void npullm_free(void* p);

/* ---- models ---- */

typedef struct npullm_model npullm_model;
typedef struct npullm_session npullm_session;

typedef enum npullm_kv_type { NPULLM_KV_F16 = 0, NPULLM_KV_F32 = 1, NPULLM_KV_Q8_0 = 2 } npullm_kv_type;

/* When a conversation outgrows the capacity: drop the oldest whole turns and re-prefill
 * (TRUNCATE), or keep the first n_keep rows and move the rest down, re-rotating keys (SHIFT). */
typedef enum npullm_context_policy { NPULLM_CONTEXT_SHIFT = 0, NPULLM_CONTEXT_TRUNCATE = 1 } npullm_context_policy;

/* Runtime options; start from npullm_model_default_params(). Sessions created from a model use
 * the model's options. */
typedef struct npullm_model_params {
  int64_t prefill_chunk;        /* tokens per prefill blob run (default 64) */
  const int64_t* variants;      /* K/V capacities of the generate variants; NULL = defaults: powers */
  size_t n_variants;            /*   of two from 128 up to min(max_prompt_len + min_response_len, n_ctx) */
  int64_t max_prompt_len;       /* default 1024 */
  int64_t min_response_len;     /* default 128 */
  int32_t threads;              /* 0 = all hardware threads */
  const char* cache_dir;        /* blob cache folder; NULL = $NPULLM_CACHE_DIR, $XDG_CACHE_HOME/npullm, ~/.cache/npullm */
  int use_cache;                /* 0: compile every blob, touch no cache (default 1) */
  npullm_kv_type kv_type;       /* default F16; Q8_0 needs a head size that is a multiple of 32 */
  int repack_weights;           /* int8 weights repacked for the CPU (default 1) */
  npullm_context_policy context_policy; /* default SHIFT */
  int64_t n_keep;               /* SHIFT: rows kept at the start; -1 = BOS + system prompt (default) */
  const char* chat_template;    /* built-in name, file or Jinja source; NULL = the model's own */
  int cut_long_prompts;         /* 0 (default): a prompt that cannot fit fails with NPULLM_ERR_CONTEXT;
                                   1: it is cut (its start and its end kept) with a warning on stderr */
} npullm_model_params;

npullm_model_params npullm_model_default_params(void);

/* Opens a GGUF model: compiles its blobs (or loads them from the cache) and builds its tokenizer.
 * params may be NULL (defaults). Errors: IO (no such file), MODEL (refused), INVALID_ARGUMENT. */
npullm_status npullm_model_open(const char* path, const npullm_model_params* params, npullm_model** out_model);
void npullm_model_free(npullm_model* model); /* NULL is fine */

typedef struct npullm_model_info {
  int64_t n_vocab;
  int32_t bos_id, eos_id;       /* -1 when the model has none */
  int64_t capacity;             /* K/V rows of one sequence: the largest variant */
  const int64_t* variants;      /* the generate variants' capacities, ascending (owned by the model) */
  size_t n_variants;
  int64_t prefill_chunk;        /* tokens per prefill blob run */
  int64_t slots;                /* sequences per runtime: 1 (see "Future" above) */
  const char* description;      /* model, architecture, device, threads (owned by the model) */
} npullm_model_info;

npullm_status npullm_model_get_info(const npullm_model* model, npullm_model_info* out_info);

/* ---- text ---- */

/* Text -> token ids (*out_ids released with npullm_free; *out_n may be 0). add_bos: prepend BOS
 * when the model wants one; parse_special: "<s>"-like texts become their special tokens. */
npullm_status npullm_tokenize(const npullm_model* model, const char* text, int add_bos, int parse_special,
                              int32_t** out_ids, size_t* out_n);
/* Token ids -> text (NUL-terminated, released with npullm_free). */
npullm_status npullm_detokenize(const npullm_model* model, const int32_t* ids, size_t n_ids, char** out_text);

typedef struct npullm_chat_message {
  const char* role;             /* "system", "user", "assistant" */
  const char* content;
} npullm_chat_message;

/* Renders messages with the chat template (the model params' chat_template, else the model's own).
 * add_generation_prompt: end with the assistant's opening. Errors: MODEL (no template, or it fails). */
npullm_status npullm_apply_chat_template(const npullm_model* model, const npullm_chat_message* messages, size_t n_messages,
                                         int add_generation_prompt, char** out_text);

/* ---- sessions: one sequence, its K/V rows and its conversation ---- */

npullm_status npullm_session_create(npullm_model* model, npullm_session** out_session);
void npullm_session_free(npullm_session* session); /* NULL is fine */

/* Sampling and stopping; start from npullm_sampling_default() (greedy, 256 new tokens). */
typedef struct npullm_sampling {
  int64_t max_new_tokens;
  float temperature;            /* 0 = greedy */
  int32_t top_k;                /* 0 = off */
  float top_p;                  /* 1 = off */
  float min_p;                  /* 0 = off */
  float typical_p;              /* 1 = off */
  float repetition_penalty;     /* 1 = off */
  float presence_penalty;
  float frequency_penalty;
  int32_t penalty_last_n;       /* look-back window of the penalties (64) */
  uint64_t seed;
  const char* const* stop_strings; /* output ends before the first one (not included) */
  size_t n_stop_strings;
  const int32_t* stop_token_ids;   /* besides EOS */
  size_t n_stop_token_ids;
  int ignore_eos;
} npullm_sampling;

npullm_sampling npullm_sampling_default(void);

/* ---- structured output: the reply kept inside a language ---- */

typedef enum npullm_structured_kind {
  NPULLM_STRUCTURED_NONE = 0,         /* free text (source and trigger must be NULL or "") */
  NPULLM_STRUCTURED_JSON_OBJECT = 1,  /* any JSON object (source NULL or "") */
  NPULLM_STRUCTURED_JSON_SCHEMA = 2,  /* source: a JSON Schema as JSON text (draft 7, with $defs and prefixItems) */
  NPULLM_STRUCTURED_GRAMMAR = 3,      /* source: a llama.cpp GBNF grammar, from its rule root */
  NPULLM_STRUCTURED_REGEX = 4         /* source: a regular expression that the whole reply matches */
} npullm_structured_kind;

/* Constrains the replies of the session's following generations (npullm_generate,
 * npullm_generate_tokens, npullm_chat) to a language, until it is called again;
 * NPULLM_STRUCTURED_NONE makes them free text again (the default). trigger: NULL or "" constrains
 * from the first token; otherwise the reply is free until this text appears in it and the
 * constraint applies to what follows (lazy constraining, e.g. a tool call after "<tool_call>").
 * A reply whose language is complete ends there (NPULLM_FINISH_EOS). The source is compiled now:
 * one that is malformed or uses a feature not implemented is refused with
 * NPULLM_ERR_INVALID_ARGUMENT and a message naming it (a JSON Schema keyword: "JSON Schema at
 * '#/properties/a': keyword 'not' is not supported"; GBNF: the line and column), and the session
 * keeps its previous setting. See docs/structured-output.md for what each kind accepts.
 * (A function rather than fields of npullm_sampling, whose layout the ABI number fixes.) */
npullm_status npullm_session_set_structured(npullm_session* session, npullm_structured_kind kind, const char* source,
                                            const char* trigger);
/* The same compile and check without a session: NPULLM_OK when the source is accepted. */
npullm_status npullm_structured_check(npullm_structured_kind kind, const char* source, const char* trigger);

/* ---- speculative decoding: several tokens per weight read ---- */

/* Opens a model as npullm_model_open does, with what speculative decoding needs at load
 * (docs/speculative.md). spec_max_k: the most guesses one verify step checks, 0..63; > 0 compiles
 * verify blobs of 2, 4, 8, ... rows up to spec_max_k + 1 per capacity (cached as the other blobs
 * are); 0 is npullm_model_open. draft_model: NULL or "", or a GGUF sharing the model's vocabulary
 * whose greedy tokens are the guesses of NPULLM_SPEC_DRAFT (each session loads it beside the model,
 * with K/V rows of its own); it needs spec_max_k > 0. Its vocabulary is checked here, from its header.
 * Errors: INVALID_ARGUMENT (spec_max_k out of range, a draft without verify blobs), IO (a file
 * that cannot be opened), MODEL (refused, or a draft whose vocabulary differs). */
npullm_status npullm_model_open_speculative(const char* path, const npullm_model_params* params, int64_t spec_max_k,
                                            const char* draft_model, npullm_model** out_model);

typedef enum npullm_spec_mode {
  NPULLM_SPEC_OFF = 0,     /* no guesses of its own (a prediction, when given, is still used) */
  NPULLM_SPEC_LOOKUP = 1,  /* prompt lookup: what followed the latest earlier occurrence of the last tokens */
  NPULLM_SPEC_DRAFT = 2    /* the draft model of npullm_model_open_speculative guesses greedily */
} npullm_spec_mode;

/* Speculative decoding for the session's following generations (npullm_generate,
 * npullm_generate_tokens, npullm_chat), until it is called again; off by default. Greedy output is
 * the same token for token as without it; sampled output keeps the model's distribution.
 * max_k: the most guesses one verify step checks (at least 1; capped by the model's spec_max_k);
 * adaptive: nonzero lets K follow the recent acceptance (grow after a step that took every guess,
 * shrink after one that did not), 0 keeps it at max_k. prediction: NULL or "", or the text the
 * reply is expected to be mostly (OpenAI's Predicted Outputs, e.g. the file being edited): its
 * tokens are guessed first, whatever the mode. max_k is not checked when nothing is asked for
 * (NPULLM_SPEC_OFF and no prediction), so (session, NPULLM_SPEC_OFF, 0, 0, NULL) turns it off.
 * Refused with NPULLM_ERR_INVALID_ARGUMENT and a message, the session keeping its previous
 * setting: a mode that is not an npullm_spec_mode, max_k < 1, speculation on a model opened
 * without verify blobs (spec_max_k 0), NPULLM_SPEC_DRAFT on a model without a draft model, and
 * speculation while the session has structured output (a grammar decodes token by token; set
 * NPULLM_STRUCTURED_NONE first). npullm_session_set_structured likewise refuses a constraint while
 * speculation is on. (Functions rather than fields of npullm_model_params and npullm_sampling,
 * whose layouts the ABI number fixes.) */
npullm_status npullm_session_set_speculative(npullm_session* session, npullm_spec_mode mode, int64_t max_k, int adaptive,
                                             const char* prediction);
/* The same checks against a model, without a session (structured output aside): NPULLM_OK when
 * its sessions would take this setting. */
npullm_status npullm_speculative_check(const npullm_model* model, npullm_spec_mode mode, int64_t max_k, int adaptive,
                                       const char* prediction);

/* What speculation did in one generation. A verify step checks up to K guesses in one run of the
 * model over K + 1 tokens and also yields the model's own next token, so a step produces
 * spec_accepted / spec_verify_steps + 1 tokens on average (docs/speculative.md: what it costs). */
typedef struct npullm_spec_metrics {
  int64_t spec_drafted;         /* guesses checked */
  int64_t spec_accepted;        /* of them, those the model agreed with (kept in the reply) */
  int64_t spec_verify_steps;    /* verify steps run */
  int64_t prediction_accepted;  /* of the guesses, those taken from the prediction and accepted ... */
  int64_t prediction_rejected;  /* ... and rejected (OpenAI's accepted / rejected_prediction_tokens) */
} npullm_spec_metrics;

/* The speculation counters of the session's last generation (zeros before the first, and for a
 * generation without speculation). */
npullm_status npullm_session_last_spec_metrics(const npullm_session* session, npullm_spec_metrics* out_metrics);

/* Receives the generated text in UTF-8-complete pieces (piece[len] is NUL) as they are sampled.
 * Return nonzero to go on, 0 to cancel: the generation then ends after that token with
 * NPULLM_FINISH_CANCELLED (still NPULLM_OK). */
typedef int (*npullm_token_callback)(const char* piece, size_t len, void* user_data);

typedef enum npullm_finish_reason {
  NPULLM_FINISH_EOS = 0,
  NPULLM_FINISH_STOP_TOKEN = 1,
  NPULLM_FINISH_STOP_STRING = 2,
  NPULLM_FINISH_LENGTH = 3,
  NPULLM_FINISH_CANCELLED = 4
} npullm_finish_reason;

const char* npullm_finish_reason_name(npullm_finish_reason reason); /* "eos", "stop_token", ... */

typedef struct npullm_metrics {
  double ttft_ms;               /* call start to first token sampled */
  int64_t prefill_tokens;       /* tokens this call prefilled (re-prefills included) */
  int64_t generated_tokens;
  double prefill_tps, decode_tps;
  double kv_utilization;        /* K/V rows in use / capacity, at the end */
  int64_t padded_positions;     /* padding computed by prefill chunks */
  int64_t kv_bytes_copied;      /* K/V bytes moved (context shifts only) */
  int64_t context_shifts;
  int64_t reprefills;           /* times the history was prefilled again */
  int64_t prefill_chunks;
  int64_t last_variant;         /* capacity of the variant the last decode step ran in */
  int64_t compiled_blobs, cached_blobs; /* at load */
  double load_ms;               /* the session's load: model, blobs, tokenizer */
  double prefill_ms;
} npullm_metrics;

typedef struct npullm_result {
  char* text;                   /* generated text, NUL-terminated (stop string excluded) */
  size_t text_len;
  int32_t* ids;                 /* generated ids (EOS / stop token excluded) */
  size_t n_ids;
  npullm_finish_reason finish;
  npullm_metrics metrics;
} npullm_result;

void npullm_result_free(npullm_result* result); /* frees text and ids, zeroes the struct; NULL is fine */

/* Generates a continuation of prompt from an empty state (BOS added when the model wants it); ends a
 * chat if one was going. sampling, callback and out_result may be NULL (defaults / no streaming /
 * no result: read npullm_session_last_metrics). Errors: CONTEXT when the prompt cannot fit beside
 * the reply (unless cut_long_prompts), INVALID_ARGUMENT. */
npullm_status npullm_generate(npullm_session* session, const char* prompt, const npullm_sampling* sampling,
                              npullm_token_callback callback, void* user_data, npullm_result* out_result);
/* The same from exactly these token ids, prefilled at once (no template, no BOS added). */
npullm_status npullm_generate_tokens(npullm_session* session, const int32_t* ids, size_t n_ids, const npullm_sampling* sampling,
                                     npullm_token_callback callback, void* user_data, npullm_result* out_result);

/* Starts a conversation (system_message may be NULL or ""): the K/V state is cleared. */
npullm_status npullm_chat_start(npullm_session* session, const char* system_message);
/* One user turn (starts a chat without a system message if none is going). Renders the template
 * for the new messages and prefills only their tokens on top of the K/V rows the previous turns
 * left; the reply joins the history. On CONTEXT the user message is not added. */
npullm_status npullm_chat(npullm_session* session, const char* user_message, const npullm_sampling* sampling,
                          npullm_token_callback callback, void* user_data, npullm_result* out_result);
/* Ends the chat and clears the K/V state. */
npullm_status npullm_session_reset(npullm_session* session);

/* The chat history (an array of *out_n messages, released with npullm_messages_free). */
npullm_status npullm_session_history(const npullm_session* session, npullm_chat_message** out_messages, size_t* out_n);
void npullm_messages_free(npullm_chat_message* messages, size_t n);
/* Replaces the conversation (starting a chat if needed); its tokens are prefilled on the next turn. */
npullm_status npullm_session_set_history(npullm_session* session, const npullm_chat_message* messages, size_t n);
/* The token ids of the conversation so far (in the K/V rows or about to be), released with npullm_free. */
npullm_status npullm_session_conversation_ids(const npullm_session* session, int32_t** out_ids, size_t* out_n);

typedef struct npullm_kv_state {
  int64_t rows_used;            /* K/V rows holding the conversation */
  int64_t capacity;             /* rows of this sequence (the largest variant) */
  int64_t variant;              /* capacity of the variant the next decode step runs in (0 when full) */
  int64_t last_variant;         /* capacity of the variant the last decode step ran in (0: none yet) */
  int64_t slot;                 /* the sequence slot these rows are in (0) */
  int in_chat;
} npullm_kv_state;

npullm_status npullm_session_kv_state(const npullm_session* session, npullm_kv_state* out_state);
/* The metrics of the session's last generation (zeros before the first). */
npullm_status npullm_session_last_metrics(const npullm_session* session, npullm_metrics* out_metrics);

/* Saves the chat history and the runtime options as JSON, followed by the chat's K/V rows (with a
 * checksum and a key naming the model, K/V type and state layout they fit). Loading restores the
 * history and, where the rows fit this session's model and options, the rows too: the next turn
 * then prefills only its own tokens. Rows that do not fit (another model or K/V type, a cut or
 * corrupt file) are skipped with a warning on stderr and the conversation is prefilled again on
 * the next turn, as for files of version 1 (history only) and for models with sliding-window
 * rings (Gemma 3), whose rows are not saved. The options are informational.
 * Errors: IO, MODEL (not a session file, or its JSON is malformed). */
npullm_status npullm_session_save(const npullm_session* session, const char* path);
npullm_status npullm_session_load(npullm_session* session, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* NPULLM_NPULLM_H */
