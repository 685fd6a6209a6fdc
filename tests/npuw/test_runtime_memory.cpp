// What the runtime keeps resident besides the weights: one K/V allocation and one scratch arena that
// every blob shares (they run one at a time on one queue), sized by the largest blob, not the sum;
// and of the GGUF's metadata not the vocabulary, which only the tokenizer reads.
#include <gtest/gtest.h>

#include <algorithm>

#include "blob/blob_image.h"
#include "formats/gguf.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

constexpr const char* kModel = "models/llama2c/stories260K.gguf";

npuw::RuntimeConfig memory_config() {
  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = 64;  // ladder 64, 16
  cfg.variants = {64, 128, 256};
  cfg.threads = 2;
  cfg.use_cache = false;
  return cfg;
}

TEST(RuntimeMemory, EveryBlobSharesOneScratchArenaSizedByTheLargest) {
  NPULLM_REQUIRE_SHARED(kModel);
  const npuw::RuntimeConfig cfg = memory_config();
  uint64_t largest = 0, sum = 0;
  for (const auto& [name, bytes] : npuw::compile_blobs(test::shared_path(kModel), cfg)) {
    const uint64_t need = blob::read_blob(bytes.data(), bytes.size(), name).scratch_bytes;
    largest = std::max(largest, need);
    sum += need;
  }
  npuw::LlmRuntime rt(test::shared_path(kModel), cfg);
  EXPECT_EQ(rt.stats().scratch_bytes, static_cast<int64_t>(largest));
  EXPECT_LT(largest, sum);  // the ladder and the variants would each have had their own
}

// A 32,000-token vocabulary: the runtime's reader knows its length, keeps none of its elements.
TEST(RuntimeMemory, KeepsTheVocabularysLengthOnly) {
  constexpr const char* kTiny = "models/ollama/llama-2-tiny-random.gguf";
  NPULLM_REQUIRE_SHARED(kTiny);
  const auto full = GgufFile::open(test::shared_path(kTiny));
  const size_t n = full->get("tokenizer.ggml.tokens").as_array("tokens").size();
  ASSERT_GT(n, kGgufLargeArray);
  npuw::LlmRuntime rt(test::shared_path(kTiny), memory_config());
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    const GgufValue& v = rt.gguf().get(key);
    EXPECT_FALSE(v.is_kept_array()) << key;
    EXPECT_EQ(v.array_size(key), n) << key;
  }
  EXPECT_EQ(rt.gguf().get_string("general.architecture"), full->get_string("general.architecture"));
  EXPECT_EQ(rt.n_vocab(), static_cast<int64_t>(n));
}

}  // namespace
}  // namespace npullm
