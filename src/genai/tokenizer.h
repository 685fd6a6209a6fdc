// Text <-> token ids for `tokenizer.ggml.model = llama` (SentencePiece BPE with byte fallback).
//
// Encoding follows llama.cpp's SPM tokenizer (and SentencePiece with add_dummy_prefix): spaces become
// U+2581, a leading U+2581 is prepended when add_space_prefix is set, then the highest-scoring
// adjacent pair present in the vocab is merged repeatedly; a symbol left without a token is emitted
// as its UTF-8 bytes through the <0xNN> byte tokens.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace npullm {
class GgufFile;
}

namespace npullm::genai {

enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

struct Vocab {
  std::string model = "llama";          // tokenizer.ggml.model
  std::vector<std::string> tokens;      // token text as stored (U+2581 for spaces)
  std::vector<float> scores;            // merge priority (higher merges first)
  std::vector<TokenType> types;
  int32_t bos = 1, eos = 2, unk = 0;    // -1 when unset
  bool add_bos = true;
  bool add_space_prefix = true;

  // Reads tokenizer.ggml.* from a GGUF; throws npullm::Error naming the key that is missing or
  // malformed, or the tokenizer model when it is not "llama".
  static Vocab from_gguf(const GgufFile& f);
};

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);

  // Token ids of `text`. add_bos prepends BOS when the vocab says so and bos >= 0.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // The bytes one token stands for: byte tokens give their byte, U+2581 becomes ' ', control
  // tokens give "" (the text of BOS/EOS is not printed).
  std::string token_to_piece(int32_t id) const;
  // Concatenated pieces; when `strip_leading_space` the space of the dummy prefix on the first
  // token is dropped (what llama.cpp does after BOS).
  std::string decode(const std::vector<int32_t>& ids, bool strip_leading_space = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }

 private:
  // Appends the id of one final symbol, or its bytes through the byte tokens when it has none.
  void emit_symbol(std::string_view text, std::vector<int32_t>& out) const;

  Vocab vocab_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  int32_t byte_token_[256];
  size_t max_token_len_ = 0;  // longest token text in bytes: no merge can produce anything longer
};

// Streams text as tokens arrive: holds back bytes until they form complete UTF-8 characters, so
// that every piece handed out is valid UTF-8 even when a character is split across byte tokens.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool strip_leading_space = false)
      : tok_(tok), strip_(strip_leading_space) {}
  // Returns the text that became complete with this token (may be empty).
  std::string push(int32_t id);
  // Returns whatever is still held back (incomplete sequences become U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool strip_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace npullm::genai
