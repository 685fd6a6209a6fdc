// What a generation loop needs to honour GenerationConfig::structured: one object per request.
//
//   auto so = StructuredDecoder::make(cfg.structured, vocab_trie, {eos, stop ids...});  // throws before generating
//   for (;;) {
//     if (so && so->must_end()) { finish as EOS; }
//     id = so ? so->sample(sampler, logits) : sampler.sample(logits);
//     if (so) so->accept(id);
//   }
//
// sample() is "sample first, check after": the sampler runs on the logits as they are, and only
// when the grammar refuses its choice does it run again on the allowed tokens alone (the mask);
// plain greedy first tries the next best few tokens in order, which gives the same token.
// For greedy decoding this is exactly the masked argmax. With a temperature the draw is
// p(t) + P(refused) * q(t) with q the distribution over allowed tokens, which equals q(t) when no
// filter (top-k/top-p/min-p/typical) is on; with filters the first draw sees the unmasked
// survivors (llama.cpp does the same).
#pragma once
#include <memory>
#include <vector>

#include <npullm/llm_pipeline.h>

#include "genai/grammar/token_matcher.h"
#include "genai/sampling/sampler.h"
#include "genai/tokenizer/tokenizer.h"

namespace npullm::genai::grammar {

// The vocabulary's byte trie: one per vocabulary in the process, shared by every caller that asks
// while one is held (callers keep it).
std::shared_ptr<const TokenTrie> make_token_trie(const Tokenizer& tok);

class StructuredDecoder {
 public:
  // Null for kind None. Throws GrammarError (npullm::Error) when the schema / grammar / expression
  // is refused.
  static std::unique_ptr<StructuredDecoder> make(const StructuredOutput& s, std::shared_ptr<const TokenTrie> trie,
                                                 std::vector<int32_t> end_ids);

  // A token the grammar allows, drawn by `sampler` from `logits`. Throws npullm::Error when no
  // token of the vocabulary can continue the text (the grammar needs bytes no token has).
  int32_t sample(Sampler& sampler, std::span<const float> logits);
  // Takes the chosen token; false when it was not allowed (state unchanged).
  bool accept(int32_t id) { return m_.accept(id); }
  bool allowed(int32_t id) { return m_.allowed(id); }
  // Jump-forward: the tokens that must come next whatever the model prefers (the grammar allows one
  // continuation: a key, `":`, closing brackets), tokenized canonically by `tok`, none of them
  // checked against the grammar yet. The last token of that text is left out when it is the start
  // of a longer token (the model may merge it with what follows), so the list may be empty.
  // Fewer than kMinForcedTokens: none (the stretch is decoded token by token, which is cheaper).
  std::vector<int32_t> forced_tokens(const Tokenizer& tok);
  static constexpr size_t kMinForcedTokens = 4;
  // Nothing may follow: end now (EOS) without sampling.
  bool must_end() const { return m_.must_end(); }
  bool complete() const { return m_.complete(); }

  int64_t masks_built() const { return m_.masks_built(); }
  int64_t rejections() const { return rejections_; }  // sampled tokens the grammar refused

 private:
  explicit StructuredDecoder(TokenMatcher m) : m_(std::move(m)) {}
  TokenMatcher m_;
  int64_t rejections_ = 0;
  std::vector<std::pair<float, int32_t>> top_;  // greedy: the best few logits (scratch)
};

}  // namespace npullm::genai::grammar
