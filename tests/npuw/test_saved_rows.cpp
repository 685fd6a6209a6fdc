// Saved and copied K/V rows (LlmRuntime::save_rows / restore_rows, what a session file holds;
// copy_rows, the server's prefix reuse across slots): rows saved from one slot and restored into
// another slot and into a second runtime, or copied from slot to slot, continue the sequence with
// the bits of the slot that prefilled it (the next token's logits and the greedy tokens after it);
// rows that do not fit are refused without touching the state.
#include <gtest/gtest.h>

#include "formats/ggml_types.h"
#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

struct RowsCase {
  const char* model;   // under ../shared
  const char* tokens;  // "stories": llama2.c case A; else a golden JSON with "tokens"
  GgmlType kv;
};
void PrintTo(const RowsCase& c, std::ostream* os) { *os << c.model << " K/V " << ggml_type_name(c.kv); }

npuw::RuntimeConfig config(GgmlType kv, int64_t parallel) {
  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = 16;
  cfg.variants = {32, 64};
  cfg.use_cache = false;
  cfg.kv_type = kv;
  cfg.parallel = parallel;
  cfg.swa_ring = false;
  return cfg;
}

// Greedy ids after `first` in `slot`, decoding n more steps (logits of each step appended to `trace`).
std::vector<int32_t> continue_greedy(npuw::LlmRuntime& rt, int64_t slot, int32_t first, int n, std::vector<float>& trace) {
  std::vector<int32_t> out;
  int32_t id = first;
  for (int i = 0; i < n; ++i) {
    const npuw::SlotToken t{slot, id};
    const std::span<const float> logits = rt.decode_batch({&t, 1});
    trace.insert(trace.end(), logits.begin(), logits.end());
    id = genai::argmax(logits);
    out.push_back(id);
  }
  return out;
}

class SavedRows : public ::testing::TestWithParam<RowsCase> {};

TEST_P(SavedRows, RestoredRowsContinueWithTheSameBits) {
  const RowsCase& c = GetParam();
  NPULLM_REQUIRE_SHARED(c.model);
  NPULLM_REQUIRE_SHARED(std::string(c.tokens) == "stories" ? test::kStoriesReference : c.tokens);
  std::vector<int32_t> tokens = std::string(c.tokens) == "stories" ? test::stories_sequence() : test::golden_tokens(c.tokens);
  tokens.resize(21);
  const std::vector<int32_t> prompt(tokens.begin(), tokens.end() - 1);

  npuw::LlmRuntime a(test::shared_path(c.model), config(c.kv, 3));
  a.prefill_slot(0, prompt);
  const std::vector<uint8_t> rows = a.save_rows(0);
  ASSERT_EQ(rows.size(), prompt.size() * static_cast<size_t>(a.stats().kv_row_bytes));

  // Into slot 1 of the same runtime and slot 0 of another one.
  ASSERT_TRUE(a.restore_rows(1, static_cast<int64_t>(prompt.size()), rows));
  EXPECT_EQ(a.position(1), a.position(0));
  const int64_t copied_before = a.stats().kv_bytes_copied;
  ASSERT_TRUE(a.copy_rows(0, 2, static_cast<int64_t>(prompt.size())));
  EXPECT_EQ(a.position(2), a.position(0));
  EXPECT_EQ(a.stats().kv_bytes_copied - copied_before, static_cast<int64_t>(rows.size()));
  EXPECT_FALSE(a.copy_rows(0, 0, 1));
  EXPECT_FALSE(a.copy_rows(0, 1, a.position(0) + 1));
  npuw::LlmRuntime b(test::shared_path(c.model), config(c.kv, 1));
  EXPECT_EQ(b.state_key(), a.state_key());
  ASSERT_TRUE(b.restore_rows(0, static_cast<int64_t>(prompt.size()), rows));
  for (const std::string& name : a.state_names()) {
    SCOPED_TRACE(name);
    const std::vector<float> want = a.get_state(name, 0);
    EXPECT_EQ(a.get_state(name, 1), want);
    EXPECT_EQ(a.get_state(name, 2), want);
    EXPECT_EQ(b.get_state(name, 0), want);
  }

  std::vector<float> t0, t1, t2, tb;
  const std::vector<int32_t> ids0 = continue_greedy(a, 0, tokens.back(), 12, t0);
  const std::vector<int32_t> ids1 = continue_greedy(a, 1, tokens.back(), 12, t1);
  const std::vector<int32_t> ids2 = continue_greedy(a, 2, tokens.back(), 12, t2);
  const std::vector<int32_t> idsb = continue_greedy(b, 0, tokens.back(), 12, tb);
  EXPECT_EQ(ids1, ids0);
  EXPECT_EQ(ids2, ids0);
  EXPECT_EQ(idsb, ids0);
  EXPECT_EQ(t1, t0);  // bit for bit
  EXPECT_EQ(t2, t0);
  EXPECT_EQ(tb, t0);
}

TEST_P(SavedRows, RowsThatDoNotFitAreRefused) {
  const RowsCase& c = GetParam();
  NPULLM_REQUIRE_SHARED(c.model);
  npuw::LlmRuntime rt(test::shared_path(c.model), config(c.kv, 1));
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  rt.prefill(ids);
  std::vector<uint8_t> rows = rt.save_rows();
  ASSERT_EQ(rows.size(), 5 * static_cast<size_t>(rt.stats().kv_row_bytes));
  const std::vector<float> before = rt.get_state(rt.state_names().front());
  EXPECT_FALSE(rt.restore_rows(0, 4, rows));                      // 5 rows' bytes for 4
  EXPECT_FALSE(rt.restore_rows(0, rt.capacity() + 1, rows));      // past the capacity
  rows.pop_back();
  EXPECT_FALSE(rt.restore_rows(0, 5, rows));                      // a byte short
  EXPECT_EQ(rt.position(), 5);
  EXPECT_EQ(rt.get_state(rt.state_names().front()), before);
  // Another K/V type is another key.
  npuw::LlmRuntime other(test::shared_path(c.model), config(c.kv == GgmlType::F32 ? GgmlType::F16 : GgmlType::F32, 1));
  EXPECT_NE(other.state_key(), rt.state_key());
}

INSTANTIATE_TEST_SUITE_P(ModelsAndKvTypes, SavedRows,
                         ::testing::Values(RowsCase{test::kStoriesModel, "stories", GgmlType::F16},
                                           RowsCase{"golden/qwen2-gpt2.Q4_0.gguf", "golden/qwen2-gpt2.Q4_0.json", GgmlType::Q8_0},
                                           RowsCase{"golden/llama-spm.Q8_0.gguf", "golden/llama-spm.Q8_0.json", GgmlType::F32}));

}  // namespace
}  // namespace npullm
