// MXFP4 (ggml type 39): the block layout and values against the OCP Microscaling spec (E8M0 scale,
// E2M1 elements decoded here from their bit fields, independently of the implementation's table),
// the quantiser against ggml's quantize_row_mxfp4_ref rule on hand-made blocks, and both against
// the MXFP4 expert tensors of the gpt-oss golden model, which llama-quantize made from F32 data:
// each of its blocks dequantises to spec values and quantises back to the very same bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "test_util.h"

namespace npullm {
namespace {

constexpr size_t kBlockBytes = 17;

// E2M1 from the spec: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is
// subnormal (0.5 * m). Values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
double e2m1_value(int code) {
  const int sign = (code >> 3) & 1, exp = (code >> 1) & 3, man = code & 1;
  const double mag = exp == 0 ? 0.5 * man : std::ldexp(1.0 + 0.5 * man, exp - 1);
  return sign ? -mag : mag;
}

// E8M0 from the spec: 2^(e - 127) (e = 255, NaN in the spec, is not used here).
double e8m0_value(int e) { return std::ldexp(1.0, e - 127); }

std::vector<uint8_t> block(uint8_t e, const uint8_t (&qs)[16]) {
  std::vector<uint8_t> b(kBlockBytes);
  b[0] = e;
  std::memcpy(b.data() + 1, qs, 16);
  return b;
}

TEST(Mxfp4, TypeTraits) {
  EXPECT_TRUE(ggml_type_known(39));
  const GgmlTypeTraits& tr = ggml_type_traits(GgmlType::MXFP4);
  EXPECT_EQ(tr.name, "MXFP4");
  EXPECT_EQ(tr.block_size, 32);
  EXPECT_EQ(tr.type_size, 17);
  EXPECT_TRUE(tr.can_dequantize);
  EXPECT_TRUE(can_quantize(GgmlType::MXFP4));
  EXPECT_EQ(ggml_row_bytes(GgmlType::MXFP4, 2880), 90u * 17u);  // gpt-oss-20b's row
  for (uint32_t id : {36u, 37u, 38u}) EXPECT_FALSE(ggml_type_known(id)) << id;  // retired repacks
}

TEST(Mxfp4, ScaleIsHalfTheE8M0Value) {
  for (int e = 0; e < 255; ++e) {
    const float s = mxfp4_scale(static_cast<uint8_t>(e));
    ASSERT_EQ(static_cast<double>(s), e8m0_value(e) / 2) << "e=" << e;
  }
  uint32_t b0, b1;
  const float s0 = mxfp4_scale(0), s1 = mxfp4_scale(1);
  std::memcpy(&b0, &s0, 4);
  std::memcpy(&b1, &s1, 4);
  EXPECT_EQ(b0, 0x00200000u);  // subnormal 2^-128
  EXPECT_EQ(b1, 0x00400000u);  // subnormal 2^-127
  EXPECT_EQ(static_cast<double>(mxfp4_scale(255)), std::ldexp(1.0, 127));  // ggml reads the NaN code as 2^127
}

TEST(Mxfp4, TableIsTwiceE2M1) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(kMxfp4Values[c], 2 * e2m1_value(c)) << "code " << c;
}

// Every code in both nibble positions, at several scales (subnormal, 1, large): element j is the
// low nibble of byte j, element j + 16 the high nibble, value = E2M1(code) * 2^(e - 127).
TEST(Mxfp4, DequantisesEveryCodeAsTheSpecSays) {
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  for (int e : {0, 1, 2, 100, 127, 128, 200, 254}) {
    SCOPED_TRACE("e=" + std::to_string(e));
    const std::vector<uint8_t> b = block(static_cast<uint8_t>(e), qs);
    float out[32];
    dequantize_row(GgmlType::MXFP4, b.data(), out, 32);
    // (As floats: at e = 254 the larger values overflow to infinity.)
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(out[j], static_cast<float>(e2m1_value(j) * e8m0_value(e))) << j;
      EXPECT_EQ(out[j + 16], static_cast<float>(e2m1_value(15 - j) * e8m0_value(e))) << j + 16;
    }
    // Code 8 is the spec's -0; ggml's int8 table holds a plain 0 there, so it dequantises to +0.
    EXPECT_FALSE(std::signbit(out[8]));
  }
}

std::vector<uint8_t> quantise(const std::vector<float>& x) {
  std::vector<uint8_t> q(ggml_row_bytes(GgmlType::MXFP4, static_cast<int64_t>(x.size())));
  quantize_row(GgmlType::MXFP4, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

// ggml's rule by hand: e = floor(log2 amax) - 2 + 127, d = 2^(e - 128); each element the first
// code of least |table * d - x|.
TEST(Mxfp4, QuantiserFollowsGgmlsRule) {
  std::vector<float> x(32, 0.0f);
  // amax 1.0: e = 0 - 2 + 127 = 125, d = 2^-3 = 0.125; in units of d:
  x[0] = 1.0f;        // 8 -> code 6
  x[1] = 0.7f;        // 5.6 -> 6, code 5
  x[2] = 0.625f;      // 5 exactly: between 4 and 6, the lower code (4 = code 4) wins
  x[3] = -0.0625f;    // -0.5: between 0 (code 0) and -1 (code 9): code 0
  x[4] = 0.3125f;     // 2.5: between 2 (code 2) and 3 (code 3): code 2
  x[5] = -0.875f;     // -7: between -6 (code 13) and -8 (code 14): code 13
  x[6] = -0.0f;       // code 0, never the -0 of code 8
  x[16] = -0.25f;     // -2 -> code 10 (high nibble of byte 0)
  x[17] = 0.1875f;    // 1.5: between 1 and 2: code 1
  x[18] = -1.0f;      // -8 -> code 14
  const std::vector<uint8_t> q = quantise(x);
  EXPECT_EQ(q[0], 125);
  EXPECT_EQ(q[1], 6 | (10 << 4));
  EXPECT_EQ(q[2], 5 | (1 << 4));
  EXPECT_EQ(q[3], 4 | (14 << 4));
  EXPECT_EQ(q[4], 0);
  EXPECT_EQ(q[5], 2);
  EXPECT_EQ(q[6], 13);
  EXPECT_EQ(q[7], 0);

  // amax 1.5 (log2 0.58): still e = 125, and 12 units -> code 7; amax just below 2 too.
  std::vector<float> y(32, 0.0f);
  y[31] = 1.5f;
  EXPECT_EQ(quantise(y)[0], 125);
  EXPECT_EQ(quantise(y)[16], 7 << 4);
  y[31] = std::nextafter(2.0f, 0.0f);
  EXPECT_EQ(quantise(y)[0], 125);
  y[31] = -2.0f;  // log2 = 1: e = 126, -8 units -> code 14
  EXPECT_EQ(quantise(y)[0], 126);
  EXPECT_EQ(quantise(y)[16], 14 << 4);

  // All zeros: e = 0 and every code 0.
  EXPECT_EQ(quantise(std::vector<float>(64, 0.0f)), std::vector<uint8_t>(34, 0));

  // Below 2^-125 ggml's float e is negative and x86 wraps it: 2^-130 gives -5, byte 251.
  std::vector<float> t(32, 0.0f);
  t[0] = std::ldexp(1.0f, -130);
  EXPECT_EQ(quantise(t)[0], 251);
}

// Quantising values that are already on the grid gives them back exactly (any scale the rule can
// choose, any mix of codes with an 8 or 12 at the largest magnitude).
TEST(Mxfp4, GridValuesRoundTrip) {
  uint32_t s = 12345;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> b(kBlockBytes);
    b[0] = static_cast<uint8_t>(10 + next() % 230);
    for (int j = 1; j < 17; ++j) {
      uint8_t lo = static_cast<uint8_t>(next() >> 28), hi = static_cast<uint8_t>(next() >> 28);
      if (lo == 8) lo = 0;  // -0 quantises to code 0
      if (hi == 8) hi = 0;
      b[static_cast<size_t>(j)] = static_cast<uint8_t>(lo | (hi << 4));
    }
    b[1] = static_cast<uint8_t>((b[1] & 0xF0) | (next() % 2 ? 7 : 14));  // an extreme: 12 or -8
    float v[32];
    dequantize_row(GgmlType::MXFP4, b.data(), v, 32);
    ASSERT_EQ(quantise(std::vector<float>(v, v + 32)), b) << "trial " << trial;
  }
}

// The gpt-oss golden model's expert tensors (../shared/golden/moe/README.md: MXFP4_MOE, made by
// llama-quantize from the F32 model): every value is a spec value, and every block is exactly what
// the quantiser makes of its own dequantisation.
TEST(Mxfp4, GptOssExpertTensorsRoundTripByteForByte) {
  const std::string rel = "golden/moe/gpt-oss-spm.MXFP4_MOE.gguf";
  NPULLM_REQUIRE_SHARED(rel);
  const auto f = GgufFile::open(test::shared_path(rel));
  int tensors = 0;
  int64_t blocks = 0, nonzero = 0;
  for (const GgufTensorInfo& t : f->tensors()) {
    if (t.type != GgmlType::MXFP4) continue;
    SCOPED_TRACE(t.name);
    ++tensors;
    EXPECT_NE(t.name.find("_exps"), std::string::npos);
    const int64_t n = t.dims[0];
    const size_t row_bytes = ggml_row_bytes(GgmlType::MXFP4, n);
    ASSERT_EQ(t.n_bytes, row_bytes * static_cast<size_t>(t.rows()));
    std::vector<float> v(static_cast<size_t>(n));
    std::vector<uint8_t> back(row_bytes);
    for (int64_t r = 0; r < t.rows(); ++r) {
      const uint8_t* row = t.data + static_cast<size_t>(r) * row_bytes;
      dequantize_row(GgmlType::MXFP4, row, v.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        const uint8_t* b = row + (j / 32) * kBlockBytes;
        const int k = static_cast<int>(j % 32);
        const int code = k < 16 ? (b[1 + k] & 0x0F) : (b[1 + k - 16] >> 4);
        ASSERT_EQ(static_cast<double>(v[static_cast<size_t>(j)]), e2m1_value(code) * e8m0_value(b[0])) << "row " << r << " el " << j;
        nonzero += v[static_cast<size_t>(j)] != 0.0f;
      }
      quantize_row(GgmlType::MXFP4, v.data(), back.data(), n);
      ASSERT_EQ(std::memcmp(back.data(), row, row_bytes), 0) << "row " << r;
      blocks += n / 32;
    }
  }
  EXPECT_EQ(tensors, 6);  // three expert tensors in each of two layers
  EXPECT_GT(blocks, 10000);
  EXPECT_GT(nonzero, blocks * 16);  // real data, not an empty file
}

}  // namespace
}  // namespace npullm
