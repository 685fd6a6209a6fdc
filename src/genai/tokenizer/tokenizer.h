// Text <-> token ids. This header is the facade: a Vocab (what a GGUF or a HF tokenizer.json
// says), a Tokenizer built from it, and a StreamDecoder for generated text.
//
// Three tokenizer models, each in its own file, behind one interface (tokenizer_encoder.h):
//   llama  SentencePiece BPE with byte fallback (spm_encoder.cpp): spaces become U+2581, a dummy
//          prefix is prepended, the highest-scoring adjacent pair in the vocab merges first.
//   gpt2   byte-level BPE (bpe_encoder.cpp): the text is split by the pre-tokenizer regexes
//          (pretokenizer.cpp), each piece's bytes are spelled with GPT-2's byte->unicode table
//          (byte_level.cpp) and merged by rank from the merges list.
//   bert   WordPiece (wpm_encoder.cpp): lower-cased words matched longest-prefix first.
//
// Before a model sees the text, special tokens are cut out of it (special_tokens.cpp), as llama.cpp
// does: USER_DEFINED tokens always, CONTROL and UNKNOWN tokens only when the caller asks for it
// (parse_special), so that text a user typed can never smuggle in "<|im_start|>".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace npullm {
class GgufFile;
}

namespace npullm::genai {

enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// Per-token flags for special tokens: when such a token is cut out of the text, the whitespace
// left (lstrip) or right (rstrip) of it is dropped, as HF's AddedToken lstrip/rstrip do.
enum TokenStrip : uint8_t { kStripNone = 0, kStripLeft = 1, kStripRight = 2 };

struct Vocab {
  std::string model = "llama";          // tokenizer.ggml.model: llama | gpt2 | bert | gemma4
  std::string pre;                      // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;      // token text as stored (U+2581 / GPT-2 byte chars)
  std::vector<float> scores;            // SPM merge priority (higher merges first)
  std::vector<TokenType> types;
  std::vector<uint8_t> strip;           // TokenStrip per token; empty = none anywhere
  // BPE merges, highest priority first: each is the two token texts that merge. gpt2 needs
  // them; for llama (SPM) they replace the scores as merge order when present (a SentencePiece-
  // style HF tokenizer.json).
  std::vector<std::pair<std::string, std::string>> merges;
  // Explicit pre-tokenizer regexes (from a tokenizer.json), applied in turn; when empty the
  // regexes come from the `pre` name (see pretokenizer.h).
  std::vector<std::string> pre_regexes;
  int32_t bos = 1, eos = 2, unk = 0;    // -1 when unset; for bert, bos/eos are [CLS]/[SEP]
  bool add_bos = true;
  bool add_eos = false;
  // SPM: prepend a U+2581 dummy prefix to the text and after each special token (llama.cpp).
  // gpt2: prepend a space to each text fragment that does not start with one (HF ByteLevel
  // add_prefix_space).
  bool add_space_prefix = true;
  // gpt2: a pre-tokenized piece that is itself a token is emitted whole, without merging
  // (Llama 3's "ignore_merges").
  bool ignore_merges = false;
  std::string chat_template;            // tokenizer.chat_template ("" when absent)

  // Reads tokenizer.ggml.* from a GGUF; throws npullm::Error naming the key that is missing or
  // malformed, or the tokenizer model when it is not supported.
  static Vocab from_gguf(const GgufFile& f);
};

namespace detail {
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
}  // namespace detail

class Tokenizer {
 public:
  // Builds the encoder for vocab.model; throws npullm::Error when the vocab is inconsistent, the
  // model is unknown, or (gpt2) the pre-tokenizer is unknown or a regex does not compile.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Token ids of `text`. add_bos prepends BOS (and add_eos appends EOS) when the vocab says so.
  // parse_special: CONTROL/UNKNOWN token texts in `text` (e.g. "<|im_start|>") become those
  // tokens; otherwise they are tokenized as ordinary text. USER_DEFINED tokens always match.
  // continues_text: `text` follows earlier plain text in the same sequence (a chat turn's new text
  // after the previous reply), so its first fragment gets no SPM dummy prefix, as it would not
  // inside the whole conversation; a fragment after a special token still does.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false,
                              bool continues_text = false) const;
  // The bytes one token stands for: byte tokens give their byte, U+2581 / GPT-2 byte chars become
  // the bytes they spell, control tokens give "" (the text of BOS/EOS is not printed).
  std::string token_to_piece(int32_t id) const;
  // Concatenated pieces; when `strip_leading_space` and the model is SPM (or WordPiece), the space
  // of the dummy prefix on the first token is dropped (what llama.cpp does after BOS). Byte-level
  // BPE has no dummy prefix, so there a leading space is real text and stays.
  std::string decode(const std::vector<int32_t>& ids, bool strip_leading_space = false) const;

  const Vocab& vocab() const;
  int32_t n_vocab() const { return static_cast<int32_t>(vocab().tokens.size()); }
  int32_t bos() const { return vocab().bos; }
  int32_t eos() const { return vocab().eos; }
  // Id of the token whose text is exactly `text`, -1 when there is none.
  int32_t find_token(std::string_view text) const;
  // Whether decode() drops the first piece's leading space when asked to: SPM's dummy prefix and
  // WordPiece's word-start space are not text; byte-level BPE's spaces are.
  // The first piece's U+2581 is a dummy prefix, not text, when the encoder added one (SPM with
  // add_space_prefix); WordPiece detokenizes with a space before every word but the first.
  bool strips_leading_space() const {
    return vocab().model == "bert" || ((vocab().model == "llama" || vocab().model == "gemma4") && vocab().add_space_prefix);
  }

 private:
  // Behind a pointer so that the encoders' references into it survive moving the Tokenizer.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streams text as tokens arrive: holds back bytes until they form complete UTF-8 characters, so
// that every piece handed out is valid UTF-8 even when a character is split across byte tokens.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool strip_leading_space = false)
      : tok_(tok), strip_(strip_leading_space && tok.strips_leading_space()) {}
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
