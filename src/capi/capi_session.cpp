// The C API's sessions: one LLMPipeline each (one sequence's K/V rows and conversation);
// generation with a sampling config and a streaming callback that can cancel; the K/V state.
#include <cstdlib>
#include <string>

#include "capi/capi_internal.h"
#include "genai/grammar/compile.h"

using namespace npullm;
using namespace npullm::capi;

namespace {

GenerationConfig generation_config(const npullm_session& session, const npullm_sampling* s) {
  const npullm_sampling d = npullm_sampling_default();
  const npullm_sampling& p = s ? *s : d;
  require(p.max_new_tokens >= 0, "max_new_tokens must not be negative");
  require(p.temperature >= 0, "temperature must not be negative (0 = greedy)");
  require(p.top_k >= 0, "top_k must not be negative (0 = off)");
  require(p.top_p >= 0 && p.top_p <= 1, "top_p must be within [0, 1]");
  require(p.min_p >= 0 && p.min_p <= 1, "min_p must be within [0, 1]");
  require(p.typical_p >= 0 && p.typical_p <= 1, "typical_p must be within [0, 1]");
  require(p.repetition_penalty > 0, "repetition_penalty must be positive (1 = off)");
  require(p.penalty_last_n >= 0, "penalty_last_n must not be negative");
  require(p.stop_strings || p.n_stop_strings == 0, "stop_strings is NULL but n_stop_strings is not 0");
  require(p.stop_token_ids || p.n_stop_token_ids == 0, "stop_token_ids is NULL but n_stop_token_ids is not 0");
  GenerationConfig g;
  g.max_new_tokens = p.max_new_tokens;
  g.temperature = p.temperature;
  g.top_k = p.top_k;
  g.top_p = p.top_p;
  g.min_p = p.min_p;
  g.typical_p = p.typical_p;
  g.repetition_penalty = p.repetition_penalty;
  g.presence_penalty = p.presence_penalty;
  g.frequency_penalty = p.frequency_penalty;
  g.penalty_last_n = p.penalty_last_n;
  g.seed = p.seed;
  for (size_t i = 0; i < p.n_stop_strings; ++i) {
    require(p.stop_strings[i] != nullptr, "a stop string is NULL");
    if (*p.stop_strings[i]) g.stop_strings.emplace_back(p.stop_strings[i]);
  }
  g.stop_token_ids.assign(p.stop_token_ids, p.stop_token_ids + p.n_stop_token_ids);
  g.ignore_eos = p.ignore_eos != 0;
  g.structured = session.structured;
  g.speculative = session.speculative;
  return g;
}

// The C arguments -> a StructuredOutput, compiled (through the grammar cache, so the generation's
// own compile is free): a refused source throws GrammarError, which guard() makes INVALID_ARGUMENT.
// kind: the int a C caller passed (raw_enum), since C lets any int through and loading an
// out-of-range value as the C++ enum type would be undefined before we could refuse it.
StructuredOutput structured_of(int k, const char* source, const char* trigger) {
  StructuredOutput s;
  const bool has_source = source && *source, has_trigger = trigger && *trigger;
  switch (k) {
    case NPULLM_STRUCTURED_NONE:
      require(!has_source && !has_trigger, "NPULLM_STRUCTURED_NONE takes no source and no trigger");
      return s;
    case NPULLM_STRUCTURED_JSON_OBJECT:
      require(!has_source, "NPULLM_STRUCTURED_JSON_OBJECT takes no source");
      s.kind = StructuredOutput::Kind::JsonObject;
      break;
    case NPULLM_STRUCTURED_JSON_SCHEMA: s.kind = StructuredOutput::Kind::JsonSchema; break;
    case NPULLM_STRUCTURED_GRAMMAR: s.kind = StructuredOutput::Kind::Gbnf; break;
    case NPULLM_STRUCTURED_REGEX: s.kind = StructuredOutput::Kind::Regex; break;
    default: refuse(NPULLM_ERR_INVALID_ARGUMENT, "kind is not an npullm_structured_kind");
  }
  if (s.kind != StructuredOutput::Kind::JsonObject) {
    require(has_source, "a JSON schema, grammar or regular expression needs its source (not NULL or \"\")");
    s.source = source;
  }
  if (has_trigger) s.trigger = trigger;
  genai::grammar::compile(s);
  return s;
}

Streamer streamer_of(npullm_token_callback cb, void* user_data) {
  if (!cb) return {};
  return [cb, user_data](std::string_view piece) {
    const std::string text(piece);  // NUL-terminated for the callback
    return cb(text.c_str(), text.size(), user_data) != 0;
  };
}

npullm_finish_reason finish_of(FinishReason r) {
  switch (r) {
    case FinishReason::Eos: return NPULLM_FINISH_EOS;
    case FinishReason::StopToken: return NPULLM_FINISH_STOP_TOKEN;
    case FinishReason::StopString: return NPULLM_FINISH_STOP_STRING;
    case FinishReason::Length: return NPULLM_FINISH_LENGTH;
    case FinishReason::Cancelled: return NPULLM_FINISH_CANCELLED;
  }
  return NPULLM_FINISH_LENGTH;
}

npullm_metrics metrics_of(const GenerationMetrics& m, int64_t last_variant) {
  npullm_metrics o{};
  o.ttft_ms = m.ttft_ms;
  o.prefill_tokens = m.prefill_tokens;
  o.generated_tokens = m.generated_tokens;
  o.prefill_tps = m.prefill_tps;
  o.decode_tps = m.decode_tps;
  o.kv_utilization = m.kv_utilization;
  o.padded_positions = m.padded_positions;
  o.kv_bytes_copied = m.kv_bytes_copied;
  o.context_shifts = m.context_shifts;
  o.reprefills = m.reprefills;
  o.prefill_chunks = m.prefill_chunks;
  o.last_variant = last_variant;
  o.compiled_blobs = m.compiled_blobs;
  o.cached_blobs = m.cached_blobs;
  o.load_ms = m.load_ms;
  o.prefill_ms = m.prefill_ms;
  return o;
}

npullm_spec_metrics spec_metrics_of(const GenerationMetrics& m) {
  npullm_spec_metrics o{};
  o.spec_drafted = m.spec_drafted;
  o.spec_accepted = m.spec_accepted;
  o.spec_verify_steps = m.spec_verify_steps;
  o.prediction_accepted = m.prediction_accepted;
  o.prediction_rejected = m.prediction_rejected;
  return o;
}

// Runs one generation and hands its result over: the metrics always, the text and ids when asked.
template <typename Run>
npullm_status generate_with(npullm_session* session, npullm_result* out, Run&& run) {
  if (out) *out = npullm_result{};
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session != nullptr, "session must not be NULL");
    const GenerationResult r = run(*session->pipe);
    session->last = metrics_of(r.metrics, session->pipe->last_variant());
    session->last_spec = spec_metrics_of(r.metrics);
    if (!out) return;
    npullm_result res{};
    res.text = copy_text(r.text);
    res.text_len = r.text.size();
    try {
      res.ids = copy_ids(r.ids);
    } catch (...) {
      std::free(res.text);
      throw;
    }
    res.n_ids = r.ids.size();
    res.finish = finish_of(r.finish);
    res.metrics = session->last;
    *out = res;
  });
}

}  // namespace

extern "C" {

npullm_status npullm_session_create(npullm_model* model, npullm_session** out_session) {
  return guard(NPULLM_ERR_MODEL, [&] {
    require(model && out_session, "model and out_session must not be NULL");
    auto s = std::make_unique<npullm_session>();
    s->model_path = model->path;
    s->cfg = model->cfg;
    s->pipe = std::make_unique<LLMPipeline>(s->model_path, s->cfg);
    *out_session = s.release();
  });
}

void npullm_session_free(npullm_session* session) { delete session; }

npullm_sampling npullm_sampling_default(void) {
  const GenerationConfig d;
  npullm_sampling s{};
  s.max_new_tokens = d.max_new_tokens;
  s.temperature = d.temperature;
  s.top_k = d.top_k;
  s.top_p = d.top_p;
  s.min_p = d.min_p;
  s.typical_p = d.typical_p;
  s.repetition_penalty = d.repetition_penalty;
  s.presence_penalty = d.presence_penalty;
  s.frequency_penalty = d.frequency_penalty;
  s.penalty_last_n = d.penalty_last_n;
  s.seed = d.seed;
  s.ignore_eos = d.ignore_eos ? 1 : 0;
  return s;
}

const char* npullm_finish_reason_name(npullm_finish_reason reason) {
  switch (reason) {
    case NPULLM_FINISH_EOS: return "eos";
    case NPULLM_FINISH_STOP_TOKEN: return "stop_token";
    case NPULLM_FINISH_STOP_STRING: return "stop_string";
    case NPULLM_FINISH_LENGTH: return "length";
    case NPULLM_FINISH_CANCELLED: return "cancelled";
  }
  return "unknown";
}

void npullm_result_free(npullm_result* result) {
  if (!result) return;
  std::free(result->text);
  std::free(result->ids);
  *result = npullm_result{};
}

npullm_status npullm_generate(npullm_session* session, const char* prompt, const npullm_sampling* sampling,
                              npullm_token_callback callback, void* user_data, npullm_result* out_result) {
  return generate_with(session, out_result, [&](LLMPipeline& pipe) {
    require(prompt != nullptr, "prompt must not be NULL");
    const GenerationConfig g = generation_config(*session, sampling);
    if (pipe.in_chat()) pipe.finish_chat();  // a completion starts from an empty state
    return pipe.generate(prompt, g, streamer_of(callback, user_data));
  });
}

npullm_status npullm_generate_tokens(npullm_session* session, const int32_t* ids, size_t n_ids, const npullm_sampling* sampling,
                                     npullm_token_callback callback, void* user_data, npullm_result* out_result) {
  return generate_with(session, out_result, [&](LLMPipeline& pipe) {
    require(ids != nullptr && n_ids > 0, "ids must hold at least one token");
    const int64_t n_vocab = pipe.n_vocab();
    for (size_t i = 0; i < n_ids; ++i)
      if (ids[i] < 0 || ids[i] >= n_vocab)
        refuse(NPULLM_ERR_INVALID_ARGUMENT, "token id " + std::to_string(ids[i]) + " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
    const GenerationConfig g = generation_config(*session, sampling);
    if (pipe.in_chat()) pipe.finish_chat();
    return pipe.generate_ids(std::vector<int32_t>(ids, ids + n_ids), g, streamer_of(callback, user_data));
  });
}

npullm_status npullm_session_set_structured(npullm_session* session, npullm_structured_kind kind, const char* source,
                                            const char* trigger) {
  const int k = raw_enum(kind);  // before any typed load of it (the lambda reads captures by reference)
  return guard(NPULLM_ERR_INVALID_ARGUMENT, [&] {
    require(session != nullptr, "session must not be NULL");
    StructuredOutput so = structured_of(k, source, trigger);
    // Refused here, not at the next generation (the pipeline refuses the pair too).
    if (so.kind != StructuredOutput::Kind::None && session->speculative.requested())
      refuse(NPULLM_ERR_INVALID_ARGUMENT,
             "structured output together with speculative decoding is not implemented (a grammar decodes token by token): "
             "turn speculation off first (npullm_session_set_speculative with NPULLM_SPEC_OFF and no prediction)");
    session->structured = std::move(so);
  });
}

npullm_status npullm_structured_check(npullm_structured_kind kind, const char* source, const char* trigger) {
  const int k = raw_enum(kind);
  return guard(NPULLM_ERR_INVALID_ARGUMENT, [&] { structured_of(k, source, trigger); });
}

npullm_status npullm_chat_start(npullm_session* session, const char* system_message) {
  return guard(NPULLM_ERR_MODEL, [&] {
    require(session != nullptr, "session must not be NULL");
    session->pipe->start_chat(system_message ? system_message : "");
  });
}

npullm_status npullm_chat(npullm_session* session, const char* user_message, const npullm_sampling* sampling,
                          npullm_token_callback callback, void* user_data, npullm_result* out_result) {
  return generate_with(session, out_result, [&](LLMPipeline& pipe) {
    require(user_message != nullptr, "user_message must not be NULL");
    const GenerationConfig g = generation_config(*session, sampling);
    if (!pipe.in_chat()) {
      try {
        pipe.start_chat();
      } catch (const Error& e) {
        refuse(NPULLM_ERR_MODEL, e.what());  // no chat template
      }
    }
    return pipe.generate(user_message, g, streamer_of(callback, user_data));
  });
}

npullm_status npullm_session_reset(npullm_session* session) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session != nullptr, "session must not be NULL");
    session->pipe->finish_chat();
  });
}

npullm_status npullm_session_history(const npullm_session* session, npullm_chat_message** out_messages, size_t* out_n) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session && out_messages && out_n, "session, out_messages and out_n must not be NULL");
    const std::vector<ChatMessage>& h = session->pipe->history();
    auto* msgs = static_cast<npullm_chat_message*>(std::calloc(std::max<size_t>(h.size(), 1), sizeof(npullm_chat_message)));
    if (!msgs) throw std::bad_alloc();
    try {
      for (size_t i = 0; i < h.size(); ++i) {
        msgs[i].role = copy_text(h[i].role);
        msgs[i].content = copy_text(h[i].content);
      }
    } catch (...) {
      npullm_messages_free(msgs, h.size());  // calloc'd: the entries not yet set are NULL
      throw;
    }
    *out_messages = msgs;
    *out_n = h.size();
  });
}

void npullm_messages_free(npullm_chat_message* messages, size_t n) {
  if (!messages) return;
  for (size_t i = 0; i < n; ++i) {
    std::free(const_cast<char*>(messages[i].role));
    std::free(const_cast<char*>(messages[i].content));
  }
  std::free(messages);
}

npullm_status npullm_session_set_history(npullm_session* session, const npullm_chat_message* messages, size_t n) {
  return guard(NPULLM_ERR_MODEL, [&] {
    require(session != nullptr, "session must not be NULL");
    const std::vector<ChatMessage> msgs = to_messages(messages, n);
    session->pipe->set_history(msgs);
  });
}

npullm_status npullm_session_conversation_ids(const npullm_session* session, int32_t** out_ids, size_t* out_n) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session && out_ids && out_n, "session, out_ids and out_n must not be NULL");
    const std::vector<int32_t> ids = session->pipe->conversation_ids();
    *out_ids = copy_ids(ids);
    *out_n = ids.size();
  });
}

npullm_status npullm_session_kv_state(const npullm_session* session, npullm_kv_state* out_state) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session && out_state, "session and out_state must not be NULL");
    const LLMPipeline& p = *session->pipe;
    npullm_kv_state s{};
    s.rows_used = p.kv_position();
    s.capacity = p.capacity();
    for (int64_t c : p.variants())
      if (c >= s.rows_used + 1) {
        s.variant = c;  // the smallest that holds the next token's row too
        break;
      }
    s.last_variant = p.last_variant();
    s.slot = 0;
    s.in_chat = p.in_chat() ? 1 : 0;
    *out_state = s;
  });
}

npullm_status npullm_session_last_metrics(const npullm_session* session, npullm_metrics* out_metrics) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session && out_metrics, "session and out_metrics must not be NULL");
    *out_metrics = session->last;
  });
}

}  // extern "C"
