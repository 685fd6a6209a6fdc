#include "genai/configs.h"

#include "common/error.h"

namespace npullm::genai {

npuw::RuntimeConfig runtime_config(const PipelineConfig& c, int64_t parallel) {
  npuw::RuntimeConfig rc;
  rc.prefill_chunk = c.prefill_chunk;
  rc.variants = c.variants;
  rc.max_prompt_len = c.max_prompt_len;
  rc.min_response_len = c.min_response_len;
  rc.threads = c.threads;
  rc.cache_dir = c.cache_dir;
  rc.use_cache = c.use_cache;
  rc.cache_max_bytes = c.cache_max_bytes;
  rc.repack_weights = c.repack_weights;
  rc.parallel = parallel;
  if (c.spec_max_k < 0 || c.spec_max_k > 63) fail("PipelineConfig::spec_max_k must be between 0 and 63 (got {})", c.spec_max_k);
  // Verify blobs of 2, 4, 8, ... rows, up to the first that holds spec_max_k guesses and the token before them.
  if (c.spec_max_k > 0)
    for (int64_t s = 2;; s *= 2) {
      rc.verify_sizes.push_back(s);
      if (s >= c.spec_max_k + 1) break;
    }
  switch (c.kv_type) {
    case KvType::F16: rc.kv_type = GgmlType::F16; break;
    case KvType::F32: rc.kv_type = GgmlType::F32; break;
    case KvType::Q8_0: rc.kv_type = GgmlType::Q8_0; break;
    default: fail("PipelineConfig::kv_type {} is not a K/V cache type (F16, F32 or Q8_0)", static_cast<int>(c.kv_type));
  }
  return rc;
}

SamplerConfig sampler_config(const GenerationConfig& g) {
  SamplerConfig sc;
  sc.temperature = g.temperature;
  sc.top_k = g.top_k;
  sc.top_p = g.top_p;
  sc.min_p = g.min_p;
  sc.typical_p = g.typical_p;
  sc.repetition_penalty = g.repetition_penalty;
  sc.presence_penalty = g.presence_penalty;
  sc.frequency_penalty = g.frequency_penalty;
  sc.penalty_last_n = g.penalty_last_n;
  sc.seed = g.seed;
  return sc;
}

}  // namespace npullm::genai
