// The pre-tokenizer's pieces, not only a byte round trip: GPT-2's, Llama 3's and Qwen2's regexes cut
// every text of tests/data/pretokenizer_splits.json exactly as Python's `regex` module cuts it with
// the patterns as their authors publish them (tests/tools/make-pretokenizer-splits.py; HF's
// Split(behavior = Isolated)): llama.cpp's tokenizer test texts plus cases that tell the patterns
// apart (contractions in capitals, digit runs, CR/LF runs, CJK, combining marks, emoji, NBSP).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "genai/tokenizer/pretokenizer.h"
#include "test_util.h"

namespace npullm::genai::detail {
namespace {

std::string show(const std::vector<std::string>& pieces) {
  std::string s = "[";
  for (const std::string& p : pieces) s += (s.size() > 1 ? ", " : "") + nlohmann::json(p).dump();
  return s + "]";
}

TEST(PreTokenizerSplits, MatchPythonRegexPieceForPiece) {
  const auto doc = nlohmann::json::parse(test::read_file(test::repo_data_path("pretokenizer_splits.json")));
  const auto& cases = doc.at("cases");
  ASSERT_GE(cases.size(), 150u);
  std::map<std::string, size_t> per_pre;
  for (const auto& c : cases) {
    const std::string pre = c.at("pre").get<std::string>(), text = c.at("text").get<std::string>();
    // The pattern npullm uses for this name is its own copy; the JSON's is the published one.
    const std::vector<std::string> regexes = pretokenizer_regexes(pre);
    ASSERT_EQ(regexes.size(), 1u) << pre;
    EXPECT_EQ(regexes[0], doc.at("patterns").at(pre).get<std::string>()) << pre;
    const PreTokenizer pt(regexes);
    std::vector<std::string> got;
    for (std::string_view p : pt.split(text)) got.emplace_back(p);
    const auto want = c.at("pieces").get<std::vector<std::string>>();
    EXPECT_EQ(got, want) << pre << " on " << nlohmann::json(text).dump() << "\n  want " << show(want) << "\n  got  " << show(got);
    ++per_pre[pre];
  }
  EXPECT_EQ(per_pre.size(), 3u);
  for (const auto& [pre, n] : per_pre) std::printf("[ pretok   ] %s: %zu texts split as Python's regex splits them\n", pre.c_str(), n);
}

// The GGUF names that share those patterns get the same pieces.
TEST(PreTokenizerSplits, AliasesUseTheSamePattern) {
  EXPECT_EQ(pretokenizer_regexes("llama-bpe"), pretokenizer_regexes("llama3"));
  EXPECT_EQ(pretokenizer_regexes(""), pretokenizer_regexes("gpt-2"));
  EXPECT_EQ(pretokenizer_regexes("default"), pretokenizer_regexes("gpt-2"));
  EXPECT_EQ(pretokenizer_regexes("deepseek-r1-qwen"), pretokenizer_regexes("qwen2"));
}

}  // namespace
}  // namespace npullm::genai::detail
