#include "genai/pipeline.h"

#include <chrono>

#include "common/error.h"

namespace npullm::genai {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Pipeline::Pipeline(const std::string& model_path, npuw::RuntimeConfig cfg)
    : rt_(std::make_unique<npuw::LlmRuntime>(model_path, std::move(cfg))),
      tok_(std::make_unique<Tokenizer>(Vocab::from_gguf(rt_->gguf()))) {
  if (tok_->n_vocab() != rt_->n_vocab())
    fail("{}: the vocabulary has {} tokens but the model's embedding has {} rows", rt_->gguf().path(), tok_->n_vocab(), rt_->n_vocab());
}

GenerationResult Pipeline::generate(const std::string& prompt, const GenerationConfig& cfg, const Streamer& streamer) {
  GenerationResult res;
  res.prompt_ids = tok_->encode(prompt, /*add_bos=*/true);
  if (res.prompt_ids.empty()) fail("the prompt is empty and the vocabulary has no BOS token to start from");
  rt_->reset();
  Sampler sampler(cfg.sampling);

  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = rt_->prefill(res.prompt_ids);
  res.prefill_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  // The prompt's text is already on screen; continuing text keeps the dummy-prefix space unless
  // the prompt was only BOS (then the first generated piece's leading space is dropped).
  StreamDecoder out(*tok_, /*strip_leading_space=*/res.prompt_ids.size() == 1);
  for (int64_t i = 0; i < cfg.max_new_tokens; ++i) {
    const int32_t id = sampler.sample(logits);
    if (id == tok_->eos() && !cfg.ignore_eos) {
      res.stopped_at_eos = true;
      break;
    }
    res.ids.push_back(id);
    const std::string piece = out.push(id);
    res.text += piece;
    bool go_on = !streamer || piece.empty() || streamer(piece);
    if (!go_on || i + 1 == cfg.max_new_tokens) break;
    if (rt_->position() >= rt_->capacity()) {  // a capacity policy (truncate / shift) is later work
      res.stopped_at_capacity = true;
      break;
    }
    logits = rt_->decode(id);
  }
  const std::string tail = out.flush();
  res.text += tail;
  if (streamer && !tail.empty()) streamer(tail);
  res.decode_ms = ms_since(t0);
  return res;
}

}  // namespace npullm::genai
