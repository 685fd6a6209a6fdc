// The mixture-of-experts kernels (device/cpu/moe.h) against plain references written here from
// their definitions (blob/task.h): the routing rule of each gating (top-k with ties to the lower
// id, the weights' formulas), the table's grouping by expert, the expert matmul equal bit for bit
// to one cpu::matmul per token over that token's expert slab (so grouping never changes an
// answer), and the weighted sum in selection order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "blob/task.h"
#include "device/cpu/kernels.h"
#include "device/cpu/moe.h"
#include "formats/ggml_types.h"
#include "formats/weight_layout.h"

namespace npullm::cpu {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// The k best experts by score, descending, an equal score going to the lower id: a stable sort
// of the ids by descending score.
std::vector<int32_t> reference_top_k(const float* v, int64_t E, int64_t k) {
  std::vector<int32_t> ids(static_cast<size_t>(E));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  ids.resize(static_cast<size_t>(k));
  return ids;
}

struct Routed {
  std::vector<int32_t> table;
  MoeTable t;
};

Routed route(const std::vector<float>& logits, int64_t S, int64_t E, int64_t k, MoeGating g) {
  Routed r;
  r.table.assign(static_cast<size_t>(blob::moe_table_ints(S, k, E)), -7);
  std::vector<float> work(static_cast<size_t>(E));
  moe_route(logits.data(), S, E, k, g, r.table.data(), work.data());
  r.t = moe_table(r.table.data(), S, k, E);
  return r;
}

TEST(MoeKernels, SoftmaxTopKChoosesAndWeighsAsQwen3Moe) {
  const int64_t S = 9, E = 8, k = 3;
  std::vector<float> logits = random_floats(static_cast<size_t>(S * E), 1, 2.0f);
  logits[2 * E + 5] = logits[2 * E + 1] = 9.0f;  // an exact tie at the top: expert 1 first
  const Routed r = route(logits, S, E, k, MoeGating::SoftmaxTopK);
  for (int64_t s = 0; s < S; ++s) {
    const float* l = logits.data() + s * E;
    const std::vector<int32_t> want = reference_top_k(l, E, k);
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(static_cast<double>(l[e]));
    double chosen = 0;
    for (int32_t id : want) chosen += std::exp(static_cast<double>(l[id])) / z;
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(r.t.id[s * k + j], want[static_cast<size_t>(j)]) << "token " << s << " choice " << j;
      const double p = std::exp(static_cast<double>(l[want[static_cast<size_t>(j)]])) / z;
      EXPECT_NEAR(r.t.w[s * k + j], p / chosen, 1e-6) << "token " << s << " choice " << j;
    }
  }
  EXPECT_EQ(r.t.id[2 * k], 1);
  EXPECT_EQ(r.t.id[2 * k + 1], 5);
}

TEST(MoeKernels, TopKSoftmaxWeighsTheChosenLogitsOnly) {
  const int64_t S = 5, E = 16, k = 4;
  const std::vector<float> logits = random_floats(static_cast<size_t>(S * E), 2, 3.0f);
  const Routed r = route(logits, S, E, k, MoeGating::TopKSoftmax);
  for (int64_t s = 0; s < S; ++s) {
    const float* l = logits.data() + s * E;
    const std::vector<int32_t> want = reference_top_k(l, E, k);
    double z = 0;
    for (int32_t id : want) z += std::exp(static_cast<double>(l[id]));
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(r.t.id[s * k + j], want[static_cast<size_t>(j)]);
      EXPECT_NEAR(r.t.w[s * k + j], std::exp(static_cast<double>(l[want[static_cast<size_t>(j)]])) / z, 1e-6);
    }
  }
}

TEST(MoeKernels, TableGroupsRowsByExpertInTokenOrder) {
  const int64_t S = 33, E = 8, k = 2, T = S * k;
  const Routed r = route(random_floats(static_cast<size_t>(S * E), 3), S, E, k, MoeGating::SoftmaxTopK);
  EXPECT_EQ(r.t.first[0], 0);
  EXPECT_EQ(r.t.first[E], T);
  for (int64_t e = 0; e < E; ++e) {
    ASSERT_LE(r.t.first[e], r.t.first[e + 1]);
    for (int64_t row = r.t.first[e]; row < r.t.first[e + 1]; ++row) {
      EXPECT_EQ(r.t.id[r.t.pair[row]], e);
      if (row > r.t.first[e]) {
        EXPECT_LT(r.t.pair[row - 1], r.t.pair[row]);
      }
    }
  }
  for (int64_t p = 0; p < T; ++p) EXPECT_EQ(r.t.pair[r.t.row[p]], p);
}

// Gather + expert matmul + weighted sum, for every expert weight layout this CPU reads, against
// one cpu::matmul per (token, choice) over that expert's slab alone.
TEST(MoeKernels, GroupedExpertsEqualPerTokenMatmulsBitForBit) {
  const int64_t S = 21, E = 8, k = 2, K = 256, N = 64, T = S * k;
  const GgmlType wt = GgmlType::Q4_K;
  const std::vector<float> logits = random_floats(static_cast<size_t>(S * E), 4, 2.0f);
  const std::vector<float> x = random_floats(static_cast<size_t>(S * K), 5);
  const std::vector<float> wf = random_floats(static_cast<size_t>(E * N * K), 6, 0.05f);
  const std::vector<float> bias = random_floats(static_cast<size_t>(E * N), 7);
  const size_t row_bytes = ggml_row_bytes(wt, K);
  std::vector<uint8_t> rows(row_bytes * static_cast<size_t>(E * N));
  for (int64_t n = 0; n < E * N; ++n) quantize_row(wt, wf.data() + n * K, rows.data() + n * row_bytes, K);
  const Routed r = route(logits, S, E, k, MoeGating::SoftmaxTopK);
  std::vector<float> work(static_cast<size_t>(matmul_work_floats(K)));

  // The reference: each (token, choice) alone, M = 1, over its expert's rows.
  std::vector<float> want(static_cast<size_t>(T * N));
  for (int64_t p = 0; p < T; ++p) {
    const int32_t e = r.t.id[p];
    matmul(x.data() + (p / k) * K, 1, K, rows.data() + static_cast<size_t>(e * N) * row_bytes, wt, bias.data() + e * N, nullptr,
           want.data() + p * N, N, 0, N, work.data());
  }
  std::vector<WeightLayout> layouts = {WeightLayout::Rows};
  if (matmul_reads_panels16(wt, K)) layouts.push_back(WeightLayout::Panels16);
  for (WeightLayout layout : layouts) {
    SCOPED_TRACE(weight_layout_name(layout));
    std::vector<uint8_t> packed(weight_bytes(wt, E * N, K, layout));
    if (layout == WeightLayout::Panels16) pack_panels16(wt, rows.data(), E * N, K, packed.data(), 0, E * N / 16);
    else std::memcpy(packed.data(), rows.data(), rows.size());
    std::vector<float> xs(static_cast<size_t>(T * K)), got(static_cast<size_t>(T * N));
    moe_gather(x.data(), K, k, r.t, xs.data(), 0, T);
    // In two column ranges, as two threads would take them.
    int64_t slabs = moe_matmul(xs.data(), K, packed.data(), wt, layout, bias.data(), r.t, E, got.data(), N, 0, 32, work.data());
    slabs += moe_matmul(xs.data(), K, packed.data(), wt, layout, bias.data(), r.t, E, got.data(), N, 32, N, work.data());
    int64_t used = 0;
    for (int64_t e = 0; e < E; ++e) used += r.t.first[e + 1] > r.t.first[e];
    EXPECT_EQ(slabs, 2 * used);
    for (int64_t p = 0; p < T; ++p)
      ASSERT_EQ(0, std::memcmp(got.data() + r.t.row[p] * N, want.data() + p * N, static_cast<size_t>(N) * 4)) << "pair " << p;

    // The weighted sum onto a residual, in selection order.
    const std::vector<float> res = random_floats(static_cast<size_t>(S * N), 8);
    std::vector<float> out(static_cast<size_t>(S * N));
    moe_sum(got.data(), r.t, N, k, res.data(), out.data(), 0, S);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < N; ++d) {
        float acc = r.t.w[s * k] * want[static_cast<size_t>((s * k) * N + d)];
        for (int64_t j = 1; j < k; ++j) acc += r.t.w[s * k + j] * want[static_cast<size_t>((s * k + j) * N + d)];
        ASSERT_EQ(out[static_cast<size_t>(s * N + d)], acc + res[static_cast<size_t>(s * N + d)]) << s << "," << d;
      }
  }
}

TEST(MoeKernels, SwiGluOaiClampsAsGptOss) {
  const float gate[] = {-10.0f, -1.0f, 0.0f, 0.5f, 3.0f, 7.5f, 20.0f};
  const float up[] = {-9.0f, -7.5f, -1.0f, 0.0f, 2.0f, 8.0f, 100.0f};
  float out[7];
  swiglu_oai(gate, up, out, 1.702f, 7.0f, 0, 7);
  for (int i = 0; i < 7; ++i) {
    const double g = std::min(static_cast<double>(gate[i]), 7.0), u = std::clamp(static_cast<double>(up[i]), -7.0, 7.0);
    EXPECT_NEAR(out[i], g / (1 + std::exp(-1.702 * g)) * (u + 1), 1e-5 * (1 + std::fabs(out[i]))) << i;
  }
}

}  // namespace
}  // namespace npullm::cpu
