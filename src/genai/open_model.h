// A model file opened the way the pipeline and the serving scheduler both need it: the tokenizer
// and the runtime, checked against each other.
#pragma once
#include <npullm/llm_pipeline.h>

#include <cstdint>
#include <memory>
#include <string>

#include "genai/tokenizer/tokenizer.h"
#include "npuw/llm_runtime.h"

namespace npullm::genai {

struct OpenedModel {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<npuw::LlmRuntime> rt;
};

// The tokenizer first, from a GGUF reader of its own that goes with it (the runtime's reader keeps
// no vocabulary: GgufArrays::kWithoutLarge), then the runtime. Throws npullm::Error when the file
// cannot be read or compiled, or when the vocabulary and the embedding disagree on the token count.
OpenedModel open_model(const std::string& path, const npuw::RuntimeConfig& rc);

// A draft model for speculative decoding (PipelineConfig::draft_model) must share the model's
// vocabulary of n_vocab tokens: checked from its header alone (nothing compiled); throws
// npullm::Error naming both counts.
void check_draft(const std::string& draft_path, int64_t n_vocab);
// The draft model's runtime: checked as above, then `parallel` slots and no verify blobs (it only
// guesses), the rest of its configuration the model's.
std::unique_ptr<npuw::LlmRuntime> open_draft(const PipelineConfig& cfg, int64_t parallel, int64_t n_vocab);

}  // namespace npullm::genai
