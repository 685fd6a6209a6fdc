// The Hugging Face tokenizer.json loader (vocab_from_hf_json, with tokenizer_config.json) and the
// Tokenizer built from what it returns, encoding and decoding a fixed text.
//
// Input: the tokenizer.json text, then optionally a NUL byte and the tokenizer_config.json text.
#include <cstdint>

#include "fuzz_util.h"
#include "genai/tokenizer/hf_tokenizer_json.h"
#include "genai/tokenizer/tokenizer.h"

using namespace npullm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_at_nul(data, size);
  const std::string_view json = parts.first, config = parts.second;
  fuzz::expect_ok_or_error([&] {
    genai::Tokenizer tok(genai::vocab_from_hf_json(json, config, "fuzz/tokenizer.json"));
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids =
          tok.encode("Hello, world! <|im_start|>user\n  123 caf\xc3\xa9 \xe2\x96\x81 <s>[INST]", true, special);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
      (void)tok.decode(ids, true);
    }
  });
  return 0;
}
