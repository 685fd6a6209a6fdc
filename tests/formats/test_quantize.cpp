// Quantisers: byte-for-byte agreement with llama-quantize on the golden tensor, round-trip error
// bounds on synthetic data, and the edge cases (zeros, constants, spikes, tiny and huge values).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "formats/ggml_types.h"
#include "test_util.h"

namespace npullm {
namespace {

struct TypeCase {
  GgmlType type;
  // Upper bound of RMSE / std on Gaussian data (about 1.25x what ggml's quantisers reach).
  double rel_rmse;
};

const TypeCase kCases[] = {
    {GgmlType::F16, 3e-4},    {GgmlType::BF16, 3e-3},   {GgmlType::Q8_0, 8e-3},   {GgmlType::Q6_K, 2.2e-2},
    {GgmlType::Q5_K, 4.4e-2}, {GgmlType::Q5_1, 4.6e-2}, {GgmlType::Q5_0, 5.0e-2}, {GgmlType::Q4_K, 8.6e-2},
    {GgmlType::Q4_1, 9.4e-2}, {GgmlType::Q4_0, 1.02e-1}, {GgmlType::IQ4_NL, 9.4e-2}, {GgmlType::IQ4_XS, 9.4e-2},
    {GgmlType::Q3_K, 1.8e-1}, {GgmlType::Q2_K, 3.6e-1},
};

// Deterministic, roughly normal values (sum of four uniforms, unit variance) times `scale`.
std::vector<float> gaussian(size_t n, uint64_t seed, float scale) {
  std::vector<float> x(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : x) {
    double sum = 0;
    for (int k = 0; k < 4; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      sum += static_cast<double>(s >> 11) * 0x1.0p-53;
    }
    v = static_cast<float>((sum - 2.0) * 1.7320508075688772 * scale);
  }
  return x;
}

// Quantises then dequantises `x` row by row (rows of `row` elements).
std::vector<float> round_trip(GgmlType t, const std::vector<float>& x, int64_t row) {
  const size_t rb = ggml_row_bytes(t, row);
  std::vector<uint8_t> q(rb);
  std::vector<float> y(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(row); ++r) {
    quantize_row(t, x.data() + r * row, q.data(), row);
    dequantize_row(t, q.data(), y.data() + r * row, row);
  }
  return y;
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(se / static_cast<double>(a.size()));
}

TEST(Quantize, CanQuantizeListsEveryQuantiser) {
  for (const TypeCase& c : kCases) EXPECT_TRUE(can_quantize(c.type)) << ggml_type_name(c.type);
  EXPECT_TRUE(can_quantize(GgmlType::F32));
  EXPECT_TRUE(can_quantize(GgmlType::Q8_K));
  EXPECT_FALSE(can_quantize(GgmlType::IQ2_XXS));
  EXPECT_FALSE(can_quantize(GgmlType::Q8_1));
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_THROW(quantize_row(GgmlType::IQ2_XXS, x.data(), q.data(), 256), Error);
  EXPECT_THROW(quantize_row(GgmlType::Q4_K, x.data(), q.data(), 128), Error);  // not a whole super-block
}

// llama-quantize's output for one 256x256 tensor (../shared/golden/dequant/README.md): our
// quantisers follow the same algorithms and float expressions, so the bytes must be identical.
TEST(Quantize, MatchesLlamaQuantizeByteForByte) {
  NPULLM_REQUIRE_SHARED("golden/dequant/source.f32");
  const std::string src = test::read_file(test::shared_path("golden/dequant/source.f32"));
  ASSERT_EQ(src.size(), 65536u * 4);
  std::vector<float> x(65536);
  std::memcpy(x.data(), src.data(), src.size());
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                            GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                            GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::F16, GgmlType::BF16};
  for (GgmlType t : types) {
    const std::string name(ggml_type_name(t));
    const std::string ref = test::read_file(test::shared_path("golden/dequant/" + name + ".bin"));
    const size_t rb = ggml_row_bytes(t, 256);
    ASSERT_EQ(ref.size(), rb * 256) << name;
    std::vector<uint8_t> q(ref.size());
    for (size_t r = 0; r < 256; ++r) quantize_row(t, x.data() + 256 * r, q.data() + rb * r, 256);
    size_t first_diff = q.size();
    for (size_t i = 0; i < q.size(); ++i)
      if (q[i] != static_cast<uint8_t>(ref[i])) {
        first_diff = i;
        break;
      }
    EXPECT_EQ(first_diff, q.size()) << name << ": first differing byte at " << first_diff << " (row "
                                    << first_diff / rb << ")";
  }
}

TEST(Quantize, RoundTripErrorWithinBounds) {
  const std::vector<float> x = gaussian(256 * 64, 7, 0.05f);
  for (const TypeCase& c : kCases) {
    const std::vector<float> y = round_trip(c.type, x, 512);
    const double rel = rmse(x, y) / 0.05;
    EXPECT_LT(rel, c.rel_rmse) << ggml_type_name(c.type);
    // The bound is about 1.25x what ggml's quantisers reach (measured 0.56x-0.82x of it: BF16 0.56,
    // F16 0.70, Q8_0 0.64, the others 0.78-0.82); far below 0.45x means the type kept more bits than
    // it has (a copy, a wrong block size or scale). Near 1.0 would be a quantiser ignoring its input.
    EXPECT_GT(rel, 0.45 * c.rel_rmse) << ggml_type_name(c.type);
  }
}

// More bits, less error: the k-quants and the 32-element types keep their order.
TEST(Quantize, ErrorDecreasesWithBits) {
  const std::vector<float> x = gaussian(256 * 32, 3, 1.0f);
  auto err = [&](GgmlType t) { return rmse(x, round_trip(t, x, 256)); };
  EXPECT_LT(err(GgmlType::Q3_K), err(GgmlType::Q2_K));
  EXPECT_LT(err(GgmlType::Q4_K), err(GgmlType::Q3_K));
  EXPECT_LT(err(GgmlType::Q5_K), err(GgmlType::Q4_K));
  EXPECT_LT(err(GgmlType::Q6_K), err(GgmlType::Q5_K));
  EXPECT_LT(err(GgmlType::Q8_0), err(GgmlType::Q6_K));
  EXPECT_LT(err(GgmlType::Q5_0), err(GgmlType::Q4_0));
  EXPECT_LT(err(GgmlType::Q5_1), err(GgmlType::Q4_1));
}

TEST(Quantize, ZerosStayZero) {
  const std::vector<float> x(512, 0.0f);
  for (const TypeCase& c : kCases) {
    for (float v : round_trip(c.type, x, 512)) ASSERT_EQ(v, 0.0f) << ggml_type_name(c.type);
  }
}

// Limit of RMSE / RMS(input) for the edge inputs: the Gaussian bound of kCases, except for values
// of 1e-4, where the F16 block scales lose bits (near F16's subnormal range): measured there Q8_0
// 9.4e-3, Q6_K 0.106, Q5_K 5.8e-2, IQ4_XS 0.171; these limits are 1.3x that.
double edge_limit(const TypeCase& c, const std::string& input) {
  if (input == "tiny") {
    switch (c.type) {
      case GgmlType::Q8_0: return 1.22e-2;
      case GgmlType::Q6_K: return 0.138;
      case GgmlType::Q5_K: return 7.6e-2;
      case GgmlType::IQ4_XS: return 0.222;
      default: break;
    }
  }
  return c.rel_rmse;
}

TEST(Quantize, ConstantsSpikesAndExtremeScalesStayFiniteAndClose) {
  struct Input {
    const char* what;
    std::vector<float> x;
  };
  std::vector<Input> inputs;
  inputs.push_back({"constant 0.5", std::vector<float>(512, 0.5f)});
  inputs.push_back({"constant -3", std::vector<float>(512, -3.0f)});
  std::vector<float> spike(512, 0.001f);
  spike[77] = 40.0f;
  spike[300] = -25.0f;
  inputs.push_back({"spikes", spike});
  inputs.push_back({"huge", gaussian(512, 11, 1e4f)});
  inputs.push_back({"tiny", gaussian(512, 12, 1e-4f)});
  std::vector<float> positive = gaussian(512, 13, 1.0f);
  for (float& v : positive) v = std::fabs(v) + 2.0f;  // all positive: exercises the min of Q4_1 / k-quants
  inputs.push_back({"all positive", positive});
  for (const Input& in : inputs) {
    for (const TypeCase& c : kCases) {
      const std::vector<float> y = round_trip(c.type, in.x, 512);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << ggml_type_name(c.type) << " " << in.what;
      const std::string what = std::string(ggml_type_name(c.type)) + " " + in.what;
      if (c.type == GgmlType::F16 || c.type == GgmlType::BF16) {
        // Element by element: half an ulp of 11 (F16) or 8 (BF16) significant bits, and F16's
        // subnormal step (2^-24) below 2^-14.
        const int bits = c.type == GgmlType::F16 ? 11 : 8;
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_LE(std::fabs(double(y[i]) - in.x[i]), std::ldexp(std::fabs(double(in.x[i])), -bits) + 0x1p-25)
              << what << " [" << i << "]";
        continue;
      }
      // The error relative to the input's RMS, per type (before: any element could be off by the
      // whole input range). Measured: constants 0-3.6e-4, spikes 1.7e-4-1.1e-3 (IQ4 4.9e-2), huge and
      // all-positive within 0.8x of the Gaussian bound.
      double ms = 0;
      for (float v : in.x) ms += double(v) * v;
      const double rel = rmse(in.x, y) / std::sqrt(ms / double(in.x.size()));
      EXPECT_LT(rel, edge_limit(c, in.what)) << what;
    }
  }
  // Constants are exact (or nearly) where a block can represent them: a min (Q4_1, Q5_1) or one level.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q6_K}) {
    const std::vector<float> y = round_trip(t, inputs[0].x, 512);
    for (float v : y) ASSERT_NEAR(v, 0.5f, 1e-3f) << ggml_type_name(t);
  }
}

TEST(Quantize, Q8KHoldsScaleQuantsAndBlockSums) {
  const std::vector<float> x = gaussian(512, 5, 2.0f);
  std::vector<uint8_t> q(ggml_row_bytes(GgmlType::Q8_K, 512));
  quantize_row(GgmlType::Q8_K, x.data(), q.data(), 512);
  for (int b = 0; b < 2; ++b) {
    const uint8_t* blk = q.data() + 292 * b;
    float d;
    std::memcpy(&d, blk, 4);
    const auto* qs = reinterpret_cast<const int8_t*>(blk + 4);
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[256 * b + j]));
    EXPECT_NEAR(std::fabs(d) * 127.0f, amax, amax * 1e-5f);
    for (int j = 0; j < 256; ++j) ASSERT_NEAR(d * qs[j], x[256 * b + j], std::fabs(d) * 0.5f + 1e-6f);
    for (int g = 0; g < 16; ++g) {
      int16_t bsum;
      std::memcpy(&bsum, blk + 260 + 2 * g, 2);
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qs[16 * g + j];
      EXPECT_EQ(bsum, sum);
    }
  }
}

}  // namespace
}  // namespace npullm
