// llama.cpp GBNF grammars: the constructs of its grammars/README.md, each accepting what it should
// and nothing else, and refusals that name the line.
#include <gtest/gtest.h>

#include "genai/grammar/gbnf.h"
#include "grammar_test_util.h"

namespace npullm::genai::grammar {
namespace {

using test::in_language;

TEST(GrammarGbnf, LiteralsSequencesAndAlternation) {
  auto g = compile_gbnf("root ::= \"yes\" | \"no\" \"!\"?\n");
  EXPECT_TRUE(in_language(g, "yes"));
  EXPECT_TRUE(in_language(g, "no"));
  EXPECT_TRUE(in_language(g, "no!"));
  EXPECT_FALSE(in_language(g, "yes!"));
  EXPECT_FALSE(in_language(g, "ye"));
  EXPECT_FALSE(in_language(g, ""));
}

TEST(GrammarGbnf, ChessExampleFromTheReadme) {
  // llama.cpp's grammars/chess.gbnf, as its README shows it (comments and multi-line groups).
  const char* chess = R"G(# `root` specifies the pattern for the overall output
root ::= (
    # it must start with the characters "1. " followed by a sequence
    # of characters that match the `move` rule, followed by a space, followed
    # by another move, and then a newline
    "1. " move " " move "\n"

    # it's followed by one or more subsequent moves, numbered with one or two digits
    ([1-9] [0-9]? ". " move " " move "\n")+
)

# `move` is an abstract representation, which can be a pawn, nonpawn, or castle.
# The `[+#]?` denotes the possibility of checking or mate signs after moves
move ::= (pawn | nonpawn | castle) [+#]?

pawn ::= ...
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
castle ::= "O-O" "-O"?
)G";
  // "pawn ::= ..." is three "any character"s in GBNF.
  auto g = compile_gbnf(chess);
  EXPECT_TRUE(in_language(g, "1. e4x e5y\n2. Nf3 O-O-O#\n"));
  EXPECT_FALSE(in_language(g, "1. e4x e5y\n"));  // needs a second line
  EXPECT_FALSE(in_language(g, "1. Zf3x e5y\n2. Nf3 Nc6\n"));  // "Zf3" is a pawn (any three), "x" then is not
}

TEST(GrammarGbnf, ClassesNegationEscapesAndUnicode) {
  auto g = compile_gbnf(R"(root ::= [^"\\\n]+ "\x41" [\u00e9-\u00ea] "\t" [\]] [a\-z])");
  EXPECT_TRUE(in_language(g, "hello wörld!A\u00e9\t]-"));
  EXPECT_TRUE(in_language(g, "x\"A\u00ea\t]z") == false);  // '"' is excluded from the first class
  EXPECT_FALSE(in_language(g, "xA\u00eb\t]a"));               // U+00EB outside [é-ê]
  EXPECT_FALSE(in_language(g, "xA\u00e9\t]b"));               // [a\-z] is a, -, z: not a range
  EXPECT_TRUE(in_language(g, "xA\u00e9\t]a"));
}

TEST(GrammarGbnf, RepetitionCounts) {
  auto g = compile_gbnf("root ::= [0-9]{2,4} \"-\" [a-z]{3} \"-\" \"x\"{2,}\n");
  EXPECT_TRUE(in_language(g, "12-abc-xx"));
  EXPECT_TRUE(in_language(g, "1234-abc-xxxxx"));
  EXPECT_FALSE(in_language(g, "1-abc-xx"));
  EXPECT_FALSE(in_language(g, "12345-abc-xx"));
  EXPECT_FALSE(in_language(g, "12-abcd-xx"));
  EXPECT_FALSE(in_language(g, "12-abc-x"));
}

TEST(GrammarGbnf, RecursionThroughRules) {
  // llama.cpp's arithmetic example.
  auto g = compile_gbnf(R"G(root  ::= expr
expr  ::= term ([-+*/] term)*
term  ::= num | "(" space expr ")" space
num   ::= [0-9]+ space
space ::= [ \t\n]*
)G");
  EXPECT_TRUE(in_language(g, "1+(2*(3-4))/5"));
  EXPECT_TRUE(in_language(g, "( 1 +2 ) *3"));
  EXPECT_FALSE(in_language(g, "1 + 2"));  // an operator takes no space after it in this grammar
  EXPECT_FALSE(in_language(g, "1+(2*3"));
  EXPECT_FALSE(in_language(g, "1+"));
}

TEST(GrammarGbnf, ByteLevelPrefixesOfAMultiByteCharacter) {
  auto g = compile_gbnf("root ::= \"\u00e9\"\n");
  Matcher m(g);
  EXPECT_TRUE(m.accept("\xC3"));  // the first byte of é: a token may end here
  EXPECT_FALSE(m.is_complete());
  EXPECT_FALSE(m.can_accept("\xA8"));  // è's second byte
  EXPECT_TRUE(m.accept("\xA9"));
  EXPECT_TRUE(m.is_terminated());
}

TEST(GrammarGbnf, RefusalsNameWhatAndWhere) {
  EXPECT_NE(test::refusal_of([] { compile_gbnf("root ::= foo\n"); }).find("'foo' is used but never defined"), std::string::npos);
  EXPECT_NE(test::refusal_of([] { compile_gbnf("start ::= \"a\"\n"); }).find("no 'root' rule"), std::string::npos);
  EXPECT_NE(test::refusal_of([] { compile_gbnf("root ::= \"a\"\nroot ::= \"b\"\n"); }).find("defined twice"), std::string::npos);
  EXPECT_NE(test::refusal_of([] { compile_gbnf("root ::= root \"a\" | \"b\"\n"); }).find("left-recursive"), std::string::npos);
  EXPECT_NE(test::refusal_of([] { compile_gbnf("root ::= \"a\"\nx ::= [abc\n"); }).find("unterminated character class"), std::string::npos);
  EXPECT_NE(test::refusal_of([] { compile_gbnf("root ::= <[1000]>\n"); }).find("token references"), std::string::npos);
  EXPECT_NE(test::refusal_of([] { compile_gbnf("root ::= [b-a]\n"); }).find("out of order"), std::string::npos);
  EXPECT_NE(test::refusal_of([] { compile_gbnf("root ::= \"a\"\nx ::= \"b\" )\n"); }).find("line 2 column 11"), std::string::npos);
}

}  // namespace
}  // namespace npullm::genai::grammar
