// Tokenizer tests: llama.cpp's tokenizer vectors for the SentencePiece vocabs, the llama2.c
// reference for stories260K, hand-built vocabs for the merge rules and byte fallback, and the
// streaming decoder's UTF-8 handling.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
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

using test::is_valid_utf8;
using test_vectors::check_vectors;

Tokenizer load_tokenizer(const std::string& rel) {
  auto f = GgufFile::open(shared_path(rel));
  return Tokenizer(Vocab::from_gguf(*f));
}

// A small hand-built SentencePiece vocab: <unk>, <s>, </s>, optionally the 256 byte tokens, then
// the given normal tokens with their scores.
struct Piece {
  std::string text;
  float score;
  TokenType type = TokenType::Normal;
};

Vocab make_vocab(const std::vector<Piece>& pieces, bool with_bytes = true,
                 bool space_prefix = false) {
  Vocab v;
  auto add = [&](std::string text, float score, TokenType type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, TokenType::Unknown);
  add("<s>", 0, TokenType::Control);
  add("</s>", 0, TokenType::Control);
  if (with_bytes)
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0, TokenType::Byte);
  for (const Piece& p : pieces) add(p.text, p.score, p.type);
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  v.add_space_prefix = space_prefix;
  return v;
}

// Token id of `text` in a hand-built vocab.
int32_t id_of(const Tokenizer& tok, const std::string& text) {
  for (int32_t i = 0; i < tok.n_vocab(); ++i)
    if (tok.vocab().tokens[i] == text) return i;
  ADD_FAILURE() << "no token " << text;
  return -1;
}

int32_t byte_id(uint8_t b) { return 3 + b; }  // in make_vocab(with_bytes=true)

// ---------------------------------------------------------------------------------------------
// llama.cpp tokenizer vectors

// Its vectors run in TokenizerVectorsFound.EveryPairInTheVocabFolder; here the header.
TEST(TokenizerVectors, LlamaSpmHeader) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer tok = load_tokenizer("models/vocab/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(tok.n_vocab(), 32000);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.vocab().unk, 0);
  EXPECT_TRUE(tok.vocab().add_bos);
  EXPECT_TRUE(tok.vocab().add_space_prefix);
}

// A chat turn's new text continues the conversation's text: tokenized on its own with
// continues_text it gives the tokens it has inside the whole text (no extra dummy-prefix "▁"),
// while a fragment after a special token still gets its prefix.
TEST(TokenizerVectors, LlamaSpmContinuationHasNoDummyPrefix) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer tok = load_tokenizer("models/vocab/ggml-vocab-llama-spm.gguf");
  const std::string a = "The cat slept.", b = "\nuser: Where did it go?\nassistant:";
  std::vector<int32_t> joined = tok.encode(a, false, true);
  const std::vector<int32_t> cont = tok.encode(b, false, true, /*continues_text=*/true);
  joined.insert(joined.end(), cont.begin(), cont.end());
  EXPECT_EQ(joined, tok.encode(a + b, false, true));
  EXPECT_NE(tok.encode(b, false, true), cont) << "standalone text starts with the dummy prefix";
  EXPECT_EQ(tok.encode(b, false, true).size(), cont.size() + 1);
  // After a special token the prefix comes back, continuation or not.
  EXPECT_EQ(tok.encode("</s>" + b, false, true, true), tok.encode("</s>" + b, false, true));
}

TEST(TokenizerVectors, Phi3Header) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-phi-3.gguf");
  const Tokenizer tok = load_tokenizer("models/vocab/ggml-vocab-phi-3.gguf");
  EXPECT_EQ(tok.n_vocab(), 32064);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 32000);
}

// Same Llama-2 vocab as llama-spm but without an add_bos_token key: the default must be true.
TEST(TokenizerVectors, OllamaTinyRandomSharesLlamaVocab) {
  NPULLM_REQUIRE_SHARED("models/ollama/llama-2-tiny-random.gguf");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf.inp");
  const Tokenizer tok = load_tokenizer("models/ollama/llama-2-tiny-random.gguf");
  EXPECT_TRUE(tok.vocab().add_bos);
  EXPECT_EQ(tok.encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(check_vectors(tok, shared_path("models/vocab/ggml-vocab-llama-spm.gguf"), "llama-spm (llama-2-tiny-random.gguf)"), 46u);
}

// Long input: the merge loop is a priority queue over a linked list, so a few hundred KB is quick.
TEST(TokenizerVectors, LongInputRoundTrips) {
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer tok = load_tokenizer("models/vocab/ggml-vocab-llama-spm.gguf");
  const test::VocabCases c = test::load_vocab_cases(shared_path("models/vocab/ggml-vocab-llama-spm.gguf.inp"),
                                  shared_path("models/vocab/ggml-vocab-llama-spm.gguf.out"));
  std::string text;
  while (text.size() < 300'000)
    for (const std::string& t : c.texts) text += t + "\n";
  text += std::string(50'000, 'a');  // one long run of a repeated character
  const std::vector<int32_t> ids = tok.encode(text, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(tok.decode(ids, true), text);
}

// ---------------------------------------------------------------------------------------------
// stories260K (llama2.c reference)

TEST(TokenizerStories, VocabHeader) {
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.gguf");
  const Tokenizer tok = load_tokenizer("models/llama2c/stories260K.gguf");
  const Vocab& v = tok.vocab();
  ASSERT_EQ(tok.n_vocab(), 512);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  EXPECT_EQ(v.types[0], TokenType::Unknown);
  EXPECT_EQ(v.types[1], TokenType::Control);
  EXPECT_EQ(v.types[2], TokenType::Control);
  for (int i = 3; i <= 258; ++i) EXPECT_EQ(v.types[i], TokenType::Byte) << i;
  for (int i = 259; i < 512; ++i) EXPECT_EQ(v.types[i], TokenType::Normal) << i;
  EXPECT_EQ(tok.token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(tok.token_to_piece(1), "");
}

TEST(TokenizerStories, PromptAndGreedyReferenceText) {
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.gguf");
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.greedy-reference.json");
  const Tokenizer tok = load_tokenizer("models/llama2c/stories260K.gguf");
  EXPECT_EQ(tok.encode("Once upon a time", true), (std::vector<int32_t>{1, 403, 407, 261, 378}));

  const auto ref = test::stories_reference();
  ASSERT_FALSE(ref.at("cases").empty());
  for (const auto& c : ref.at("cases")) {
    const std::string name = c.at("name");
    const auto prompt_ids = c.at("prompt_ids").get<std::vector<int32_t>>();
    const auto next_ids = c.at("next_ids").get<std::vector<int32_t>>();
    const std::string stdout_text = c.at("stdout_text");
    if (name.rfind("A_", 0) == 0) {
      EXPECT_EQ(tok.encode("Once upon a time", true), prompt_ids);
    }
    if (prompt_ids.size() == 1) {
      EXPECT_EQ(tok.encode("", true), prompt_ids) << name;
    }

    // run.c prints the pieces of every token after BOS, dropping the space a piece starts with
    // right after BOS, then a newline. next_ids are exactly the tokens after BOS (the prompt's
    // forced ones first); a sampled BOS would have ended the run before being printed.
    std::vector<int32_t> after_bos;
    for (int32_t id : next_ids) {
      if (id == tok.bos()) break;
      after_bos.push_back(id);
    }
    EXPECT_EQ(tok.decode(after_bos, true) + "\n", stdout_text) << name;

    // The same text, streamed token by token.
    StreamDecoder stream(tok, true);
    std::string streamed;
    for (int32_t id : after_bos) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed + "\n", stdout_text) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// merge rules on hand-built vocabs

TEST(Tokenizer, HighestScoreMergesFirst) {
  {
    const Tokenizer tok(make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}}));
    EXPECT_EQ(tok.encode("abc", false), (std::vector<int32_t>{id_of(tok, "a"), id_of(tok, "bc")}));
  }
  {
    const Tokenizer tok(make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}}));
    EXPECT_EQ(tok.encode("abc", false), (std::vector<int32_t>{id_of(tok, "ab"), id_of(tok, "c")}));
  }
  {
    // A merged symbol keeps merging: ab + c -> abc even though "bc" scores higher than "abc".
    const Tokenizer tok(
        make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}, {"abc", -5}}));
    EXPECT_EQ(tok.encode("abc", false), (std::vector<int32_t>{id_of(tok, "abc")}));
  }
}

TEST(Tokenizer, TiesMergeLeftmostFirst) {
  const Tokenizer tok(make_vocab({{"a", -10}, {"aa", -1}}));
  const int32_t a = id_of(tok, "a"), aa = id_of(tok, "aa");
  EXPECT_EQ(tok.encode("aaa", false), (std::vector<int32_t>{aa, a}));
  EXPECT_EQ(tok.encode("aaaaa", false), (std::vector<int32_t>{aa, aa, a}));
}

TEST(Tokenizer, SpacesAndDummyPrefix) {
  const std::string sp = "\xE2\x96\x81";  // U+2581
  Vocab v =
      make_vocab({{sp, -10}, {"h", -10}, {"i", -10}, {"hi", -3}, {sp + "hi", -1}, {sp + sp, -20}});
  v.add_space_prefix = true;
  const Tokenizer tok(v);
  const int32_t space = id_of(tok, sp), hi = id_of(tok, "hi"), shi = id_of(tok, sp + "hi");
  EXPECT_EQ(tok.encode("hi", false), (std::vector<int32_t>{shi}));
  EXPECT_EQ(tok.encode("hi hi", false), (std::vector<int32_t>{shi, shi}));
  EXPECT_EQ(tok.encode(" hi", false), (std::vector<int32_t>{space, shi}));
  EXPECT_EQ(tok.encode("hi", true), (std::vector<int32_t>{1, shi}));
  EXPECT_EQ(tok.encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(tok.encode("", true), std::vector<int32_t>{1});

  v.add_space_prefix = false;
  const Tokenizer no_prefix(v);
  EXPECT_EQ(no_prefix.encode("hi", false), (std::vector<int32_t>{hi}));
  EXPECT_EQ(no_prefix.encode("hi hi", false), (std::vector<int32_t>{hi, shi}));

  v.add_bos = false;  // the vocab says no BOS: encode(add_bos=true) adds none
  EXPECT_EQ(Tokenizer(v).encode("hi", true), (std::vector<int32_t>{hi}));
}

TEST(Tokenizer, ByteFallbackForCharactersWithoutToken) {
  const Tokenizer tok(make_vocab({{"a", -1}}));
  // "é" is C3 A9, the emoji F0 9F 98 80: neither has a token, so each goes out byte by byte.
  const std::string e_acute = "\xC3\xA9";
  EXPECT_EQ(tok.encode("a" + e_acute + "a", false),
            (std::vector<int32_t>{id_of(tok, "a"), byte_id(0xC3), byte_id(0xA9), id_of(tok, "a")}));
  EXPECT_EQ(tok.encode("\xF0\x9F\x98\x80", false),
            (std::vector<int32_t>{byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)}));
  // Invalid UTF-8 is not rejected either: it is spelled in bytes too. Like llama.cpp, a character's
  // length comes from its lead byte alone, so the bogus lead FF takes the "a" after it along.
  EXPECT_EQ(tok.encode("a\xFF", false), (std::vector<int32_t>{id_of(tok, "a"), byte_id(0xFF)}));
  EXPECT_EQ(tok.encode(std::string("\xFF") + "a", false),
            (std::vector<int32_t>{byte_id(0xFF), byte_id('a')}));
  EXPECT_EQ(tok.decode(tok.encode("a\xC3\xA9\xF0\x9F\x98\x80", false)),
            "a\xC3\xA9\xF0\x9F\x98\x80");
}

TEST(Tokenizer, UnknownBytesWithoutByteTokensBecomeUnk) {
  const Tokenizer tok(make_vocab({{"a", -1}}, /*with_bytes=*/false));
  EXPECT_EQ(tok.encode("a\xC3\xA9", false), (std::vector<int32_t>{id_of(tok, "a"), 0, 0}));

  Vocab no_unk = make_vocab({{"a", -1}}, false);
  no_unk.unk = -1;
  const Tokenizer strict(no_unk);
  EXPECT_NE(error_of([&] { strict.encode("\xC3\xA9", false); }).find("0xC3"), std::string::npos);
}

// Special tokens in SPM text: USER_DEFINED always split, CONTROL only with parse_special; the text
// after a special token gets the dummy prefix again (llama.cpp).
TEST(Tokenizer, SpecialTokensInSentencePieceText) {
  const std::string sp = "\xE2\x96\x81";
  Vocab v = make_vocab(
      {{sp, -5}, {"h", -5}, {"i", -5}, {"hi", -3}, {sp + "hi", -1}, {"<tag>", 0, TokenType::UserDefined}});
  v.add_space_prefix = true;
  const Tokenizer tok(v);
  const int32_t shi = id_of(tok, sp + "hi"), tag = id_of(tok, "<tag>");
  EXPECT_EQ(tok.encode("hi<tag>hi", false), (std::vector<int32_t>{shi, tag, shi}));
  EXPECT_EQ(tok.encode("<s>hi", false, /*parse_special=*/true), (std::vector<int32_t>{1, shi}));
  const std::vector<int32_t> plain = tok.encode("<s>hi", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok.decode(plain, true), "<s>hi");
}

TEST(Tokenizer, TokenToPieceByType) {
  const std::string sp = "\xE2\x96\x81";
  const Tokenizer tok(make_vocab({{sp + "hi" + sp + "x", -1},
                                  {sp, -1},
                                  {"<tag>", 0, TokenType::UserDefined},
                                  {"<pad>", 0, TokenType::Unused}}));
  EXPECT_EQ(tok.token_to_piece(id_of(tok, sp + "hi" + sp + "x")), " hi x");
  EXPECT_EQ(tok.token_to_piece(id_of(tok, sp)), " ");
  EXPECT_EQ(tok.token_to_piece(id_of(tok, "<tag>")), "<tag>");
  EXPECT_EQ(tok.token_to_piece(id_of(tok, "<pad>")), "");
  EXPECT_EQ(tok.token_to_piece(byte_id(0x41)), "A");
  EXPECT_EQ(tok.token_to_piece(byte_id(0x00)), std::string(1, '\0'));
  EXPECT_EQ(tok.token_to_piece(byte_id(0xF0)), "\xF0");
  EXPECT_EQ(tok.token_to_piece(1), "");              // <s>
  EXPECT_EQ(tok.token_to_piece(2), "");              // </s>
  EXPECT_EQ(tok.token_to_piece(0), "\xE2\x96\x85");  // <unk>, printed as llama.cpp does
  EXPECT_NE(error_of([&] { tok.token_to_piece(tok.n_vocab()); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.token_to_piece(-1); }).find("out of range"), std::string::npos);
}

TEST(Tokenizer, DecodeStripsOnlyTheFirstLeadingSpace) {
  const std::string sp = "\xE2\x96\x81";
  const Tokenizer tok(make_vocab({{sp + "hi", -1}, {sp, -1}}, true, /*space_prefix=*/true));
  const int32_t shi = id_of(tok, sp + "hi"), space = id_of(tok, sp);
  EXPECT_EQ(tok.decode({1, shi, shi}), " hi hi");
  EXPECT_EQ(tok.decode({1, shi, shi}, true), "hi hi");
  EXPECT_EQ(tok.decode({shi, shi}, true), "hi hi");
  EXPECT_EQ(tok.decode({space, shi}, true), " hi");  // only one space goes
  EXPECT_EQ(tok.decode({}, true), "");
  // Without a dummy prefix (Gemma 4's vocab, add_space_prefix false) a leading space is text.
  const Tokenizer plain(make_vocab({{sp + "hi", -1}, {sp, -1}}));
  EXPECT_EQ(plain.decode({id_of(plain, sp + "hi")}, true), " hi");
}

TEST(Tokenizer, RejectsInconsistentVocab) {
  Vocab v = make_vocab({{"a", -1}});
  v.scores.pop_back();
  EXPECT_NE(error_of([&] { Tokenizer t(v); }).find("scores"), std::string::npos);
  v = make_vocab({{"a", -1}});
  v.types.pop_back();
  EXPECT_NE(error_of([&] { Tokenizer t(v); }).find("token types"), std::string::npos);
  v = make_vocab({{"a", -1}});
  v.bos = 100000;
  EXPECT_NE(error_of([&] { Tokenizer t(v); }).find("bos"), std::string::npos);
  v = make_vocab({{"a", -1}});
  v.model = "t5";
  EXPECT_NE(error_of([&] { Tokenizer t(v); }).find("tokenizer model 't5' is not supported"),
            std::string::npos);
  v = make_vocab({{"a", -1}});
  v.strip = {kStripLeft};
  EXPECT_NE(error_of([&] { Tokenizer t(v); }).find("strip flags"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// StreamDecoder

TEST(StreamDecoder, HoldsBackSplitCharacterUntilComplete) {
  const Tokenizer tok(make_vocab({{"a", -1}}));
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600
  const std::vector<int32_t> ids = tok.encode("a" + emoji + "a", false);
  ASSERT_EQ(ids.size(), 6u);

  StreamDecoder s(tok);
  EXPECT_EQ(s.push(ids[0]), "a");
  EXPECT_EQ(s.push(ids[1]), "");  // F0
  EXPECT_EQ(s.push(ids[2]), "");  // 9F
  EXPECT_EQ(s.push(ids[3]), "");  // 98
  EXPECT_EQ(s.push(ids[4]), emoji);
  EXPECT_EQ(s.push(ids[5]), "a");
  EXPECT_EQ(s.flush(), "");
}

TEST(StreamDecoder, PiecesAreValidUtf8AndConcatenateToDecode) {
  const std::string sp = "\xE2\x96\x81";
  Vocab v = make_vocab({{sp, -5}, {"a", -5}, {sp + "a", -1}, {"\xC3\xA9", -2}});
  v.add_space_prefix = true;
  const Tokenizer tok(v);
  const std::string text = "a \xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\xF0\x9F\x91\x8D a";
  const std::vector<int32_t> ids = tok.encode(text, true);
  for (bool strip : {false, true}) {
    StreamDecoder s(tok, strip);
    std::string all;
    for (int32_t id : ids) {
      const std::string piece = s.push(id);
      EXPECT_TRUE(is_valid_utf8(piece)) << "token " << id;
      all += piece;
    }
    all += s.flush();
    EXPECT_EQ(all, tok.decode(ids, strip));
  }
  EXPECT_EQ(tok.decode(ids, true), text);
}

TEST(StreamDecoder, FlushReplacesIncompleteTail) {
  const Tokenizer tok(make_vocab({{"a", -1}}));
  StreamDecoder s(tok);
  EXPECT_EQ(s.push(byte_id(0xF0)), "");
  EXPECT_EQ(s.push(byte_id(0x9F)), "");
  EXPECT_EQ(s.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(s.flush(), "");
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementAtOnce) {
  const Tokenizer tok(make_vocab({{"a", -1}}));
  StreamDecoder s(tok);
  EXPECT_EQ(s.push(byte_id(0xFF)), "\xEF\xBF\xBD");  // never valid in UTF-8
  EXPECT_EQ(s.push(byte_id(0x80)), "\xEF\xBF\xBD");  // stray continuation byte
  EXPECT_EQ(s.push(byte_id(0xE2)), "");              // could still become a character...
  EXPECT_EQ(s.push(id_of(tok, "a")),
            "\xEF\xBF\xBD"
            "a");  // ...but "a" is no continuation
  EXPECT_EQ(s.push(byte_id(0xED)), "");
  EXPECT_EQ(s.push(byte_id(0xA0)), "\xEF\xBF\xBD\xEF\xBF\xBD");  // ED A0 starts a surrogate
  EXPECT_EQ(s.flush(), "");
}

TEST(StreamDecoder, StripsLeadingSpaceOfFirstPieceOnly) {
  const std::string sp = "\xE2\x96\x81";
  const Tokenizer tok(make_vocab({{sp + "hi", -1}}, true, /*space_prefix=*/true));
  const int32_t shi = id_of(tok, sp + "hi");
  StreamDecoder s(tok, true);
  EXPECT_EQ(s.push(1), "");  // BOS prints nothing and does not count as the first piece
  EXPECT_EQ(s.push(shi), "hi");
  EXPECT_EQ(s.push(shi), " hi");
  StreamDecoder keep(tok);
  EXPECT_EQ(keep.push(shi), " hi");
}

// ---------------------------------------------------------------------------------------------
// Vocab::from_gguf on hand-written GGUFs

struct MemGguf {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

MemGguf build(const GgufWriter& w) {
  MemGguf m;
  m.bytes = w.serialize();
  m.file = GgufFile::from_memory(m.bytes.data(), m.bytes.size(), "test.gguf");
  return m;
}

GgufWriter tokenizer_writer(const std::vector<std::string>& tokens) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  return w;
}

TEST(VocabFromGguf, DefaultsWhenKeysAreAbsent) {
  const MemGguf m = build(tokenizer_writer({"<unk>", "<s>", "</s>", "a"}));
  const Vocab v = Vocab::from_gguf(*m.file);
  EXPECT_EQ(v.model, "llama");
  ASSERT_EQ(v.tokens.size(), 4u);
  EXPECT_EQ(v.scores, std::vector<float>(4, 0.0f));
  EXPECT_EQ(v.types, std::vector<TokenType>(4, TokenType::Normal));
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  EXPECT_TRUE(v.add_bos);
  EXPECT_TRUE(v.add_space_prefix);
}

TEST(VocabFromGguf, ReadsEveryKey) {
  GgufWriter w = tokenizer_writer({"<unk>", "<s>", "</s>", "a", "b"});
  w.add_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1.5f, -2.5f});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 4});
  w.add_u32("tokenizer.ggml.bos_token_id", 4);
  w.add_u32("tokenizer.ggml.eos_token_id", 3);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0xFFFFFFFFu);  // "unset"
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_bool("tokenizer.ggml.add_space_prefix", false);
  const MemGguf m = build(w);
  const Vocab v = Vocab::from_gguf(*m.file);
  EXPECT_EQ(v.tokens[3], "a");
  EXPECT_EQ(v.scores[4], -2.5f);
  EXPECT_EQ(v.types[0], TokenType::Unknown);
  EXPECT_EQ(v.types[4], TokenType::UserDefined);
  EXPECT_EQ(v.bos, 4);
  EXPECT_EQ(v.eos, 3);
  EXPECT_EQ(v.unk, -1);
  EXPECT_FALSE(v.add_bos);
  EXPECT_FALSE(v.add_space_prefix);
}

// The message of the error that reading a vocab from `w`'s file throws ("" when none); the GGUF
// reader may already reject some of these files while validating them, which is fine as well.
std::string from_gguf_error(const GgufWriter& w) {
  return error_of([&] { Vocab::from_gguf(*build(w).file); });
}

TEST(VocabFromGguf, Errors) {
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "rwkv");
    w.add_string_array("tokenizer.ggml.tokens", {"a"});
    EXPECT_NE(from_gguf_error(w).find("tokenizer model 'rwkv' is not supported"),
              std::string::npos);
  }
  {
    // Byte-level BPE needs its merges...
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string_array("tokenizer.ggml.tokens", {"a"});
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.merges"), std::string::npos);
    // ...as "left right" pairs...
    w.add_string_array("tokenizer.ggml.merges", {"ab"});
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.merges[0]"), std::string::npos);
  }
  {
    // ...and a pre-tokenizer it knows, named in the error when it does not.
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "brand-new-pre");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.add_string_array("tokenizer.ggml.merges", {"a b"});
    EXPECT_NE(from_gguf_error(w).find("unknown pre-tokenizer 'brand-new-pre'"), std::string::npos);
  }
  {
    GgufWriter w;
    w.add_string("tokenizer.ggml.model", "llama");
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.tokens"), std::string::npos);
  }
  {
    GgufWriter w;
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.model"), std::string::npos);
  }
  {
    GgufWriter w = tokenizer_writer({"a", "b", "c"});
    w.add_f32_array("tokenizer.ggml.scores", {0, 0});
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.scores"), std::string::npos);
  }
  {
    GgufWriter w = tokenizer_writer({"a", "b", "c"});
    w.add_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 1});
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.token_type"), std::string::npos);
  }
  {
    GgufWriter w = tokenizer_writer({"a", "b", "c"});
    w.add_i32_array("tokenizer.ggml.token_type", {1, 9, 1});
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.token_type[1]"), std::string::npos);
  }
  {
    GgufWriter w = tokenizer_writer({"a", "b", "c"});
    w.add_u32("tokenizer.ggml.eos_token_id", 3);
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.eos_token_id"), std::string::npos);
  }
  {
    GgufWriter w = tokenizer_writer({"a"});
    w.add_string("tokenizer.ggml.scores", "not an array");
    EXPECT_NE(from_gguf_error(w).find("tokenizer.ggml.scores"), std::string::npos);
  }
}

}  // namespace
}  // namespace npullm::genai
