// The SentencePiece (llama, gemma4), byte-level BPE (gpt2) and WordPiece (bert) encoders behind
// the Tokenizer facade, with special-token splitting, and decoding (whole and streamed), over
// real vocabularies from ../shared/models/vocab loaded once at start-up.
//
// Input: byte 0 picks the vocabulary (bits 0-2) and the flags (bit 3 add_bos, bit 4
// parse_special, bit 5 continues_text, bit 6: the rest is token ids to decode instead of text).
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "formats/gguf.h"
#include "fuzz_util.h"
#include "genai/tokenizer/tokenizer.h"

using namespace npullm;

namespace {
std::vector<std::unique_ptr<genai::Tokenizer>> g_tok;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One vocabulary per encoder and pre-tokenizer family the runtime supports.
  for (const char* name : {"llama-spm", "gpt-2", "qwen2", "llama-bpe", "bert-bge", "gemma-4", "deepseek-coder", "phi-3"}) {
    const std::string path = fuzz::shared_path(std::string("models/vocab/ggml-vocab-") + name + ".gguf");
    try {
      g_tok.push_back(std::make_unique<genai::Tokenizer>(genai::Vocab::from_gguf(*GgufFile::open(path))));
    } catch (const Error& e) {
      fuzz::die(std::string("cannot load a vocabulary: ") + e.what());
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const genai::Tokenizer& tok = *g_tok[(mode & 7u) % g_tok.size()];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<int32_t> ids;
  if (mode & 64u) {
    // Ids as the API takes them: any int32, so out-of-range ones must be refused cleanly.
    for (size_t i = 0; i + 4 <= rest.size(); i += 4) {
      int32_t id;
      std::memcpy(&id, rest.data() + i, 4);
      // Mostly valid ids (to reach every piece), sometimes raw ones.
      ids.push_back((id & 0x40000000) ? id : static_cast<int32_t>(static_cast<uint32_t>(id) % static_cast<uint32_t>(tok.n_vocab())));
    }
  } else {
    ids = tok.encode(rest, mode & 8u, mode & 16u, mode & 32u);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.n_vocab()) __builtin_trap();  // the encoder made up an id
  }
  fuzz::expect_ok_or_error([&] { (void)tok.decode(ids, true); });
  fuzz::expect_ok_or_error([&] {
    genai::StreamDecoder sd(tok, true);
    for (int32_t id : ids) (void)sd.push(id);
    (void)sd.flush();
  });
  return 0;
}
