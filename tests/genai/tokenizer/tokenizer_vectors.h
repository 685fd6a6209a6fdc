// llama.cpp tokenizer vectors (.inp/.out pairs) run through a Tokenizer: shared by the SentencePiece
// and BPE tokenizer tests. Loading the pairs is test::load_vocab_cases (tests/test_util.h).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "genai/tokenizer/tokenizer.h"
#include "test_util.h"

namespace npullm::genai::test_vectors {

inline std::string ids_to_line(const std::vector<int32_t>& ids) {
  std::string line;
  for (int32_t id : ids) line += " " + std::to_string(id);
  return line;
}

// Every case of the pair at `stem` (+ ".inp"/".out", absolute paths) encoded without BOS and
// without parsing special tokens (as llama.cpp's test-tokenizer-0 does) must give its .out line,
// compared as numbers; for lossless models (byte-level BPE, SPM with byte fallback) decoding and
// streaming (valid UTF-8 in every piece) must give the text back. `normalise`, when given, is
// applied to the text before encoding (the reference tokenizer normalised it). Returns the number
// of cases that matched, and prints "<name>: matched/total".
inline size_t check_vectors(const Tokenizer& tok, const std::string& stem, const std::string& name,
                            bool lossless = true,
                            const std::function<std::string(const std::string&)>& normalise = {}) {
  const test::VocabCases c = test::load_vocab_cases(stem + ".inp", stem + ".out");
  // As many cases as the files hold (llama.cpp's standard 46, more for newer vocabularies).
  EXPECT_GT(c.texts.size(), 0u) << stem << ": no cases";
  EXPECT_EQ(c.expected.size(), c.texts.size()) << stem << ": .inp and .out disagree on the number of cases";
  if (c.texts.empty() || c.expected.size() != c.texts.size()) return 0;
  size_t passed = 0;
  for (size_t i = 0; i < c.texts.size(); ++i) {
    const std::string text = normalise ? normalise(c.texts[i]) : c.texts[i];
    const std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/false);
    EXPECT_EQ(ids, c.expected[i]) << name << " case " << i << " text [" << text << "]";
    if (ids == c.expected[i]) ++passed;
    if (!lossless) continue;
    EXPECT_EQ(tok.decode(ids, /*strip_leading_space=*/true), text) << name << " round trip, case " << i;
    StreamDecoder stream(tok, /*strip_leading_space=*/true);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      EXPECT_TRUE(test::is_valid_utf8(piece)) << name << " case " << i << " streamed invalid UTF-8";
      streamed += piece;
    }
    EXPECT_EQ(streamed + stream.flush(), text) << name << " stream, case " << i;
  }
  std::cout << "[  vectors ] " << name << ": " << passed << "/" << c.texts.size() << " cases match\n";
  return passed;
}

}  // namespace npullm::genai::test_vectors
