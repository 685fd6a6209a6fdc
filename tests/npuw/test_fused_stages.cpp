// compiler::fuse_stages (npuw RuntimeConfig::fuse_stages, the default): norms folded into the
// matmuls that read them, SwiGLU / GeGLU into the down projection's input, RoPE into the K/V
// scatter, per-head norms into the RoPE, residual Adds into the norm before them, a fused
// projection's column slices into matmuls over the weight's rows. Every golden model gives the same
// logits, bit for bit, fused as unfused: chunked prefill (16-row matmuls: the stage applies the
// prologue once), single decode steps and batched decode of two slots (1- and 2-row matmuls: each
// thread applies it), with F16, F32 and Q8_0 K/V; and a decode step of a llama-style model runs 6
// stages per layer instead of 10 (Qwen3, whose per-head Q/K norms go into the RoPE, 6 instead of
// 11; Gemma 3, whose post-norms take the residual Add, 8 instead of 15; Phi-3, whose fused
// projections become one matmul per slice, 6 instead of 12).
#include <gtest/gtest.h>

#include <cstring>

#include "formats/ggml_types.h"
#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

struct Golden {
  const char* gguf;
  const char* json;
};
constexpr Golden kModels[] = {
    {"golden/llama-spm.Q8_0.gguf", "golden/llama-spm.Q8_0.json"},
    {"golden/llama-spm.Q4_K_M.gguf", "golden/llama-spm.Q4_K_M.json"},
    {"golden/qwen2-gpt2.Q4_0.gguf", "golden/qwen2-gpt2.Q4_0.json"},
    {"golden/qwen2-gpt2.Q5_K_M.gguf", "golden/qwen2-gpt2.Q5_K_M.json"},
    {"golden/arch/qwen3-gpt2.Q4_K_M.gguf", "golden/arch/qwen3-gpt2.Q4_K_M.json"},
    {"golden/arch/gemma3-spm.Q4_K_M.gguf", "golden/arch/gemma3-spm.Q4_K_M.json"},
    {"golden/arch/phi3-spm.Q4_K_M.gguf", "golden/arch/phi3-spm.Q4_K_M.json"},
};

npuw::RuntimeConfig config(GgmlType kv, bool fuse) {
  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = 16;
  cfg.variants = {128};
  cfg.parallel = 2;
  cfg.all_logits = true;
  cfg.use_cache = false;
  cfg.threads = 2;
  cfg.kv_type = kv;
  cfg.fuse_stages = fuse;
  return cfg;
}

using test::same_bits;

std::vector<int32_t> golden_tokens(const Golden& m) {
  return test::golden_tokens(m.json);
}

TEST(FusedStages, EveryGoldenModelGivesTheBitsOfTheUnfusedGraph) {
  for (const Golden& m : kModels) {
    NPULLM_REQUIRE_SHARED(m.gguf);
    NPULLM_REQUIRE_SHARED(m.json);
  }
  for (const Golden& m : kModels)
    for (GgmlType kv : {GgmlType::F16, GgmlType::F32, GgmlType::Q8_0}) {
      SCOPED_TRACE(std::string(m.gguf) + ", " + std::string(ggml_type_name(kv)) + " K/V");
      const std::vector<int32_t> tokens = golden_tokens(m);
      ASSERT_GE(tokens.size(), 40u);
      npuw::LlmRuntime fused(test::shared_path(m.gguf), config(kv, true));
      npuw::LlmRuntime plain(test::shared_path(m.gguf), config(kv, false));
      // Slot 0: 37 tokens in chunks of 16, 16 and 5 (padded to 16).
      std::vector<float> a, b;
      const std::span<const int32_t> prompt(tokens.data(), 37);
      fused.prefill(prompt, &a);
      plain.prefill(prompt, &b);
      ASSERT_TRUE(same_bits(a, b)) << "prefill";
      // Slot 1: a different prompt, then both slots decode together and slot 0 alone.
      const std::span<const int32_t> other(tokens.data() + 3, 9);
      a.clear();
      b.clear();
      fused.prefill_slot(1, other, &a);
      plain.prefill_slot(1, other, &b);
      ASSERT_TRUE(same_bits(a, b)) << "prefill of slot 1";
      int32_t id0 = tokens[37], id1 = tokens[12];
      for (int step = 0; step < 4; ++step) {
        const std::vector<npuw::SlotToken> batch{{0, id0}, {1, id1}};
        std::vector<float> la;
        {
          const std::span<const float> l = fused.decode_batch(batch);
          la.assign(l.begin(), l.end());
        }
        const std::span<const float> lb = plain.decode_batch(batch);
        ASSERT_TRUE(same_bits(la, lb)) << "batched decode step " << step;
        const size_t V = lb.size() / 2;
        id0 = genai::argmax(lb.subspan(0, V));
        id1 = genai::argmax(lb.subspan(V, V));
      }
      for (int step = 0; step < 4; ++step) {
        std::vector<float> la;
        {
          const std::span<const float> l = fused.decode(id0);
          la.assign(l.begin(), l.end());
        }
        const std::span<const float> lb = plain.decode(id0);
        ASSERT_TRUE(same_bits(la, lb)) << "decode step " << step;
        id0 = genai::argmax(lb);
      }
    }
}

// Stages of one decode step (a token of slot 0), fused or not, and the model's layers.
struct StepStages {
  int64_t stages = 0, layers = 0;
};
StepStages decode_stages(const Golden& m, bool fuse) {
  const std::vector<int32_t> tokens = golden_tokens(m);
  npuw::LlmRuntime rt(test::shared_path(m.gguf), config(GgmlType::F16, fuse));
  rt.prefill(std::span<const int32_t>(tokens.data(), 8));
  const int64_t before = rt.device_counters().stages;
  (void)rt.decode(tokens[8]);
  return {rt.device_counters().stages - before, rt.hparams().n_layer};
}

// A decode step of `m`, fused or not, runs per_layer stages a layer plus `extra`.
void expect_stages(const Golden& m, bool fuse, int64_t per_layer, int64_t extra) {
  SCOPED_TRACE(std::string(m.gguf) + (fuse ? ", fused" : ", unfused"));
  const StepStages got = decode_stages(m, fuse);
  EXPECT_EQ(got.stages, per_layer * got.layers + extra);
}

TEST(FusedStages, ALlamaLayerDecodesInSixStages) {
  const Golden& m = kModels[0];
  NPULLM_REQUIRE_SHARED(m.gguf);
  NPULLM_REQUIRE_SHARED(m.json);
  // Unfused: norm, q/k/v, rope, scatter, attention, output + residual, norm, gate/up, SwiGLU, down
  // + residual per layer, then the output norm and the logits (embedding in the first stage).
  expect_stages(m, false, 10, 3);
  // Fused: q/k/v (normalising), rope q + scatter k (rotating) and v, attention, output, gate/up
  // (normalising), down (gating); then the logits (normalising).
  expect_stages(m, true, 6, 2);
}

TEST(FusedStages, PerHeadNormsAndGemmasPostNormsCostNoStageOfTheirOwn) {
  const Golden& qwen3 = kModels[4];
  const Golden& gemma3 = kModels[5];
  for (const Golden* m : {&qwen3, &gemma3}) {
    NPULLM_REQUIRE_SHARED(m->gguf);
    NPULLM_REQUIRE_SHARED(m->json);
  }
  // Qwen3: the llama layer's ten plus the Q/K norms' own stage; fused, the Q/K norms are applied
  // by the Rope of q and the rotating scatter of k, so a layer is a llama layer's six.
  expect_stages(qwen3, false, 11, 3);
  expect_stages(qwen3, true, 6, 2);
  // Gemma 3: each sublayer's output is normalised and then added to the residual stream (no
  // residual inside the matmul): 15 stages a layer, plus the embedding's scale and the logits'
  // soft-cap. Fused: the six above plus one norm-and-add per sublayer.
  expect_stages(gemma3, false, 15, 5);
  expect_stages(gemma3, true, 8, 4);
}

TEST(FusedStages, PhisFusedProjectionsSplitIntoOneMatMulPerSlice) {
  const Golden& phi3 = kModels[6];
  NPULLM_REQUIRE_SHARED(phi3.gguf);
  NPULLM_REQUIRE_SHARED(phi3.json);
  // Unfused: the llama layer's ten plus a stage of column slices after each fused projection (q/k/v
  // and gate/up). Fused, each slice is a matmul over its rows of the weight: the llama layer's six.
  expect_stages(phi3, false, 12, 3);
  expect_stages(phi3, true, 6, 2);
}

}  // namespace
}  // namespace npullm
