#include "genai/open_model.h"

#include "common/error.h"
#include "formats/gguf.h"
#include "genai/configs.h"
#include "model/hparams.h"

namespace npullm::genai {

OpenedModel open_model(const std::string& path, const npuw::RuntimeConfig& rc) {
  OpenedModel m;
  m.tok = std::make_unique<Tokenizer>(Vocab::from_gguf(*GgufFile::open(path)));
  m.rt = std::make_unique<npuw::LlmRuntime>(path, rc);
  if (m.tok->n_vocab() != m.rt->n_vocab())
    fail("{}: the vocabulary has {} tokens but the model's embedding has {} rows", path, m.tok->n_vocab(), m.rt->n_vocab());
  return m;
}

void check_draft(const std::string& draft_path, int64_t n_vocab) {
  const int64_t n = model::HParams::from_gguf(*GgufFile::open(draft_path, GgufArrays::kWithoutLarge)).n_vocab;
  if (n != n_vocab)
    fail("draft model {}: its vocabulary has {} tokens but the model's has {}; a draft model must share the vocabulary", draft_path,
         n, n_vocab);
}

std::unique_ptr<npuw::LlmRuntime> open_draft(const PipelineConfig& cfg, int64_t parallel, int64_t n_vocab) {
  check_draft(cfg.draft_model, n_vocab);
  PipelineConfig dc = cfg;
  dc.spec_max_k = 0;
  return std::make_unique<npuw::LlmRuntime>(cfg.draft_model, runtime_config(dc, parallel));
}

}  // namespace npullm::genai
