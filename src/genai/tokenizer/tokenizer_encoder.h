// The interface between the Tokenizer facade and the model-specific encoders (internal to genai/).
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "genai/tokenizer/tokenizer.h"

namespace npullm::genai::detail {

// What every encoder may look up: the vocab and its text -> id map (built once by the Tokenizer;
// on duplicate texts the later id wins, as in llama.cpp).
struct VocabView {
  const Vocab& vocab;
  const TokenMap& token_to_id;

  int32_t find(std::string_view text) const {
    const auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
};

// Encodes one fragment of plain text: a run of the input between special tokens.
class Encoder {
 public:
  virtual ~Encoder() = default;
  // Appends the ids of `text` (non-empty) to `out`. `after_special` is true for the first fragment
  // of the input and for every fragment that follows a special token (SPM adds its dummy prefix
  // there, as llama.cpp does).
  virtual void encode(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  // The bytes token `id` (in range) stands for when printed: each model spells token texts its
  // own way (U+2581 for spaces, GPT-2 byte chars, "##" continuations) and prints types differently.
  virtual std::string piece(int32_t id) const = 0;
};

// Each is defined in its own file; each throws npullm::Error for a vocab it cannot use.
std::unique_ptr<Encoder> make_spm_encoder(VocabView v);   // spm_encoder.cpp
std::unique_ptr<Encoder> make_bpe_encoder(VocabView v);   // bpe_encoder.cpp
std::unique_ptr<Encoder> make_wpm_encoder(VocabView v);   // wpm_encoder.cpp

}  // namespace npullm::genai::detail
