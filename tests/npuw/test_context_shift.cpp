// Context shift in npuw: rows after the dropped block move down, keys are re-rotated to their new
// positions (checked against RoPE computed here in double), values move unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "genai/sampler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

constexpr const char* kModel = "models/llama2c/stories260K.gguf";

TEST(ContextShift, MovesRowsAndReRotatesKeys) {
  NPULLM_REQUIRE_SHARED(kModel);
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.greedy-reference.json");
  const auto ref = nlohmann::json::parse(test::read_file(test::shared_path("models/llama2c/stories260K.greedy-reference.json")));
  std::vector<int32_t> tokens{1};
  for (int32_t id : ref["cases"][0]["next_ids"].get<std::vector<int32_t>>()) tokens.push_back(id);
  tokens.resize(40);

  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = 16;
  cfg.variants = {64};
  cfg.use_cache = false;
  npuw::LlmRuntime rt(test::shared_path(kModel), cfg);
  rt.prefill(tokens);
  ASSERT_EQ(rt.position(), 40);
  const auto names = rt.state_names();
  ASSERT_EQ(names.size(), 10u);  // 5 layers x (key, value)
  std::map<std::string, std::vector<float>> before;
  for (const auto& n : names) before[n] = rt.get_state(n);

  const int64_t keep = 1, drop = 10, row = 4 * 8;  // Hkv * head_dim floats per row
  rt.shift(keep, drop);
  EXPECT_EQ(rt.position(), 30);
  EXPECT_EQ(rt.stats().context_shifts, 1);
  EXPECT_EQ(rt.stats().kv_bytes_copied, 10 * 29 * row * 4);  // 29 rows moved in 10 states

  for (const auto& n : names) {
    const auto after = rt.get_state(n);
    ASSERT_EQ(after.size(), size_t(30 * row));
    const bool is_key = n.find("key") != std::string::npos;
    for (int64_t r = 0; r < 30; ++r) {
      const int64_t src = r < keep ? r : r + drop;
      for (int64_t h = 0; h < 4; ++h) {
        const float* old = before[n].data() + src * row + h * 8;
        const float* now = after.data() + r * row + h * 8;
        for (int64_t i = 0; i < 4; ++i) {
          double a = old[2 * i], b = old[2 * i + 1];
          if (is_key && r >= keep) {  // turn back by `drop` positions: theta = -drop * base^(-2i/8)
            const double th = -double(drop) * std::pow(10000.0, -2.0 * double(i) / 8.0);
            const double a2 = a * std::cos(th) - b * std::sin(th), b2 = a * std::sin(th) + b * std::cos(th);
            a = a2;
            b = b2;
          }
          ASSERT_NEAR(now[2 * i], a, 1e-5) << n << " row " << r;
          ASSERT_NEAR(now[2 * i + 1], b, 1e-5) << n << " row " << r;
        }
      }
    }
  }
  // Generation continues from the shifted state without error.
  auto logits = rt.decode(genai::argmax(rt.decode(tokens[40 - 1])));
  EXPECT_EQ(rt.position(), 32);
  EXPECT_EQ(logits.size(), 512u);
  EXPECT_THROW(rt.shift(20, 20), Error);
}

}  // namespace
}  // namespace npullm
