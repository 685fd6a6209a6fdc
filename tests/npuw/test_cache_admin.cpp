// The cache folder, per model: what `npullm cache list` reports (blobs, packed weights, bytes, the
// model's path, last use), pruning least recently used first down to a size or by age, never the
// folder of the model in use, and the bound every runtime enforces when it starts.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <unistd.h>

#include "device/cpu/cpu_device.h"
#include "npuw/cache_admin.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

namespace fs = std::filesystem;

void load(const std::string& rel, const std::string& cache, uint64_t bound = 0) {
  npuw::RuntimeConfig cfg;
  cfg.variants = {64};
  cfg.prefill_chunk = 16;
  cfg.cache_dir = cache;
  cfg.cache_max_bytes = bound;
  cfg.threads = 1;
  npuw::LlmRuntime rt(test::shared_path(rel), cfg);
}

TEST(CacheAdmin, ListsPrunesLeastRecentlyUsedAndBoundsAtStart) {
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.gguf");
  NPULLM_REQUIRE_SHARED("golden/arch/qwen3-gpt2.Q4_K_M.gguf");
  const std::string dir = (fs::temp_directory_path() / ("npullm-cache-admin-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  load("golden/arch/qwen3-gpt2.Q4_K_M.gguf", dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  load("models/llama2c/stories260K.gguf", dir);
  auto models = npuw::list_cache(dir);
  ASSERT_EQ(models.size(), 2u);
  EXPECT_NE(models[0].model_path.find("qwen3-gpt2.Q4_K_M.gguf"), std::string::npos);  // least recently used first
  EXPECT_NE(models[1].model_path.find("stories260K.gguf"), std::string::npos);
  for (const auto& m : models) EXPECT_GT(m.blobs, 0) << m.model_path;
  const uint64_t qwen_bytes = models[0].bytes();
  if (cpu::create_cpu_device(1)->panels16_types().empty()) {
    EXPECT_EQ(models[0].packed, 0);
  } else {
    EXPECT_GT(models[0].packed, 0);  // Q4_K / Q6_K weights repacked
    EXPECT_GT(models[0].packed_bytes, models[0].blob_bytes);
  }
  EXPECT_EQ(models[1].packed, 0);  // stories260K is F32: nothing to repack

  // A bound the two do not fit in: the older goes, the newer stays.
  npuw::PruneReport r = npuw::prune_cache(dir, models[1].bytes() + 1, -1);
  EXPECT_EQ(r.removed, 1);
  EXPECT_EQ(r.freed_bytes, qwen_bytes);
  models = npuw::list_cache(dir);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_NE(models[0].model_path.find("stories260K.gguf"), std::string::npos);

  // The bound a runtime enforces at start: the other model goes, never its own.
  load("golden/arch/qwen3-gpt2.Q4_K_M.gguf", dir, /*bound=*/1);
  models = npuw::list_cache(dir);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_NE(models[0].model_path.find("qwen3-gpt2.Q4_K_M.gguf"), std::string::npos);
  r = npuw::prune_cache(dir, 1, -1, models[0].key);
  EXPECT_EQ(r.removed, 0);

  // By age: nothing is a day old; everything is older than no time at all.
  EXPECT_EQ(npuw::prune_cache(dir, 0, 1.0).removed, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(npuw::prune_cache(dir, 0, 0.0).removed, 1);
  EXPECT_TRUE(npuw::list_cache(dir).empty());
  fs::remove_all(dir);
}

TEST(CacheAdmin, SizesParseAndPrint) {
  EXPECT_EQ(npuw::parse_size("2000000"), 2000000u);
  EXPECT_EQ(npuw::parse_size("10G"), 10ull << 30);
  EXPECT_EQ(npuw::parse_size("512M"), 512ull << 20);
  EXPECT_EQ(npuw::parse_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(npuw::parse_size("4k"), 4096u);
  for (const char* bad : {"", "ten", "5X", "-1G"}) EXPECT_THROW(npuw::parse_size(bad), Error) << bad;
  EXPECT_EQ(npuw::format_size(512), "512 B");
  EXPECT_EQ(npuw::format_size(3ull << 29), "1.5 GiB");
  EXPECT_GE(npuw::default_cache_max_bytes("/tmp/does/not/exist/yet"), 1ull << 30);
  EXPECT_LE(npuw::default_cache_max_bytes("/tmp"), 64ull << 30);
}

}  // namespace
}  // namespace npullm
