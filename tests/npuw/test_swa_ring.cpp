// Gemma 3's sliding-window layers as rings of K/V rows (npuw RuntimeConfig::swa_ring): the golden
// gemma3 model (window 16, layers 0-4 local, layer 5 global) gives the same logits, bit for bit,
// with rings as with full-length local layers: for prefill chunks 1, 7 and 64 (rings of 32, 48 and
// 96 rows, so the small ones wrap within the 64 tokens), through decode, across a context shift
// and after a truncation (chat reuse), for F16, F32 and Q8_0 K/V. The K/V allocation is the global
// layers' rows plus the fixed rings, and what a ring can no longer serve is refused by name.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "formats/ggml_types.h"
#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

constexpr const char* kGemma = "golden/arch/gemma3-spm.Q4_K_M.gguf";
constexpr const char* kGemmaJson = "golden/arch/gemma3-spm.Q4_K_M.json";

npuw::RuntimeConfig config(int64_t chunk, GgmlType kv, bool ring) {
  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = chunk;
  cfg.variants = {64, 128};
  cfg.all_logits = true;
  cfg.use_cache = false;
  cfg.threads = 2;
  cfg.kv_type = kv;
  cfg.swa_ring = ring;
  return cfg;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs the same steps on a runtime with rings and one without, comparing every logit's bits.
struct Pair {
  npuw::LlmRuntime ring, full;
  Pair(int64_t chunk, GgmlType kv)
      : ring(test::shared_path(kGemma), config(chunk, kv, true)), full(test::shared_path(kGemma), config(chunk, kv, false)) {}

  void prefill(const std::vector<int32_t>& ids, const char* what) {
    std::vector<float> a, b;
    ring.prefill(ids, &a);
    full.prefill(ids, &b);
    ASSERT_TRUE(same_bits(a, b)) << what;
  }
  // Greedy decode of n tokens from `id`; returns the last token picked.
  int32_t decode(int32_t id, int n, const char* what) {
    for (int i = 0; i < n; ++i) {
      std::vector<float> a;
      {
        auto la = ring.decode(id);
        a.assign(la.begin(), la.end());
      }
      auto lb = full.decode(id);
      EXPECT_TRUE(same_bits(a, lb)) << what << ", decode step " << i;
      id = genai::argmax(lb);
    }
    return id;
  }
};

TEST(SwaRing, Gemma3GivesTheBitsOfFullLengthLocalLayers) {
  NPULLM_REQUIRE_SHARED(kGemma);
  NPULLM_REQUIRE_SHARED(kGemmaJson);
  const auto tokens = test::golden_tokens(kGemmaJson);
  ASSERT_EQ(tokens.size(), 64u);
  for (GgmlType kv : {GgmlType::F16, GgmlType::F32, GgmlType::Q8_0})
    for (int64_t chunk : {1, 7, 64}) {
      SCOPED_TRACE(std::string(ggml_type_name(kv)) + " K/V, prefill chunk " + std::to_string(chunk));
      Pair p(chunk, kv);
      const npuw::RuntimeStats& rs = p.ring.stats();
      ASSERT_EQ(rs.kv_ring_rows, npuw::swa_ring_rows(16, chunk));
      EXPECT_EQ(p.full.stats().kv_ring_rows, 0);
      // 64 tokens: the rings of 32 and 48 rows (chunks 1 and 7) wrap.
      p.prefill(tokens, "prefill");
      int32_t next = p.decode(tokens.back(), 6, "decode");
      ASSERT_EQ(p.ring.position(), 70);
      // Context shift: keep 4, drop 30; the kept start is outside the window afterwards.
      ASSERT_TRUE(p.ring.can_shift(4, 30));
      p.ring.shift(4, 30);
      p.full.shift(4, 30);
      next = p.decode(next, 6, "after shift(4, 30)");
      ASSERT_EQ(p.ring.position(), 46);
      // Truncation (a chat turn re-using its context): back 5 rows, then on.
      ASSERT_TRUE(p.ring.can_truncate(0, 41));
      p.ring.truncate(0, 41);
      p.full.truncate(0, 41);
      p.decode(next, 4, "after truncate(41)");
      // Chat reuse of a whole new turn through prefill after the truncation.
      p.ring.truncate(0, 43);
      p.full.truncate(0, 43);
      p.prefill(std::vector<int32_t>(tokens.begin() + 3, tokens.begin() + 20), "prefill after truncate(43)");
    }
}

TEST(SwaRing, KvMemoryIsGlobalRowsPlusFixedRings) {
  NPULLM_REQUIRE_SHARED(kGemma);
  npuw::LlmRuntime ring(test::shared_path(kGemma), config(7, GgmlType::F16, true));
  npuw::LlmRuntime full(test::shared_path(kGemma), config(7, GgmlType::F16, false));
  const model::HParams& hp = ring.hparams();
  int64_t local = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) local += hp.is_swa(l);
  ASSERT_GT(local, 0);
  const int64_t row = static_cast<int64_t>(ggml_row_bytes(GgmlType::F16, hp.n_head_kv * hp.head_dim));  // one layer's K or V
  const npuw::RuntimeStats& a = ring.stats();
  const npuw::RuntimeStats& b = full.stats();
  EXPECT_EQ(b.kv_row_bytes, 2 * hp.n_layer * row);
  EXPECT_EQ(a.kv_row_bytes, 2 * (hp.n_layer - local) * row);
  EXPECT_EQ(a.kv_ring_rows, 48);
  EXPECT_EQ(a.kv_ring_bytes, 2 * local * 48 * row);
  // The allocation: each state padded to 64 bytes at most.
  EXPECT_GE(a.kv_bytes, ring.capacity() * a.kv_row_bytes + a.kv_ring_bytes);
  EXPECT_LT(a.kv_bytes, ring.capacity() * a.kv_row_bytes + a.kv_ring_bytes + 64 * 2 * hp.n_layer);
  std::printf("[ ring     ] gemma3 golden, F16 K/V, C_max %lld: global %lld B/position, rings %lld rows = %lld B; K/V %lld B (full-length: %lld B)\n",
              static_cast<long long>(ring.capacity()), static_cast<long long>(a.kv_row_bytes), static_cast<long long>(a.kv_ring_rows),
              static_cast<long long>(a.kv_ring_bytes), static_cast<long long>(a.kv_bytes), static_cast<long long>(b.kv_bytes));
}

TEST(SwaRing, RefusesWhatTheRingNoLongerHolds) {
  NPULLM_REQUIRE_SHARED(kGemma);
  NPULLM_REQUIRE_SHARED(kGemmaJson);
  const auto tokens = test::golden_tokens(kGemmaJson);
  npuw::LlmRuntime rt(test::shared_path(kGemma), config(7, GgmlType::F16, true));  // rings of 48 rows
  rt.prefill(tokens);
  // Row 20 needs positions 5..19, long overwritten by positions 53..63.
  EXPECT_FALSE(rt.can_truncate(0, 20));
  EXPECT_THROW(rt.truncate(0, 20), Error);
  EXPECT_EQ(rt.position(), 64);
  // Keeping 10 and dropping 50: the next token (position 14) would see the kept rows 0..9.
  EXPECT_FALSE(rt.can_shift(10, 50));
  EXPECT_THROW(rt.shift(10, 50), Error);
  EXPECT_EQ(rt.position(), 64);
  // Rings are not in position order: nothing to save (a session file then keeps the history only),
  // and nothing restored.
  EXPECT_TRUE(rt.save_rows().empty());
  EXPECT_FALSE(rt.restore_rows(0, 0, {}));
  EXPECT_EQ(rt.position(), 64);
  // What it can serve still works, and a reset always does.
  EXPECT_TRUE(rt.can_truncate(0, 60));
  rt.truncate(0, 60);
  rt.reset();
  rt.prefill(tokens);
  EXPECT_EQ(rt.position(), 64);
}

}  // namespace
}  // namespace npullm
