// The per-request matchers: the byte matcher's push/pop, and the token level — the mask equals
// the brute-force answer (every token checked on its own) in every state of random walks, the
// cache gives the same masks, end tokens only when complete, and lazy constraining after a trigger.
#include <gtest/gtest.h>

#include <random>

#include "genai/grammar/gbnf.h"
#include "genai/grammar/json_schema.h"
#include "genai/grammar/regex.h"
#include "genai/grammar/structured.h"
#include "genai/grammar/token_classes.h"
#include "genai/grammar/token_matcher.h"
#include "genai/sampling/sampler.h"
#include "grammar_test_util.h"

namespace npullm::genai::grammar {
namespace {

// A small vocabulary with JSON-ish pieces, multi-byte characters split across tokens, and ids
// 0 (EOS, prints nothing) and 1 (another control token).
std::vector<std::string> small_vocab() {
  std::vector<std::string> v = {"", "", "{", "}", "\"", ":", ",", " ", "\n", "{\"", "\":", "\",", "\"}", "a", "b", "ab", "name",
                                "\"name", "\":\"", "1", "12", "-", "0", "true", "false", "null", "[", "]", "[]", "x", "\xC3",
                                "\xA9", "\xC3\xA9", "é!", "\\", "\\n", "u", "\\u", "00e9", "\"a\"", "}\n", ", \""};
  return v;
}

bool bit(std::span<const uint64_t> m, size_t id) { return (m[id / 64] >> (id % 64)) & 1; }

TEST(GrammarMatcher, StatesAreCanonicalAndChecksLeaveTheStateAlone) {
  auto g = compile_gbnf("root ::= \"ab\" | \"ac\" | \"b\"+\n");
  Matcher m(g);
  const int32_t start = m.state();
  const int32_t a = m.step(start, 'a');
  ASSERT_GE(a, 0);
  EXPECT_TRUE(m.complete(m.step(a, 'c')));
  EXPECT_EQ(m.step(start, 'x'), -1);
  EXPECT_EQ(m.step(start, 'a'), a);  // remembered
  EXPECT_TRUE(m.can_accept("bbb"));
  EXPECT_FALSE(m.can_accept("abb"));
  EXPECT_EQ(m.state(), start);
  EXPECT_TRUE(m.accept("bb"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.is_terminated());  // more b's may follow
  const int32_t bb = m.state();
  EXPECT_EQ(m.step(bb, 'b'), bb);   // b+ loops on one state
  EXPECT_FALSE(m.accept("bx"));
  EXPECT_EQ(m.state(), bb);          // all or nothing
}

TEST(GrammarMatcher, MaskEqualsBruteForceAlongRandomWalks) {
  auto trie = std::make_shared<const TokenTrie>(small_vocab());
  const auto schema = compile_json_schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},
      "a":{"type":"array","items":{"type":["integer","boolean","null"]}}},"required":["name"],"additionalProperties":false})");
  std::mt19937 rng(7);
  for (int walk = 0; walk < 30; ++walk) {
    TokenMatcher tm(schema, trie, {0});
    TokenMatcher brute(schema, trie, {0});
    for (int step = 0; step < 40; ++step) {
      const std::span<const uint64_t> mask = tm.mask();
      std::vector<int32_t> allowed;
      for (size_t id = 0; id < trie->n_vocab(); ++id) {
        EXPECT_EQ(bit(mask, id), brute.allowed(static_cast<int32_t>(id))) << "token " << id << " at step " << step;
        if (bit(mask, id)) allowed.push_back(static_cast<int32_t>(id));
      }
      ASSERT_FALSE(allowed.empty()) << "a JSON text always has a continuation or an end";
      const int32_t id = allowed[rng() % allowed.size()];
      if (id == 0) {
        EXPECT_TRUE(tm.complete());
        break;
      }
      ASSERT_TRUE(tm.accept(id));
      ASSERT_TRUE(brute.accept(id));
      if (tm.must_end()) {
        const std::span<const uint64_t> end = tm.mask();
        for (size_t k = 1; k < trie->n_vocab(); ++k) EXPECT_FALSE(bit(end, k));
        EXPECT_TRUE(bit(end, 0));
        break;
      }
    }
  }
}

// A vocabulary of random pieces over the bytes JSON and the grammars below use (quotes, escapes,
// brackets, digits, letters, spaces, newlines, a two-byte character split or whole), lengths 1-7:
// many tokens run past the end of a string or a number, which is what the token classes must get
// right.
std::vector<std::string> random_vocab(size_t n, unsigned seed) {
  const std::string alphabet = "{}[]\":, \n\\abcmnou0129-.e+tx@\xC3\xA9";
  std::mt19937 rng(seed);
  std::vector<std::string> v = {""};
  for (auto& p : small_vocab()) v.push_back(p);
  while (v.size() < n) {
    std::string p;
    const size_t len = 1 + rng() % 7;
    for (size_t i = 0; i < len; ++i) p += alphabet[rng() % alphabet.size()];
    v.push_back(p);
  }
  return v;
}

// The masks assembled from the precomputed token classes are the brute-force masks (each token
// checked on its own against the whole state), in every state of random walks through schemas,
// recursive GBNF, free JSON and a regular expression.
TEST(GrammarMatcher, MaskFromTokenClassesEqualsBruteForce) {
  auto trie = std::make_shared<const TokenTrie>(random_vocab(3000, 11));
  const std::vector<std::shared_ptr<const Grammar>> grammars = {
      compile_json_schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},
          "a":{"type":"array","items":{"type":["integer","boolean","null"]}},"n":{"type":"number"},
          "e":{"type":"string","format":"email"}},"required":["name"],"additionalProperties":false})"),
      compile_json_object(),
      compile_gbnf("root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9]+ | \"(\" expr \")\" | \"\\\"\" [a-z]* \"\\\"\"\n"),
      compile_regex("[a-z]+@[a-z]+\\.(com|net)( [0-9]{1,3})?"),
  };
  std::mt19937 rng(5);
  for (size_t gi = 0; gi < grammars.size(); ++gi) {
    auto classes = std::make_shared<TokenClasses>(grammars[gi], trie);
    EXPECT_GT(classes->precompute(), 0u);
    for (int walk = 0; walk < 12; ++walk) {
      TokenMatcher tm(grammars[gi], trie, {0}, "", classes);
      TokenMatcher brute(grammars[gi], trie, {0});
      for (int step = 0; step < 30; ++step) {
        const std::span<const uint64_t> mask = tm.mask();
        std::vector<int32_t> allowed;
        for (size_t id = 0; id < trie->n_vocab(); ++id) {
          ASSERT_EQ(bit(mask, id), brute.allowed(static_cast<int32_t>(id))) << "grammar " << gi << " token " << id << " ('"
                                                                            << trie->piece(static_cast<int32_t>(id)) << "') at step " << step;
          if (bit(mask, id)) allowed.push_back(static_cast<int32_t>(id));
        }
        if (allowed.empty()) break;  // the random vocabulary has no piece for what must come (equal to brute force)
        const int32_t id = allowed[rng() % allowed.size()];
        if (id == 0 || tm.must_end()) break;
        ASSERT_TRUE(tm.accept(id));
        ASSERT_TRUE(brute.accept(id));
      }
    }
  }
}

// A request of a grammar starts from what an earlier one of the same classes built: walking the
// same text, it builds no mask at all, and its masks are the ones a cold matcher builds. (The
// random walks of MaskFromTokenClassesEqualsBruteForce share their classes too, so every walk after
// the first is checked against brute force from a warm start.)
TEST(GrammarMatcher, ALaterRequestStartsFromTheStatesAndMasksOfEarlierOnes) {
  auto trie = std::make_shared<const TokenTrie>(small_vocab());
  auto g = compile_json_schema(R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})");
  auto classes = std::make_shared<TokenClasses>(g, trie);
  classes->precompute();
  const std::vector<int32_t> text = {9, 16, 18, 13, 14, 12};  // {" name ":" a b "}
  std::vector<std::vector<uint64_t>> cold;
  {
    TokenMatcher first(g, trie, {0}, "", classes);
    for (int32_t id : text) {
      const std::span<const uint64_t> m = first.mask();
      cold.emplace_back(m.begin(), m.end());
      ASSERT_TRUE(first.accept(id)) << id;
    }
    EXPECT_GT(first.masks_built(), 0);
    EXPECT_EQ(classes->warm_states(), 0u);  // offered when it ends
  }
  EXPECT_GT(classes->warm_states(), 0u);
  TokenMatcher second(g, trie, {0}, "", classes);
  for (size_t i = 0; i < text.size(); ++i) {
    const std::span<const uint64_t> m = second.mask();
    EXPECT_EQ(std::vector<uint64_t>(m.begin(), m.end()), cold[i]) << "step " << i;
    ASSERT_TRUE(second.accept(text[i]));
  }
  EXPECT_EQ(second.masks_built(), 0);
  EXPECT_TRUE(second.complete());
}

TEST(GrammarMatcher, MasksAreReusedForTheSameState) {
  auto trie = std::make_shared<const TokenTrie>(small_vocab());
  TokenMatcher tm(compile_json_schema(R"({"type":"string"})"), trie, {0});
  ASSERT_TRUE(tm.accept(4));  // "
  std::vector<uint64_t> first(tm.mask().begin(), tm.mask().end());
  ASSERT_TRUE(tm.accept(13));  // a: inside the string, the same state again
  std::vector<uint64_t> second(tm.mask().begin(), tm.mask().end());
  EXPECT_EQ(first, second);
  EXPECT_EQ(tm.masks_built(), 1);
}

TEST(GrammarMatcher, LazyTriggerConstrainsOnlyAfterIt) {
  auto trie = std::make_shared<const TokenTrie>(std::vector<std::string>{"", "hi ", "<", "call", ">", "<call>", "{", "}", "x", "{}"});
  TokenMatcher tm(compile_gbnf("root ::= \"{}\"\n"), trie, {0}, "<call>");
  EXPECT_TRUE(tm.allowed(8));  // free text
  EXPECT_TRUE(tm.allowed(0));  // may end before any call
  ASSERT_TRUE(tm.accept(1));
  ASSERT_TRUE(tm.accept(2));
  ASSERT_TRUE(tm.accept(3));
  EXPECT_FALSE(tm.triggered());
  ASSERT_TRUE(tm.accept(4));  // "<" "call" ">" across three tokens
  EXPECT_TRUE(tm.triggered());
  EXPECT_FALSE(tm.allowed(8));
  EXPECT_FALSE(tm.allowed(0));  // not complete
  EXPECT_TRUE(tm.allowed(9));
  ASSERT_TRUE(tm.accept(6));
  ASSERT_TRUE(tm.accept(7));
  EXPECT_TRUE(tm.must_end());
}

TEST(GrammarMatcher, SamplerMaskHookKeepsOnlyAllowedTokens) {
  // The sampler's side: with a mask, greedy takes the best allowed token and a draw never leaves it.
  std::vector<float> logits = {5.0f, 1.0f, 4.0f, 0.5f, 3.0f};
  std::vector<uint64_t> mask = {(1u << 2) | (1u << 3)};
  Sampler greedy(SamplerConfig{});
  EXPECT_EQ(greedy.sample(logits, mask), 2);
  SamplerConfig hot;
  hot.temperature = 2.0f;
  hot.seed = 3;
  Sampler s(hot);
  for (int i = 0; i < 200; ++i) {
    const int32_t id = s.sample(logits, mask);
    EXPECT_TRUE(id == 2 || id == 3) << id;
  }
}

TEST(GrammarMatcher, GreedyDecodingPicksTheMaskedArgmax) {
  // StructuredDecoder's greedy shortcut (the next best few tokens before a mask) must give exactly
  // the sampler's argmax over the mask, ties to the lowest id.
  auto trie = std::make_shared<const TokenTrie>(small_vocab());
  const char* schema = R"({"type":"object","properties":{"name":{"type":"string"},"a":{"type":"array","items":{"type":"integer"}}}})";
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> level(0, 3);  // few levels: many ties
  for (int run = 0; run < 20; ++run) {
    auto dec = StructuredDecoder::make({StructuredOutput::Kind::JsonSchema, schema, ""}, trie, {0});
    TokenMatcher ref(compile_json_schema(schema), trie, {0});
    Sampler s1(SamplerConfig{}), s2(SamplerConfig{});
    for (int step = 0; step < 30 && !dec->must_end(); ++step) {
      std::vector<float> logits(trie->n_vocab());
      for (float& x : logits) x = static_cast<float>(level(rng));
      const int32_t want = s2.sample(logits, ref.mask());
      const int32_t got = dec->sample(s1, logits);
      ASSERT_EQ(got, want) << "run " << run << " step " << step;
      if (got == 0) break;
      ASSERT_TRUE(dec->accept(got));
      ASSERT_TRUE(ref.accept(got));
    }
  }
}

}  // namespace
}  // namespace npullm::genai::grammar
