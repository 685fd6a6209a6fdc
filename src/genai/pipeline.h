// genai: text in, text out. Tokenises the prompt, asks npuw to prefill it, then samples one token
// at a time through npuw's generate variants, streaming UTF-8-complete text and stopping at EOS
// or after max_new_tokens. It never touches K/V memory: npuw owns that.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "genai/sampler.h"
#include "genai/tokenizer.h"
#include "npuw/llm_runtime.h"

namespace npullm::genai {

struct GenerationConfig {
  int64_t max_new_tokens = 128;
  SamplerConfig sampling;
  bool ignore_eos = false;
};

struct GenerationResult {
  std::vector<int32_t> prompt_ids;  // as fed (BOS included)
  std::vector<int32_t> ids;         // generated (EOS excluded)
  std::string text;                 // generated text
  bool stopped_at_eos = false;
  bool stopped_at_capacity = false;  // the K/V state is full
  double prefill_ms = 0, decode_ms = 0;
};

// Receives each piece of text as it becomes complete; return false to stop generating.
using Streamer = std::function<bool(const std::string& piece)>;

class Pipeline {
 public:
  Pipeline(const std::string& model_path, npuw::RuntimeConfig cfg);
  GenerationResult generate(const std::string& prompt, const GenerationConfig& cfg, const Streamer& streamer = {});
  const Tokenizer& tokenizer() const { return *tok_; }
  npuw::LlmRuntime& runtime() { return *rt_; }

 private:
  std::unique_ptr<npuw::LlmRuntime> rt_;
  std::unique_ptr<Tokenizer> tok_;
};

}  // namespace npullm::genai
