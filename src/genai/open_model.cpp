#include "genai/open_model.h"

#include "common/error.h"
#include "formats/gguf.h"

namespace npullm::genai {

OpenedModel open_model(const std::string& path, const npuw::RuntimeConfig& rc) {
  OpenedModel m;
  m.tok = std::make_unique<Tokenizer>(Vocab::from_gguf(*GgufFile::open(path)));
  m.rt = std::make_unique<npuw::LlmRuntime>(path, rc);
  if (m.tok->n_vocab() != m.rt->n_vocab())
    fail("{}: the vocabulary has {} tokens but the model's embedding has {} rows", path, m.tok->n_vocab(), m.rt->n_vocab());
  return m;
}

}  // namespace npullm::genai
