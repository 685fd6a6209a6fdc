// The public configs as the internal ones: PipelineConfig's runtime options as npuw's
// RuntimeConfig, GenerationConfig's sampling settings as the Sampler's (shared by the
// single-conversation pipeline and the serving scheduler).
#pragma once
#include <npullm/llm_pipeline.h>

#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"

namespace npullm::genai {

// Throws npullm::Error for a kv_type that is not a K/V cache type.
npuw::RuntimeConfig runtime_config(const PipelineConfig& c, int64_t parallel = 1);
SamplerConfig sampler_config(const GenerationConfig& g);

}  // namespace npullm::genai
