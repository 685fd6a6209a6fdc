#include "genai/grammar/structured.h"

#include <algorithm>
#include <functional>
#include <mutex>

#include "genai/grammar/compile.h"
#include "genai/grammar/token_classes.h"

namespace npullm::genai::grammar {

std::shared_ptr<const TokenTrie> make_token_trie(const Tokenizer& tok) {
  std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
  size_t key = pieces.size();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    pieces[static_cast<size_t>(id)] = tok.token_to_piece(id);
    key = key * 1000003u ^ std::hash<std::string>{}(pieces[static_cast<size_t>(id)]);
  }
  // One trie per vocabulary in the process, not per tokenizer: the token classes are cached by
  // (grammar, trie), so every pipeline, scheduler and C API session of a model shares them, and a
  // schema's classes are built once rather than once per holder (each build is ~1 s of a core
  // with a 152k vocabulary, on a thread of its own beside decode). Held weakly: the classes' cache
  // keeps a trie alive while it is used.
  struct Entry {
    size_t key;
    std::weak_ptr<const TokenTrie> trie;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  const auto same = [&](const TokenTrie& t) {
    if (t.n_vocab() != pieces.size()) return false;
    for (size_t i = 0; i < pieces.size(); ++i)
      if (t.piece(static_cast<int32_t>(i)) != pieces[i]) return false;
    return true;
  };
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(cache, [](const Entry& e) { return e.trie.expired(); });
  for (const Entry& e : cache)
    if (e.key == key)
      if (std::shared_ptr<const TokenTrie> t = e.trie.lock(); t && same(*t)) return t;
  auto trie = std::make_shared<const TokenTrie>(std::move(pieces));
  cache.push_back({key, trie});
  return trie;
}

std::unique_ptr<StructuredDecoder> StructuredDecoder::make(const StructuredOutput& s, std::shared_ptr<const TokenTrie> trie,
                                                           std::vector<int32_t> end_ids) {
  std::shared_ptr<const Grammar> g = compile(s);
  if (!g) return nullptr;
  // The token classes of this grammar and vocabulary (built here, on the caller's thread, once per
  // grammar): a full mask is then a few unions and a short list of checks.
  auto classes = token_classes(g, trie);
  return std::unique_ptr<StructuredDecoder>(
      new StructuredDecoder(TokenMatcher(std::move(g), std::move(trie), std::move(end_ids), s.trigger, std::move(classes))));
}

std::vector<int32_t> StructuredDecoder::forced_tokens(const Tokenizer& tok) {
  constexpr size_t kMaxForcedBytes = 128;
  const std::string text = m_.forced_bytes(kMaxForcedBytes);
  if (text.empty()) return {};
  // The forced text continues the reply: no SPM dummy prefix.
  std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/false, /*parse_special=*/false, /*continues_text=*/true);
  // The text must come back byte for byte (an SPM dummy prefix or a normalisation would not).
  std::string back;
  for (int32_t id : ids) back += m_.trie().piece(id);
  if (back != text) return {};
  if (!ids.empty() && m_.trie().extends(ids.back())) ids.pop_back();
  // A prefill run costs more than a decode step (its smallest blob has 8 rows: 2-5 decode steps of
  // time on a 2-core AVX-512 machine, bench --json-schema), so a short stretch is decoded as usual.
  if (ids.size() < kMinForcedTokens) ids.clear();
  return ids;
}

int32_t StructuredDecoder::sample(Sampler& sampler, std::span<const float> logits) {
  const SamplerConfig& c = sampler.config();
  const bool plain_greedy = c.temperature <= 0.0f && (c.penalty_last_n == 0 || (c.repetition_penalty == 1.0f &&
                                                      c.presence_penalty == 0.0f && c.frequency_penalty == 0.0f));
  if (plain_greedy) {
    // The masked argmax is the first allowed token in (logit descending, id ascending) order: one
    // scan finds the argmax (the sampler's choice) with its next few runners-up, tried before the
    // whole mask is built.
    constexpr size_t kTry = 8;
    top_logits(logits, kTry, top_);
    for (size_t i = 0; i < top_.size(); ++i) {
      if (m_.allowed(top_[i].second)) return top_[i].second;
      if (i == 0) ++rejections_;
    }
  } else {
    const int32_t first = sampler.sample(logits);
    if (m_.allowed(first)) return first;
    ++rejections_;
  }
  const std::span<const uint64_t> mask = m_.mask();
  bool any = false;
  for (size_t w = 0; w < mask.size() && !any; ++w) any = mask[w] != 0;
  if (!any) throw Error("structured output: no token of the vocabulary can continue the text the grammar requires");
  return sampler.sample(logits, mask);
}

}  // namespace npullm::genai::grammar
