// ggml type table, fp16/bf16 conversions, dequantize_row against llama.cpp's golden vectors
// (../shared/golden/dequant) and quantize_row round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "formats/ggml_types.h"
#include "test_util.h"

namespace npullm {
namespace {

std::vector<float> as_floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- type table ----

TEST(GgmlTypes, TableHasSpecSizes) {
  struct Row { GgmlType t; const char* name; int64_t bs, ts; };
  const Row rows[] = {
      {GgmlType::F32, "F32", 1, 4},       {GgmlType::F16, "F16", 1, 2},
      {GgmlType::BF16, "BF16", 1, 2},     {GgmlType::Q4_0, "Q4_0", 32, 18},
      {GgmlType::Q4_1, "Q4_1", 32, 20},   {GgmlType::Q5_0, "Q5_0", 32, 22},
      {GgmlType::Q5_1, "Q5_1", 32, 24},   {GgmlType::Q8_0, "Q8_0", 32, 34},
      {GgmlType::Q8_1, "Q8_1", 32, 36},   {GgmlType::Q2_K, "Q2_K", 256, 84},
      {GgmlType::Q3_K, "Q3_K", 256, 110}, {GgmlType::Q4_K, "Q4_K", 256, 144},
      {GgmlType::Q5_K, "Q5_K", 256, 176}, {GgmlType::Q6_K, "Q6_K", 256, 210},
      {GgmlType::Q8_K, "Q8_K", 256, 292}, {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},
      {GgmlType::IQ4_XS, "IQ4_XS", 256, 136}, {GgmlType::I8, "I8", 1, 1},
      {GgmlType::I16, "I16", 1, 2},       {GgmlType::I32, "I32", 1, 4},
      {GgmlType::I64, "I64", 1, 8},       {GgmlType::F64, "F64", 1, 8},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_TRUE(ggml_type_known(static_cast<uint32_t>(r.t)));
    const GgmlTypeTraits& tr = ggml_type_traits(r.t);
    EXPECT_EQ(tr.name, r.name);
    EXPECT_EQ(ggml_type_name(r.t), r.name);
    EXPECT_EQ(tr.block_size, r.bs);
    EXPECT_EQ(tr.type_size, r.ts);
  }
}

TEST(GgmlTypes, KnownIsExactlyTheEnumValues) {
  const uint32_t defined[] = {0,  1,  2,  3,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,
                              18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 34, 35, 39};
  for (uint32_t id = 0; id < 64; ++id) {
    bool is_defined = false;
    for (uint32_t d : defined) is_defined |= d == id;
    EXPECT_EQ(ggml_type_known(id), is_defined) << "id " << id;
  }
  EXPECT_FALSE(ggml_type_known(0xFFFFFFFFu));
  EXPECT_THROW(ggml_type_traits(static_cast<GgmlType>(4)), Error);
  EXPECT_THROW(ggml_type_traits(static_cast<GgmlType>(99)), Error);
  EXPECT_TRUE(ggml_type_name(static_cast<GgmlType>(99)).empty());
}

TEST(GgmlTypes, RowBytes) {
  EXPECT_EQ(ggml_row_bytes(GgmlType::F32, 7), 28u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::F16, 7), 14u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_0, 256), 8u * 18u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 64), 2u * 34u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 512), 2u * 210u);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_0, 0), 0u);
  EXPECT_THROW(ggml_row_bytes(GgmlType::Q4_0, 33), Error);
  EXPECT_THROW(ggml_row_bytes(GgmlType::Q4_K, 32), Error);
  EXPECT_THROW(ggml_row_bytes(GgmlType::F32, -1), Error);
}

// ---- fp16 / bf16 ----

// Exact value of a half, computed independently of the implementation (ldexp on the fields).
double half_value(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(Fp16, AllHalvesConvertExactlyAndRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const double want = half_value(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << "half 0x" << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;  // keeps -0 too
  }
}

TEST(Fp16, RoundsToNearestEven) {
  // Exhaustive over a sample of float bit patterns: the result is the nearest half, ties to even.
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = rng();
    // Concentrate on the half range (|x| < 2^17) where rounding matters.
    u = (u & 0x807FFFFFu) | ((90u + rng() % 55u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    const uint16_t h = fp32_to_fp16(f);
    const double got = half_value(h);
    const double x = f;
    if (std::fabs(x) >= 65520.0) {
      EXPECT_TRUE(std::isinf(got)) << x;
      continue;
    }
    // Neighbours of h (same sign) must not be nearer; on a tie h must be even.
    const uint16_t mag = h & 0x7FFF;
    for (int dir : {-1, 1}) {
      const int nm = mag + dir;
      if (nm < 0 || nm > 0x7BFF) continue;
      const double other = half_value(static_cast<uint16_t>((h & 0x8000) | nm));
      const double eg = std::fabs(got - x), eo = std::fabs(other - x);
      ASSERT_LE(eg, eo) << "x=" << x;
      if (eg == eo) {
        ASSERT_EQ(h & 1, 0) << "tie not to even, x=" << x;
      }
    }
  }
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);          // tie between 0 and 2^-24
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 ulp: tie -> even (2)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);          // smallest normal
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
}

TEST(Bf16, ConversionsRoundToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xC000), -2.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even gives 1.0.
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

// ---- dequantize_row against llama.cpp (golden/dequant) ----

struct Golden {
  GgmlType type;
  const char* name;
};

const Golden kGolden[] = {
    {GgmlType::F16, "F16"},   {GgmlType::BF16, "BF16"}, {GgmlType::Q4_0, "Q4_0"},
    {GgmlType::Q4_1, "Q4_1"}, {GgmlType::Q5_0, "Q5_0"}, {GgmlType::Q5_1, "Q5_1"},
    {GgmlType::Q8_0, "Q8_0"},   {GgmlType::Q2_K, "Q2_K"}, {GgmlType::Q3_K, "Q3_K"},
    {GgmlType::Q4_K, "Q4_K"},   {GgmlType::Q5_K, "Q5_K"}, {GgmlType::Q6_K, "Q6_K"},
    {GgmlType::IQ4_NL, "IQ4_NL"}, {GgmlType::IQ4_XS, "IQ4_XS"},
};

constexpr int64_t kRows = 256, kCols = 256;  // the golden tensor is 256 x 256

class DequantGolden : public ::testing::TestWithParam<Golden> {};

// Row by row, as a runtime would call it; bit-identical to ggml (same float expressions).
TEST_P(DequantGolden, MatchesLlamaCppBitForBit) {
  const Golden g = GetParam();
  const std::string base = std::string("golden/dequant/") + g.name;
  NPULLM_REQUIRE_SHARED(base + ".bin");
  NPULLM_REQUIRE_SHARED(base + ".f32");
  const std::string bin = test::read_file(test::shared_path(base + ".bin"));
  const std::vector<float> want = as_floats(test::read_file(test::shared_path(base + ".f32")));
  const size_t row_bytes = ggml_row_bytes(g.type, kCols);
  ASSERT_EQ(bin.size(), row_bytes * kRows);
  ASSERT_EQ(want.size(), static_cast<size_t>(kRows * kCols));
  EXPECT_TRUE(ggml_type_traits(g.type).can_dequantize);

  std::vector<float> got(kCols);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    dequantize_row(g.type, bin.data() + r * row_bytes, got.data(), kCols);
    for (int64_t c = 0; c < kCols; ++c) {
      if (bits(got[c]) != bits(want[r * kCols + c])) {
        if (++mismatches <= 5)
          ADD_FAILURE() << g.name << " (" << r << ", " << c << "): got " << got[c] << " want "
                        << want[r * kCols + c];
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Types, DequantGolden, ::testing::ValuesIn(kGolden),
                         [](const auto& info) { return std::string(info.param.name); });

// Quantising the source tensor gives llama-quantize's bytes: Quantize.MatchesLlamaQuantizeByteForByte
// (tests/formats/test_quantize.cpp), for every type quantize_row supports.

TEST(Dequant, F32IsACopy) {
  const float x[3] = {1.5f, -0.0f, 3e-40f};
  float y[3];
  dequantize_row(GgmlType::F32, x, y, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bits(x[i]), bits(y[i]));
}

TEST(Dequant, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<uint8_t> buf(1024);
  std::vector<float> out(512);
  EXPECT_THROW(dequantize_row(GgmlType::Q4_0, buf.data(), out.data(), 48), Error);
  EXPECT_THROW(dequantize_row(GgmlType::I32, buf.data(), out.data(), 4), Error);
  EXPECT_THROW(dequantize_row(GgmlType::IQ2_XXS, buf.data(), out.data(), 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::Q6_K, buf.data(), out.data(), 128), Error);
  EXPECT_THROW(dequantize_row(static_cast<GgmlType>(5), buf.data(), out.data(), 4), Error);
  EXPECT_THROW(quantize_row(GgmlType::IQ2_XXS, out.data(), buf.data(), 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q8_0, out.data(), buf.data(), 31), Error);
}

// ---- quantize -> dequantize round trips ----

struct RoundTrip {
  GgmlType type;
  const char* name;
  double max_rel_err;  // max |err| / block absmax bound
};

// Bounds: half the quantisation step relative to the block's absmax (a few ulp of slack).
//   Q8_0: step amax/127 -> 0.5/127;  Q4_0: step amax/8 -> 0.5/8 (plus the clamp at +amax: 1/8);
//   F16 / BF16: relative 2^-11 / 2^-8 of the element itself, bounded here via absmax.
const RoundTrip kRoundTrips[] = {
    {GgmlType::F32, "F32", 0.0},
    {GgmlType::F16, "F16", 1.0 / 2048},
    {GgmlType::BF16, "BF16", 1.0 / 256},
    {GgmlType::Q8_0, "Q8_0", 0.5 / 127 * 1.01},
    {GgmlType::Q4_0, "Q4_0", 1.0 / 8 * 1.01},
};

class QuantRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(QuantRoundTrip, ErrorWithinHalfAStep) {
  const RoundTrip rt = GetParam();
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 32 * 24;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = nd(rng) * (i < 32 ? 1e-3f : 1.0f);  // one tiny block
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;                                   // one zero block
  x[100] = 1e4f;                                                               // an outlier
  std::vector<uint8_t> q(ggml_row_bytes(rt.type, n));
  std::vector<float> y(n);
  quantize_row(rt.type, x.data(), q.data(), n);
  dequantize_row(rt.type, q.data(), y.data(), n);
  double sq = 0.0;
  for (int64_t b = 0; b < n / 32; ++b) {
    double amax = 0.0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double(x[b * 32 + j])));
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      const double err = std::fabs(double(y[i]) - double(x[i]));
      // fp16 scale rounding adds a relative 2^-11 of amax for the block types.
      const double slack = (rt.max_rel_err > 0 ? amax / 1024.0 : 0.0);
      ASSERT_LE(err, rt.max_rel_err * amax + slack) << rt.name << " element " << i;
      if (b == 2) {
        ASSERT_EQ(y[i], 0.0f);
      }
      sq += err * err;
    }
  }
  // The sign of the largest element survives in Q4_0 (it maps exactly to -8).
  EXPECT_NEAR(y[100], 1e4f, 1e4 * (rt.max_rel_err + 1.0 / 1024));
  if (rt.type == GgmlType::F32) {
    EXPECT_EQ(sq, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantRoundTrip, ::testing::ValuesIn(kRoundTrips),
                         [](const auto& info) { return std::string(info.param.name); });

// RMSE of quantise(source.f32) -> dequantise against the figures llama.cpp reaches (README §4).
TEST(QuantRoundTrip, RmseOnGoldenSourceMatchesLlamaCpp) {
  NPULLM_REQUIRE_SHARED("golden/dequant/source.f32");
  const std::vector<float> src = as_floats(test::read_file(test::shared_path("golden/dequant/source.f32")));
  struct Bound { GgmlType t; double rmse; };
  const Bound bounds[] = {{GgmlType::F16, 1.8166e-05}, {GgmlType::BF16, 1.4465e-04},
                          {GgmlType::Q8_0, 4.4349e-04}, {GgmlType::Q4_0, 7.1243e-03}};
  for (const Bound& b : bounds) {
    const int64_t n = static_cast<int64_t>(src.size());
    std::vector<uint8_t> q(ggml_row_bytes(b.t, n));
    std::vector<float> y(n);
    quantize_row(b.t, src.data(), q.data(), n);
    dequantize_row(b.t, q.data(), y.data(), n);
    double sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sq += (double(y[i]) - src[i]) * (double(y[i]) - src[i]);
    EXPECT_LE(std::sqrt(sq / n), b.rmse * 1.001) << ggml_type_name(b.t);
  }
}

}  // namespace
}  // namespace npullm
