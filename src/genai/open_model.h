// A model file opened the way the pipeline and the serving scheduler both need it: the tokenizer
// and the runtime, checked against each other.
#pragma once
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

}  // namespace npullm::genai
