// npullm synth: the tiny preset loads with the tensors and types llama-quantize's rules give, the
// same seed gives the same bytes, the hyper-parameters read back, the model runs and its next-token
// distributions are peaked; with the golden models' shape and seed, synth reproduces llama-quantize's
// files tensor for tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

#include "common/error.h"
#include "formats/gguf.h"
#include "model/hparams.h"
#include "model/synth.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

namespace fs = std::filesystem;
using model::SynthOptions;
using model::SynthTensor;

// A folder for this process's files, removed at exit.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("npullm-synth-test-" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const fs::path& temp_dir() {
  static const TempDir d;
  return d.path;
}

SynthOptions tiny(const std::string& type, uint64_t seed = 1) {
  SynthOptions o;
  o.shape = model::synth_preset("tiny");
  o.type = model::synth_file_type(type);
  o.seed = seed;
  o.threads = 2;
  return o;
}

// Writes `o` to a temp file named `name` and returns its path.
std::string write(const SynthOptions& o, const std::string& name) {
  const std::string path = (temp_dir() / name).string();
  model::synth_write(o, path);
  return path;
}

std::map<std::string, GgmlType> types_of(const std::vector<SynthTensor>& plan) {
  std::map<std::string, GgmlType> m;
  for (const SynthTensor& t : plan) m[t.name] = t.type;
  return m;
}

// The layers llama-quantize's *_M mixtures give more bits (use_more_bits in llama-quant.cpp).
std::set<int> more_bits_layers(int n) {
  std::set<int> s;
  for (int i = 0; i < n; ++i)
    if (i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2) s.insert(i);
  return s;
}

TEST(Synth, TinyPresetLoadsWithExpectedTensors) {
  const std::string path = write(tiny("Q8_0"), "tiny-q8.gguf");
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("general.file_type"), 7);
  EXPECT_EQ(f->get_int("llama.block_count"), 4);
  EXPECT_EQ(f->get_int("llama.vocab_size"), 4096);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_NE(f->get_string("general.description")->find("random"), std::string::npos);
  ASSERT_EQ(f->tensors().size(), 3u + 4u * 9u);
  // llama-quantize's order: non-layer tensors first, then by layer, each group sorted by name.
  EXPECT_EQ(f->tensors()[0].name, "output.weight");
  EXPECT_EQ(f->tensors()[1].name, "output_norm.weight");
  EXPECT_EQ(f->tensors()[2].name, "token_embd.weight");
  EXPECT_EQ(f->tensors()[3].name, "blk.0.attn_k.weight");
  for (const GgufTensorInfo& t : f->tensors()) {
    if (t.dims.size() == 1) EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    else EXPECT_EQ(t.type, GgmlType::Q8_0) << t.name;
  }
  EXPECT_EQ(f->tensor("blk.3.attn_k.weight").dims, (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(f->tensor("blk.3.ffn_down.weight").dims, (std::vector<int64_t>{768, 256}));
  EXPECT_EQ(f->tensor("token_embd.weight").dims, (std::vector<int64_t>{256, 4096}));
  // A 1-D tensor's values follow the recipe exactly (norms are mean 1, std 0.2).
  const GgufTensorInfo& norm = f->tensor("blk.1.ffn_norm.weight");
  const uint64_t key = model::synth_tensor_key(norm.name, 1);
  for (int64_t i = 0; i < 256; ++i) {
    float v;
    std::memcpy(&v, norm.data + 4 * i, 4);
    ASSERT_EQ(v, model::synth_value(key, i, 1.0, 0.2)) << i;
    ASSERT_GT(v, 1.0f - 0.2f * 3.5f);
    ASSERT_LT(v, 1.0f + 0.2f * 3.5f);
  }
}

TEST(Synth, TinyQ4KMHasQ6KWhereLlamaQuantizePutsIt) {
  const std::string path = write(tiny("Q4_K_M"), "tiny-q4km.gguf");
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->get_int("general.file_type"), 15);
  std::set<std::string> q6k;
  for (const GgufTensorInfo& t : f->tensors()) {
    if (t.type == GgmlType::Q6_K) q6k.insert(t.name);
    else if (t.dims.size() == 1) EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    else EXPECT_EQ(t.type, GgmlType::Q4_K) << t.name;
  }
  // 4 layers: use_more_bits picks layers 2 and 3; the output matrix always gets Q6_K.
  EXPECT_EQ(q6k, (std::set<std::string>{"output.weight", "blk.2.attn_v.weight", "blk.3.attn_v.weight",
                                        "blk.2.ffn_down.weight", "blk.3.ffn_down.weight"}));
}

TEST(Synth, MixtureRulesForRealShapes) {
  using model::synth_file_type;
  using model::synth_preset;
  {  // TinyLlama Q4_K_M: attn_v and ffn_down get Q6_K in the use_more_bits layers.
    const auto t = types_of(model::synth_plan(synth_preset("tinyllama-1.1b"), synth_file_type("Q4_K_M")));
    const std::set<int> more = more_bits_layers(22);
    EXPECT_EQ(more, (std::set<int>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21}));
    for (int l = 0; l < 22; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const GgmlType want = more.count(l) ? GgmlType::Q6_K : GgmlType::Q4_K;
      EXPECT_EQ(t.at(p + "attn_v.weight"), want) << l;
      EXPECT_EQ(t.at(p + "ffn_down.weight"), want) << l;
      EXPECT_EQ(t.at(p + "attn_q.weight"), GgmlType::Q4_K) << l;
      EXPECT_EQ(t.at(p + "ffn_up.weight"), GgmlType::Q4_K) << l;
    }
    EXPECT_EQ(t.at("output.weight"), GgmlType::Q6_K);
    EXPECT_EQ(t.at("token_embd.weight"), GgmlType::Q4_K);
  }
  {  // Qwen2.5-0.5B Q4_K_M: rows of 896 are not 256-blocks, so llama-quantize falls back.
    const auto t = types_of(model::synth_plan(synth_preset("qwen2.5-0.5b"), synth_file_type("Q4_K_M")));
    EXPECT_EQ(t.count("output.weight"), 0u);
    EXPECT_EQ(t.at("token_embd.weight"), GgmlType::Q8_0);  // tied: the output rule, 896 -> Q8_0
    const std::set<int> more = more_bits_layers(24);
    for (int l = 0; l < 24; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      EXPECT_EQ(t.at(p + "attn_q.weight"), GgmlType::Q5_0) << l;                                  // Q4_K -> Q5_0
      EXPECT_EQ(t.at(p + "attn_v.weight"), more.count(l) ? GgmlType::Q8_0 : GgmlType::Q5_0) << l;  // Q6_K -> Q8_0
      EXPECT_EQ(t.at(p + "ffn_down.weight"), more.count(l) ? GgmlType::Q6_K : GgmlType::Q4_K) << l;  // 4864 = 19 x 256
      EXPECT_EQ(t.at(p + "attn_q.bias"), GgmlType::F32);
      EXPECT_EQ(t.at(p + "attn_v.bias"), GgmlType::F32);
    }
  }
  {  // Qwen2.5-0.5B Q3_K_M: Q3_K falls back to Q4_0 (llama.cpp 80fb11a; IQ4_NL before), Q5_K to Q5_1.
    const auto t = types_of(model::synth_plan(synth_preset("qwen2.5-0.5b"), synth_file_type("Q3_K_M")));
    EXPECT_EQ(t.at("blk.5.attn_q.weight"), GgmlType::Q4_0);
    EXPECT_EQ(t.at("blk.0.attn_v.weight"), GgmlType::Q5_1);
    EXPECT_EQ(t.at("blk.5.attn_v.weight"), GgmlType::Q5_0);
    EXPECT_EQ(t.at("blk.5.attn_output.weight"), GgmlType::Q5_0);
    EXPECT_EQ(t.at("blk.0.ffn_down.weight"), GgmlType::Q5_K);
    EXPECT_EQ(t.at("blk.5.ffn_down.weight"), GgmlType::Q4_K);
  }
  {  // TinyLlama Q2_K: GQA 8 lifts attn_v to Q4_K; ffn_down and attn_output take Q3_K.
    const auto t = types_of(model::synth_plan(synth_preset("tinyllama-1.1b"), synth_file_type("Q2_K")));
    EXPECT_EQ(t.at("blk.3.attn_v.weight"), GgmlType::Q4_K);
    EXPECT_EQ(t.at("blk.3.ffn_down.weight"), GgmlType::Q3_K);
    EXPECT_EQ(t.at("blk.3.attn_output.weight"), GgmlType::Q3_K);
    EXPECT_EQ(t.at("blk.3.attn_q.weight"), GgmlType::Q2_K);
    EXPECT_EQ(t.at("output.weight"), GgmlType::Q6_K);
  }
  {  // Llama-3.2-1B Q4_0: tied, so the embedding takes the output's Q6_K.
    const auto t = types_of(model::synth_plan(synth_preset("llama-3.2-1b"), synth_file_type("Q4_0")));
    EXPECT_EQ(t.count("output.weight"), 0u);
    EXPECT_EQ(t.at("token_embd.weight"), GgmlType::Q6_K);
    EXPECT_EQ(t.at("blk.15.ffn_down.weight"), GgmlType::Q4_0);
  }
  {  // F16 has no mixture.
    for (const SynthTensor& x : model::synth_plan(synth_preset("tiny"), synth_file_type("F16")))
      EXPECT_EQ(x.type, x.dims.size() == 1 ? GgmlType::F32 : GgmlType::F16) << x.name;
  }
}

TEST(Synth, SameSeedGivesIdenticalBytes) {
  SynthOptions a = tiny("Q4_K_M", 42), b = tiny("Q4_K_M", 42), c = tiny("Q4_K_M", 43);
  b.threads = 1;  // the thread count must not matter
  const std::string pa = write(a, "seed42-a.gguf"), pb = write(b, "seed42-b.gguf"), pc = write(c, "seed43.gguf");
  const std::string fa = test::read_file(pa), fb = test::read_file(pb), fc = test::read_file(pc);
  EXPECT_EQ(fa.size(), fb.size());
  EXPECT_TRUE(fa == fb);
  EXPECT_EQ(fa.size(), fc.size());
  EXPECT_FALSE(fa == fc);
}

TEST(Synth, HParamsReadBack) {
  const std::string path = write(tiny("Q4_0"), "tiny-q40.gguf");
  const auto f = GgufFile::open(path);
  const model::HParams h = model::HParams::from_gguf(*f);
  EXPECT_EQ(h.arch, "llama");
  EXPECT_EQ(h.n_layer, 4);
  EXPECT_EQ(h.n_embd, 256);
  EXPECT_EQ(h.n_head, 8);
  EXPECT_EQ(h.n_head_kv, 2);
  EXPECT_EQ(h.n_ff, 768);
  EXPECT_EQ(h.n_vocab, 4096);
  EXPECT_EQ(h.n_ctx_train, 2048);
  EXPECT_EQ(h.head_dim, 32);
  EXPECT_EQ(h.n_rot, 32);
  EXPECT_FLOAT_EQ(h.rope_freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(h.rms_eps, 1e-5f);
  EXPECT_FALSE(h.tied_output);
}

TEST(Synth, Qwen2FileHasBiasesTiedOutputAndBpeVocab) {
  SynthOptions o;
  o.shape = model::synth_preset("tiny");
  o.shape.arch = "qwen2";
  o.shape.tied = true;
  o.shape.rope_base = 1e6f;
  o.type = model::synth_file_type("Q5_K_M");
  const std::string path = write(o, "tiny-qwen2.gguf");
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f->get_int("qwen2.embedding_length"), 256);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f->tensor("token_embd.weight").type, GgmlType::Q6_K);
  EXPECT_EQ(f->tensor("blk.0.attn_k.bias").dims, (std::vector<int64_t>{64}));
  EXPECT_EQ(f->tensor("blk.0.attn_q.bias").type, GgmlType::F32);
  // The byte-level BPE vocabulary: every merge joins two tokens into a third.
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "qwen2");
  const auto& tokens = f->get("tokenizer.ggml.tokens").as_array("tokens");
  const auto& merges = f->get("tokenizer.ggml.merges").as_array("merges");
  ASSERT_EQ(tokens.size(), 4096u);
  EXPECT_EQ(merges.size(), 4096u - 256u - 3u);
  std::set<std::string> vocab;
  for (const GgufValue& t : tokens) vocab.insert(t.as_string("token"));
  EXPECT_EQ(vocab.size(), tokens.size()) << "tokens are unique";
  for (const GgufValue& m : merges) {
    const std::string& s = m.as_string("merge");
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos) << s;
    ASSERT_TRUE(vocab.count(s.substr(0, sp)) && vocab.count(s.substr(sp + 1)) && vocab.count(s.substr(0, sp) + s.substr(sp + 1))) << s;
  }
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 4093);
  EXPECT_EQ(tokens[4093].as_string("token"), "<|endoftext|>");
  // HParams learns qwen2 from another change; until then it must refuse clearly.
  try {
    const model::HParams h = model::HParams::from_gguf(*f);
    EXPECT_EQ(h.arch, "qwen2");
    EXPECT_TRUE(h.tied_output);
    EXPECT_FLOAT_EQ(h.rope_freq_base, 1e6f);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos) << e.what();
  }
}

TEST(Synth, GeneratedSentencePieceVocabIsWellFormed) {
  const std::string path = write(tiny("Q4_0"), "tiny-vocab.gguf");
  const auto f = GgufFile::open(path);
  const auto& tokens = f->get("tokenizer.ggml.tokens").as_array("tokens");
  const auto& types = f->get("tokenizer.ggml.token_type").as_array("types");
  const auto& scores = f->get("tokenizer.ggml.scores").as_array("scores");
  ASSERT_EQ(tokens.size(), 4096u);
  ASSERT_EQ(types.size(), 4096u);
  ASSERT_EQ(scores.size(), 4096u);
  EXPECT_EQ(tokens[0].as_string("t"), "<unk>");
  EXPECT_EQ(tokens[1].as_string("t"), "<s>");
  EXPECT_EQ(tokens[2].as_string("t"), "</s>");
  EXPECT_EQ(tokens[3 + 0x0A].as_string("t"), "<0x0A>");
  EXPECT_EQ(types[3 + 0x0A].as_int("t"), 6);
  std::set<std::string> seen;
  for (const GgufValue& t : tokens) seen.insert(t.as_string("t"));
  EXPECT_EQ(seen.size(), tokens.size());
  EXPECT_TRUE(seen.count("\xE2\x96\x81the"));  // "▁the"
  EXPECT_TRUE(seen.count("\xE2\x96\x81upon"));
}

// Every tensor of `ref` in `ours`, in the same order, with the same name, dims, type and bytes.
void expect_same_tensors(const GgufFile& ours, const GgufFile& ref) {
  ASSERT_EQ(ours.tensors().size(), ref.tensors().size());
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const GgufTensorInfo& a = ours.tensors()[i];
    const GgufTensorInfo& b = ref.tensors()[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.dims, b.dims) << a.name;
    ASSERT_EQ(a.type, b.type) << a.name;
    ASSERT_EQ(a.n_bytes, b.n_bytes) << a.name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0) << a.name << " differs";
  }
}

// Every <arch>.* key of `ref`, with its type and value, in `ours`, and no key it lacks.
void expect_same_arch_keys(const GgufFile& ours, const GgufFile& ref) {
  const std::string arch = *ref.get_string("general.architecture");
  EXPECT_EQ(ours.get_string("general.architecture"), arch);
  std::set<std::string> ref_keys, our_keys;
  for (const auto& [key, value] : ref.metadata()) {
    if (key.rfind(arch + ".", 0) != 0) continue;
    ref_keys.insert(key);
    const GgufValue* mine = ours.find(key);
    ASSERT_NE(mine, nullptr) << key;
    EXPECT_EQ(mine->type, value.type) << key;
    if (value.is_integer()) EXPECT_EQ(mine->as_int(key), value.as_int(key)) << key;
    else if (value.is_string()) EXPECT_EQ(ours.get_string(key), ref.get_string(key)) << key;
    else EXPECT_EQ(mine->as_float(key), value.as_float(key)) << key;
  }
  for (const auto& [key, value] : ours.metadata())
    if (key.rfind(arch + ".", 0) == 0) our_keys.insert(key);
  EXPECT_EQ(our_keys, ref_keys);
}

// With the golden models' shapes, seeds and vocabularies, synth writes the tensors llama-quantize
// wrote (../shared/golden/README.md §8): the value recipe, the mixture rules, the tensor order and
// every quantiser agree byte for byte.
TEST(Synth, ReproducesGoldenModelsTensorForTensor) {
  NPULLM_REQUIRE_SHARED("golden/llama-spm.Q4_K_M.gguf");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  struct Case {
    const char* golden;
    const char* type;
    bool qwen2;
  };
  for (const Case& c : {Case{"llama-spm.Q8_0", "Q8_0", false}, Case{"llama-spm.Q4_K_M", "Q4_K_M", false},
                        Case{"qwen2-gpt2.Q4_0", "Q4_0", true}, Case{"qwen2-gpt2.Q5_K_M", "Q5_K_M", true}}) {
    SCOPED_TRACE(c.golden);
    SynthOptions o;
    o.shape = model::synth_preset("tiny");  // 256 / 4 layers / 8 heads / ff 768, as the golden models
    o.type = model::synth_file_type(c.type);
    o.threads = 2;
    o.shape.n_vocab = 0;  // from the vocabulary file
    if (c.qwen2) {
      o.shape.arch = "qwen2";
      o.shape.n_head_kv = 4;
      o.shape.tied = true;
      o.shape.rope_base = 1e6f;
      o.shape.rms_eps = 1e-6f;
      o.seed = 2;
      o.vocab_from = test::shared_path("models/vocab/ggml-vocab-gpt-2.gguf");
    } else {
      o.seed = 1;
      o.vocab_from = test::shared_path("models/vocab/ggml-vocab-llama-spm.gguf");
    }
    const std::string path = write(o, std::string(c.golden) + ".gguf");
    const auto ours = GgufFile::open(path);
    const auto ref = GgufFile::open(test::shared_path(std::string("golden/") + c.golden + ".gguf"));
    expect_same_tensors(*ours, *ref);
    const std::string key = "tokenizer.ggml.tokens";
    EXPECT_EQ(ours->get(key).as_array(key).size(), ref->get(key).as_array(key).size());
    fs::remove(path);  // 14-21 MB each
  }
}

// The same for the golden arch models (../shared/golden/arch/README.md §5 and §8; llama-quantize
// 80fb11a): the tiny-qwen3/-gemma3/-phi3 presets are their shapes, so with their seeds and
// vocabularies synth writes the same tensors — q/k norms, post norms, fused attn_qkv (with its
// per-row scales) and fused ffn_up, the key_length head size, the partial-rotary and sliding-window
// keys, and the types llama-quantize chose (attn_qkv takes attn_v's Q6_K layers).
TEST(Synth, ReproducesGoldenArchModelsTensorForTensor) {
  NPULLM_REQUIRE_SHARED("golden/arch/qwen3-gpt2.Q4_K_M.gguf");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-phi-3.gguf");
  struct Case {
    const char* golden;
    const char* preset;
    uint64_t seed;
    const char* vocab;
  };
  for (const Case& c : {Case{"qwen3-gpt2", "tiny-qwen3", 3, "gpt-2"}, Case{"gemma3-spm", "tiny-gemma3", 4, "llama-spm"},
                        Case{"phi3-spm", "tiny-phi3", 5, "phi-3"}}) {
    SCOPED_TRACE(c.golden);
    SynthOptions o;
    o.shape = model::synth_preset(c.preset);
    o.shape.n_vocab = 0;  // from the vocabulary file
    o.type = model::synth_file_type("Q4_K_M");
    o.seed = c.seed;
    o.threads = 2;
    o.vocab_from = test::shared_path(std::string("models/vocab/ggml-vocab-") + c.vocab + ".gguf");
    const std::string path = write(o, std::string(c.golden) + ".gguf");
    const auto ours = GgufFile::open(path);
    const auto ref = GgufFile::open(test::shared_path(std::string("golden/arch/") + c.golden + ".Q4_K_M.gguf"));
    expect_same_tensors(*ours, *ref);
    expect_same_arch_keys(*ours, *ref);
    fs::remove(path);
  }
}

// The mixtures of experts at full size (planned only): Qwen3-30B-A3B Q4_K_M and gpt-oss-20b
// MXFP4_MOE come out at the sizes of the files people download (17.3 GiB and 11.3 GiB, issue 45;
// within 3 %: the vocabularies are generated), with their experts as one 3-D tensor per matrix.
TEST(Synth, MoePresetsHaveRealShapesAndSizes) {
  struct Case {
    const char* preset;
    const char* type;
    double gib;
    GgmlType expert_type;
  };
  for (const Case& c : {Case{"qwen3-30b-a3b", "Q4_K_M", 17.3, GgmlType::Q4_K}, Case{"gpt-oss-20b", "MXFP4_MOE", 11.3, GgmlType::MXFP4}}) {
    SCOPED_TRACE(c.preset);
    const model::SynthShape shape = model::synth_preset(c.preset);
    const auto plan = model::synth_plan(shape, model::synth_file_type(c.type));
    double bytes = 0;
    int experts = 0;
    for (const auto& t : plan) {
      bytes += static_cast<double>(ggml_row_bytes(t.type, t.dims[0])) * static_cast<double>(t.n_elements() / t.dims[0]);
      if (t.name.find("ffn_gate_exps.weight") != std::string::npos) {
        ++experts;
        EXPECT_EQ(t.dims, (std::vector<int64_t>{shape.n_embd, shape.n_ff_exp, shape.n_expert}));
        EXPECT_EQ(t.type, c.expert_type);
      }
    }
    EXPECT_EQ(experts, shape.n_layer);
    std::printf("[ synth    ] %s %s: %.2f GiB\n", c.preset, c.type, bytes / (1u << 30));
    EXPECT_NEAR(bytes / (1u << 30), c.gib, 0.03 * c.gib);
  }
}

// The same for the golden MoE model (../shared/golden/moe/README.md §8): the tiny-qwen3moe preset is
// its shape, so with seed 18 and the llama-spm vocabulary synth writes the 3-D expert tensors (one
// flat array each), the F32 router and llama-quantize's choices for a mixture of 8 experts (Q8_0
// K and V, Q5_K attention output) byte for byte.
// gpt-oss too (seed 13, MXFP4_MOE): biases of every kind, sinks, the YaRN and window keys, and
// llama-quantize's MXFP4 experts byte for byte (the MXFP4 quantiser is ggml's rule).
TEST(Synth, ReproducesGoldenMoeModelTensorForTensor) {
  NPULLM_REQUIRE_SHARED("golden/moe/qwen3moe-spm.Q4_K_M.gguf");
  NPULLM_REQUIRE_SHARED("golden/moe/gpt-oss-spm.MXFP4_MOE.gguf");
  NPULLM_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  struct Case {
    const char* golden;
    const char* preset;
    const char* type;
    uint64_t seed;
  };
  for (const Case& c : {Case{"qwen3moe-spm.Q4_K_M", "tiny-qwen3moe", "Q4_K_M", 18},
                        Case{"gpt-oss-spm.MXFP4_MOE", "tiny-gpt-oss", "MXFP4_MOE", 13}}) {
    SCOPED_TRACE(c.golden);
    SynthOptions o;
    o.shape = model::synth_preset(c.preset);
    o.shape.n_vocab = 0;
    o.type = model::synth_file_type(c.type);
    o.seed = c.seed;
    o.threads = 2;
    o.vocab_from = test::shared_path("models/vocab/ggml-vocab-llama-spm.gguf");
    const std::string path = write(o, std::string(c.golden) + ".gguf");
    const auto ours = GgufFile::open(path);
    const auto ref = GgufFile::open(test::shared_path(std::string("golden/moe/") + c.golden + ".gguf"));
    expect_same_tensors(*ours, *ref);
    expect_same_arch_keys(*ours, *ref);
    fs::remove(path);
  }
}

// The new families' presets at full size: the shapes of the real models and the types
// llama-quantize gives them (planned only; the files are 0.5-2.5 GB).
TEST(Synth, NewFamilyPresetsHaveRealShapesAndTypes) {
  using model::synth_file_type;
  using model::synth_preset;
  {  // Qwen3-0.6B: q width 16 x 128 = 2048 > n_embd 1024; tied; everything 256-aligned.
    const model::SynthShape s = synth_preset("qwen3-0.6b");
    const auto plan = model::synth_plan(s, synth_file_type("Q4_K_M"));
    std::map<std::string, SynthTensor> t;
    for (const SynthTensor& x : plan) t[x.name] = x;
    EXPECT_EQ(plan.size(), 1u + 1u + 28u * 11u);
    EXPECT_EQ(t.at("blk.0.attn_q.weight").dims, (std::vector<int64_t>{1024, 2048}));
    EXPECT_EQ(t.at("blk.0.attn_k.weight").dims, (std::vector<int64_t>{1024, 1024}));
    EXPECT_EQ(t.at("blk.0.attn_output.weight").dims, (std::vector<int64_t>{2048, 1024}));
    EXPECT_EQ(t.at("blk.0.attn_q_norm.weight").dims, (std::vector<int64_t>{128}));
    EXPECT_EQ(t.at("token_embd.weight").dims, (std::vector<int64_t>{1024, 151936}));
    EXPECT_EQ(t.at("token_embd.weight").type, GgmlType::Q6_K);
    const std::set<int> more = more_bits_layers(28);
    for (int l = 0; l < 28; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      EXPECT_EQ(t.at(p + "attn_v.weight").type, more.count(l) ? GgmlType::Q6_K : GgmlType::Q4_K) << l;
      EXPECT_EQ(t.at(p + "ffn_down.weight").type, more.count(l) ? GgmlType::Q6_K : GgmlType::Q4_K) << l;
      EXPECT_EQ(t.at(p + "attn_q.weight").type, GgmlType::Q4_K) << l;
    }
    EXPECT_EQ(t.count("output.weight"), 0u);
  }
  {  // Gemma-3-1B: rows of 1152 are not 256-blocks, so Q4_K -> Q5_0, Q6_K -> Q8_0; the tied
     // embedding takes Q8_0; ffn_down (6912 = 27 x 256) and attn_output (1024) keep k-quants.
    const model::SynthShape s = synth_preset("gemma-3-1b");
    EXPECT_EQ(s.head_dim(), 256);
    EXPECT_EQ(s.q_dim(), 1024);
    EXPECT_EQ(s.kv_dim(), 256);
    const auto plan = model::synth_plan(s, synth_file_type("Q4_K_M"));
    std::map<std::string, SynthTensor> t;
    for (const SynthTensor& x : plan) t[x.name] = x;
    EXPECT_EQ(plan.size(), 1u + 1u + 26u * 13u);
    EXPECT_EQ(t.at("token_embd.weight").type, GgmlType::Q8_0);
    EXPECT_EQ(t.at("token_embd.weight").dims, (std::vector<int64_t>{1152, 262144}));
    const std::set<int> more = more_bits_layers(26);
    for (int l = 0; l < 26; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      EXPECT_EQ(t.at(p + "attn_q.weight").type, GgmlType::Q5_0) << l;
      EXPECT_EQ(t.at(p + "attn_v.weight").type, more.count(l) ? GgmlType::Q8_0 : GgmlType::Q5_0) << l;
      EXPECT_EQ(t.at(p + "ffn_down.weight").type, more.count(l) ? GgmlType::Q6_K : GgmlType::Q4_K) << l;
      EXPECT_EQ(t.at(p + "attn_output.weight").type, GgmlType::Q4_K) << l;
      EXPECT_EQ(t.at(p + "post_ffw_norm.weight").type, GgmlType::F32) << l;
    }
  }
  {  // Phi-4-mini: fused qkv [3072, 3072 + 2 x 1024] with attn_v's rules, fused ffn_up [3072, 2 x 8192].
    const model::SynthShape s = synth_preset("phi-4-mini");
    EXPECT_EQ(s.rot_dims(), 96);
    EXPECT_EQ(s.n_ctx, 4096);
    EXPECT_TRUE(s.bpe_vocab());
    const auto plan = model::synth_plan(s, synth_file_type("Q4_K_M"));
    std::map<std::string, SynthTensor> t;
    for (const SynthTensor& x : plan) t[x.name] = x;
    EXPECT_EQ(plan.size(), 1u + 1u + 32u * 6u);
    EXPECT_EQ(t.count("blk.0.attn_q.weight") + t.count("blk.0.ffn_gate.weight"), 0u);
    EXPECT_EQ(t.at("blk.0.attn_qkv.weight").dims, (std::vector<int64_t>{3072, 5120}));
    EXPECT_EQ(t.at("blk.0.attn_qkv.weight").split_row, 3072 + 1024);  // the V rows take V's scale
    EXPECT_EQ(t.at("blk.0.ffn_up.weight").dims, (std::vector<int64_t>{3072, 16384}));
    EXPECT_EQ(t.at("token_embd.weight").type, GgmlType::Q6_K);
    const std::set<int> more = more_bits_layers(32);
    for (int l = 0; l < 32; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      EXPECT_EQ(t.at(p + "attn_qkv.weight").type, more.count(l) ? GgmlType::Q6_K : GgmlType::Q4_K) << l;
      EXPECT_EQ(t.at(p + "ffn_up.weight").type, GgmlType::Q4_K) << l;
    }
    // Q3_K_M: the first two attn_v-like tensors get Q5_K (llama-quantize's counter).
    const auto q3 = types_of(model::synth_plan(s, synth_file_type("Q3_K_M")));
    EXPECT_EQ(q3.at("blk.1.attn_qkv.weight"), GgmlType::Q5_K);
    EXPECT_EQ(q3.at("blk.2.attn_qkv.weight"), GgmlType::Q4_K);
  }
}

// The scaled-down presets of the new families load in npullm with the hyper-parameters synth
// wrote, and run with finite, peaked next-token distributions; `npullm run` generates from each.
TEST(Synth, TinyArchPresetsRunInNpullm) {
  for (const char* preset : {"tiny-qwen3", "tiny-gemma3", "tiny-phi3"}) {
    SCOPED_TRACE(preset);
    SynthOptions o;
    o.shape = model::synth_preset(preset);
    o.type = model::synth_file_type("Q4_K_M");
    o.threads = 2;
    const std::string path = write(o, std::string(preset) + ".gguf");
    {
      const auto f = GgufFile::open(path);
      const model::HParams h = model::HParams::from_gguf(*f);
      EXPECT_EQ(h.arch, o.shape.arch);
      EXPECT_EQ(h.head_dim, o.shape.head_dim());
      EXPECT_EQ(h.n_rot, o.shape.rot_dims());
      EXPECT_EQ(h.n_ff, o.shape.n_ff);
      EXPECT_TRUE(h.tied_output);
      if (o.shape.arch == "gemma3") {
        EXPECT_EQ(h.n_swa, 16);
        EXPECT_EQ(h.swa_pattern, 6);
        EXPECT_FLOAT_EQ(h.rope_freq_base_swa, 10000.0f);
        EXPECT_FLOAT_EQ(h.final_softcap, 30.0f);
        EXPECT_TRUE(h.is_swa(4));
        EXPECT_FALSE(h.is_swa(5));
      }
    }
    npuw::RuntimeConfig cfg;
    cfg.prefill_chunk = 16;
    cfg.variants = {64};
    cfg.all_logits = true;
    cfg.threads = 2;
    cfg.use_cache = false;
    npuw::LlmRuntime rt(path, cfg);
    std::vector<int32_t> ids = {o.shape.bpe_vocab() ? 4093 : 1};
    for (int i = 0; i < 31; ++i) ids.push_back(300 + (i * 97) % 3700);
    std::vector<float> logits;
    rt.prefill(ids, &logits);
    const int64_t V = rt.n_vocab();
    ASSERT_EQ(logits.size(), ids.size() * static_cast<size_t>(V));
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    double mean_top1 = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      const float* l = logits.data() + p * V;
      const float mx = *std::max_element(l, l + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v]) - mx);
      mean_top1 += 1.0 / sum;
    }
    mean_top1 /= static_cast<double>(ids.size());
    EXPECT_GT(mean_top1, 0.1) << "peaked, not flat (1/4096)";

    const fs::path out = temp_dir() / (std::string(preset) + ".run.json");
    const std::string cmd = std::string(NPULLM_BINARY) + " run -m " + path +
                            " -p hi -n 8 --temp 0 --ignore-eos --json --no-cache -t 2 > " + out.string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    const std::string text = test::read_file(out.string());
    ASSERT_EQ(WEXITSTATUS(status), 0) << text;
    EXPECT_EQ(nlohmann::json::parse(text)["ids"].size(), 8u);
    fs::remove(path);
  }
}

TEST(Synth, BadOptionsAreRefused) {
  EXPECT_THROW(model::synth_preset("gpt-5"), Error);
  EXPECT_THROW(model::synth_file_type("Q4_K_X"), Error);
  SynthOptions o = tiny("Q4_0");
  o.shape.n_head = 7;  // 256 is not a multiple of 7
  EXPECT_THROW(model::synth_write(o, (temp_dir() / "bad1.gguf").string()), Error);
  o = tiny("Q4_0");
  o.shape.arch = "gpt2";
  EXPECT_THROW(model::synth_write(o, (temp_dir() / "bad2.gguf").string()), Error);
  // Shape rules of the new archs: partial rotary is phi3's, a window gemma3's, and phi3's
  // attn_output must be square.
  EXPECT_THROW(model::synth_plan([] { auto s = model::synth_preset("tiny-qwen3"); s.n_rot = 32; return s; }(),
                                 model::synth_file_type("Q8_0")),
               Error);
  EXPECT_THROW(model::synth_plan([] { auto s = model::synth_preset("tiny-qwen3"); s.n_swa = 16; return s; }(),
                                 model::synth_file_type("Q8_0")),
               Error);
  EXPECT_THROW(model::synth_plan([] { auto s = model::synth_preset("tiny-phi3"); s.head_size = 64; return s; }(),
                                 model::synth_file_type("Q8_0")),
               Error);
  o = tiny("Q4_0");
  o.shape.n_embd = 240;  // 30 heads? no: 240 / 8 = 30, but 240 is not a multiple of 32 for Q4_0
  try {
    model::synth_write(o, (temp_dir() / "bad3.gguf").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block size"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(temp_dir() / "bad3.gguf"));
  // Too small a vocabulary for the generated tokenizer.
  o = tiny("Q4_0");
  o.shape.n_vocab = 100;
  EXPECT_THROW(model::synth_write(o, (temp_dir() / "bad4.gguf").string()), Error);
}

// The streaming mode of GgufWriter that synth writes through: the same file as serialize() for the
// same content, and a fill that gives the wrong byte count (or throws) leaves no file behind.
TEST(SynthWriter, StreamingMatchesSerializeAndFailsCleanly) {
  std::vector<uint8_t> a(4 * 10), b(2 * 64);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(255 - i);
  GgufWriter whole;
  whole.add_string("general.architecture", "llama");
  whole.add_tensor("a", {10}, GgmlType::F32, a);
  whole.add_tensor("b", {64}, GgmlType::F16, b);
  GgufWriter streamed;
  streamed.add_string("general.architecture", "llama");
  streamed.add_tensor("a", {10}, GgmlType::F32, a);  // a tensor with bytes is written as given
  streamed.add_tensor_info("b", {64}, GgmlType::F16);
  EXPECT_THROW(streamed.serialize(), Error);
  const std::string path = (temp_dir() / "streamed.gguf").string();
  size_t calls = 0;
  const uint64_t size = streamed.write_streaming(path, [&](size_t index, const GgufWriter::TensorSink& sink) {
    EXPECT_EQ(index, 1u);
    ++calls;
    sink(b.data(), 100);  // in two pieces
    sink(b.data() + 100, b.size() - 100);
  });
  EXPECT_EQ(calls, 1u);
  const std::vector<uint8_t> ref = whole.serialize();
  EXPECT_EQ(size, ref.size());
  const std::string got = test::read_file(path);
  EXPECT_TRUE(got == std::string(ref.begin(), ref.end()));

  const std::string bad = (temp_dir() / "short.gguf").string();
  EXPECT_THROW(streamed.write_streaming(bad, [&](size_t, const GgufWriter::TensorSink& sink) { sink(b.data(), 10); }),
               Error);
  EXPECT_THROW(streamed.write_streaming(bad, [&](size_t, const GgufWriter::TensorSink& sink) {
    sink(b.data(), b.size());
    sink(b.data(), 1);
  }),
               Error);
  EXPECT_THROW(streamed.write_streaming(bad, [&](size_t, const GgufWriter::TensorSink&) { fail("generator failed"); }),
               Error);
  EXPECT_FALSE(fs::exists(bad));
  for (const auto& e : fs::directory_iterator(temp_dir()))
    EXPECT_EQ(e.path().filename().string().find("short.gguf.tmp"), std::string::npos) << "temp file left behind";
}

// The generated model is usable: it runs, and its next-token distributions have a clear winner.
TEST(Synth, TinyModelHasPeakedOutputs) {
  const std::string path = write(tiny("Q8_0"), "tiny-peaked.gguf");
  npuw::RuntimeConfig cfg;
  cfg.prefill_chunk = 16;
  cfg.variants = {64};
  cfg.all_logits = true;
  cfg.threads = 2;
  cfg.use_cache = false;
  npuw::LlmRuntime rt(path, cfg);
  std::vector<int32_t> ids = {1};
  for (int i = 0; i < 31; ++i) ids.push_back(300 + (i * 97) % 3700);
  std::vector<float> logits;
  rt.prefill(ids, &logits);
  const int64_t V = rt.n_vocab();
  ASSERT_EQ(logits.size(), ids.size() * static_cast<size_t>(V));
  double mean_top1 = 0;
  std::set<int64_t> argmaxes;
  for (size_t p = 0; p < ids.size(); ++p) {
    const float* l = logits.data() + p * V;
    const float mx = *std::max_element(l, l + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v]) - mx);
    mean_top1 += 1.0 / sum;
    argmaxes.insert(std::max_element(l, l + V) - l);
  }
  mean_top1 /= static_cast<double>(ids.size());
  // Flat would be 1/4096; the recipe aims at the golden models' 0.4.
  EXPECT_GT(mean_top1, 0.15);
  EXPECT_GT(argmaxes.size(), ids.size() / 4) << "the winner changes with the position";
}

TEST(Synth, NpullmRunGeneratesFromATinySynthModel) {
  const std::string path = write(tiny("Q4_K_M"), "tiny-run.gguf");
  const fs::path out = temp_dir() / "run.json";
  const std::string cmd = std::string(NPULLM_BINARY) + " run -m " + path +
                          " -p 'Once upon a time' -n 12 --temp 0 --ignore-eos --json --no-cache -t 2 > " +
                          out.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string text = test::read_file(out.string());
  ASSERT_EQ(WEXITSTATUS(status), 0) << text;
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["ids"].size(), 12u);
  // The prompt tokenizes into pieces of the generated vocabulary, not into bytes.
  EXPECT_LT(j["prompt_ids"].size(), 10u);
}

}  // namespace
}  // namespace npullm
