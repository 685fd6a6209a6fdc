// The o200k vocabulary (GPT-4o's; gpt-oss's with the harmony special tokens) through npullm's
// byte-level BPE tokenizer, checked id for id against tokenizers outside npullm.
//
// The vocabulary comes from js-tiktoken's o200k_base ranks file (npm, fetched by
// scripts/fetch-test-tokenizers.sh): each rank is a token's bytes. The test writes it into a GGUF
// the way llama.cpp's converter writes gpt-oss (tokenizer.ggml.model "gpt2", pre "gpt-4o", tokens
// in GPT-2's byte chars, the merges HF's tiktoken converter derives from the ranks, the harmony
// special tokens as CONTROL tokens, "<|reserved_ID|>" filling the gaps up to 201088) and reads it
// back with Vocab::from_gguf, so the path a real gpt-oss file takes is the one under test.
// The expected ids (tests/data/o200k_vectors.json) come from js-tiktoken and gpt-tokenizer, which
// agreed on every text (tests/tools/make-o200k-vectors.mjs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/gguf.h"
#include "genai/chat/harmony_parser.h"
#include "genai/tokenizer/byte_level.h"
#include "genai/tokenizer/hf_tokenizer_json.h"
#include "genai/tokenizer/tokenizer.h"
#include "test_util.h"

namespace npullm::genai {
namespace {

using json = nlohmann::json;

std::string test_data_dir() {
  if (const char* e = std::getenv("NPULLM_TEST_DATA"); e && *e) return e;
  return (std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path() / "build" / "test-data")
      .string();
}

std::string ranks_path() { return test_data_dir() + "/node_modules/js-tiktoken/dist/ranks/o200k_base.js"; }

// RFC 4648 base64 (the ranks file's token encoding), padding required.
std::string base64_decode(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) throw std::runtime_error("bad base64 character in '" + s + "'");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// js-tiktoken's ranks module: `export default {"pat_str": ..., "bpe_ranks": "! 0 TOK TOK ..."}`,
// where the tokens after the offset are base64 and take consecutive ranks.
std::vector<std::string> load_ranks(const std::string& path) {
  std::string text = test::read_file(path);
  const std::string prefix = "export default ";
  if (text.rfind(prefix, 0) != 0) throw std::runtime_error(path + ": not an `export default {...}` module");
  text.erase(0, prefix.size());
  while (!text.empty() && (text.back() == ';' || text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const json doc = json::parse(text);
  const std::string ranks = doc.at("bpe_ranks").get<std::string>();
  std::vector<std::string> fields;
  size_t start = 0;
  while (start <= ranks.size()) {
    const size_t sp = ranks.find(' ', start);
    const size_t end = sp == std::string::npos ? ranks.size() : sp;
    fields.push_back(ranks.substr(start, end - start));
    start = end + 1;
  }
  if (fields.size() < 3 || fields[1] != "0") throw std::runtime_error(path + ": bpe_ranks does not start at rank 0");
  std::vector<std::string> tokens;
  tokens.reserve(fields.size() - 2);
  for (size_t i = 2; i < fields.size(); ++i) tokens.push_back(base64_decode(fields[i]));
  return tokens;
}

// The merges HF's TikTokenConverter writes for a tiktoken vocabulary (and so gpt-oss's
// tokenizer.json, which llama.cpp copies into the GGUF): for each token, in rank order, every
// split into two tokens, ordered by the parts' ranks. Merging by these ranks gives tiktoken's
// lowest-rank-first BPE.
std::vector<std::string> derive_merges(const std::vector<std::string>& tokens) {
  std::unordered_map<std::string, int32_t> rank;
  rank.reserve(tokens.size() * 2);
  for (size_t i = 0; i < tokens.size(); ++i) rank.emplace(tokens[i], static_cast<int32_t>(i));
  std::vector<std::string> merges;
  std::vector<std::pair<std::pair<int32_t, int32_t>, size_t>> local;
  for (const std::string& t : tokens) {
    local.clear();
    for (size_t k = 1; k < t.size(); ++k) {
      const auto l = rank.find(t.substr(0, k)), r = rank.find(t.substr(k));
      if (l != rank.end() && r != rank.end()) local.push_back({{l->second, r->second}, k});
    }
    std::sort(local.begin(), local.end());
    for (const auto& [parts, k] : local)
      merges.push_back(detail::byte_level_encode(t.substr(0, k)) + " " + detail::byte_level_encode(t.substr(k)));
  }
  return merges;
}

struct O200k {
  json vectors;
  std::vector<uint8_t> gguf;
  std::unique_ptr<Tokenizer> tok;
};

// Built once for the suite: deriving ~450k merges from 200k ranks takes a moment.
const O200k& o200k() {
  static const O200k* built = [] {
    auto* o = new O200k;
    o->vectors = json::parse(test::read_file(test::repo_data_path("o200k_vectors.json")));
    const std::vector<std::string> ranks = load_ranks(ranks_path());
    const int32_t n_vocab = o->vectors.at("n_vocab").get<int32_t>();
    if (static_cast<int32_t>(ranks.size()) != o->vectors.at("n_ranks").get<int32_t>())
      throw std::runtime_error("the ranks file and o200k_vectors.json disagree on the number of ranks");

    std::vector<std::string> tokens(n_vocab);
    std::vector<int32_t> types(n_vocab, static_cast<int32_t>(TokenType::Normal));
    for (size_t i = 0; i < ranks.size(); ++i) tokens[i] = detail::byte_level_encode(ranks[i]);
    for (int32_t id = static_cast<int32_t>(ranks.size()); id < n_vocab; ++id) {
      tokens[id] = "<|reserved_" + std::to_string(id) + "|>";
      types[id] = static_cast<int32_t>(TokenType::Control);
    }
    for (const auto& [text, id] : o->vectors.at("special_tokens").items()) tokens.at(id.get<int32_t>()) = text;

    GgufWriter w;
    w.add_string("general.architecture", "gpt-oss");
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "gpt-4o");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    w.add_string_array("tokenizer.ggml.merges", derive_merges(ranks));
    w.add_u32("tokenizer.ggml.bos_token_id", 199998);  // <|startoftext|>
    w.add_u32("tokenizer.ggml.eos_token_id", 200002);  // <|return|>
    o->gguf = w.serialize();
    auto f = GgufFile::from_memory(o->gguf.data(), o->gguf.size(), "o200k.gguf");
    o->tok = std::make_unique<Tokenizer>(Vocab::from_gguf(*f));
    return o;
  }();
  return *built;
}

#define REQUIRE_O200K()                                                                          \
  do {                                                                                           \
    NPULLM_REQUIRE_FILE(ranks_path(), "(run scripts/fetch-test-tokenizers.sh, or set NPULLM_TEST_DATA)"); \
  } while (0)

TEST(TokenizerO200k, EveryCaseGivesTheIdsOfTiktoken) {
  REQUIRE_O200K();
  const O200k& o = o200k();
  const Tokenizer& tok = *o.tok;
  EXPECT_EQ(tok.vocab().pre, "gpt-4o");
  EXPECT_FALSE(tok.vocab().ignore_merges);
  size_t passed = 0, n = 0, special = 0;
  for (const json& c : o.vectors.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const bool parse_special = c.at("special").get<bool>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, /*add_bos=*/false, parse_special);
    EXPECT_EQ(got, want) << "text [" << text << "]";
    passed += got == want;
    special += parse_special;
    ++n;
    // Byte-level BPE loses nothing: ordinary text decodes back to itself (special tokens print
    // as nothing, as control tokens do).
    if (!parse_special) {
      EXPECT_EQ(tok.decode(got), text) << "round trip of [" << text << "]";
      StreamDecoder stream(tok);
      std::string streamed;
      for (int32_t id : got) streamed += stream.push(id);
      EXPECT_EQ(streamed + stream.flush(), text) << "stream of [" << text << "]";
    }
  }
  EXPECT_GE(n, 70u);
  EXPECT_GE(special, 4u);
  std::cout << "[  vectors ] o200k (gpt-4o pre-tokenizer): " << passed << "/" << n << " cases match js-tiktoken / gpt-tokenizer ("
            << special << " with harmony special tokens)\n";
}

// The harmony markers a reply's channels are read from (<|start|>, <|channel|>, <|message|>,
// <|constrain|>) are printed by the detokenizer, as llama.cpp makes them USER_DEFINED for this
// vocabulary; the ends of a message or reply (<|end|>, <|return|>, <|call|>) stay CONTROL tokens
// that print nothing and that text a user typed cannot produce.
TEST(TokenizerO200k, HarmonyMarkersArePrintedEndsAreControl) {
  REQUIRE_O200K();
  const Tokenizer& tok = *o200k().tok;
  for (const char* marker : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"}) {
    const int32_t id = tok.find_token(marker);
    ASSERT_GE(id, 0) << marker;
    EXPECT_EQ(tok.vocab().types[id], TokenType::UserDefined) << marker;
    EXPECT_EQ(tok.token_to_piece(id), marker);
  }
  for (const char* end : {"<|end|>", "<|return|>", "<|call|>"}) {
    const int32_t id = tok.find_token(end);
    ASSERT_GE(id, 0) << end;
    EXPECT_EQ(tok.vocab().types[id], TokenType::Control) << end;
    EXPECT_EQ(tok.token_to_piece(id), "");
    EXPECT_EQ(tok.encode(end, false, /*parse_special=*/true), (std::vector<int32_t>{id}));
    const std::vector<int32_t> typed = tok.encode(end, false, /*parse_special=*/false);
    EXPECT_GT(typed.size(), 1u) << end;
    EXPECT_EQ(tok.decode(typed), end);
  }
  EXPECT_EQ(tok.eos(), tok.find_token("<|return|>"));
}

// The same markers from a HF tokenizer.json (gpt-oss's lists them as special added tokens).
TEST(TokenizerO200k, HarmonyMarkersArePrintedFromTokenizerJsonToo) {
  json j;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(detail::byte_to_chars(static_cast<uint8_t>(b)))] = b;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}};
  j["added_tokens"] = json::array({{{"id", 256}, {"content", "<|channel|>"}, {"special", true}},
                                   {{"id", 257}, {"content", "<|end|>"}, {"special", true}}});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  const Vocab v = vocab_from_hf_json(j.dump(), "", "harmony tokenizer.json");
  EXPECT_EQ(v.types.at(256), TokenType::UserDefined);
  EXPECT_EQ(v.types.at(257), TokenType::Control);
  const Tokenizer tok(v);
  EXPECT_EQ(tok.decode({256, 'x', 257}), "<|channel|>x");
}

// A gpt-oss reply as the model emits it (token ids of harmony markup), detokenized piece by piece
// as the pipeline and the scheduler stream it, and split by HarmonyParser: the reasoning never
// reaches the visible reply, which is the final channel's text exactly.
TEST(TokenizerO200k, StreamedHarmonyReplyShowsOnlyTheFinalChannel) {
  REQUIRE_O200K();
  const Tokenizer& tok = *o200k().tok;
  const std::string reply =
      "<|channel|>analysis<|message|>User greets in German: \"Grüße\". Reply politely.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hallo! Wie kann ich helfen? 🙂<|return|>";
  const std::vector<int32_t> ids = tok.encode(reply, false, /*parse_special=*/true);
  ASSERT_EQ(ids.back(), tok.eos());
  StreamDecoder decoder(tok);
  HarmonyParser parser;
  std::string shown;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {  // the last id, <|return|>, stops generation
    const HarmonyParser::Delta d = parser.feed(decoder.push(ids[i]));
    EXPECT_EQ(d.content.find("German"), std::string::npos);
    shown += d.content;
  }
  shown += parser.feed(decoder.flush()).content;
  shown += parser.finish().content;
  EXPECT_EQ(shown, "Hallo! Wie kann ich helfen? 🙂");
  EXPECT_EQ(parser.reasoning(), "User greets in German: \"Grüße\". Reply politely.");
}

}  // namespace
}  // namespace npullm::genai
