// The C API's models: open with runtime options (and what speculative decoding needs: verify blobs,
// a draft model), info, tokenize / detokenize, chat templates.
#include <fstream>

#include "capi/capi_internal.h"
#include "genai/open_model.h"

using namespace npullm;
using namespace npullm::capi;

namespace {

PipelineConfig pipeline_config(const npullm_model_params& p) {
  PipelineConfig c;
  require(p.prefill_chunk > 0, "prefill_chunk must be positive");
  require(p.max_prompt_len > 0 && p.min_response_len >= 0, "max_prompt_len must be positive and min_response_len not negative");
  require(p.threads >= 0, "threads must not be negative (0 = all hardware threads)");
  require(p.variants || p.n_variants == 0, "variants is NULL but n_variants is not 0");
  const int kv = raw_enum(p.kv_type), policy = raw_enum(p.context_policy);
  require(kv == NPULLM_KV_F16 || kv == NPULLM_KV_F32 || kv == NPULLM_KV_Q8_0, "kv_type is not an npullm_kv_type");
  require(policy == NPULLM_CONTEXT_SHIFT || policy == NPULLM_CONTEXT_TRUNCATE, "context_policy is not an npullm_context_policy");
  c.prefill_chunk = p.prefill_chunk;
  for (size_t i = 0; i < p.n_variants; ++i) {
    require(p.variants[i] > 0, "every variant capacity must be positive");
    c.variants.push_back(p.variants[i]);
  }
  c.max_prompt_len = p.max_prompt_len;
  c.min_response_len = p.min_response_len;
  c.threads = p.threads;
  if (p.cache_dir) c.cache_dir = p.cache_dir;
  c.use_cache = p.use_cache != 0;
  c.kv_type = kv == NPULLM_KV_F32 ? KvType::F32 : kv == NPULLM_KV_Q8_0 ? KvType::Q8_0 : KvType::F16;
  c.repack_weights = p.repack_weights != 0;
  c.context_policy = policy == NPULLM_CONTEXT_TRUNCATE ? ContextPolicy::Truncate : ContextPolicy::Shift;
  c.n_keep = p.n_keep;
  if (p.chat_template) c.chat_template = p.chat_template;
  c.cut_long_prompts = p.cut_long_prompts != 0;
  return c;
}

}  // namespace

extern "C" {

npullm_model_params npullm_model_default_params(void) {
  const PipelineConfig d;
  npullm_model_params p{};
  p.prefill_chunk = d.prefill_chunk;
  p.max_prompt_len = d.max_prompt_len;
  p.min_response_len = d.min_response_len;
  p.threads = d.threads;
  p.use_cache = 1;
  p.kv_type = NPULLM_KV_F16;
  p.repack_weights = 1;
  p.context_policy = NPULLM_CONTEXT_SHIFT;
  p.n_keep = d.n_keep;
  p.cut_long_prompts = 0;  // a C caller gets an error code rather than a silently shortened prompt
  return p;
}

npullm_status npullm_model_open(const char* path, const npullm_model_params* params, npullm_model** out_model) {
  return npullm_model_open_speculative(path, params, 0, nullptr, out_model);
}

npullm_status npullm_model_open_speculative(const char* path, const npullm_model_params* params, int64_t spec_max_k,
                                            const char* draft_model, npullm_model** out_model) {
  return guard(NPULLM_ERR_MODEL, [&] {
    require(path && out_model, "path and out_model must not be NULL");
    const npullm_model_params p = params ? *params : npullm_model_default_params();
    auto m = std::make_unique<npullm_model>();
    m->path = path;
    m->cfg = pipeline_config(p);
    require(spec_max_k >= 0 && spec_max_k <= 63, "spec_max_k must be between 0 and 63 (0: no verify blobs)");
    m->cfg.spec_max_k = spec_max_k;
    if (draft_model && *draft_model) {
      require(spec_max_k > 0, "a draft model needs verify blobs: spec_max_k must be at least 1");
      m->cfg.draft_model = draft_model;
    }
    // A missing or unreadable file is the caller's I/O problem, not the model's.
    if (!std::ifstream(path, std::ios::binary)) refuse(NPULLM_ERR_IO, std::string(path) + ": cannot open the model file");
    if (!m->cfg.draft_model.empty() && !std::ifstream(m->cfg.draft_model, std::ios::binary))
      refuse(NPULLM_ERR_IO, m->cfg.draft_model + ": cannot open the draft model file");
    // The model's own pipeline never generates, so it goes without the draft model; its verify
    // blobs are compiled (or found in the cache) now, so the sessions' loads find them cached.
    PipelineConfig own = m->cfg;
    own.draft_model.clear();
    m->pipe = std::make_unique<LLMPipeline>(m->path, own);
    m->variants = m->pipe->variants();
    m->description = m->pipe->description();
    m->bos = m->pipe->bos_id();
    m->eos = m->pipe->eos_id();
    m->n_vocab = m->pipe->n_vocab();
    // A draft of another vocabulary fails the open (from its header), not every npullm_session_create.
    if (!m->cfg.draft_model.empty()) genai::check_draft(m->cfg.draft_model, m->n_vocab);
    *out_model = m.release();
  });
}

void npullm_model_free(npullm_model* model) { delete model; }

npullm_status npullm_model_get_info(const npullm_model* model, npullm_model_info* out_info) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(model && out_info, "model and out_info must not be NULL");
    npullm_model_info i{};
    i.n_vocab = model->n_vocab;
    i.bos_id = model->bos;
    i.eos_id = model->eos;
    i.capacity = model->variants.empty() ? 0 : model->variants.back();
    i.variants = model->variants.data();
    i.n_variants = model->variants.size();
    i.prefill_chunk = model->cfg.prefill_chunk;
    i.slots = 1;
    i.description = model->description.c_str();
    *out_info = i;
  });
}

npullm_status npullm_tokenize(const npullm_model* model, const char* text, int add_bos, int parse_special, int32_t** out_ids,
                              size_t* out_n) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(model && text && out_ids && out_n, "model, text, out_ids and out_n must not be NULL");
    std::lock_guard lock(model->mu);
    const std::vector<int32_t> ids = model->pipe->tokenize(text, add_bos != 0, parse_special != 0);
    *out_ids = copy_ids(ids);
    *out_n = ids.size();
  });
}

npullm_status npullm_detokenize(const npullm_model* model, const int32_t* ids, size_t n_ids, char** out_text) {
  return guard(NPULLM_ERR_INVALID_ARGUMENT, [&] {
    require(model && (ids || n_ids == 0) && out_text, "model, ids and out_text must not be NULL");
    std::vector<int32_t> v(ids, ids + n_ids);
    for (int32_t id : v)
      if (id < 0 || id >= model->n_vocab)
        refuse(NPULLM_ERR_INVALID_ARGUMENT, "token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(model->n_vocab - 1) + ")");
    std::lock_guard lock(model->mu);
    *out_text = copy_text(model->pipe->detokenize(v));
  });
}

npullm_status npullm_apply_chat_template(const npullm_model* model, const npullm_chat_message* messages, size_t n_messages,
                                         int add_generation_prompt, char** out_text) {
  return guard(NPULLM_ERR_MODEL, [&] {
    require(model && out_text, "model and out_text must not be NULL");
    const std::vector<ChatMessage> msgs = to_messages(messages, n_messages);
    std::lock_guard lock(model->mu);
    *out_text = copy_text(model->pipe->apply_chat_template(msgs, add_generation_prompt != 0));
  });
}

}  // extern "C"
