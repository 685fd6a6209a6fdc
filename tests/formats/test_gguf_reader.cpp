// GGUF reader on real files from ../shared, plus a writer -> reader round trip of every value type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <unistd.h>

#include "common/error.h"
#include "formats/gguf.h"
#include "test_util.h"

namespace npullm {
namespace {

using test::shared_path;

const char* const kStories = "models/llama2c/stories260K.gguf";
const char* const kTinyRandom = "models/ollama/llama-2-tiny-random.gguf";

GgufValue val(GgufValueType t, decltype(GgufValue::v) payload) {
  GgufValue v;
  v.type = t;
  v.v = std::move(payload);
  return v;
}

GgufValue arr(GgufValueType elem, std::vector<GgufValue> elems) {
  GgufValue v;
  v.type = GgufValueType::ARRAY;
  v.elem_type = elem;
  v.v = std::move(elems);
  return v;
}

// Deep equality; floats compare by bits so NaN and -0.0 round-trip checks are exact.
::testing::AssertionResult same_value(const GgufValue& a, const GgufValue& b, const std::string& where) {
  if (a.type != b.type)
    return ::testing::AssertionFailure() << where << ": type " << gguf_value_type_name(a.type) << " vs "
                                         << gguf_value_type_name(b.type);
  if (a.is_array()) {
    if (a.elem_type != b.elem_type) return ::testing::AssertionFailure() << where << ": elem type differs";
    const auto& x = a.as_array(where);
    const auto& y = b.as_array(where);
    if (x.size() != y.size())
      return ::testing::AssertionFailure() << where << ": size " << x.size() << " vs " << y.size();
    for (size_t i = 0; i < x.size(); ++i) {
      auto r = same_value(x[i], y[i], where + "[" + std::to_string(i) + "]");
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
  if (a.type == GgufValueType::F32 || a.type == GgufValueType::F64) {
    const double x = a.as_float(where), y = b.as_float(where);
    if (std::memcmp(&x, &y, sizeof x) != 0) return ::testing::AssertionFailure() << where << ": " << x << " vs " << y;
    return ::testing::AssertionSuccess();
  }
  const bool equal = a.v.index() == b.v.index() && std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::vector<GgufValue>>) return false;  // arrays handled above
        else return x == std::get<X>(b.v);
      },
      a.v);
  if (!equal) return ::testing::AssertionFailure() << where << ": payload differs";
  return ::testing::AssertionSuccess();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("npullm_gguf_reader_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// ---- stories260K ------------------------------------------------------------------------------

void check_stories(const GgufFile& f) {
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.data_offset(), 14176u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.file_size(), 1185376u);

  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("general.name"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 5);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(f.get_int("llama.context_length"), 2048);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 8);
  EXPECT_FALSE(f.get_float("llama.rope.freq_base").has_value());
  ASSERT_TRUE(f.get_float("llama.attention.layer_norm_rms_epsilon").has_value());
  EXPECT_NEAR(*f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.find("tokenizer.ggml.pre"), nullptr);
  EXPECT_EQ(f.get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(f.get_int("tokenizer.ggml.seperator_token_id"), 0xFFFFFFFFll);  // "unset", written as u32 -1
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 0xFFFFFFFFll);

  const auto& tokens = f.get("tokenizer.ggml.tokens").as_array("tokens");
  const auto& scores = f.get("tokenizer.ggml.scores").as_array("scores");
  const auto& types = f.get("tokenizer.ggml.token_type").as_array("token_type");
  ASSERT_EQ(tokens.size(), 512u);
  ASSERT_EQ(scores.size(), 512u);
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(tokens[1].as_string("tok"), "<s>");
  EXPECT_EQ(tokens[2].as_string("tok"), "</s>");
  EXPECT_EQ(tokens[3].as_string("tok"), "<0x00>");
  EXPECT_EQ(tokens[258].as_string("tok"), "<0xFF>");
  for (size_t i = 0; i < types.size(); ++i) {
    const int64_t want = i == 0 ? 2 : i <= 2 ? 3 : i <= 258 ? 6 : 1;
    ASSERT_EQ(types[i].as_int("token_type"), want) << "token " << i;
  }

  const GgufTensorInfo& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb.type, GgmlType::F32);
  EXPECT_EQ(emb.n_bytes, 64u * 512 * 4);
  EXPECT_EQ(emb.n_elements(), 64 * 512);
  EXPECT_EQ(emb.rows(), 512);
  EXPECT_EQ(emb.data, f.file_data() + f.data_offset() + emb.offset);
  EXPECT_EQ(f.tensor("output_norm.weight").dims, (std::vector<int64_t>{64}));
  EXPECT_EQ(f.tensor("blk.0.attn_k.weight").dims, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f.tensor("blk.4.ffn_down.weight").dims, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(f.tensor("blk.4.ffn_up.weight").dims, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(f.find_tensor("blk.5.ffn_up.weight"), nullptr);

  int64_t params = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    params += t.n_elements();
  }
  EXPECT_EQ(params, 292800);

  // output.weight is a copy of the shared classifier, i.e. of token_embd.weight.
  const GgufTensorInfo& out = f.tensor("output.weight");
  ASSERT_EQ(out.n_bytes, emb.n_bytes);
  EXPECT_EQ(std::memcmp(out.data, emb.data, emb.n_bytes), 0);
}

TEST(GgufReader, Stories260KViaMmap) {
  NPULLM_REQUIRE_SHARED(kStories);
  const auto f = GgufFile::open(shared_path(kStories));
  EXPECT_EQ(f->path(), shared_path(kStories));
  check_stories(*f);
}

TEST(GgufReader, Stories260KFromMemory) {
  NPULLM_REQUIRE_SHARED(kStories);
  const std::string bytes = test::read_file(shared_path(kStories));
  const auto f = GgufFile::from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem");
  EXPECT_EQ(f->path(), "mem");
  check_stories(*f);
}

// The GGUF holds the same weights as the llama2.c checkpoint: the embedding table follows its
// 7-int32 header.
TEST(GgufReader, Stories260KEmbeddingMatchesLlama2cCheckpoint) {
  NPULLM_REQUIRE_SHARED(kStories);
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.bin");
  const auto f = GgufFile::open(shared_path(kStories));
  const std::string bin = test::read_file(shared_path("models/llama2c/stories260K.bin"));
  const GgufTensorInfo& emb = f->tensor("token_embd.weight");
  ASSERT_GE(bin.size(), 28 + emb.n_bytes);
  EXPECT_EQ(std::memcmp(bin.data() + 28, emb.data, emb.n_bytes), 0);
}

// Re-serialising what was read reproduces llama.cpp's converters' output byte for byte: a check of
// the writer's layout rules (key order, encodings, 32-byte placement) against an independent writer.
void expect_rewrite_identical(const std::string& rel) {
  const std::string bytes = test::read_file(shared_path(rel));
  const auto f = GgufFile::from_memory(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), rel);
  GgufWriter w;
  for (const auto& [key, value] : f->metadata()) w.add(key, value);
  for (const GgufTensorInfo& t : f->tensors())
    w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  const std::vector<uint8_t> out = w.serialize();
  ASSERT_EQ(out.size(), bytes.size());
  EXPECT_EQ(std::memcmp(out.data(), bytes.data(), bytes.size()), 0);
}

TEST(GgufReader, Stories260KRewritesByteIdentical) {
  NPULLM_REQUIRE_SHARED(kStories);
  expect_rewrite_identical(kStories);
}

TEST(GgufReader, TinyRandomRewritesByteIdentical) {
  NPULLM_REQUIRE_SHARED(kTinyRandom);
  expect_rewrite_identical(kTinyRandom);
}

// ---- ollama llama-2-tiny-random -----------------------------------------------------------------

TEST(GgufReader, TinyRandomLlama2) {
  NPULLM_REQUIRE_SHARED(kTinyRandom);
  const auto f = GgufFile::open(shared_path(kTinyRandom));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 12u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_string("general.name"), "LLaMA v2");
  EXPECT_EQ(f->get_int("general.file_type"), 1);
  EXPECT_EQ(f->get_int("llama.block_count"), 1);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 8);
  EXPECT_EQ(f->get_int("llama.feed_forward_length"), 32);
  EXPECT_EQ(f->get_int("llama.attention.head_count"), 2);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 2);
  EXPECT_EQ(f->get_int("llama.context_length"), 4096);
  EXPECT_EQ(f->get_int("llama.rope.dimension_count"), 4);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get("tokenizer.ggml.tokens").as_array("tokens").size(), 32000u);
  EXPECT_EQ(f->get("tokenizer.ggml.scores").as_array("scores").size(), 32000u);
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 2);

  int f16 = 0, f32 = 0;
  int64_t params = 0;
  for (const GgufTensorInfo& t : f->tensors()) {
    f16 += t.type == GgmlType::F16;
    f32 += t.type == GgmlType::F32;
    params += t.n_elements();
    EXPECT_EQ(t.n_bytes, static_cast<uint64_t>(t.n_elements()) * (t.type == GgmlType::F16 ? 2 : 4)) << t.name;
  }
  EXPECT_EQ(f16, 9);
  EXPECT_EQ(f32, 3);
  EXPECT_EQ(params, 513048);
  const GgufTensorInfo& emb = f->tensor("token_embd.weight");
  EXPECT_EQ(emb.dims, (std::vector<int64_t>{8, 32000}));
  EXPECT_EQ(emb.type, GgmlType::F16);
  EXPECT_EQ(emb.n_bytes, 8u * 32000 * 2);
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight").dims, (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(f->tensor("output_norm.weight").type, GgmlType::F32);
}

// Vocab-only files: no tensors, large string arrays (and BPE merges), written by another writer.
TEST(GgufReader, VocabOnlyFiles) {
  const std::pair<const char*, size_t> files[] = {
      {"llama-spm", 32000},      {"phi-3", 32064},        {"baichuan", 64000},
      {"gpt-2", 50257},          {"mpt", 50432},          {"gpt-neox", 50432},
      {"starcoder", 49152},      {"refact", 49216},       {"falcon", 65024},
      {"deepseek-coder", 32256}, {"deepseek-llm", 102400}, {"bert-bge", 30522},
  };
  for (const auto& [name, n_vocab] : files) {
    const std::string rel = std::string("models/vocab/ggml-vocab-") + name + ".gguf";
    NPULLM_REQUIRE_SHARED(rel);
    SCOPED_TRACE(rel);
    const auto f = GgufFile::open(shared_path(rel));
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->get("tokenizer.ggml.tokens").as_array("tokens").size(), n_vocab);
    EXPECT_TRUE(f->get_string("general.architecture").has_value());
    expect_rewrite_identical(rel);  // llama.cpp writes no padding when there is no tensor data
  }
}

// ---- Writer -> reader round trip ------------------------------------------------------------------

std::vector<std::pair<std::string, GgufValue>> every_value_type() {
  using T = GgufValueType;
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("t.u8", val(T::U8, uint64_t{255}));
  kv.emplace_back("t.i8", val(T::I8, int64_t{-128}));
  kv.emplace_back("t.u16", val(T::U16, uint64_t{65535}));
  kv.emplace_back("t.i16", val(T::I16, int64_t{-32768}));
  kv.emplace_back("t.u32", val(T::U32, uint64_t{0xFFFFFFFFu}));
  kv.emplace_back("t.i32", val(T::I32, int64_t{std::numeric_limits<int32_t>::min()}));
  kv.emplace_back("t.f32", val(T::F32, double{1.5f}));
  kv.emplace_back("t.f32.nan", val(T::F32, double{std::numeric_limits<float>::quiet_NaN()}));
  kv.emplace_back("t.f32.negzero", val(T::F32, -0.0));
  kv.emplace_back("t.bool.true", val(T::BOOL, true));
  kv.emplace_back("t.bool.false", val(T::BOOL, false));
  kv.emplace_back("t.string", val(T::STRING, std::string("h\xc3\xa9llo \xe2\x96\x81world")));
  kv.emplace_back("t.string.nul", val(T::STRING, std::string("a\0b", 3)));
  kv.emplace_back("t.string.empty", val(T::STRING, std::string()));
  kv.emplace_back("t.u64", val(T::U64, std::numeric_limits<uint64_t>::max()));
  kv.emplace_back("t.i64", val(T::I64, std::numeric_limits<int64_t>::min()));
  kv.emplace_back("t.f64", val(T::F64, -0.1));
  kv.emplace_back("a.u8", arr(T::U8, {val(T::U8, uint64_t{0}), val(T::U8, uint64_t{1}), val(T::U8, uint64_t{255})}));
  kv.emplace_back("a.i16", arr(T::I16, {val(T::I16, int64_t{-1}), val(T::I16, int64_t{32767})}));
  kv.emplace_back("a.u64", arr(T::U64, {val(T::U64, uint64_t{1} << 63)}));
  kv.emplace_back("a.i64.empty", arr(T::I64, {}));
  kv.emplace_back("a.f64", arr(T::F64, {val(T::F64, 3.25), val(T::F64, -1e300)}));
  kv.emplace_back("a.bool", arr(T::BOOL, {val(T::BOOL, true), val(T::BOOL, false)}));
  kv.emplace_back("a.string", arr(T::STRING, {val(T::STRING, std::string("x")), val(T::STRING, std::string())}));
  // Nested: [[1, 2], [3], []] of I32, and three levels of strings.
  kv.emplace_back("a.nested",
                  arr(T::ARRAY, {arr(T::I32, {val(T::I32, int64_t{1}), val(T::I32, int64_t{2})}),
                                 arr(T::I32, {val(T::I32, int64_t{3})}), arr(T::I32, {})}));
  kv.emplace_back("a.nested3",
                  arr(T::ARRAY, {arr(T::ARRAY, {arr(T::STRING, {val(T::STRING, std::string("deep"))})}),
                                 arr(T::ARRAY, {})}));
  return kv;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type;
  size_t bytes;
};

const std::vector<TensorSpec>& round_trip_tensors() {
  static const std::vector<TensorSpec> specs = {
      {"f32", {4, 3}, GgmlType::F32, 48},      {"f16", {8}, GgmlType::F16, 16},
      {"q8_0", {64, 2}, GgmlType::Q8_0, 136},  {"q4_k", {256}, GgmlType::Q4_K, 144},
      {"i32.4d", {5, 1, 2, 1}, GgmlType::I32, 40}, {"bf16", {2, 2, 2}, GgmlType::BF16, 16},
  };
  return specs;
}

GgufWriter round_trip_writer(uint64_t alignment) {
  GgufWriter w;
  w.set_alignment(alignment);
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_i32("t.helper.i32", -7);
  w.add_f32("t.helper.f32", 0.25f);
  w.add_bool("t.helper.bool", true);
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
  w.add_f32_array("tokenizer.ggml.scores", {0.f, -1.f, -2.5f});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3});
  for (auto& [k, v] : every_value_type()) w.add(k, v);
  uint8_t seed = 1;
  for (const TensorSpec& t : round_trip_tensors()) w.add_tensor(t.name, t.dims, t.type, pattern(t.bytes, seed++));
  return w;
}

void check_round_trip(const GgufFile& f, uint64_t alignment, uint32_t version = 3) {
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  for (const auto& [key, want] : every_value_type()) {
    const GgufValue* got = f.find(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_TRUE(same_value(*got, want, key));
  }
  EXPECT_EQ(f.get_int("llama.block_count"), 2);
  EXPECT_EQ(f.get_int("t.helper.i32"), -7);
  EXPECT_EQ(f.get_float("t.helper.f32"), 0.25);
  EXPECT_EQ(f.get_bool("t.helper.bool"), true);
  EXPECT_EQ(f.get("tokenizer.ggml.tokens").as_array("t")[2].as_string("t"), "</s>");
  EXPECT_EQ(f.get("tokenizer.ggml.scores").as_array("t")[2].as_float("t"), -2.5);
  EXPECT_EQ(f.get("tokenizer.ggml.token_type").as_array("t")[0].as_int("t"), 2);
  if (alignment != 32) EXPECT_EQ(f.get_int("general.alignment"), static_cast<int64_t>(alignment));
  else EXPECT_EQ(f.find("general.alignment"), nullptr);

  ASSERT_EQ(f.tensors().size(), round_trip_tensors().size());
  uint8_t seed = 1;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const TensorSpec& want = round_trip_tensors()[i];
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(t.name, want.name);
    EXPECT_EQ(t.dims, want.dims);
    EXPECT_EQ(t.type, want.type);
    EXPECT_EQ(t.n_bytes, want.bytes);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(static_cast<size_t>(t.data - f.file_data()) % alignment, 0u);
    const std::vector<uint8_t> bytes = pattern(want.bytes, seed++);
    EXPECT_EQ(std::memcmp(t.data, bytes.data(), bytes.size()), 0);
  }
  EXPECT_EQ(f.tensor("q8_0").rows(), 2);
  EXPECT_EQ(f.tensor("i32.4d").n_elements(), 10);
  EXPECT_EQ(f.tensor("i32.4d").rows(), 2);
}

TEST(GgufRoundTrip, EveryValueTypeFromMemory) {
  for (uint64_t alignment : {32u, 64u, 1u, 256u}) {
    SCOPED_TRACE(alignment);
    const std::vector<uint8_t> bytes = round_trip_writer(alignment).serialize();
    const auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "rt");
    check_round_trip(*f, alignment);
    // Writing back what was read gives the same bytes.
    GgufWriter again;
    for (const auto& [k, v] : f->metadata()) again.add(k, v);
    for (const GgufTensorInfo& t : f->tensors())
      again.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    EXPECT_EQ(again.serialize(), bytes);
  }
}

TEST(GgufRoundTrip, ThroughAFile) {
  const std::string path = temp_path("rt.gguf");
  round_trip_writer(64).write(path);
  {
    const auto f = GgufFile::open(path);
    EXPECT_EQ(f->path(), path);
    check_round_trip(*f, 64);
  }
  std::filesystem::remove(path);
}

TEST(GgufRoundTrip, Version2IsAccepted) {
  std::vector<uint8_t> bytes = round_trip_writer(32).serialize();
  bytes[4] = 2;  // v2 and v3 share the layout; v3 only added big-endian files
  const auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "v2");
  check_round_trip(*f, 32, 2);
}

TEST(GgufRoundTrip, EmptyFileHasNoDataSection) {
  GgufWriter w;
  const std::vector<uint8_t> bytes = w.serialize();
  EXPECT_EQ(bytes.size(), 24u);
  const auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "empty");
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());
}

// Nesting up to the reader's limit (8 levels of arrays) is accepted.
TEST(GgufRoundTrip, NestingAtTheLimit) {
  GgufValue v = arr(GgufValueType::U8, {val(GgufValueType::U8, uint64_t{42})});
  for (int level = 1; level < 8; ++level) v = arr(GgufValueType::ARRAY, {v});
  GgufWriter w;
  w.add("deep", v);
  const std::vector<uint8_t> bytes = w.serialize();
  const auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "deep");
  EXPECT_TRUE(same_value(f->get("deep"), v, "deep"));
}

// ---- Large arrays left out (GgufArrays::kWithoutLarge, a runtime's reader) ------------------------

// A vocabulary of n tokens with m scores, a small array and a BOOL array of n flags.
std::vector<uint8_t> vocab_bytes(size_t n, size_t m) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  std::vector<std::string> tokens;
  for (size_t i = 0; i < n; ++i) tokens.push_back("tok" + std::to_string(i));
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_f32_array("tokenizer.ggml.scores", std::vector<float>(m, -1.0f));
  w.add_i32_array("small", {1, 2, 3});
  w.add("flags", arr(GgufValueType::BOOL, std::vector<GgufValue>(n, val(GgufValueType::BOOL, false))));
  return w.serialize();
}

TEST(GgufLargeArrays, KeptAsTheirLengthOnly) {
  for (size_t n : {static_cast<size_t>(kGgufLargeArray), static_cast<size_t>(kGgufLargeArray) + 1}) {
    SCOPED_TRACE(n);
    const std::vector<uint8_t> bytes = vocab_bytes(n, n);
    const auto all = GgufFile::from_memory(bytes.data(), bytes.size(), "all");
    const auto lean = GgufFile::from_memory(bytes.data(), bytes.size(), "lean", GgufArrays::kWithoutLarge);
    const bool large = n > kGgufLargeArray;
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "flags"}) {
      const GgufValue& a = all->get(key);
      const GgufValue& b = lean->get(key);
      EXPECT_TRUE(a.is_kept_array()) << key;
      EXPECT_EQ(a.as_array(key).size(), n) << key;
      EXPECT_TRUE(b.is_array()) << key;
      EXPECT_EQ(b.elem_type, a.elem_type) << key;
      EXPECT_EQ(b.array_size(key), n) << key;
      EXPECT_EQ(b.is_kept_array(), !large) << key;
      if (large) {
        EXPECT_NE(test::error_of([&] { b.as_array(key); }).find("did not keep"), std::string::npos) << key;
      } else {
        EXPECT_TRUE(same_value(a, b, key));
      }
    }
    EXPECT_TRUE(same_value(all->get("small"), lean->get("small"), "small"));
    EXPECT_EQ(lean->get_string("general.architecture"), "llama");
    // What was left out cannot be written back as if it were empty.
    GgufWriter w;
    w.add("tokenizer.ggml.tokens", lean->get("tokenizer.ggml.tokens"));
    if (large) {
      EXPECT_NE(test::error_of([&] { w.serialize(); }).find("did not keep"), std::string::npos);
    }
  }
}

TEST(GgufLargeArrays, StillCheckedElementByElement) {
  const size_t n = static_cast<size_t>(kGgufLargeArray) + 10;
  for (GgufArrays mode : {GgufArrays::kAll, GgufArrays::kWithoutLarge}) {
    // One score short of the tokens.
    const std::vector<uint8_t> short_scores = vocab_bytes(n, n - 1);
    EXPECT_NE(test::error_of([&] { GgufFile::from_memory(short_scores.data(), short_scores.size(), "v", mode); })
                  .find("has " + std::to_string(n - 1) + " entries"),
              std::string::npos);
    // The last flag is 2: not a bool.
    std::vector<uint8_t> bad = vocab_bytes(n, n);
    const std::string key = "flags";
    const auto at = std::search(bad.begin(), bad.end(), key.begin(), key.end()) - bad.begin();
    bad[static_cast<size_t>(at) + key.size() + 4 + 4 + 8 + n - 1] = 2;
    EXPECT_NE(test::error_of([&] { GgufFile::from_memory(bad.data(), bad.size(), "v", mode); }).find("bool value 2"),
              std::string::npos);
  }
}

// ---- Accessors ------------------------------------------------------------------------------------

using test::error_of;

TEST(GgufValueAccess, TypedAccessors) {
  using T = GgufValueType;
  EXPECT_EQ(val(T::U8, uint64_t{7}).as_int("x"), 7);
  EXPECT_EQ(val(T::I8, int64_t{-7}).as_int("x"), -7);
  EXPECT_EQ(val(T::U64, uint64_t{1} << 63).as_uint("x"), uint64_t{1} << 63);
  EXPECT_EQ(val(T::I64, int64_t{5}).as_uint("x"), 5u);
  EXPECT_EQ(val(T::U32, uint64_t{3}).as_float("x"), 3.0);
  EXPECT_EQ(val(T::I32, int64_t{-3}).as_float("x"), -3.0);
  EXPECT_EQ(val(T::F32, 0.5).as_float("x"), 0.5);
  EXPECT_TRUE(val(T::BOOL, true).as_bool("x"));
  EXPECT_EQ(val(T::STRING, std::string("s")).as_string("x"), "s");
  EXPECT_TRUE(val(T::U16, uint64_t{1}).is_integer());
  EXPECT_FALSE(val(T::BOOL, true).is_integer());
  EXPECT_FALSE(val(T::F32, 1.0).is_integer());

  EXPECT_NE(error_of([] { val(T::U64, uint64_t{1} << 63).as_int("big key"); }).find("big key"), std::string::npos);
  EXPECT_NE(error_of([] { val(T::I32, int64_t{-1}).as_uint("neg"); }).find("negative"), std::string::npos);
  EXPECT_NE(error_of([] { val(T::STRING, std::string("s")).as_int("sk"); }).find("sk: has type STRING"),
            std::string::npos);
  EXPECT_NE(error_of([] { val(T::F32, 1.0).as_int("f"); }).find("integer"), std::string::npos);
  EXPECT_NE(error_of([] { val(T::U8, uint64_t{1}).as_bool("b"); }).find("BOOL"), std::string::npos);
  EXPECT_NE(error_of([] { val(T::BOOL, true).as_float("b"); }).find("number"), std::string::npos);
  EXPECT_NE(error_of([] { val(T::U8, uint64_t{1}).as_string("s"); }).find("STRING"), std::string::npos);
  EXPECT_NE(error_of([] { val(T::U8, uint64_t{1}).as_array("a"); }).find("ARRAY"), std::string::npos);
  EXPECT_EQ(gguf_value_type_name(T::F64), "F64");
  EXPECT_EQ(gguf_value_type_name(static_cast<T>(99)), "unknown");
}

TEST(GgufValueAccess, FileGettersNameTheKey) {
  GgufWriter w;
  w.add_string("s", "text");
  w.add_u32("n", 3);
  w.add_tensor("w", {4}, GgmlType::F32, std::vector<uint8_t>(16));
  const std::vector<uint8_t> bytes = w.serialize();
  const auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "g.gguf");
  EXPECT_FALSE(f->get_int("absent").has_value());
  EXPECT_FALSE(f->get_string("absent").has_value());
  EXPECT_EQ(f->get_float("n"), 3.0);
  EXPECT_NE(error_of([&] { f->get("absent"); }).find("g.gguf: missing key 'absent'"), std::string::npos);
  EXPECT_NE(error_of([&] { f->get_int("s"); }).find("g.gguf: key 's'"), std::string::npos);
  EXPECT_NE(error_of([&] { f->get_bool("n"); }).find("key 'n'"), std::string::npos);
  EXPECT_NE(error_of([&] { f->get_string("n"); }).find("STRING"), std::string::npos);
  EXPECT_NE(error_of([&] { f->tensor("nope"); }).find("no tensor named 'nope'"), std::string::npos);
  EXPECT_EQ(&f->tensor("w"), f->find_tensor("w"));
}

// ---- Writer errors --------------------------------------------------------------------------------

TEST(GgufWriterErrors, RejectsWhatItCannotSerialise) {
  GgufWriter w;
  EXPECT_NE(error_of([&] { w.add_tensor("t", {4}, GgmlType::F32, std::vector<uint8_t>(15)); }).find("15 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("t", {33}, GgmlType::Q8_0, std::vector<uint8_t>(34)); }).find("block size"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("t", {0}, GgmlType::F32, {}); }).find("dim 0"), std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("t", {1, 1, 1, 1, 1}, GgmlType::F32, std::vector<uint8_t>(4)); })
                .find("at most 4"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("t", {4}, static_cast<GgmlType>(250), {}); }).find("250"),
            std::string::npos);

  GgufWriter bad_payload;
  bad_payload.add("k", val(GgufValueType::U8, uint64_t{256}));
  EXPECT_NE(error_of([&] { bad_payload.serialize(); }).find("does not fit in U8"), std::string::npos);
  GgufWriter bad_variant;
  bad_variant.add("k", val(GgufValueType::STRING, uint64_t{1}));
  EXPECT_NE(error_of([&] { bad_variant.serialize(); }).find("key 'k'"), std::string::npos);
  GgufWriter bad_elem;
  bad_elem.add("k", arr(GgufValueType::I32, {val(GgufValueType::U8, uint64_t{1})}));
  EXPECT_NE(error_of([&] { bad_elem.serialize(); }).find("element 0"), std::string::npos);
  GgufWriter bad_align;
  bad_align.set_alignment(24);
  EXPECT_NE(error_of([&] { bad_align.serialize(); }).find("alignment 24"), std::string::npos);
  GgufWriter conflict;
  conflict.set_alignment(64);
  conflict.add_u32("general.alignment", 128);
  EXPECT_NE(error_of([&] { conflict.serialize(); }).find("conflicts"), std::string::npos);

  EXPECT_NE(error_of([] { GgufWriter().write("/nonexistent-dir/x.gguf"); }).find("/nonexistent-dir/x.gguf"),
            std::string::npos);
}

// An explicit U32 general.alignment drives placement, just as set_alignment() does.
TEST(GgufWriterErrors, AlignmentKeyDrivesPlacement) {
  GgufWriter w;
  w.add_u32("general.alignment", 128);
  w.add_tensor("a", {3}, GgmlType::F32, std::vector<uint8_t>(12));
  w.add_tensor("b", {3}, GgmlType::F32, std::vector<uint8_t>(12));
  const std::vector<uint8_t> bytes = w.serialize();
  const auto f = GgufFile::from_memory(bytes.data(), bytes.size(), "a128");
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->data_offset() % 128, 0u);
  EXPECT_EQ(f->tensor("b").offset, 128u);
  EXPECT_EQ(f->metadata().size(), 1u);
}

}  // namespace
}  // namespace npullm
