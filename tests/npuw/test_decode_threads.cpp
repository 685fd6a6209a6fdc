// Decode gives the same logits, bit for bit, on 1, 2 and 3 threads. With one thread every stage
// runs whole on the caller; with more, each MatMul of a parallel stage is cut into chunks of 16-row
// multiples (two a thread) that the threads claim as they come, so which thread computes which
// rows changes from step to step, and that must change nothing else. The thread-count test of the
// stories260K reference never reaches this: its stages are all too small to run on several threads.
// Golden models with Q4_0 and K-quant weights (the int8 kernels' two families), single decode steps
// and a batch of two slots.
#include <gtest/gtest.h>

#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

// Golden models under ../shared, each a .gguf beside the .json of its reference tokens.
constexpr const char* kModels[] = {"golden/llama-spm.Q4_K_M", "golden/qwen2-gpt2.Q4_0"};

struct Decoded {
  std::vector<std::vector<float>> logits;  // each decode step's, in order
  int64_t parallel_stages = 0;             // of the decode steps
};

Decoded decode_with(const std::string& model, int threads, const std::vector<int32_t>& tokens) {
  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = 16;
  cfg.variants = {128};
  cfg.parallel = 2;
  cfg.use_cache = false;
  cfg.threads = threads;
  npuw::LlmRuntime rt(test::shared_path(model + ".gguf"), cfg);
  rt.prefill(std::span<const int32_t>(tokens.data(), 20));
  rt.prefill_slot(1, std::span<const int32_t>(tokens.data() + 5, 9));
  Decoded r;
  const int64_t before = rt.device_counters().parallel_stages;
  // The next tokens come from the file, not from the logits: every run decodes the same inputs.
  for (int step = 0; step < 6; ++step) {
    const std::span<const float> l = rt.decode(tokens[20 + step]);
    r.logits.emplace_back(l.begin(), l.end());
  }
  for (int step = 0; step < 3; ++step) {
    const std::vector<npuw::SlotToken> batch{{0, tokens[26 + step]}, {1, tokens[30 + step]}};
    const std::span<const float> l = rt.decode_batch(batch);
    r.logits.emplace_back(l.begin(), l.end());
  }
  r.parallel_stages = rt.device_counters().parallel_stages - before;
  return r;
}

TEST(DecodeThreads, LogitsDoNotDependOnTheThreadCount) {
  for (const std::string m : kModels) {
    NPULLM_REQUIRE_SHARED(m + ".gguf");
    NPULLM_REQUIRE_SHARED(m + ".json");
  }
  for (const std::string m : kModels) {
    SCOPED_TRACE(m);
    const std::vector<int32_t> tokens = test::golden_tokens(m + ".json");
    ASSERT_GE(tokens.size(), 33u);
    const Decoded one = decode_with(m, 1, tokens);
    EXPECT_EQ(one.parallel_stages, 0);
    for (int threads : {2, 3}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      const Decoded many = decode_with(m, threads, tokens);
      EXPECT_GT(many.parallel_stages, 0) << "no stage ran on several threads: the test tests nothing";
      ASSERT_EQ(many.logits.size(), one.logits.size());
      for (size_t s = 0; s < one.logits.size(); ++s) ASSERT_TRUE(test::same_bits(many.logits[s], one.logits[s])) << "step " << s;
    }
  }
}

}  // namespace
}  // namespace npullm
