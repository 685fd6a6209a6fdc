// Regular expressions (the Regex kind, and JSON Schema's pattern): each construct, checked against
// std::regex's ECMAScript engine on the same strings where the two agree in meaning.
#include <gtest/gtest.h>

#include <regex>

#include "genai/grammar/regex.h"
#include "grammar_test_util.h"

namespace npullm::genai::grammar {
namespace {

using test::in_language;

TEST(GrammarRegex, AgreesWithStdRegexOnAsciiCases) {
  const std::vector<std::string> patterns = {
      "abc",          "a|bc|",       "(ab)*c",          "a+b?",          "[a-c]{2,3}",      "[^a-c]x",
      "\\d{3}-\\d{4}", "\\w+@\\w+\\.com", "(?:x|y){2}z", "a{3}",          "a{2,}",          ".\\..",
      "[\\d_]+",      "\\s*\\S+",    "(a|b)(c|d)*",     "[-a]+",         "x{0,2}y",        "[\\]\\\\]+"};
  const std::vector<std::string> inputs = {"", "abc", "c", "ababc", "a", "ab", "b", "bc", "aa", "abc", "ccc", "dx", "ax",
                                           "555-1234", "55-1234", "bob@mail.com", "xyz", "yyz", "aaa", "aaaa", "a.b",
                                           "1_2", "  x", "acdc", "-a-", "xxy", "xxxy", "]\\", "a b"};
  for (const std::string& p : patterns) {
    const auto g = compile_regex(p);
    const std::regex re(p, std::regex::ECMAScript);
    for (const std::string& in : inputs) EXPECT_EQ(in_language(g, in), std::regex_match(in, re)) << "/" << p << "/ on '" << in << "'";
  }
}

TEST(GrammarRegex, UnicodeClassesAndDot) {
  auto g = compile_regex("[à-ÿ]+.\\u00e9");
  EXPECT_TRUE(in_language(g, "àÿ€é"));
  EXPECT_FALSE(in_language(g, "aÿ€é"));
  EXPECT_FALSE(in_language(g, "à\né"));  // . is not a line terminator
  auto any = compile_regex("[^a]");
  EXPECT_TRUE(in_language(any, "\xF0\x9F\x98\x80"));  // one code point, four bytes
  EXPECT_FALSE(in_language(any, "\xED\xA0\x80"));     // a surrogate is not UTF-8
}

TEST(GrammarRegex, SearchFindsAMatchInsideUnlessAnchored) {
  GrammarBuilder b;
  const int32_t r = b.add_rule("root");
  b.define(r, regex_search("^a|b$|c", b, [](const CodepointSet& s) { return Expr::codepoints(s); }));
  const auto g = b.build(r);
  EXPECT_TRUE(in_language(g, "axx"));
  EXPECT_FALSE(in_language(g, "xax"));
  EXPECT_TRUE(in_language(g, "xxb"));
  EXPECT_FALSE(in_language(g, "xbx"));
  EXPECT_TRUE(in_language(g, "xcx"));
}

TEST(GrammarRegex, JsonSpellingOfCharacters) {
  // In a JSON string the pattern speaks of the value: a quote is written \", a newline \n.
  GrammarBuilder b;
  const int32_t r = b.add_rule("root");
  b.define(r, regex_full("a\"\\n\\\\", b, json_string_chars));
  const auto g = b.build(r);
  EXPECT_TRUE(in_language(g, R"(a\"\n\\)"));
  EXPECT_FALSE(in_language(g, "a\"\n\\"));
}

TEST(GrammarRegex, RefusesWhatItDoesNotImplement) {
  for (const char* p : {"(a)\\1", "a(?=b)", "\\bword", "a^b", "a$b", "a++", "\\p{L}", "(?i)a", "a)", "(a", "[a", "a{3,2}"}) {
    const std::string why = test::refusal_of([&] { compile_regex(p); });
    EXPECT_NE(why.find("regular expression"), std::string::npos) << p << ": " << why;
  }
}

}  // namespace
}  // namespace npullm::genai::grammar
