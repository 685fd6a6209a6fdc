// The C API's speculative decoding: a session's setting (mode, K, a prediction), checked against its
// model when it is set rather than when a generation runs, and the last generation's counters.
// The model side (verify blobs, the draft model) is npullm_model_open_speculative, in capi_model.cpp.
#include <string>

#include "capi/capi_internal.h"

using namespace npullm;
using namespace npullm::capi;

namespace {

// The C arguments -> a Speculation, refused (StatusError, INVALID_ARGUMENT) where the pipeline
// made with `cfg` would refuse it at generation time, so a C caller hears of it at the setting.
// mode: the int the caller passed (raw_enum).
Speculation speculation_of(const PipelineConfig& cfg, int mode, int64_t max_k, int adaptive, const char* prediction) {
  Speculation s;
  switch (mode) {
    case NPULLM_SPEC_OFF: break;
    case NPULLM_SPEC_LOOKUP: s.mode = SpecMode::Lookup; break;
    case NPULLM_SPEC_DRAFT: s.mode = SpecMode::Draft; break;
    default: refuse(NPULLM_ERR_INVALID_ARGUMENT, "mode is not an npullm_spec_mode");
  }
  if (prediction) s.prediction = prediction;
  if (!s.requested()) return Speculation{};  // off: max_k and adaptive mean nothing
  if (cfg.spec_max_k <= 0)
    refuse(NPULLM_ERR_INVALID_ARGUMENT,
           "speculative decoding needs verify blobs: open the model with npullm_model_open_speculative and spec_max_k > 0");
  if (max_k < 1) refuse(NPULLM_ERR_INVALID_ARGUMENT, "max_k must be at least 1 (got " + std::to_string(max_k) + ")");
  if (s.mode == SpecMode::Draft && cfg.draft_model.empty())
    refuse(NPULLM_ERR_INVALID_ARGUMENT,
           "NPULLM_SPEC_DRAFT needs a draft model: open the model with npullm_model_open_speculative and a draft_model");
  s.max_k = max_k;  // the pipeline caps it by spec_max_k
  s.adaptive = adaptive != 0;
  return s;
}

}  // namespace

extern "C" {

npullm_status npullm_session_set_speculative(npullm_session* session, npullm_spec_mode mode, int64_t max_k, int adaptive,
                                             const char* prediction) {
  const int m = raw_enum(mode);
  return guard(NPULLM_ERR_INVALID_ARGUMENT, [&] {
    require(session != nullptr, "session must not be NULL");
    Speculation s = speculation_of(session->cfg, m, max_k, adaptive, prediction);
    // The pipeline refuses the pair at generation time; here the setting is refused instead.
    if (s.requested() && session->structured.kind != StructuredOutput::Kind::None)
      refuse(NPULLM_ERR_INVALID_ARGUMENT,
             "speculative decoding together with structured output is not implemented (a grammar decodes token by token): "
             "set NPULLM_STRUCTURED_NONE first (npullm_session_set_structured)");
    session->speculative = std::move(s);
  });
}

npullm_status npullm_speculative_check(const npullm_model* model, npullm_spec_mode mode, int64_t max_k, int adaptive,
                                       const char* prediction) {
  const int m = raw_enum(mode);
  return guard(NPULLM_ERR_INVALID_ARGUMENT, [&] {
    require(model != nullptr, "model must not be NULL");
    speculation_of(model->cfg, m, max_k, adaptive, prediction);
  });
}

npullm_status npullm_session_last_spec_metrics(const npullm_session* session, npullm_spec_metrics* out_metrics) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session && out_metrics, "session and out_metrics must not be NULL");
    *out_metrics = session->last_spec;
  });
}

}  // extern "C"
