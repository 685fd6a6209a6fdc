// stories260K through the whole stack (compiler -> ELF blob -> driver -> CPU device -> npuw -> genai)
// against llama2.c's greedy reference (../shared/models/llama2c/stories260K.greedy-reference.json).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "genai/pipeline.h"
#include "test_util.h"

namespace npullm {
namespace {

constexpr const char* kModel = "models/llama2c/stories260K.gguf";
constexpr const char* kReference = "models/llama2c/stories260K.greedy-reference.json";

nlohmann::json reference_case(const std::string& name) {
  const auto ref = nlohmann::json::parse(test::read_file(test::shared_path(kReference)));
  for (const auto& c : ref["cases"])
    if (c["name"].get<std::string>().rfind(name, 0) == 0) return c;
  ADD_FAILURE() << "no case " << name;
  return {};
}

npuw::RuntimeConfig config(int64_t chunk, std::vector<int64_t> variants, int threads) {
  npuw::RuntimeConfig c;
  c.prefill_chunk = chunk;
  c.variants = std::move(variants);
  c.threads = threads;
  c.use_cache = false;
  return c;
}

// llama2.c's next_ids are the tokens at positions 1..steps: the prompt after BOS, then generated ones.
std::vector<int32_t> sequence_after_bos(const genai::GenerationResult& r) {
  std::vector<int32_t> seq(r.prompt_ids.begin() + 1, r.prompt_ids.end());
  seq.insert(seq.end(), r.ids.begin(), r.ids.end());
  return seq;
}

genai::GenerationResult greedy(genai::Pipeline& p, const std::string& prompt, int64_t n) {
  genai::GenerationConfig gc;
  gc.max_new_tokens = n;
  return p.generate(prompt, gc);
}

TEST(StoriesReference, CaseAPromptGreedyIdsAndText) {
  NPULLM_REQUIRE_SHARED(kModel);
  NPULLM_REQUIRE_SHARED(kReference);
  const auto c = reference_case("A_");
  const auto want = c["next_ids"].get<std::vector<int32_t>>();
  genai::Pipeline p(test::shared_path(kModel), config(64, {}, 2));
  const auto r = greedy(p, "Once upon a time", static_cast<int64_t>(want.size()));
  EXPECT_EQ(r.prompt_ids, c["prompt_ids"].get<std::vector<int32_t>>());
  std::vector<int32_t> got = sequence_after_bos(r);
  ASSERT_GE(got.size(), want.size());
  got.resize(want.size());
  EXPECT_EQ(got, want);
  // The reference text is the prompt plus everything decoded up to step 200, then a newline.
  const size_t n_gen = want.size() - (r.prompt_ids.size() - 1);
  std::vector<int32_t> gen(r.ids.begin(), r.ids.begin() + static_cast<long>(n_gen));
  const std::string text = "Once upon a time" + p.tokenizer().decode(gen);
  EXPECT_EQ(text + "\n", c["stdout_text"].get<std::string>());
}

TEST(StoriesReference, CaseBNoPromptGreedy) {
  NPULLM_REQUIRE_SHARED(kModel);
  NPULLM_REQUIRE_SHARED(kReference);
  const auto c = reference_case("B_");
  const auto want = c["next_ids"].get<std::vector<int32_t>>();
  genai::Pipeline p(test::shared_path(kModel), config(64, {}, 2));
  const auto r = greedy(p, "", static_cast<int64_t>(want.size()));
  EXPECT_EQ(r.prompt_ids, std::vector<int32_t>{1});
  EXPECT_EQ(r.ids, want);
  EXPECT_EQ(r.text + "\n", c["stdout_text"].get<std::string>());
}

TEST(StoriesReference, LogitsAtPositions0To7MatchWithin1e4) {
  NPULLM_REQUIRE_SHARED(kModel);
  NPULLM_REQUIRE_SHARED(kReference);
  const auto c = reference_case("A_");
  std::vector<int32_t> tokens;
  for (const auto& row : c["logits"]) tokens.push_back(row["input_token"].get<int32_t>());
  for (int64_t chunk : {1, 3, 64}) {
    npuw::LlmRuntime rt(test::shared_path(kModel), config(chunk, {64, 512}, 2));
    std::vector<float> all;
    rt.prefill(tokens, &all);
    ASSERT_EQ(all.size(), tokens.size() * 512);
    double worst = 0;
    for (size_t pos = 0; pos < tokens.size(); ++pos) {
      const auto want = c["logits"][pos]["logits"].get<std::vector<float>>();
      ASSERT_EQ(want.size(), 512u);
      for (size_t v = 0; v < 512; ++v) worst = std::max(worst, std::fabs(double(all[pos * 512 + v]) - want[v]));
    }
    EXPECT_LT(worst, 1e-4) << "prefill chunk " << chunk;
  }
}

// The same ids whatever the chunk size, the variant list and the thread count (DESIGN rule 7).
TEST(StoriesReference, SameIdsForEveryChunkVariantListAndThreadCount) {
  NPULLM_REQUIRE_SHARED(kModel);
  NPULLM_REQUIRE_SHARED(kReference);
  const auto want = reference_case("A_")["next_ids"].get<std::vector<int32_t>>();
  const std::vector<std::vector<int64_t>> variant_lists = {{64, 128, 256, 512}, {512}};
  for (int64_t chunk : {1, 7, 16, 64, 256})
    for (const auto& variants : variant_lists)
      for (int threads : {1, 2}) {
        genai::Pipeline p(test::shared_path(kModel), config(chunk, variants, threads));
        auto got = sequence_after_bos(greedy(p, "Once upon a time", 196));
        ASSERT_EQ(got, want) << "chunk " << chunk << ", " << variants.size() << " variants, " << threads << " threads";
        const auto& st = p.runtime().stats();
        EXPECT_EQ(st.prefill_chunks, (5 + chunk - 1) / chunk);
        EXPECT_EQ(st.kv_bytes_copied, 0);
        if (variants.size() == 4) {
          // 200 positions: the 64-, 128- and 256-row variants each ran, the 512 one never did.
          EXPECT_EQ(st.variants_used, (std::set<int64_t>{64, 128, 256}));
        }
      }
}

TEST(StoriesReference, StateFullIsAClearStopNotACrash) {
  NPULLM_REQUIRE_SHARED(kModel);
  genai::Pipeline p(test::shared_path(kModel), config(16, {32}, 1));
  const auto r = greedy(p, "Once upon a time", 100);
  EXPECT_TRUE(r.stopped_at_capacity);
  EXPECT_EQ(r.prompt_ids.size() + r.ids.size(), 33u);  // 32 rows in use + the last sampled token
  std::vector<int32_t> too_long(40, 300);
  EXPECT_THROW(p.runtime().prefill(too_long), Error);
}

}  // namespace
}  // namespace npullm
