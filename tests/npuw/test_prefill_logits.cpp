// Prefill computes the logits of the last token of each run only (a GatherRows before the output
// norm and matmul), unless the runtime is made with RuntimeConfig::all_logits. The last token's
// logits are bit for bit the matching row of an all-logits run, for every chunk size, and
// the K/V state and what follows are unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "blob/blob_image.h"
#include "common/error.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

constexpr const char* kModel = "models/llama2c/stories260K.gguf";
constexpr const char* kReference = "models/llama2c/stories260K.greedy-reference.json";

std::vector<int32_t> reference_tokens(size_t n) {
  std::vector<int32_t> tokens = test::stories_sequence();
  tokens.resize(n);
  return tokens;
}

npuw::RuntimeConfig config(int64_t chunk, bool all_logits) {
  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = chunk;
  cfg.variants = {64, 128};
  cfg.all_logits = all_logits;
  cfg.threads = 2;
  cfg.use_cache = false;
  return cfg;
}

using test::same_bits;

TEST(PrefillLogits, LastTokenLogitsAreThatRowOfTheAllLogitsRun) {
  NPULLM_REQUIRE_SHARED(kModel);
  NPULLM_REQUIRE_SHARED(kReference);
  const std::vector<int32_t> tokens = reference_tokens(60);
  // Three prefill calls (5, 18 and 37 tokens): each ends in a different chunk, ladder blob and row.
  const std::vector<std::pair<size_t, size_t>> calls = {{0, 5}, {5, 23}, {23, 60}};
  for (int64_t chunk : {1, 7, 16, 64}) {
    npuw::LlmRuntime all_rt(test::shared_path(kModel), config(chunk, true));
    npuw::LlmRuntime last_rt(test::shared_path(kModel), config(chunk, false));
    const size_t V = static_cast<size_t>(all_rt.n_vocab());
    for (const auto& [b, e] : calls) {
      const std::span<const int32_t> ids(tokens.data() + b, e - b);
      std::vector<float> all;
      const std::span<const float> all_last = all_rt.prefill(ids, &all);
      ASSERT_EQ(all.size(), ids.size() * V);
      const std::span<const float> want(all.data() + (ids.size() - 1) * V, V);
      EXPECT_TRUE(same_bits(all_last, want)) << "chunk " << chunk;
      const std::span<const float> got = last_rt.prefill(ids);
      EXPECT_TRUE(same_bits(got, want)) << "chunk " << chunk << ", tokens [" << b << ", " << e << ")";
    }
    ASSERT_EQ(last_rt.position(), all_rt.position());
    for (const std::string& name : all_rt.state_names())
      EXPECT_EQ(last_rt.get_state(name), all_rt.get_state(name)) << name << ", chunk " << chunk;
    // Greedy decoding goes on identically.
    int32_t a = 0, l = 0;
    for (int step = 0; step < 8; ++step) {
      const auto la = all_rt.decode(step == 0 ? tokens.back() : a);
      const auto ll = last_rt.decode(step == 0 ? tokens.back() : l);
      ASSERT_TRUE(same_bits(la, ll)) << "decode step " << step << ", chunk " << chunk;
      a = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
      l = static_cast<int32_t>(std::max_element(ll.begin(), ll.end()) - ll.begin());
    }
  }
}

TEST(PrefillLogits, AllLogitsWithoutTheOptionAreRefusedBeforeRunning) {
  NPULLM_REQUIRE_SHARED(kModel);
  npuw::LlmRuntime rt(test::shared_path(kModel), config(16, false));
  std::vector<float> all;
  const std::vector<int32_t> ids = {1, 403, 407};
  try {
    rt.prefill(ids, &all);
    FAIL() << "prefill(ids, &all) ran without RuntimeConfig::all_logits";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_logits"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rt.position(), 0);
  EXPECT_EQ(rt.prefill(ids).size(), static_cast<size_t>(rt.n_vocab()));
}

// The blobs themselves: prefill blobs have a logit_rows input and [1, n_vocab] logits unless
// all_logits; generate blobs are the same either way, and so is their cache key.
TEST(PrefillLogits, PrefillBlobsComputeOneRowOfLogitsUnlessAllAreAsked) {
  NPULLM_REQUIRE_SHARED(kModel);
  for (bool all : {false, true}) {
    const npuw::RuntimeConfig cfg = config(64, all);
    for (const auto& [name, bytes] : npuw::compile_blobs(test::shared_path(kModel), cfg)) {
      if (name == "rerotate") continue;
      const blob::BlobImage img = blob::read_blob(bytes.data(), bytes.size(), name);
      const int64_t seq = name == "prefill" ? 64 : name == "prefill-16" ? 16 : 1;
      const bool gathers = !all && name.rfind("prefill", 0) == 0;
      bool has_rows = false;
      for (const blob::IoDesc& io : img.ios) {
        if (io.name == "logits") {
          EXPECT_EQ(io.shape, (std::vector<int64_t>{gathers ? 1 : seq, 512})) << name;
        }
        if (io.name == "logit_rows") {
          has_rows = true;
          EXPECT_EQ(io.shape, std::vector<int64_t>{1}) << name;
        }
      }
      EXPECT_EQ(has_rows, gathers) << name << (all ? " (all_logits)" : "");
    }
    EXPECT_EQ(npuw::blob_specs(cfg).front().last_row_logits, !all);
  }
  npuw::RuntimeConfig a = config(64, true), b = config(64, false);
  const auto sa = npuw::blob_specs(a), sb = npuw::blob_specs(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].name.rfind("prefill", 0) == 0) {
      EXPECT_NE(sa[i].cache_config(), sb[i].cache_config()) << sa[i].name;
    } else {
      EXPECT_EQ(sa[i].cache_config(), sb[i].cache_config()) << sa[i].name;
    }
  }
}

}  // namespace
}  // namespace npullm
