// Verify blobs (speculative decoding, issue 47): a run of one slot's next token and the guesses
// after it gives, row by row, the logits that decoding the same tokens one at a time gives, bit
// for bit, and leaves the same K/V rows; rejected guesses are given up by moving the position back
// (nothing copied), after which decoding goes on as if they had never run. Several slots share a
// verify step; near the capacity end fewer rows fit; verify blobs are cached like the others.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

struct Model {
  const char* path;
  std::vector<int32_t> (*tokens)();
};

std::vector<int32_t> stories_tokens() { return test::stories_sequence(); }
std::vector<int32_t> qwen2_tokens() { return test::golden_tokens("golden/qwen2-gpt2.Q4_0.json"); }
std::vector<int32_t> gemma3_tokens() { return test::golden_tokens("golden/arch/gemma3-spm.Q4_K_M.json"); }

npuw::RuntimeConfig config(int64_t parallel, std::vector<int64_t> verify) {
  npuw::RuntimeConfig cfg;
  cfg.use_cache = false;
  cfg.variants = {32, 64};
  cfg.prefill_chunk = 16;
  cfg.parallel = parallel;
  cfg.threads = 2;
  cfg.verify_sizes = std::move(verify);
  return cfg;
}

std::vector<int32_t> prompt_of(const std::vector<int32_t>& src, size_t from, size_t n) {
  std::vector<int32_t> p;
  for (size_t k = 0; k < n; ++k) p.push_back(src[(from + k) % src.size()]);
  return p;
}

// Greedy decoding one token at a time: the ids after the prompt and the logits after each input.
struct Trace {
  std::vector<int32_t> ids;                // ids[0] from the prompt's logits
  std::vector<std::vector<float>> logits;  // logits[j]: after ids[j - 1] (logits[0]: after the prompt)
};

Trace decode_alone(const std::string& path, const std::vector<int32_t>& prompt, int64_t n) {
  npuw::LlmRuntime rt(path, config(1, {}));
  Trace t;
  std::span<const float> lg = rt.prefill(prompt);
  for (int64_t i = 0; i < n; ++i) {
    t.logits.emplace_back(lg.begin(), lg.end());
    t.ids.push_back(genai::argmax(lg));
    if (i + 1 < n) lg = rt.decode(t.ids.back());
  }
  return t;
}

bool same_row(std::span<const float> got, const std::vector<float>& want) {
  return got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0;
}

class VerifyBlobs : public ::testing::TestWithParam<Model> {};

TEST_P(VerifyBlobs, RowsEqualDecodingOneAtATimeAndRejectedRowsAreGivenUpWithoutCopies) {
  const std::string rel = GetParam().path;
  NPULLM_REQUIRE_SHARED(rel);
  const std::string path = test::shared_path(rel);
  const std::vector<int32_t> prompt = prompt_of(GetParam().tokens(), 2, 9);
  const Trace ref = decode_alone(path, prompt, 30);
  const int64_t V = static_cast<int64_t>(ref.logits[0].size());

  npuw::LlmRuntime rt(path, config(1, {4, 8}));
  EXPECT_EQ(rt.max_verify_rows(0), 8);
  std::span<const float> lg = rt.prefill(prompt);
  ASSERT_TRUE(same_row(lg, ref.logits[0]));
  const int64_t p0 = rt.position();
  // Step 1: the next token and 7 correct guesses (the reference's own continuation): all 8 rows
  // are the reference's logits.
  std::vector<int32_t> run(ref.ids.begin(), ref.ids.begin() + 8);
  lg = rt.verify(0, run);
  ASSERT_EQ(lg.size(), static_cast<size_t>(8 * V));
  for (int64_t r = 0; r < 8; ++r)
    ASSERT_TRUE(same_row(lg.subspan(static_cast<size_t>(r * V), static_cast<size_t>(V)), ref.logits[static_cast<size_t>(r + 1)]))
        << "row " << r;
  EXPECT_EQ(rt.position(), p0 + 8);
  // Step 2: the next token and three guesses of which the second is wrong: keep the token and the
  // first guess (rows p0+8, p0+9), give up the rest, decode the right token from there.
  run = {ref.ids[8], ref.ids[9], (ref.ids[10] + 1) % static_cast<int32_t>(V), ref.ids[11]};
  lg = rt.verify(0, run);  // 4 rows: the size-4 blob
  ASSERT_TRUE(same_row(lg.subspan(0, static_cast<size_t>(V)), ref.logits[9]));
  ASSERT_TRUE(same_row(lg.subspan(static_cast<size_t>(V), static_cast<size_t>(V)), ref.logits[10]));
  rt.rollback(0, p0 + 10);
  EXPECT_EQ(rt.position(), p0 + 10);
  lg = rt.decode(ref.ids[10]);
  ASSERT_TRUE(same_row(lg, ref.logits[11]));
  // Step 3: a verify of 3 rows runs in the size-4 blob (one padded row) and still matches.
  run = {ref.ids[11], ref.ids[12], ref.ids[13]};
  lg = rt.verify(0, run);
  for (int64_t r = 0; r < 3; ++r)
    ASSERT_TRUE(same_row(lg.subspan(static_cast<size_t>(r * V), static_cast<size_t>(V)), ref.logits[static_cast<size_t>(12 + r)]));
  rt.rollback(0, p0 + 12);  // keep ids[11] only: the guesses after it are "rejected"
  for (int64_t i = 12; i < 29; ++i) {
    lg = rt.decode(ref.ids[static_cast<size_t>(i)]);
    ASSERT_TRUE(same_row(lg, ref.logits[static_cast<size_t>(i + 1)])) << "decode after rollback, token " << i;
  }
  // The K/V rows are those of decoding alone, and no byte was copied.
  npuw::LlmRuntime alone(path, config(1, {}));
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), ref.ids.begin(), ref.ids.begin() + 29);
  alone.prefill(all);
  for (const std::string& name : rt.state_names()) EXPECT_EQ(rt.get_state(name), alone.get_state(name)) << name;
  const npuw::RuntimeStats& st = rt.stats();
  EXPECT_EQ(st.kv_bytes_copied, 0);
  EXPECT_EQ(st.verify_steps, 3);
  EXPECT_EQ(st.verify_rows, 15);
  EXPECT_EQ(st.verify_padded_rows, 1);
  EXPECT_EQ(st.rolled_back_rows, 4);
}

TEST_P(VerifyBlobs, SeveralSlotsShareAVerifyStepEachWithItsOwnLength) {
  const std::string rel = GetParam().path;
  NPULLM_REQUIRE_SHARED(rel);
  const std::string path = test::shared_path(rel);
  const std::vector<int32_t> src = GetParam().tokens();
  const std::vector<int32_t> pa = prompt_of(src, 0, 5), pb = prompt_of(src, 7, 11);
  const Trace ra = decode_alone(path, pa, 8), rb = decode_alone(path, pb, 8);
  const size_t V = ra.logits[0].size();
  npuw::LlmRuntime rt(path, config(2, {8}));
  rt.prefill_slot(0, pa);
  rt.prefill_slot(1, pb);
  const std::vector<int32_t> a(ra.ids.begin(), ra.ids.begin() + 3), b(rb.ids.begin(), rb.ids.begin() + 5);
  const npuw::SlotRun runs[] = {{1, b}, {0, a}};
  const std::span<const float> lg = rt.verify_batch(runs);
  ASSERT_EQ(lg.size(), 8 * V);
  for (size_t r = 0; r < 5; ++r) ASSERT_TRUE(same_row(lg.subspan(r * V, V), rb.logits[r + 1])) << "slot 1 row " << r;
  for (size_t r = 0; r < 3; ++r) ASSERT_TRUE(same_row(lg.subspan((5 + r) * V, V), ra.logits[r + 1])) << "slot 0 row " << r;
  EXPECT_EQ(rt.position(0), 8);
  EXPECT_EQ(rt.position(1), 16);
  EXPECT_EQ(rt.stats().kv_bytes_copied, 0);
}

std::string param_name(const ::testing::TestParamInfo<Model>& i) {
  static const char* const names[] = {"stories260K", "qwen2_Q4_0", "gemma3_rings"};
  return names[i.index];
}

INSTANTIATE_TEST_SUITE_P(Models, VerifyBlobs,
                         ::testing::Values(Model{"models/llama2c/stories260K.gguf", stories_tokens},
                                           Model{"golden/qwen2-gpt2.Q4_0.gguf", qwen2_tokens},
                                           Model{"golden/arch/gemma3-spm.Q4_K_M.gguf", gemma3_tokens}),
                         param_name);

TEST(VerifyBlobsLimits, NearTheCapacityEndFewerRowsFitAndTooManyAreRefused) {
  NPULLM_REQUIRE_SHARED(test::kStoriesModel);
  npuw::LlmRuntime rt(test::shared_path(test::kStoriesModel), config(1, {4}));
  const std::vector<int32_t> prompt = prompt_of(test::stories_sequence(), 0, 61);
  rt.prefill(prompt);
  EXPECT_EQ(rt.max_verify_rows(0), 3);  // 64 - 61
  const std::vector<int32_t> four{1, 2, 3, 4}, three{1, 2, 3};
  EXPECT_NE(test::error_of([&] { rt.verify(0, four); }).find("do not fit"), std::string::npos);
  EXPECT_EQ(rt.position(), 61);
  EXPECT_EQ(rt.verify(0, three).size(), static_cast<size_t>(3 * rt.n_vocab()));
  EXPECT_EQ(rt.max_verify_rows(0), 0);
  npuw::LlmRuntime none(test::shared_path(test::kStoriesModel), config(1, {}));
  EXPECT_EQ(none.max_verify_rows(0), 0);
  EXPECT_NE(test::error_of([&] { none.verify(0, three); }).find("no verify blobs"), std::string::npos);
  const std::vector<int32_t> five{1, 2, 3, 4, 5};
  EXPECT_NE(test::error_of([&] { rt.reset(); rt.verify(0, five); }).find("largest verify blob runs 4"), std::string::npos);
}

TEST(VerifyBlobsLimits, VerifyBlobsAreCompiledOnceAndThenLoadedFromTheCache) {
  NPULLM_REQUIRE_SHARED(test::kStoriesModel);
  npuw::RuntimeConfig cfg = config(1, {4, 8});
  cfg.use_cache = true;
  cfg.cache_dir = (test::scratch_dir() / "verify-cache").string();
  const std::string path = test::shared_path(test::kStoriesModel);
  int64_t compiled = 0;
  {
    npuw::LlmRuntime rt(path, cfg);
    compiled = rt.stats().compiled_blobs;
  }
  npuw::RuntimeConfig plain = cfg;
  plain.verify_sizes.clear();
  npuw::LlmRuntime without(path, plain);
  // 2 capacities x 2 verify sizes more than the plain configuration, all cached now.
  EXPECT_EQ(compiled, without.stats().cached_blobs + 4);
  npuw::LlmRuntime again(path, cfg);
  EXPECT_EQ(again.stats().compiled_blobs, 0);
  EXPECT_EQ(again.stats().cached_blobs, compiled);
  const std::vector<npuw::BlobSpec> specs = npuw::blob_specs(again.config());
  EXPECT_TRUE(std::any_of(specs.begin(), specs.end(), [](const npuw::BlobSpec& s) { return s.name == "verify-8-64"; }));
}

}  // namespace
}  // namespace npullm
