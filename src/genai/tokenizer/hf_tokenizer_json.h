// Loads a Hugging Face tokenizer.json (and, when given, its tokenizer_config.json) into the same
// Vocab that Vocab::from_gguf produces, so that the Tokenizer does not care where a vocab came from.
//
// Supported (everything else is refused with an npullm::Error naming the component):
//   model      BPE, merges as "a b" strings or ["a", "b"] pairs, ignore_merges, byte_fallback, unk_token
//   byte-level pre_tokenizer Sequence / Split(Regex|String, Isolated) / ByteLevel / Digits,
//              decoder ByteLevel, normalizer none or NFC (accepted but not applied, as llama.cpp's
//              converted Qwen2 GGUFs do: texts are normally NFC already)        -> Vocab model "gpt2"
//   SentencePiece-style (Llama 2, Mistral): byte_fallback, normalizer Prepend("▁") + Replace(" ",
//              "▁") or pre_tokenizer Metaspace(split = false); merges give the merge order
//                                                                                -> Vocab model "llama"
//   added_tokens: special -> CONTROL, others -> USER_DEFINED, with their lstrip/rstrip
//   tokenizer_config.json: bos_token, eos_token, add_bos_token, add_eos_token, chat_template
#pragma once
#include <string>
#include <string_view>

#include "genai/tokenizer/tokenizer.h"

namespace npullm::genai {

// `json` is the text of tokenizer.json, `config` that of tokenizer_config.json ("" when there is
// none); `label` names the source in error messages.
Vocab vocab_from_hf_json(std::string_view json, std::string_view config, const std::string& label);

// Reads `path` (a tokenizer.json, or a directory holding one) and the tokenizer_config.json next
// to it when there is one.
Vocab load_hf_tokenizer(const std::string& path);

}  // namespace npullm::genai
