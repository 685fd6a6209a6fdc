// Pre-tokenization for byte-level BPE: the text is cut into pieces by a list of regexes before
// BPE merges inside each piece (so merges never cross word/number/punctuation boundaries).
//
// Each regex is applied in turn to every piece the previous one left, and splits it the way HF's
// Split(behavior = Isolated) and llama.cpp's unicode_regex_split do: every match is a piece, and
// so is every run of text between matches. Regexes are PCRE2 with UTF and UCP, so \p{L}, \p{N},
// \s mean their Unicode categories; invalid UTF-8 in the input is allowed and never matches.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace npullm::genai::detail {

// The regex list llama.cpp uses for the pre-tokenizer name `pre` (tokenizer.ggml.pre; "" or
// "default" -> GPT-2's, what HF's ByteLevel pre-tokenizer does). "none" -> no regex (the whole
// fragment is one piece). Throws npullm::Error naming `pre` when it is not known.
std::vector<std::string> pretokenizer_regexes(std::string_view pre);

// GPT-2's regex, also what HF's ByteLevel(use_regex = true) applies.
extern const char* const kGpt2Regex;

class PreTokenizer {
 public:
  // Compiles the regexes; throws npullm::Error naming the regex and PCRE2's complaint.
  explicit PreTokenizer(const std::vector<std::string>& regexes);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // The pieces of `text`, as views into it, in order; they concatenate to `text` (none for "").
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace npullm::genai::detail
