#include "device/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "device/cpu/kernels.h"

namespace npullm::cpu {

MoeTable moe_table(const int32_t* table, int64_t S, int64_t k, int64_t E) {
  const int64_t T = S * k;
  return MoeTable{table, reinterpret_cast<const float*>(table + T), table + 2 * T, table + 3 * T, table + 4 * T};
}

namespace {

// The k largest of v[0, E) in descending order, an equal value going to the lower index (a strict
// '>' scan in ascending index). NaNs are never larger, so a row of NaNs still picks k experts.
void top_k(const float* v, int64_t E, int64_t k, int32_t* out) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= out[i] == e;
      if (taken) continue;
      if (best < 0 || v[e] > v[best]) best = static_cast<int32_t>(e);
    }
    out[j] = best;
  }
}

}  // namespace

void moe_route(const float* logits, int64_t S, int64_t E, int64_t k, MoeGating gating, int32_t* table, float* work) {
  if (k < 1 || k > E) fail("moe_route: {} of {} experts", k, E);
  const int64_t T = S * k;
  int32_t* id = table;
  float* w = reinterpret_cast<float*>(table + T);
  int32_t* pair = table + 2 * T;
  int32_t* row = table + 3 * T;
  int32_t* first = table + 4 * T;
  float* p = work;  // [E] probabilities
  for (int64_t s = 0; s < S; ++s) {
    const float* l = logits + s * E;
    int32_t* ids = id + s * k;
    float* ws = w + s * k;
    if (gating == MoeGating::SoftmaxTopK) {
      // As llama.cpp's soft_max: exp(l - max), summed in double, times the float reciprocal.
      float mx = -INFINITY;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, l[e]);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(l[e] - mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t e = 0; e < E; ++e) p[e] *= inv;
      top_k(p, E, k, ids);
      float chosen = 0;
      for (int64_t j = 0; j < k; ++j) chosen += p[ids[j]];
      chosen = std::max(chosen, 6.103515625e-5f);
      for (int64_t j = 0; j < k; ++j) ws[j] = p[ids[j]] / chosen;
    } else {
      top_k(l, E, k, ids);
      float mx = -INFINITY;
      for (int64_t j = 0; j < k; ++j) mx = std::max(mx, l[ids[j]]);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += ws[j] = std::exp(l[ids[j]] - mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < k; ++j) ws[j] *= inv;
    }
  }
  // Counting sort of the pairs by expert; within an expert, ascending pair (token order).
  std::fill(first, first + E + 1, 0);
  for (int64_t q = 0; q < T; ++q) first[id[q] + 1]++;
  for (int64_t e = 0; e < E; ++e) first[e + 1] += first[e];
  int32_t* next = reinterpret_cast<int32_t*>(work);  // [E] next free row of each expert
  std::copy(first, first + E, next);
  for (int64_t q = 0; q < T; ++q) {
    const int32_t r = next[id[q]]++;
    pair[r] = static_cast<int32_t>(q);
    row[q] = r;
  }
}

void moe_gather(const float* x, int64_t K, int64_t k, const MoeTable& t, float* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) std::memcpy(out + r * K, x + (t.pair[r] / k) * K, static_cast<size_t>(K) * 4);
}

size_t moe_slab_bytes(GgmlType wt, WeightLayout layout, int64_t N, int64_t K) {
  return static_cast<size_t>(N) * (layout == WeightLayout::Panels16 ? panels16_stride(wt, K) : ggml_row_bytes(wt, K));
}

int64_t moe_matmul(const float* x, int64_t K, const void* W, GgmlType wt, WeightLayout layout, const float* bias,
                   const MoeTable& t, int64_t E, float* out, int64_t N, int64_t n0, int64_t n1, float* work) {
  const size_t slab = moe_slab_bytes(wt, layout, N, K);
  int64_t read = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = t.first[e], r1 = t.first[e + 1];
    if (r1 == r0) continue;
    matmul(x + r0 * K, r1 - r0, K, static_cast<const uint8_t*>(W) + static_cast<size_t>(e) * slab, wt,
           bias ? bias + e * N : nullptr, nullptr, out + r0 * N, N, n0, n1, work, nullptr, layout);
    ++read;
  }
  return read;
}

void moe_sum(const float* y, const MoeTable& t, int64_t D, int64_t k, const float* res, float* out, int64_t s0, int64_t s1) {
  for (int64_t s = s0; s < s1; ++s) {
    const float* w = t.w + s * k;
    const int32_t* rows = t.row + s * k;
    for (int64_t d = 0; d < D; ++d) {
      float acc = w[0] * y[rows[0] * D + d];
      for (int64_t j = 1; j < k; ++j) {
        const float term = w[j] * y[rows[j] * D + d];
        acc += term;
      }
      out[s * D + d] = res ? acc + res[s * D + d] : acc;
    }
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, float alpha, float limit, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

}  // namespace npullm::cpu
