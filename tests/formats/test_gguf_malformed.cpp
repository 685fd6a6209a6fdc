// Malformed GGUF files: every one must be refused with an npullm::Error that names the problem,
// never a crash or an out-of-bounds read. Images are checked from exactly-sized heap copies, so
// AddressSanitizer flags any read past the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <unistd.h>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
#include "test_util.h"

namespace npullm {
namespace {

using T = GgufValueType;
constexpr uint64_t k2p62 = uint64_t{1} << 62;
constexpr uint64_t kU64Max = ~uint64_t{0};
constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ4_K = 12, kF64 = 28;
const char* const kStories = "models/llama2c/stories260K.gguf";

// ---- Building files byte by byte ------------------------------------------------------------------

class Raw {
 public:
  std::vector<uint8_t> b;

  Raw& u8(uint8_t v) { b.push_back(v); return *this; }
  Raw& u32(uint32_t v) { return put(v, 4); }
  Raw& u64(uint64_t v) { return put(v, 8); }
  Raw& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // Key and value type; the caller appends the payload.
  Raw& key(const std::string& k, uint32_t type) { return str(k).u32(type); }
  Raw& kv_u32(const std::string& k, uint32_t v) { return key(k, uint32_t(T::U32)).u32(v); }
  Raw& kv_string(const std::string& k, const std::string& v) { return key(k, uint32_t(T::STRING)).str(v); }
  Raw& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Raw& align(size_t a) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }

 private:
  Raw& put(uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
};

void patch(std::vector<uint8_t>& b, size_t at, uint64_t v, size_t n) {
  ASSERT_LE(at + n, b.size());
  for (size_t i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// A file with one metadata key and one tensor whose info fields are given raw.
std::vector<uint8_t> one_tensor(const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset,
                                size_t data_bytes) {
  Raw r;
  r.header(1, 1).kv_string("general.architecture", "llama").tensor("w", dims, type, offset);
  return r.align(32).zeros(data_bytes).b;
}

// A file with no tensors and one key whose type and payload `write` appends.
template <typename F>
std::vector<uint8_t> one_key(const std::string& k, uint32_t type, F write) {
  Raw r;
  r.header(0, 1).key(k, type);
  write(r);
  return r.b;
}

GgufValue val(T t, decltype(GgufValue::v) payload) {
  GgufValue v;
  v.type = t;
  v.v = std::move(payload);
  return v;
}

GgufValue arr(T elem, std::vector<GgufValue> elems) {
  GgufValue v;
  v.type = T::ARRAY;
  v.elem_type = elem;
  v.v = std::move(elems);
  return v;
}

// A small valid model made with the writer: scalar, string, nested and vocab keys, three tensors.
std::vector<uint8_t> sample_file() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "sample");
  w.add_u32("llama.block_count", 1);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_bool("sample.flag", true);
  w.add("sample.u64", val(T::U64, uint64_t{1} << 40));
  w.add("sample.nested", arr(T::ARRAY, {arr(T::I16, {val(T::I16, int64_t{1}), val(T::I16, int64_t{-2})}),
                                        arr(T::STRING, {val(T::STRING, std::string("s"))})}));
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b"});
  w.add_f32_array("tokenizer.ggml.scores", {0.f, 0.f, 0.f, -1.f, -2.f});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
  w.add_tensor("token_embd.weight", {4, 5}, GgmlType::F32, std::vector<uint8_t>(80, 1));
  w.add_tensor("blk.0.attn_q.weight", {32, 2}, GgmlType::Q8_0, std::vector<uint8_t>(68, 2));
  w.add_tensor("output_norm.weight", {4}, GgmlType::F16, std::vector<uint8_t>(8, 3));
  return w.serialize();
}

// ---- Checking refusals ----------------------------------------------------------------------------

const std::string kLabel = "bad.gguf";

::testing::AssertionResult has_words(const std::string& msg, const std::string& label,
                                     std::initializer_list<const char*> words) {
  if (msg.rfind(label + ": ", 0) != 0)
    return ::testing::AssertionFailure() << "message does not start with '" << label << ": ': " << msg;
  for (const char* w : words)
    if (msg.find(w) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << w << "': " << msg;
  return ::testing::AssertionSuccess() << msg;
}

// The image is refused with an npullm::Error naming the label and containing every word. Any other
// exception escapes and fails the test.
::testing::AssertionResult rejected(const std::vector<uint8_t>& bytes, std::initializer_list<const char*> words) {
  const std::vector<uint8_t> exact(bytes);  // exactly sized heap block
  try {
    GgufFile::from_memory(exact.data(), exact.size(), kLabel);
  } catch (const Error& e) {
    return has_words(e.what(), kLabel, words);
  }
  return ::testing::AssertionFailure() << "a malformed image of " << bytes.size() << " bytes was accepted";
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("npullm_gguf_malformed_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  }
  std::fclose(f);
}

// Same, through a temporary file and GgufFile::open (the mmap path).
::testing::AssertionResult rejected_on_disk(const std::string& name, const std::vector<uint8_t>& bytes,
                                            std::initializer_list<const char*> words) {
  const std::string path = temp_path(name);
  write_file(path, bytes);
  ::testing::AssertionResult result = ::testing::AssertionFailure() << "the malformed file was accepted";
  try {
    GgufFile::open(path);
  } catch (const Error& e) {
    result = has_words(e.what(), path, words);
  }
  std::filesystem::remove(path);
  return result;
}

// For fuzz-style checks: parsing may succeed or throw npullm::Error, nothing else.
bool parses(const std::vector<uint8_t>& bytes) {
  const std::vector<uint8_t> exact(bytes);
  try {
    GgufFile::from_memory(exact.data(), exact.size(), kLabel);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// ---- The valid baselines ------------------------------------------------------------------------------

TEST(GgufMalformed, BaselinesAreValid) {
  const std::vector<uint8_t> sample = sample_file();
  const auto f = GgufFile::from_memory(sample.data(), sample.size(), "sample");
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().size(), 10u);
  const std::vector<uint8_t> raw = one_tensor({8}, kF32, 0, 32);
  EXPECT_TRUE(parses(raw));
  EXPECT_TRUE(parses(one_key("k", uint32_t(T::U8), [](Raw& r) { r.u8(1); })));
  // Edge cases that are valid: a 0-dim (scalar) tensor, as ggml allows, and an empty key.
  const std::vector<uint8_t> scalar = one_tensor({}, kF32, 0, 32);
  const auto s = GgufFile::from_memory(scalar.data(), scalar.size(), "scalar");
  EXPECT_EQ(s->tensor("w").n_elements(), 1);
  EXPECT_EQ(s->tensor("w").n_bytes, 4u);
  EXPECT_TRUE(parses(one_key("", uint32_t(T::U8), [](Raw& r) { r.u8(1); })));
}

// ---- Truncation ---------------------------------------------------------------------------------------

TEST(GgufMalformed, SampleTruncatedAtEveryOffset) {
  const std::vector<uint8_t> sample = sample_file();
  for (size_t len = 0; len < sample.size(); ++len) {
    const std::vector<uint8_t> prefix(sample.begin(), sample.begin() + len);
    ASSERT_TRUE(rejected(prefix, {"end of file", "at offset"})) << "truncated to " << len << " bytes";
  }
}

TEST(GgufMalformed, Stories260KTruncated) {
  NPULLM_REQUIRE_SHARED(kStories);
  const std::string file = test::read_file(test::shared_path(kStories));
  const std::vector<uint8_t> bytes(file.begin(), file.end());
  const size_t header_end = GgufFile::from_memory(bytes.data(), bytes.size(), "s")->data_offset();
  std::vector<size_t> lengths;
  for (size_t len = 0; len < 1024; ++len) lengths.push_back(len);          // every offset of the start
  for (size_t len = 1024; len < header_end; len += 5) lengths.push_back(len);  // dense over the header
  for (size_t len = header_end; len < bytes.size(); len += 4093) lengths.push_back(len);  // the data
  lengths.push_back(header_end - 1);
  lengths.push_back(bytes.size() - 1);
  for (size_t len : lengths) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + len);
    ASSERT_TRUE(rejected(prefix, {"end of file"})) << "truncated to " << len << " bytes";
  }
}

TEST(GgufMalformed, TruncatedFilesOnDisk) {
  const std::vector<uint8_t> sample = sample_file();
  EXPECT_TRUE(rejected_on_disk("empty.gguf", {}, {"end of file", "magic"}));
  EXPECT_TRUE(rejected_on_disk("t10.gguf", {sample.begin(), sample.begin() + 10}, {"end of file", "tensor_count"}));
  EXPECT_TRUE(rejected_on_disk("tdata.gguf", {sample.begin(), sample.end() - 1}, {"end of file", "output_norm.weight"}));
}

// ---- Header fields ------------------------------------------------------------------------------------

TEST(GgufMalformed, BadMagic) {
  std::vector<uint8_t> b = sample_file();
  std::memcpy(b.data(), "GGML", 4);
  EXPECT_TRUE(rejected(b, {"magic", "at offset 0", "GGUF"}));
  std::memcpy(b.data(), "gguf", 4);
  EXPECT_TRUE(rejected(b, {"magic"}));
  EXPECT_TRUE(rejected({'G', 'G', 'U'}, {"end of file", "magic"}));
  EXPECT_TRUE(rejected_on_disk("magic.gguf", b, {"magic"}));
}

TEST(GgufMalformed, UnsupportedVersions) {
  std::vector<uint8_t> b = sample_file();
  patch(b, 4, 1, 4);
  EXPECT_TRUE(rejected(b, {"version 1", "not supported", "at offset 4"}));
  patch(b, 4, 0, 4);
  EXPECT_TRUE(rejected(b, {"version 0"}));
  patch(b, 4, 4, 4);
  EXPECT_TRUE(rejected(b, {"version 4"}));
  patch(b, 4, 0x03000000, 4);
  EXPECT_TRUE(rejected(b, {"version", "big-endian"}));
  EXPECT_TRUE(rejected_on_disk("v1.gguf", Raw().header(0, 0, 1).b, {"version 1"}));
}

TEST(GgufMalformed, ImpossibleCounts) {
  for (uint64_t n : {k2p62, kU64Max, uint64_t{1} << 32, uint64_t{1000}}) {
    std::vector<uint8_t> b = sample_file();
    patch(b, 8, n, 8);
    EXPECT_TRUE(rejected(b, {"tensor_count", "too large", "at offset 8"})) << n;
    b = sample_file();
    patch(b, 16, n, 8);
    EXPECT_TRUE(rejected(b, {"kv_count", "too large", "at offset 16"})) << n;
  }
  EXPECT_TRUE(rejected_on_disk("count.gguf", Raw().header(k2p62, 0).b, {"tensor_count"}));
  // Counts one too high still fit the size check; what follows is misread, and must fail cleanly.
  std::vector<uint8_t> b = sample_file();
  patch(b, 8, 4, 8);
  EXPECT_FALSE(parses(b));
  b = sample_file();
  patch(b, 16, 11, 8);
  EXPECT_FALSE(parses(b));
}

// ---- Metadata -----------------------------------------------------------------------------------------

TEST(GgufMalformed, KeyLengths) {
  for (uint64_t len : {k2p62, kU64Max, uint64_t{1} << 32, uint64_t{100}}) {
    EXPECT_TRUE(rejected(Raw().header(0, 1).u64(len).zeros(20).b, {"metadata key", "string length", "end of file",
                                                                   "at offset 24"}))
        << len;
  }
  // A key that ends exactly at the end of the file: the value type is what is missing.
  EXPECT_TRUE(rejected(Raw().header(0, 1).str("abcde").b, {"end of file", "value type"}));
}

TEST(GgufMalformed, UnknownValueTypes) {
  EXPECT_TRUE(rejected(one_key("k", 99, [](Raw& r) { r.u32(0); }), {"unknown value type 99", "key 'k'", "at offset 33"}));
  EXPECT_TRUE(rejected(one_key("k", 13, [](Raw& r) { r.u64(0); }), {"value type 13"}));
  EXPECT_TRUE(rejected(one_key("k", uint32_t(T::ARRAY), [](Raw& r) { r.u32(99).u64(0); }), {"value type 99"}));
  EXPECT_TRUE(rejected(one_key("k", uint32_t(T::ARRAY), [](Raw& r) { r.u32(uint32_t(T::ARRAY)).u64(1).u32(250).u64(0); }),
                       {"value type 250"}));
}

TEST(GgufMalformed, ImpossibleArrayCounts) {
  for (uint64_t n : {k2p62, kU64Max, uint64_t{1} << 40}) {
    for (T elem : {T::U8, T::U64, T::STRING, T::ARRAY, T::BOOL}) {
      EXPECT_TRUE(rejected(one_key("k", uint32_t(T::ARRAY), [&](Raw& r) { r.u32(uint32_t(elem)).u64(n).zeros(64); }),
                           {"array count", "key 'k'", "end of file"}))
          << n << " of " << gguf_value_type_name(elem);
    }
  }
  // Five U8 elements with four bytes left.
  EXPECT_TRUE(rejected(one_key("k", uint32_t(T::ARRAY), [](Raw& r) { r.u32(uint32_t(T::U8)).u64(5).u32(0); }),
                       {"array count 5 for key 'k'", "at most 4"}));
  // A nested array whose inner count is impossible.
  EXPECT_TRUE(rejected(one_key("k", uint32_t(T::ARRAY),
                               [](Raw& r) { r.u32(uint32_t(T::ARRAY)).u64(1).u32(uint32_t(T::I32)).u64(k2p62); }),
                       {"array count"}));
}

TEST(GgufMalformed, StringValueLengths) {
  EXPECT_TRUE(rejected(one_key("k", uint32_t(T::STRING), [](Raw& r) { r.u64(k2p62).zeros(8); }),
                       {"string length", "key 'k'", "end of file"}));
  EXPECT_TRUE(rejected(one_key("k", uint32_t(T::ARRAY),
                               [](Raw& r) { r.u32(uint32_t(T::STRING)).u64(2).str("ok").u64(kU64Max); }),
                       {"string length", "key 'k'"}));
}

TEST(GgufMalformed, ArraysNestedTooDeep) {
  GgufValue v = arr(T::U8, {});
  for (int level = 1; level < 9; ++level) v = arr(T::ARRAY, {v});  // 9 levels
  GgufWriter w;
  w.add("deep", v);
  EXPECT_TRUE(rejected(w.serialize(), {"nested", "key 'deep'", "at most 8"}));
  // A hand-made chain of 10000 array headers must not exhaust the stack.
  Raw r;
  r.header(0, 1).key("chain", uint32_t(T::ARRAY));
  for (int i = 0; i < 10000; ++i) r.u32(uint32_t(T::ARRAY)).u64(1);
  EXPECT_TRUE(rejected(r.b, {"nested"}));
}

TEST(GgufMalformed, BoolOutOfRange) {
  EXPECT_TRUE(rejected(one_key("flag", uint32_t(T::BOOL), [](Raw& r) { r.u8(2); }), {"bool value 2", "'flag'", "0 or 1"}));
}

TEST(GgufMalformed, DuplicateKeysAndTensorNames) {
  GgufWriter w;
  w.add_u32("k", 1);
  w.add_u32("k", 2);
  EXPECT_TRUE(rejected(w.serialize(), {"duplicate key 'k'"}));
  GgufWriter t;
  t.add_tensor("w", {4}, GgmlType::F32, std::vector<uint8_t>(16));
  t.add_tensor("w", {4}, GgmlType::F32, std::vector<uint8_t>(16));
  EXPECT_TRUE(rejected(t.serialize(), {"duplicate tensor name 'w'"}));
}

// ---- Well-known keys with the wrong type --------------------------------------------------------------

TEST(GgufMalformed, WrongTypesForKnownKeys) {
  GgufWriter a;
  a.add_string("general.alignment", "32");
  EXPECT_TRUE(rejected(a.serialize(), {"key 'general.alignment' has type STRING", "expected U32"}));
  GgufWriter a64;
  a64.add("general.alignment", val(T::U64, uint64_t{32}));
  EXPECT_TRUE(rejected(a64.serialize(), {"general.alignment", "U64"}));
  GgufWriter ai;
  ai.add_i32("general.alignment", 32);
  EXPECT_TRUE(rejected(ai.serialize(), {"general.alignment", "I32"}));

  GgufWriter arch;
  arch.add_u32("general.architecture", 1);
  EXPECT_TRUE(rejected(arch.serialize(), {"general.architecture", "has type U32", "expected STRING"}));

  GgufWriter tok;
  tok.add_i32_array("tokenizer.ggml.tokens", {1, 2});
  EXPECT_TRUE(rejected(tok.serialize(), {"tokenizer.ggml.tokens", "ARRAY of I32", "expected ARRAY of STRING"}));
  GgufWriter tok_s;
  tok_s.add_string("tokenizer.ggml.tokens", "a b c");
  EXPECT_TRUE(rejected(tok_s.serialize(), {"tokenizer.ggml.tokens", "has type STRING"}));

  GgufWriter sc;
  sc.add("tokenizer.ggml.scores", arr(T::F64, {val(T::F64, 0.0)}));
  EXPECT_TRUE(rejected(sc.serialize(), {"tokenizer.ggml.scores", "ARRAY of F64", "expected ARRAY of F32"}));
  GgufWriter tt;
  tt.add("tokenizer.ggml.token_type", arr(T::U32, {val(T::U32, uint64_t{1})}));
  EXPECT_TRUE(rejected(tt.serialize(), {"tokenizer.ggml.token_type", "ARRAY of U32", "expected ARRAY of I32"}));
}

TEST(GgufMalformed, BadAlignmentValues) {
  for (uint32_t a : {0u, 24u, 3u, 0xFFFFFFFFu}) {
    GgufWriter w;
    w.add_u32("general.alignment", a);
    EXPECT_TRUE(rejected(w.serialize(), {"general.alignment", "power of two"})) << a;
  }
  // A huge but valid alignment pushes the data section past the end of a file that has tensors.
  Raw r;
  r.header(1, 1).kv_u32("general.alignment", 1u << 31).tensor("w", {8}, kF32, 0);
  EXPECT_TRUE(rejected(r.align(32).zeros(32).b, {"tensor 'w'", "end of file"}));
}

TEST(GgufMalformed, VocabArraysOfDifferentLengths) {
  GgufWriter w;
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.add_f32_array("tokenizer.ggml.scores", {0.f, 1.f});
  EXPECT_TRUE(rejected(w.serialize(), {"tokenizer.ggml.scores", "2 entries", "has 3"}));
  GgufWriter t;
  t.add_string_array("tokenizer.ggml.tokens", {"a"});
  t.add_i32_array("tokenizer.ggml.token_type", {1, 1});
  EXPECT_TRUE(rejected(t.serialize(), {"tokenizer.ggml.token_type", "2 entries"}));
}

// ---- Tensor infos ---------------------------------------------------------------------------------------

TEST(GgufMalformed, TensorNameLength) {
  EXPECT_TRUE(rejected(Raw().header(1, 0).u64(k2p62).zeros(40).b, {"tensor name", "string length", "end of file"}));
}

TEST(GgufMalformed, TooManyDims) {
  EXPECT_TRUE(rejected(one_tensor({1, 1, 1, 1, 1, 1, 1, 1, 8}, kF32, 0, 32), {"tensor 'w'", "n_dims 9", "at most 4"}));
  EXPECT_TRUE(rejected(one_tensor({8, 1, 1, 1, 1}, kF32, 0, 32), {"n_dims 5"}));
  // n_dims huge: refused before any dims are read.
  EXPECT_TRUE(rejected(Raw().header(1, 0).str("w").u32(0xFFFFFFFFu).zeros(64).b, {"n_dims 4294967295"}));
}

TEST(GgufMalformed, UnknownTensorTypes) {
  EXPECT_TRUE(rejected(one_tensor({8}, 250, 0, 32), {"tensor 'w'", "unknown ggml type 250"}));
  EXPECT_TRUE(rejected(one_tensor({8}, 4, 0, 32), {"unknown ggml type 4"}));  // retired Q4_2
  EXPECT_TRUE(rejected(one_tensor({8}, 0xFFFFFFFFu, 0, 32), {"unknown ggml type 4294967295"}));
}

TEST(GgufMalformed, BadDims) {
  EXPECT_TRUE(rejected(one_tensor({0}, kF32, 0, 32), {"tensor 'w' dim 0 is 0"}));
  EXPECT_TRUE(rejected(one_tensor({8, 0}, kF32, 0, 32), {"dim 1 is 0"}));
  EXPECT_TRUE(rejected(one_tensor({uint64_t{1} << 63}, kF32, 0, 32), {"dim 0 is -9223372036854775808"}));
  EXPECT_TRUE(rejected(one_tensor({8, kU64Max}, kF32, 0, 32), {"dim 1 is -1"}));
}

TEST(GgufMalformed, OverflowingShapes) {
  EXPECT_TRUE(rejected(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 32),
                       {"element count overflows"}));
  EXPECT_TRUE(rejected(one_tensor({1 << 16, 1 << 16, 1 << 16, 1 << 16}, kF32, 0, 32), {"element count overflows"}));
  EXPECT_TRUE(rejected(one_tensor({k2p62}, kF64, 0, 32), {"row byte size overflows"}));
  EXPECT_TRUE(rejected(one_tensor({k2p62}, kF32, 0, 32), {"byte size overflows"}));
  EXPECT_TRUE(rejected(one_tensor({uint64_t{1} << 61, 2}, kF32, 0, 32), {"tensor 'w' byte size overflows"}));
}

TEST(GgufMalformed, RowsNotWholeBlocks) {
  EXPECT_TRUE(rejected(one_tensor({33}, kQ8_0, 0, 64), {"dims[0] = 33", "Q8_0 block size", "multiple of 32"}));
  EXPECT_TRUE(rejected(one_tensor({32}, kQ4_K, 0, 160), {"block size", "multiple of 256"}));
}

TEST(GgufMalformed, DataOutsideTheFile) {
  EXPECT_TRUE(rejected(one_tensor({8}, kF32, uint64_t{1} << 40, 32), {"tensor 'w' data", "past end of file"}));
  EXPECT_TRUE(rejected(one_tensor({8}, kF32, kU64Max - 31, 32), {"past end of file"}));  // aligned, would wrap
  EXPECT_TRUE(rejected(one_tensor({8}, kF32, 0, 31), {"past end of file"}));             // one byte short
  EXPECT_TRUE(rejected(one_tensor({8}, kF32, 32, 32), {"past end of file"}));
  EXPECT_TRUE(rejected_on_disk("past.gguf", one_tensor({8}, kF32, 64, 32), {"past end of file"}));
}

TEST(GgufMalformed, MisalignedData) {
  EXPECT_TRUE(rejected(one_tensor({8}, kF32, 4, 64), {"tensor 'w'", "data offset 4", "alignment", "multiple of 32"}));
  Raw r;
  r.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {8}, kF32, 32);
  EXPECT_TRUE(rejected(r.align(64).zeros(128).b, {"data offset 32", "multiple of 64"}));
  EXPECT_TRUE(rejected_on_disk("misaligned.gguf", one_tensor({8}, kF32, 1, 64), {"alignment"}));
}

TEST(GgufMalformed, OverlappingData) {
  Raw same;
  same.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 0);
  EXPECT_TRUE(rejected(same.align(32).zeros(64).b, {"overlaps"}));
  Raw part;  // a: 64 bytes at 0; b at 32
  part.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32);
  EXPECT_TRUE(rejected(part.align(32).zeros(96).b, {"tensor 'b' data overlaps tensor 'a'"}));
  Raw reversed;  // listed out of order: still found
  reversed.header(2, 0).tensor("late", {8}, kF32, 32).tensor("early", {16}, kF32, 0);
  EXPECT_TRUE(rejected(reversed.align(32).zeros(96).b, {"overlaps"}));
  Raw fine;  // adjacent, not overlapping
  fine.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 32);
  EXPECT_TRUE(parses(fine.align(32).zeros(64).b));
}

// ---- Message shape ----------------------------------------------------------------------------------------

TEST(GgufMalformed, MessagesSayWhereAndWhat) {
  const std::regex shape(R"(^bad\.gguf: .+ at offset [0-9]+ \(expected .+\)$)");
  std::vector<uint8_t> magic = sample_file();
  magic[0] = 'X';
  const std::vector<uint8_t> sample = sample_file();
  const std::vector<uint8_t> truncated(sample.begin(), sample.begin() + 100);
  const std::vector<std::vector<uint8_t>> cases = {
      magic,
      one_tensor({8}, 250, 0, 32),
      one_tensor({8}, kF32, 4, 64),
      one_key("k", 99, [](Raw& r) { r.u32(0); }),
      Raw().header(k2p62, 0).b,
      truncated,
  };
  for (const auto& bytes : cases) {
    const std::vector<uint8_t> exact(bytes);
    try {
      GgufFile::from_memory(exact.data(), exact.size(), kLabel);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(std::regex_match(std::string(e.what()), shape)) << e.what();
    }
  }
}

TEST(GgufMalformed, OpenFailures) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_TRUE(has_words(e.what(), "/nonexistent/model.gguf", {"cannot open"}));
  }
  const std::string dir = std::filesystem::temp_directory_path().string();
  try {
    GgufFile::open(dir);
    ADD_FAILURE() << "opened a directory";
  } catch (const Error& e) {
    EXPECT_TRUE(has_words(e.what(), dir, {"not a regular file"}));
  }
}

// ---- Corrupting a real file ---------------------------------------------------------------------------------

// Offset of the tensor-info (or key) string `name`, i.e. of its u64 length prefix.
size_t string_at(const std::vector<uint8_t>& b, const std::string& name) {
  Raw r;
  r.str(name);
  const auto it = std::search(b.begin(), b.end(), r.b.begin(), r.b.end());
  return it == b.end() ? 0 : static_cast<size_t>(it - b.begin());
}

TEST(GgufMalformed, Stories260KCorruptedFields) {
  NPULLM_REQUIRE_SHARED(kStories);
  const std::string file = test::read_file(test::shared_path(kStories));
  const std::vector<uint8_t> good(file.begin(), file.end());
  const size_t emb = string_at(good, "token_embd.weight");
  ASSERT_GT(emb, 0u);
  const size_t n_dims_at = emb + 8 + 17, type_at = n_dims_at + 4 + 16, offset_at = type_at + 4;

  std::vector<uint8_t> b = good;
  patch(b, type_at, 250, 4);
  EXPECT_TRUE(rejected(b, {"tensor 'token_embd.weight'", "unknown ggml type 250"}));
  b = good;
  patch(b, n_dims_at, 9, 4);
  EXPECT_TRUE(rejected(b, {"token_embd.weight", "n_dims 9"}));
  b = good;
  patch(b, n_dims_at + 4, 0, 8);
  EXPECT_TRUE(rejected(b, {"token_embd.weight", "dim 0 is 0"}));
  b = good;
  patch(b, type_at, kQ4_K, 4);  // 64 is not a whole number of 256-element blocks
  EXPECT_TRUE(rejected(b, {"token_embd.weight", "block size"}));
  b = good;
  uint64_t offset = 0;
  for (int i = 0; i < 8; ++i) offset |= uint64_t{good[offset_at + i]} << (8 * i);
  patch(b, offset_at, offset + 4, 8);
  EXPECT_TRUE(rejected(b, {"token_embd.weight", "alignment"}));
  b = good;
  patch(b, offset_at, offset + 32, 8);
  EXPECT_TRUE(rejected(b, {"overlaps"}));

  // The token array's count, 4 + 4 bytes after its key.
  const size_t tokens = string_at(good, "tokenizer.ggml.tokens");
  ASSERT_GT(tokens, 0u);
  const size_t count_at = tokens + 8 + 21 + 4 + 4;
  b = good;
  patch(b, count_at, k2p62, 8);
  EXPECT_TRUE(rejected(b, {"array count", "tokenizer.ggml.tokens"}));
  b = good;
  patch(b, count_at + 8, kU64Max, 8);  // the first token's length
  EXPECT_TRUE(rejected(b, {"string length", "tokenizer.ggml.tokens"}));
  b = good;
  patch(b, 8, 49, 8);
  EXPECT_FALSE(parses(b));
  EXPECT_TRUE(rejected_on_disk("stories_type.gguf", [&] {
    std::vector<uint8_t> t = good;
    patch(t, type_at, 250, 4);
    return t;
  }(), {"unknown ggml type 250"}));
}

// ---- Sweeps: every byte of a small file, then random damage ---------------------------------------------

TEST(GgufMalformed, EveryByteOfSampleCorrupted) {
  const std::vector<uint8_t> sample = sample_file();
  int refused = 0;
  for (size_t i = 0; i < sample.size(); ++i) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<uint8_t> b = sample;
      const uint8_t orig = b[i];
      b[i] = variant == 0 ? 0x00 : variant == 1 ? 0xFF : variant == 2 ? orig ^ 0x01 : orig ^ 0x80;
      if (b[i] == orig) continue;
      refused += !parses(b);
    }
  }
  EXPECT_GT(refused, 500);  // the header region is dense with checks
}

TEST(GgufMalformed, RandomDamage) {
  const std::vector<uint8_t> sample = sample_file();
  const uint64_t interesting[] = {0, 1, 0xFF, 0xFFFFFFFF, uint64_t{1} << 32, k2p62, kU64Max, kU64Max >> 1, 99, 250};
  std::mt19937_64 rng(12345);
  int refused = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> b = sample;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[at] = static_cast<uint8_t>(rng()); break;
        case 1: {  // an interesting little-endian u64 (or u32) anywhere
          const uint64_t v = interesting[rng() % std::size(interesting)];
          const size_t n = rng() % 2 ? 8 : 4;
          for (size_t k = 0; k < n && at + k < b.size(); ++k) b[at + k] = static_cast<uint8_t>(v >> (8 * k));
          break;
        }
        default: b.resize(at); break;  // truncate
      }
      if (b.empty()) break;
    }
    refused += !parses(b);
  }
  EXPECT_GT(refused, 2000);
}

}  // namespace
}  // namespace npullm
