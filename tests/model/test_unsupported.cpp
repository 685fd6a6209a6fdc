// Models npullm cannot run are refused with a message that names what is unsupported:
// the architecture, a tensor type, a tensor the graph does not know, the tokenizer, or a vocabulary
// whose size is not the embedding's.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "common/error.h"
#include "formats/gguf.h"
#include "genai/open_model.h"
#include "genai/tokenizer/tokenizer.h"
#include "model/hparams.h"
#include "model/llama_graph.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

// A tiny llama-shaped file (1 layer, dim 32) whose parts the tests then vary.
GgufWriter tiny(const std::string& arch, GgmlType down_type = GgmlType::F32, const std::string& extra_tensor = "") {
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_u32(arch + ".block_count", 1);
  w.add_u32(arch + ".embedding_length", 32);
  w.add_u32(arch + ".feed_forward_length", 256);
  w.add_u32(arch + ".attention.head_count", 4);
  w.add_u32(arch + ".context_length", 128);
  auto add = [&](const std::string& name, std::vector<int64_t> dims, GgmlType t) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> src(static_cast<size_t>(n), 0.01f);
    std::vector<uint8_t> bytes(ggml_row_bytes(t, dims[0]) * static_cast<size_t>(n / dims[0]));
    if (can_quantize(t))  // types we cannot quantise stay zero bytes
      for (int64_t r = 0; r < n / dims[0]; ++r)
        quantize_row(t, src.data() + r * dims[0], bytes.data() + r * ggml_row_bytes(t, dims[0]), dims[0]);
    w.add_tensor(name, dims, t, std::move(bytes));
  };
  add("token_embd.weight", {32, 16}, GgmlType::F32);
  add("output_norm.weight", {32}, GgmlType::F32);
  add("blk.0.attn_norm.weight", {32}, GgmlType::F32);
  add("blk.0.ffn_norm.weight", {32}, GgmlType::F32);
  for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) add(std::string("blk.0.") + m + ".weight", {32, 32}, GgmlType::F32);
  add("blk.0.ffn_gate.weight", {32, 256}, GgmlType::F32);
  add("blk.0.ffn_up.weight", {32, 256}, GgmlType::F32);
  add("blk.0.ffn_down.weight", {256, 32}, down_type);
  if (!extra_tensor.empty()) add(extra_tensor, {32}, GgmlType::F32);
  return w;
}

std::string load_error(const std::vector<uint8_t>& bytes, bool tokenizer = false) {
  try {
    auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "t.gguf");
    if (tokenizer) {
      genai::Tokenizer tok(genai::Vocab::from_gguf(*f));
      return "";
    }
    const auto hp = model::HParams::from_gguf(*f);
    model::build_llama_graph(hp, *f, GgmlType::F16);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Unsupported, TheValidTinyModelBuilds) { EXPECT_EQ(load_error(tiny("llama").serialize()), ""); }

TEST(Unsupported, ArchitectureIsNamed) {
  const std::string e = load_error(tiny("rwkv6").serialize());
  EXPECT_NE(e.find("architecture 'rwkv6' is not supported"), std::string::npos) << e;
}

TEST(Unsupported, TensorTypeIsNamed) {
  EXPECT_EQ(load_error(tiny("llama", GgmlType::Q4_K).serialize()), "");  // a K-quant computes
  // IQ2_XXS: a type the file format knows but npullm cannot compute with (yet).
  const std::string e = load_error(tiny("llama", GgmlType::IQ2_XXS).serialize());
  EXPECT_NE(e.find("'blk.0.ffn_down.weight' has type IQ2_XXS"), std::string::npos) << e;
}

TEST(Unsupported, UnknownTensorIsNamed) {
  const std::string e = load_error(tiny("llama", GgmlType::F32, "blk.0.attn_q_norm.weight").serialize());
  EXPECT_NE(e.find("'blk.0.attn_q_norm.weight'"), std::string::npos) << e;
}

TEST(Unsupported, TokenizerModelIsNamed) {
  GgufWriter w = tiny("llama");
  w.add_string("tokenizer.ggml.model", "rwkv");
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  const std::string e = load_error(w.serialize(), /*tokenizer=*/true);
  EXPECT_NE(e.find("rwkv"), std::string::npos) << e;
}

// A vocabulary of one token fewer or more than the embedding has rows is refused when the model is
// opened for generation (the pipeline and the server's scheduler both open it with open_model), with
// both counts; the same file with the counts in agreement opens.
TEST(Unsupported, AVocabularyThatDisagreesWithTheEmbeddingIsRefused) {
  for (int tokens : {15, 16, 17}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens, 16 embedding rows");
    GgufWriter w = tiny("llama");
    std::vector<std::string> text{"<unk>", "<s>", "</s>"};
    while (static_cast<int>(text.size()) < tokens) text.push_back(fmt::format("t{}", text.size()));
    std::vector<int32_t> type(text.size(), 1);
    type[0] = 2, type[1] = 3, type[2] = 3;
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", text);
    w.add_f32_array("tokenizer.ggml.scores", std::vector<float>(text.size(), 0.0f));
    w.add_i32_array("tokenizer.ggml.token_type", type);
    const std::string path = (test::scratch_dir() / ("vocab-" + std::to_string(tokens) + ".gguf")).string();
    w.write(path);
    npuw::RuntimeConfig cfg;
    cfg.prefill_chunk = 16;
    cfg.variants = {32};
    cfg.threads = 1;
    cfg.use_cache = false;
    std::string e;
    try {
      const genai::OpenedModel m = genai::open_model(path, cfg);
      EXPECT_EQ(m.tok->n_vocab(), 16);
      EXPECT_EQ(m.rt->n_vocab(), 16);
    } catch (const Error& err) {
      e = err.what();
    }
    if (tokens == 16) {
      EXPECT_EQ(e, "");
    } else {
      EXPECT_NE(e.find("the vocabulary has " + std::to_string(tokens) + " tokens but the model's embedding has 16 rows"), std::string::npos) << e;
    }
  }
}

}  // namespace
}  // namespace npullm

namespace npullm {
namespace {

// Phi-3's LongRoPE factors would change every rotation: refused by name, not ignored.
TEST(Unsupported, LongRopeFactorsAreNamed) {
  NPULLM_REQUIRE_SHARED("golden/arch/phi3-spm.Q4_K_M.gguf");
  auto f = GgufFile::open(test::shared_path("golden/arch/phi3-spm.Q4_K_M.gguf"));
  const auto hp = model::HParams::from_gguf(*f);
  EXPECT_EQ(test::error_of([&] { model::build_llama_graph(hp, *f, GgmlType::F16); }), "");
  const std::string e = load_error(tiny("phi3", GgmlType::F32, "rope_factors_long.weight").serialize());
  EXPECT_NE(e.find("'rope_factors_long.weight' (LongRoPE"), std::string::npos) << e;
}

// Mixtures of experts npullm does not run are refused by name, never run wrong: the golden
// qwen3moe file with a key of a routing variant added, or with a shared expert's tensor.
std::vector<uint8_t> moe_variant(const GgufFile& f, const std::string& key, uint32_t value, const std::string& tensor,
                                 const std::string& float_key = "", float float_value = 0) {
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.add(k, v);
  if (!key.empty()) w.add_u32(key, value);
  if (!float_key.empty()) w.add_f32(float_key, float_value);
  for (const GgufTensorInfo& t : f.tensors())
    w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  if (!tensor.empty()) w.add_tensor(tensor, {256, 768}, GgmlType::F32, std::vector<uint8_t>(256 * 768 * 4));
  return w.serialize();
}

TEST(Unsupported, MixtureOfExpertsVariantsAreNamed) {
  NPULLM_REQUIRE_SHARED("golden/moe/qwen3moe-spm.Q4_K_M.gguf");
  const auto f = GgufFile::open(test::shared_path("golden/moe/qwen3moe-spm.Q4_K_M.gguf"));
  EXPECT_EQ(load_error(moe_variant(*f, "", 0, "")), "");  // the file as it is builds
  struct Case {
    const char* key;
    uint32_t value;
    const char* tensor;
    const char* want;
  };
  for (const Case& c : {Case{"qwen3moe.expert_shared_count", 1, "", "shared experts (qwen3moe.expert_shared_count = 1) are not supported"},
                        Case{"qwen3moe.expert_group_count", 4, "", "expert groups (qwen3moe.expert_group_count = 4) are not supported"},
                        Case{"qwen3moe.expert_gating_func", 2, "", "expert gating function sigmoid"},
                        Case{"", 0, "blk.0.ffn_gate_shexp.weight", "tensor 'blk.0.ffn_gate_shexp.weight' is not part of the qwen3moe graph"}}) {
    const std::string e = load_error(moe_variant(*f, c.key, c.value, c.tensor));
    EXPECT_NE(e.find(c.want), std::string::npos) << e;
  }
}

// gpt-oss's YaRN with another setting than llama.cpp's defaults (which npullm computes with) is
// refused by name, not run with the defaults.
TEST(Unsupported, YarnSettingsOtherThanTheDefaultsAreNamed) {
  NPULLM_REQUIRE_SHARED("golden/moe/gpt-oss-spm.MXFP4_MOE.gguf");
  const auto f = GgufFile::open(test::shared_path("golden/moe/gpt-oss-spm.MXFP4_MOE.gguf"));
  EXPECT_EQ(load_error(moe_variant(*f, "", 0, "", "gpt-oss.rope.scaling.yarn_beta_fast", 32.0f)), "");
  const std::string e = load_error(moe_variant(*f, "", 0, "", "gpt-oss.rope.scaling.yarn_beta_fast", 16.0f));
  EXPECT_NE(e.find("gpt-oss.rope.scaling.yarn_beta_fast = 16 is not supported"), std::string::npos) << e;
}

}  // namespace
}  // namespace npullm
