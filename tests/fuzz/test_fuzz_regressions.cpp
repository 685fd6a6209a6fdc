// Replays every input the fuzzers of tests/fuzz found a crash with (tests/fuzz/regressions/, named
// <harness>-<what>), through the same parser, in the normal build: each must now give a result or
// an npullm::Error, never another exception or a crash. Cases with a specific expected answer have
// their own test below.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>

#include "common/error.h"
#include "formats/gguf.h"
#include "genai/tokenizer/hf_tokenizer_json.h"
#include "genai/jinja/template.h"
#include "genai/tokenizer/tokenizer.h"
#include "server/openai_request.h"

namespace npullm {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(__FILE__).parent_path() / "regressions";

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What the harness of that name does with the input (tests/fuzz/<harness>.cc), minus the checks
// that need a vocabulary from ../shared.
void replay(const std::string& harness, const std::string& in) {
  if (harness == "openai_request") {
    if (in.empty()) return;
    const auto r = server::parse_request(in.substr(1), in[0] & 1, server::RequestLimits{.n_vocab = 32000});
    if (const auto* e = std::get_if<server::ApiError>(&r))
      (void)e->body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else if (harness == "gguf") {
    (void)GgufFile::from_memory(reinterpret_cast<const uint8_t*>(in.data()), in.size(), "regression.gguf");
  } else if (harness == "model_load") {
    // The harness reads the input as the start of a 32 MiB zero-filled file.
    std::string image = in;
    image.resize(std::max<size_t>(image.size(), size_t{32} << 20), '\0');
    (void)GgufFile::from_memory(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "regression.gguf");
  } else if (harness == "tokenizer_json") {
    const size_t nul = in.find('\0');
    const std::string json = in.substr(0, nul), config = nul == std::string::npos ? "" : in.substr(nul + 1);
    genai::Tokenizer tok(genai::vocab_from_hf_json(json, config, "regression/tokenizer.json"));
    (void)tok.decode(tok.encode("Hello, world! <|im_start|>user\n", true, true));
  } else if (harness == "jinja") {
    const size_t nul = in.find('\0');
    genai::jinja::RenderOptions opt;
    opt.now = std::tm{};
    (void)genai::jinja::Template(in.substr(0, nul)).render(nlohmann::ordered_json::object(), opt);
  } else {
    FAIL() << "no replay for harness '" << harness << "'";
  }
}

TEST(FuzzRegressions, EveryFoundInputGivesAResultOrAnError) {
  ASSERT_TRUE(fs::is_directory(kDir)) << kDir;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(kDir)) {
    const std::string name = e.path().filename().string();
    const std::string harness = name.substr(0, name.find('-'));
    ++n;
    try {
      replay(harness, bytes_of(e.path()));
    } catch (const Error&) {
    } catch (const std::exception& ex) {
      ADD_FAILURE() << name << ": threw " << typeid(ex).name() << ": " << ex.what();
    }
  }
  EXPECT_GT(n, 0u);
}

TEST(FuzzRegressions, OpenAiRequestNumberBeyondDoubleIsA400) {
  // nlohmann throws out_of_range (not parse_error) for 1e309; it used to escape parse_request.
  const auto r = server::parse_request(R"({"model":"m","prompt":1e309})", false, server::RequestLimits{.n_vocab = 10});
  const auto* e = std::get_if<server::ApiError>(&r);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->message.find("not valid JSON"), std::string::npos) << e->message;
}

TEST(FuzzRegressions, GgufMetadataArraysAreBoundedInAll) {
  // 16.7M one-byte elements in a 32 MiB file asked for 800 MB of GgufValues (the fuzzer's limit is
  // 512 MiB); the file's metadata arrays together now hold at most 2^23 elements.
  std::string image = bytes_of(kDir / "model_load-huge-metadata-array");
  image.resize(size_t{32} << 20, '\0');
  std::string err;
  try {
    (void)GgufFile::from_memory(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "huge.gguf");
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("array count 16777224 for key 'tokenize{.ggml.tllama' takes the file's metadata arrays past 8388608 elements"),
            std::string::npos) << err;
}

TEST(FuzzRegressions, TokenizerJsonHugeIdIsRefusedBeforeAllocating) {
  // One token with the id 2^31 - 2 used to allocate a vector of 2^31 token strings (12 GB).
  const std::string json = R"({"model":{"type":"BPE","vocab":{"a":0,"b":2147483646},"merges":[]},
    "pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}})";
  std::string err;
  try {
    (void)genai::vocab_from_hf_json(json, "", "huge.json");
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("no token has id 1 (ids must run from 0 to 2147483646 without gaps)"), std::string::npos) << err;
}

}  // namespace
}  // namespace npullm
