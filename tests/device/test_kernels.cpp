// CPU kernels against naive double-precision references written here, for every code path this
// CPU can run (scalar, avx2, avx512: forced with kernel_force_isa), plus the promises of
// kernels.h: results independent of the [n0, n1) / [r0, r1) split, M = 1 and M > 1 agree bit for
// bit, and the ISA paths agree with each other within a tight tolerance. Matmuls with int8
// activations (kernels.h: matmul_activations) are also checked bit for bit against a scalar model
// of their quantisation and integer dot products written here from the block layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "device/cpu/kernels.h"
#include "formats/ggml_types.h"
#include "test_util.h"

namespace npullm::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

const char* const kIsas[] = {"scalar", "avx2", "avx512-base", "avx512", "amx"};

// Restores the best path after a test that forced one.
void force_best() {
  if (!kernel_force_isa("amx") && !kernel_force_isa("avx512") && !kernel_force_isa("avx2")) kernel_force_isa("scalar");
}

using test::same_bits;

// got equals want bit for bit; the first difference is named.
::testing::AssertionResult bits_equal(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " values vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!same_bits(got[i], want[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

// A 64-byte aligned buffer of n bytes (filled with `fill`), as prequantize_x wants.
struct AlignedBytes {
  std::vector<uint8_t> store;
  void* data;
  explicit AlignedBytes(size_t n, uint8_t fill = 0) : store(n + 64, fill) {
    data = store.data() + (64 - reinterpret_cast<uintptr_t>(store.data()) % 64) % 64;
  }
};

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

// ---- weights ---------------------------------------------------------------------------------

struct Weights {
  GgmlType type;
  int64_t N, K;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // exact dequantised values, [N, K]
};

// Byte offsets of the f16 scale fields (d, and dmin / m where there is one) in a block of t.
std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q5_0: return {0};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

// Random weights of type t. Types with a quantiser (and MXFP4, whose random scale bytes would span
// 2^-128 .. 2^127) are quantised from Gaussian values; the others
// (Q4_1, Q5_0, Q5_1, K-quants) get random quant bits and small random fp16 scales / mins.
Weights make_weights(GgmlType t, int64_t N, int64_t K, uint32_t seed) {
  Weights w{t, N, K, {}, {}};
  const size_t rb = ggml_row_bytes(t, K);
  w.bytes.resize(rb * N);
  const std::vector<float> src = randn(static_cast<size_t>(N * K), seed, 0.5f);
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
      t == GgmlType::Q4_0 || t == GgmlType::MXFP4) {
    for (int64_t n = 0; n < N; ++n) quantize_row(t, src.data() + n * K, w.bytes.data() + n * rb, K);
  } else {
    std::mt19937 rng(seed);
    for (uint8_t& b : w.bytes) b = static_cast<uint8_t>(rng());
    const int64_t bs = ggml_type_traits(t).type_size;
    std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
    for (size_t off = 0; off < w.bytes.size(); off += bs)
      for (int f : f16_fields(t)) {
        const uint16_t h = fp32_to_fp16(ud(rng));
        std::memcpy(&w.bytes[off + f], &h, 2);
      }
  }
  w.deq.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) dequantize_row(t, w.bytes.data() + n * rb, w.deq.data() + n * K, K);
  return w;
}

// out[m, n] in double, plus the magnitude sum |x||w| that bounds any float summation's error.
void reference_matmul(const std::vector<float>& x, int64_t M, const Weights& w, const float* bias,
                      const float* res, std::vector<double>& out, std::vector<double>& mag) {
  out.assign(static_cast<size_t>(M * w.N), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < w.N; ++n) {
      double s = 0.0, a = 0.0;
      for (int64_t k = 0; k < w.K; ++k) {
        const double p = double(x[m * w.K + k]) * w.deq[n * w.K + k];
        s += p;
        a += std::fabs(p);
      }
      if (bias) s += bias[n], a += std::fabs(bias[n]);
      if (res) s += res[m * w.N + n], a += std::fabs(res[m * w.N + n]);
      out[m * w.N + n] = s;
      mag[m * w.N + n] = a;
    }
}

std::vector<float> run_matmul(const std::vector<float>& x, int64_t M, const Weights& w, const float* bias,
                              const float* res, const std::vector<std::pair<int64_t, int64_t>>& splits) {
  std::vector<float> out(static_cast<size_t>(M * w.N), -12345.0f);
  std::vector<float> work(static_cast<size_t>(matmul_work_floats(w.K)));
  for (auto [a, b] : splits)
    matmul(x.data(), M, w.K, w.bytes.data(), w.type, bias, res, out.data(), w.N, a, b, work.data());
  return out;
}

struct MatmulCase {
  GgmlType type;
  const char* name;
  std::vector<int64_t> Ks;  // K values the type allows
};

std::vector<MatmulCase> matmul_cases() {
  const std::vector<int64_t> any = {1, 7, 16, 17, 64, 100, 333};
  // 544 = 17 blocks: activations are quantised 16 blocks at a time, then one by one.
  const std::vector<int64_t> q32 = {32, 96, 160, 352, 544};
  return {{GgmlType::F32, "F32", any},   {GgmlType::F16, "F16", any},   {GgmlType::BF16, "BF16", any},
          {GgmlType::Q8_0, "Q8_0", q32}, {GgmlType::Q4_0, "Q4_0", q32}, {GgmlType::Q4_1, "Q4_1", q32},
          {GgmlType::Q5_0, "Q5_0", q32}, {GgmlType::Q5_1, "Q5_1", q32}, {GgmlType::Q4_K, "Q4_K", {256, 512}},
          {GgmlType::Q5_K, "Q5_K", {256, 512}}, {GgmlType::Q6_K, "Q6_K", {256, 512}},
          {GgmlType::MXFP4, "MXFP4", q32}};
}


// ---- int8 activations: a scalar model of kernels.h's numerics ----------------------------------
//
// Written from the block layouts, independently of the kernels: activations quantised per 32
// (Q8_0-style, fp16 scale) or per 256 (Q8_K-style, float scale), exact integer dot products per
// weight block, then one float chain per output (std::fma, blocks in order).

bool uses_int8(GgmlType t) { return matmul_activations(t) != MatmulActivations::F32; }

struct QRow {
  std::vector<int> q;      // quantised activations
  std::vector<float> d;    // scale per block (32 or 256)
  std::vector<float> amax;  // max |x| per block, for error bounds
};

QRow quantise_act(const float* x, int64_t K, bool k_style) {
  const int64_t bs = k_style ? 256 : 32;
  QRow r;
  r.q.resize(K);
  for (int64_t b = 0; b < K / bs; ++b) {
    float amax = 0.0f;
    for (int64_t j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(x[b * bs + j]));
    r.amax.push_back(amax);
    if (k_style) {
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int64_t j = 0; j < bs; ++j)
        r.q[b * bs + j] = std::clamp(static_cast<int>(std::nearbyint(x[b * bs + j] * id)), -127, 127);
      r.d.push_back(amax != 0.0f ? 1.0f / id : 0.0f);
    } else {
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int64_t j = 0; j < bs; ++j) r.q[b * bs + j] = static_cast<int>(std::nearbyint(x[b * bs + j] * id));
      r.d.push_back(fp16_to_fp32(fp32_to_fp16(amax / 127.0f)));
    }
  }
  return r;
}

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// The integer quants of one weight block and its scales. Simple types: w[32], d (and m);
// Q4_K / Q5_K: w[256] unsigned, sc[8], mn[8], d, dmin; Q6_K: w[256] in [-32, 31], sc[16], d.
struct WBlock {
  int w[256];
  int sc[16], mn[8];
  float d = 0, m = 0;
};

void decode_block(GgmlType t, const uint8_t* b, WBlock& o) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: {
      const uint8_t* qs = b + (t == GgmlType::Q4_0 ? 2 : 4);
      const int off = t == GgmlType::Q4_0 ? 8 : 0;
      for (int j = 0; j < 16; ++j) o.w[j] = (qs[j] & 15) - off, o.w[j + 16] = (qs[j] >> 4) - off;
      o.d = f16_at(b);
      if (t == GgmlType::Q4_1) o.m = f16_at(b + 2);
      return;
    }
    case GgmlType::Q5_0: case GgmlType::Q5_1: {
      const bool one = t == GgmlType::Q5_1;
      uint32_t qh;
      std::memcpy(&qh, b + (one ? 4 : 2), 4);
      const uint8_t* qs = b + (one ? 8 : 6);
      for (int j = 0; j < 32; ++j) {
        const int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
        o.w[j] = (lo | (((qh >> j) & 1) << 4)) - (one ? 0 : 16);
      }
      o.d = f16_at(b);
      if (one) o.m = f16_at(b + 2);
      return;
    }
    case GgmlType::Q8_0:
      for (int j = 0; j < 32; ++j) o.w[j] = static_cast<int8_t>(b[2 + j]);
      o.d = f16_at(b);
      return;
    case GgmlType::MXFP4: {
      // OCP MX: E2M1 codes (sign, 2 exponent bits of bias 1, 1 mantissa bit; exponent 0 is
      // subnormal) whose doubled values are integers, and an E8M0 scale 2^(e - 127), halved.
      for (int j = 0; j < 32; ++j) {
        const int c = j < 16 ? (b[1 + j] & 15) : (b[1 + j - 16] >> 4);
        const int ex = (c >> 1) & 3, man = c & 1;
        const int twice = ex == 0 ? man : (2 + man) << (ex - 1);
        o.w[j] = (c & 8) ? -twice : twice;
      }
      o.d = std::ldexp(1.0f, b[0] - 128);
      return;
    }
    case GgmlType::Q4_K: case GgmlType::Q5_K: {
      const uint8_t* sc = b + 4;
      for (int j = 0; j < 8; ++j) {
        if (j < 4) {
          o.sc[j] = sc[j] & 63, o.mn[j] = sc[j + 4] & 63;
        } else {
          o.sc[j] = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
          o.mn[j] = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        }
      }
      const bool five = t == GgmlType::Q5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * (j / 2) + l];
          o.w[32 * j + l] = ((j % 2) ? byte >> 4 : byte & 15) + (five && ((qh[l] >> j) & 1) ? 16 : 0);
        }
      o.d = f16_at(b);
      o.m = f16_at(b + 2);
      return;
    }
    case GgmlType::Q6_K: {
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
        const uint8_t ql = b[64 * h + 32 * (quarter % 2) + l];
        const int lo = quarter < 2 ? (ql & 15) : (ql >> 4);
        const int hi = (b[128 + 32 * h + l] >> (2 * quarter)) & 3;
        o.w[e] = (lo | (hi << 4)) - 32;
      }
      for (int j = 0; j < 16; ++j) o.sc[j] = static_cast<int8_t>(b[192 + j]);
      o.d = f16_at(b + 208);
      return;
    }
    default: FAIL() << "no int8 model for " << ggml_type_name(t);
  }
}

// out[m, n] as kernels.h specifies for int8 activations, bit for bit.
std::vector<float> int8_model_matmul(const std::vector<float>& x, int64_t M, const Weights& w, const float* bias,
                                     const float* res) {
  const GgmlType t = w.type;
  const bool k_style = matmul_activations(t) == MatmulActivations::Q8_K;
  const int64_t unit = k_style ? 256 : 32;
  const size_t rb = ggml_row_bytes(t, w.K), bb = ggml_type_traits(t).type_size;
  std::vector<float> out(static_cast<size_t>(M * w.N));
  for (int64_t m = 0; m < M; ++m) {
    const QRow xq = quantise_act(x.data() + m * w.K, w.K, k_style);
    for (int64_t n = 0; n < w.N; ++n) {
      float acc = 0.0f;
      for (int64_t u = 0; u < w.K / unit; ++u) {
        WBlock blk;
        decode_block(t, w.bytes.data() + n * rb + u * bb, blk);
        const int* q = xq.q.data() + u * unit;
        const float dx = xq.d[u];
        if (!k_style) {
          int32_t I = 0, S = 0;
          for (int j = 0; j < 32; ++j) I += blk.w[j] * q[j], S += q[j];
          acc = std::fma(static_cast<float>(I), dx * blk.d, acc);
          if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) acc = std::fma(blk.m, dx * static_cast<float>(S), acc);
        } else if (t == GgmlType::Q6_K) {
          int32_t isc = 0;
          for (int j = 0; j < 16; ++j) {
            int32_t I = 0;
            for (int l = 0; l < 16; ++l) I += blk.w[16 * j + l] * q[16 * j + l];
            isc += blk.sc[j] * I;
          }
          acc = std::fma(static_cast<float>(isc), dx * blk.d, acc);
        } else {
          int32_t isc = 0, imn = 0;
          for (int j = 0; j < 8; ++j) {
            int32_t I = 0, S = 0;
            for (int l = 0; l < 32; ++l) I += blk.w[32 * j + l] * q[32 * j + l], S += q[32 * j + l];
            isc += blk.sc[j] * I;
            imn += blk.mn[j] * S;
          }
          acc = std::fma(static_cast<float>(isc), dx * blk.d, acc);
          acc = std::fma(static_cast<float>(-imn), dx * blk.m, acc);
        }
      }
      float v = acc;
      if (bias) v += bias[n];
      if (res) v += res[m * w.N + n];
      out[m * w.N + n] = v;
    }
  }
  return out;
}

// How far int8 activations may move out[m, n] from the exact product: each activation is off by
// at most half a quantisation step d (d = amax / 127) plus, for the fp16 scale of Q8_0-style
// blocks, 127 * 2^-11 d; 0.6 d covers both. Zero for types computed in F32.
std::vector<double> act_quant_bound(const std::vector<float>& x, int64_t M, const Weights& w) {
  std::vector<double> b(static_cast<size_t>(M * w.N), 0.0);
  if (!uses_int8(w.type)) return b;
  const bool k_style = matmul_activations(w.type) == MatmulActivations::Q8_K;
  const int64_t unit = k_style ? 256 : 32;
  for (int64_t m = 0; m < M; ++m) {
    const QRow xq = quantise_act(x.data() + m * w.K, w.K, k_style);
    for (int64_t n = 0; n < w.N; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < w.K; ++k) s += std::fabs(double(w.deq[n * w.K + k])) * 0.6 * xq.amax[k / unit] / 127.0;
      b[m * w.N + n] = s;
    }
  }
  return b;
}

// ---- per-ISA fixture -------------------------------------------------------------------------

class KernelIsa : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!kernel_force_isa(GetParam())) NPULLM_SKIP_UNSUPPORTED(std::string("this CPU cannot run the ") + GetParam() + " path");
    // "avx512-base" (the AVX-512 build without VBMI2) reports itself as "avx512", as the VBMI2 build does.
    ASSERT_EQ(std::string(kernel_isa()), std::string(GetParam()) == "avx512-base" ? "avx512" : GetParam());
  }
  void TearDown() override { force_best(); }
};

TEST_P(KernelIsa, MatmulMatchesDoubleReferenceForEveryType) {
  uint32_t seed = 1;
  for (const MatmulCase& c : matmul_cases()) {
    for (int64_t K : c.Ks) {
      for (int64_t M : {1, 2, 3, 5}) {
        const int64_t N = 13;
        SCOPED_TRACE(std::string(c.name) + " K=" + std::to_string(K) + " M=" + std::to_string(M));
        const Weights w = make_weights(c.type, N, K, seed++);
        const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++);
        const std::vector<float> bias = randn(static_cast<size_t>(N), seed++);
        const std::vector<float> res = randn(static_cast<size_t>(M * N), seed++);
        for (int variant = 0; variant < 2; ++variant) {  // without / with bias and residual
          const float* b = variant ? bias.data() : nullptr;
          const float* r = variant ? res.data() : nullptr;
          std::vector<double> want, mag;
          reference_matmul(x, M, w, b, r, want, mag);
          const std::vector<double> qb = act_quant_bound(x, M, w);
          const std::vector<float> got = run_matmul(x, M, w, b, r, {{0, N}});
          for (size_t i = 0; i < got.size(); ++i) {
            // Worst-case bound of float summation in any order: (K + 2) u sum |terms|, plus the
            // error int8 activations may add.
            const double tol = double(K + 2) * 6e-8 * mag[i] + qb[i] + 1e-30;
            ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
          }
        }
      }
    }
  }
}

TEST_P(KernelIsa, MatmulIndependentOfSplitAndOfM) {
  uint32_t seed = 100;
  for (const MatmulCase& c : matmul_cases()) {
    const int64_t K = c.Ks.back(), N = 37, M = 5;
    SCOPED_TRACE(c.name);
    const Weights w = make_weights(c.type, N, K, seed++);
    const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++);
    const std::vector<float> bias = randn(static_cast<size_t>(N), seed++);
    const std::vector<float> whole = run_matmul(x, M, w, bias.data(), nullptr, {{0, N}});
    // Uneven splits put rows in different tile positions (4-row groups, 16-row blocks, remainders).
    const std::vector<std::vector<std::pair<int64_t, int64_t>>> splits = {
        {{0, 1}, {1, 6}, {6, 23}, {23, 37}},
        {{0, 18}, {18, 19}, {19, 37}},
        {{30, 37}, {0, 3}, {3, 30}},
    };
    for (const auto& sp : splits) {
      const std::vector<float> got = run_matmul(x, M, w, bias.data(), nullptr, sp);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], whole[i])) << "element " << i;
    }
    std::vector<float> one_by_one(whole.size());
    {
      std::vector<float> work(static_cast<size_t>(matmul_work_floats(K)));
      for (int64_t n = 0; n < N; ++n)
        matmul(x.data(), M, K, w.bytes.data(), w.type, bias.data(), nullptr, one_by_one.data(), N, n, n + 1,
               work.data());
    }
    for (size_t i = 0; i < whole.size(); ++i) ASSERT_TRUE(same_bits(one_by_one[i], whole[i])) << i;
    // Row m of a batch equals the decode (M = 1) result for that row alone.
    for (int64_t m = 0; m < M; ++m) {
      const std::vector<float> xm(x.begin() + m * K, x.begin() + (m + 1) * K);
      const std::vector<float> single = run_matmul(xm, 1, w, bias.data(), nullptr, {{0, 17}, {17, N}});
      for (int64_t n = 0; n < N; ++n)
        ASSERT_TRUE(same_bits(single[n], whole[m * N + n])) << "m=" << m << " n=" << n;
    }
  }
}

// A batch larger than the kernel's row chunk (32) and K spanning several K slices (256) with a
// tail: the blocked prefill path still matches the reference and the M = 1 path bit for bit.
TEST_P(KernelIsa, MatmulLargeBatchCrossesBlocking) {
  uint32_t seed = 300;
  for (auto [t, K] : {std::pair{GgmlType::F32, int64_t{600}}, std::pair{GgmlType::BF16, int64_t{529}},
                      std::pair{GgmlType::Q4_0, int64_t{608}}, std::pair{GgmlType::Q5_0, int64_t{544}}}) {
    SCOPED_TRACE(std::string(ggml_type_name(t)));
    const int64_t M = 37, N = 20;
    const Weights w = make_weights(t, N, K, seed++);
    const std::vector<float> x = randn(M * K, seed++);
    std::vector<double> want, mag;
    reference_matmul(x, M, w, nullptr, nullptr, want, mag);
    const std::vector<double> qb = act_quant_bound(x, M, w);
    const std::vector<float> got = run_matmul(x, M, w, nullptr, nullptr, {{0, 9}, {9, N}});
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], double(K + 2) * 6e-8 * mag[i] + qb[i]) << i;
    for (int64_t m : {0, 31, 32, 36}) {
      const std::vector<float> xm(x.begin() + m * K, x.begin() + (m + 1) * K);
      const std::vector<float> single = run_matmul(xm, 1, w, nullptr, nullptr, {{0, N}});
      for (int64_t n = 0; n < N; ++n) ASSERT_TRUE(same_bits(single[n], got[m * N + n])) << "m=" << m << " n=" << n;
    }
  }
}

TEST_P(KernelIsa, MatmulResidualMayAliasOutput) {
  const int64_t M = 3, K = 64, N = 9;
  const Weights w = make_weights(GgmlType::Q8_0, N, K, 7);
  const std::vector<float> x = randn(M * K, 8);
  std::vector<float> out = randn(M * N, 9);
  const std::vector<float> res = out;
  const std::vector<float> want = run_matmul(x, M, w, nullptr, res.data(), {{0, N}});
  std::vector<float> work(matmul_work_floats(K));
  matmul(x.data(), M, K, w.bytes.data(), w.type, nullptr, out.data(), out.data(), N, 0, N, work.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(same_bits(out[i], want[i])) << i;
}

// Every int8 path computes exactly the model above: same quantised activations, same integer
// dot products, same float chain. Shapes cross the vector panels (8 / 16 rows, pairs of them),
// the decode / prefill switch (M = 4 / 5) and the 64-row activation chunks (M = 70).
TEST_P(KernelIsa, Int8MatmulMatchesScalarModelBitForBit) {
  uint32_t seed = 700;
  for (const MatmulCase& c : matmul_cases()) {
    if (!uses_int8(c.type)) continue;
    for (int64_t K : c.Ks) {
      for (int64_t M : {1, 2, 3, 4, 5, 9, 70}) {
        const int64_t N = M > 9 ? 35 : 53;
        SCOPED_TRACE(std::string(c.name) + " K=" + std::to_string(K) + " M=" + std::to_string(M));
        const Weights w = make_weights(c.type, N, K, seed++);
        const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++);
        const std::vector<float> bias = randn(static_cast<size_t>(N), seed++);
        const std::vector<float> res = randn(static_cast<size_t>(M * N), seed++);
        const bool extras = M % 2 == 1;
        const float* b = extras ? bias.data() : nullptr;
        const float* r = extras ? res.data() : nullptr;
        const std::vector<float> want = int8_model_matmul(x, M, w, b, r);
        const std::vector<float> got = run_matmul(x, M, w, b, r, {{0, 17}, {17, N}});
        ASSERT_TRUE(bits_equal(got, want));
      }
    }
  }
}

// x quantised once up front (prefill: in uneven row pieces, as the device's threads do; decode: by
// each thread for all its chunks) and handed to every output chunk gives the same bits as the
// model; F32-activation types take no pre-quantised x.
TEST_P(KernelIsa, Int8PrequantizedActivationsMatchModelBitForBit) {
  uint32_t seed = 900;
  for (const MatmulCase& c : matmul_cases()) {
    if (!uses_int8(c.type)) continue;
    const int64_t K = c.Ks.back();
    for (int64_t M : {1, 4, 5, 70}) {
      SCOPED_TRACE(std::string(c.name) + " K=" + std::to_string(K) + " M=" + std::to_string(M));
      const int64_t N = 37;
      const Weights w = make_weights(c.type, N, K, seed++);
      const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++);
      const int64_t bytes = prequantized_x_bytes(c.type, M, K);
      ASSERT_GT(bytes, 0);
      const AlignedBytes store(static_cast<size_t>(bytes), 0xA5);
      void* xq = store.data;
      const int64_t cut = M > 3 ? 3 : 1;
      prequantize_x(c.type, x.data(), M, K, xq, cut, M);  // out of order, uneven pieces
      prequantize_x(c.type, x.data(), M, K, xq, 0, cut);
      const std::vector<float> want = int8_model_matmul(x, M, w, nullptr, nullptr);
      std::vector<float> got(static_cast<size_t>(M * N)), work(static_cast<size_t>(matmul_work_floats(K)));
      for (auto [a, b] : std::vector<std::pair<int64_t, int64_t>>{{0, 17}, {17, N}})
        matmul(x.data(), M, K, w.bytes.data(), w.type, nullptr, nullptr, got.data(), N, a, b, work.data(), xq);
      ASSERT_TRUE(bits_equal(got, want));
    }
  }
  EXPECT_EQ(prequantized_x_bytes(GgmlType::F16, 64, 256), 0);
}

// Activations with extremes: all zeros (scale 0), one huge element per block, and exact ties
// (amax = 127 makes x * 127 / amax = x, and x = k + 0.5 rounds to even).
TEST_P(KernelIsa, Int8MatmulEdgeActivations) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
    SCOPED_TRACE(std::string(ggml_type_name(t)));
    const int64_t K = 512, N = 19, M = 3;
    const Weights w = make_weights(t, N, K, 41);
    std::vector<float> x(static_cast<size_t>(M * K), 0.0f);  // row 0: zeros
    for (int64_t k = 0; k < K; ++k) {
      x[K + k] = (k % 32 == 5) ? 1e6f : 0.001f * float(k % 7) - 0.003f;  // row 1: one spike per block
      x[2 * K + k] = (k % 32 == 0) ? 127.0f : float(k % 50 - 25) + 0.5f;    // row 2: ties
    }
    const std::vector<float> want = int8_model_matmul(x, M, w, nullptr, nullptr);
    const std::vector<float> got = run_matmul(x, M, w, nullptr, nullptr, {{0, N}});
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << i;
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(got[n], 0.0f) << "zero activations give exact zeros";
  }
}

// Split and thread invariance at model-like shapes: every split of [0, N) (multiples of 16, odd
// cuts, single rows) gives the same bits, for decode and prefill.
TEST_P(KernelIsa, Int8MatmulIndependentOfSplit) {
  uint32_t seed = 800;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::MXFP4}) {
    for (int64_t M : {1, 7}) {
      SCOPED_TRACE(std::string(ggml_type_name(t)) + " M=" + std::to_string(M));
      const int64_t K = 768, N = 100;
      const Weights w = make_weights(t, N, K, seed++);
      const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++);
      const std::vector<float> whole = run_matmul(x, M, w, nullptr, nullptr, {{0, N}});
      for (const auto& sp : std::vector<std::vector<std::pair<int64_t, int64_t>>>{
               {{0, 16}, {16, 48}, {48, 64}, {64, 100}}, {{0, 33}, {33, 34}, {34, 99}, {99, 100}}, {{50, 100}, {0, 50}}}) {
        const std::vector<float> got = run_matmul(x, M, w, nullptr, nullptr, sp);
        for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], whole[i])) << i;
      }
    }
  }
}

// Prefill shapes around the AMX tiles (16 rows of x by 16 weight rows, one block of 32 per tile
// multiply) and the 64-row activation chunks: M not a multiple of 16, N not a multiple of 16 or
// 32, K of one block and of many (odd counts too), x quantised inside the matmul or up front.
// Every path gives the model's bits.
TEST_P(KernelIsa, Int8PrefillTileEdgesMatchModelBitForBit) {
  struct Shape { int64_t M, N, K; };
  const Shape shapes[] = {{5, 16, 32},  {16, 17, 32},   {17, 31, 64},  {33, 33, 96}, {47, 48, 352},
                          {64, 40, 544}, {65, 15, 160}, {100, 50, 64}, {31, 1, 256}};
  uint32_t seed = 1100;
  for (const MatmulCase& c : matmul_cases()) {
    if (!uses_int8(c.type)) continue;
    for (const Shape& sh : shapes) {
      const int64_t M = sh.M, N = sh.N, K = c.Ks.back() % 256 == 0 ? (sh.K + 255) / 256 * 256 : sh.K;
      SCOPED_TRACE(std::string(c.name) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
      const Weights w = make_weights(c.type, N, K, seed++);
      const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++);
      const std::vector<float> bias = randn(static_cast<size_t>(N), seed++);
      const std::vector<float> res = randn(static_cast<size_t>(M * N), seed++);
      const bool extras = M % 2 == 1;
      const float* b = extras ? bias.data() : nullptr;
      const float* r = extras ? res.data() : nullptr;
      const std::vector<float> want = int8_model_matmul(x, M, w, b, r);
      const int64_t cut = N > 16 ? 16 : N;
      const std::vector<float> got = run_matmul(x, M, w, b, r, {{0, cut}, {cut, N}});
      ASSERT_TRUE(bits_equal(got, want));
      const AlignedBytes store(static_cast<size_t>(prequantized_x_bytes(c.type, M, K)));
      void* xq = store.data;
      prequantize_x(c.type, x.data(), M, K, xq, 0, M);
      std::vector<float> pre(static_cast<size_t>(M * N)), work(static_cast<size_t>(matmul_work_floats(K)));
      matmul(x.data(), M, K, w.bytes.data(), w.type, b, r, pre.data(), N, 0, N, work.data(), xq);
      ASSERT_TRUE(bits_equal(pre, want)) << "pre-quantised";
    }
  }
}

// Q8_0 decode (M = 1) reads each row as stored, a block pair at a time, with the 4 bytes between
// pairs fetched apart (kernels_int8.h, row-wise path): block counts odd and even (the last pair
// ends the row) from 1 to 64, panels cut short (N not a multiple of 16, splits inside a panel),
// raw quant bytes (-128 included, which no quantiser writes) and fp16 scales of every sign and
// exponent (subnormals too), activations whose largest element sits at a block's last positions.
TEST_P(KernelIsa, Q8_0DecodeEdges) {
  uint32_t seed = 1100;
  for (int64_t nb : {1, 2, 3, 4, 8, 9, 16, 17, 64}) {
    for (int64_t N : {1, 15, 16, 17, 40}) {
      const int64_t K = 32 * nb;
      SCOPED_TRACE("blocks=" + std::to_string(nb) + " N=" + std::to_string(N));
      Weights w = make_weights(GgmlType::Q8_0, N, K, seed++);
      std::mt19937 rng(seed++);
      for (uint8_t& b : w.bytes) b = static_cast<uint8_t>(rng());
      for (size_t off = 0; off < w.bytes.size(); off += 34) {
        uint16_t h = static_cast<uint16_t>(rng());
        if ((h & 0x7C00) == 0x7C00) h &= 0x83FF;  // no inf / NaN: a subnormal instead
        std::memcpy(&w.bytes[off], &h, 2);
      }
      std::vector<float> xs[3] = {randn(static_cast<size_t>(K), seed++), randn(static_cast<size_t>(K), seed++),
                                  std::vector<float>(static_cast<size_t>(K), 0.0f)};
      for (int64_t k = 0; k < K; ++k)
        if (k % 32 >= 30) xs[1][k] = (k % 2 ? 9.0f : -9.0f);  // q = -127 / 127 in the pair gap bytes
      const std::vector<float> bias = randn(static_cast<size_t>(N), seed++);
      for (const std::vector<float>& x : xs) {
        const std::vector<float> want = int8_model_matmul(x, 1, w, bias.data(), nullptr);
        for (const auto& sp : std::vector<std::vector<std::pair<int64_t, int64_t>>>{{{0, N}}, {{0, N / 3}, {N / 3, N}}}) {
          const std::vector<float> got = run_matmul(x, 1, w, bias.data(), nullptr, sp);
          ASSERT_TRUE(bits_equal(got, want));
        }
      }
    }
  }
}

// MXFP4 blocks with every scale byte (0 and 1 are the subnormal scales 2^-128, 2^-127; 255 is read
// as 2^127) and raw codes (-0 included, which the quantiser never writes), in rows and in panels,
// decode and prefill: every path gives the model's bits. The activations are small enough
// (|x| < 2^-12) that no product overflows, and the smallest scales make subnormal products.
TEST_P(KernelIsa, Mxfp4EveryScaleByteMatchesModelBitForBit) {
  uint32_t seed = 1700;
  for (int64_t K : {32, 256, 544}) {
    const int64_t N = 40;
    Weights w = make_weights(GgmlType::MXFP4, N, K, seed++);
    std::mt19937 rng(seed++);
    for (uint8_t& b : w.bytes) b = static_cast<uint8_t>(rng());
    for (size_t off = 0, i = 0; off < w.bytes.size(); off += 17, ++i) w.bytes[off] = static_cast<uint8_t>(i * 37 % 256);
    std::vector<uint8_t> packed(weight_bytes(GgmlType::MXFP4, N, K, WeightLayout::Panels16));
    pack_panels16(GgmlType::MXFP4, w.bytes.data(), N, K, packed.data(), 0, (N + 15) / 16);
    for (int64_t M : {1, 3, 9}) {
      SCOPED_TRACE("K=" + std::to_string(K) + " M=" + std::to_string(M));
      const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++, 1.0f / 8192);
      const std::vector<float> want = int8_model_matmul(x, M, w, nullptr, nullptr);
      ASSERT_TRUE(bits_equal(run_matmul(x, M, w, nullptr, nullptr, {{0, 16}, {16, N}}), want));
      std::vector<float> got(static_cast<size_t>(M * N)), work(static_cast<size_t>(matmul_work_floats(K)));
      matmul(x.data(), M, K, packed.data(), GgmlType::MXFP4, nullptr, nullptr, got.data(), N, 0, N, work.data(), nullptr,
             WeightLayout::Panels16);
      ASSERT_TRUE(bits_equal(got, want)) << "panels16";
    }
  }
}

// Weights in the Panels16 layout (formats/weight_layout.h) give the model's bits on every path:
// block counts that end on an octet, a pair and a single block (the decode loop's steps; 12, 15 and
// Qwen2.5's 28 blocks leave 4 or 7 after the octets), Q6_K super-blocks at odd offsets (fields 2 bytes into a dword), rows padded to whole dwords (odd block
// counts of the 2-byte-aligned types: Q4_0 K = 32, Q6_K K = 256, 768), a last panel cut short (N = 40, 1),
// ranges that start at later panels, decode and prefill M, x quantised inside or up front.
TEST_P(KernelIsa, Int8MatmulPanels16MatchesModelBitForBit) {
  uint32_t seed = 1500;
  for (const MatmulCase& c : matmul_cases()) {
    if (!uses_int8(c.type)) continue;
    const std::vector<int64_t> Ks = c.Ks.back() % 256 == 0 ? std::vector<int64_t>{256, 512, 768} : std::vector<int64_t>{32, 64, 96, 320, 384, 480, 544, 896};
    for (int64_t K : Ks) {
      ASSERT_TRUE(matmul_reads_panels16(c.type, K)) << c.name << " K=" << K;
      for (int64_t M : {1, 2, 4, 5, 33}) {
        for (int64_t N : {1, 40}) {
          SCOPED_TRACE(std::string(c.name) + " K=" + std::to_string(K) + " M=" + std::to_string(M) + " N=" + std::to_string(N));
          const Weights w = make_weights(c.type, N, K, seed++);
          std::vector<uint8_t> packed(weight_bytes(c.type, N, K, WeightLayout::Panels16), 0xEE);
          pack_panels16(c.type, w.bytes.data(), N, K, packed.data(), 0, (N + 15) / 16);
          const std::vector<float> x = randn(static_cast<size_t>(M * K), seed++);
          const std::vector<float> bias = randn(static_cast<size_t>(N), seed++);
          const std::vector<float> want = int8_model_matmul(x, M, w, bias.data(), nullptr);
          std::vector<float> got(static_cast<size_t>(M * N), -1.0f), work(static_cast<size_t>(matmul_work_floats(K)));
          const int64_t cut = N > 16 ? 16 : N;
          for (auto [a, b] : std::vector<std::pair<int64_t, int64_t>>{{0, cut}, {cut, N}})
            matmul(x.data(), M, K, packed.data(), c.type, bias.data(), nullptr, got.data(), N, a, b, work.data(), nullptr,
                   WeightLayout::Panels16);
          ASSERT_TRUE(bits_equal(got, want));
          if (prequantized_x_bytes(c.type, M, K) == 0) continue;
          const AlignedBytes store(static_cast<size_t>(prequantized_x_bytes(c.type, M, K)));
          void* xq = store.data;
          prequantize_x(c.type, x.data(), M, K, xq, 0, M);
          std::fill(got.begin(), got.end(), -1.0f);
          matmul(x.data(), M, K, packed.data(), c.type, bias.data(), nullptr, got.data(), N, 0, N, work.data(), xq,
                 WeightLayout::Panels16);
          ASSERT_TRUE(bits_equal(got, want)) << "pre-quantised";
        }
      }
    }
  }
}

// The AMX path (where this CPU and build have it) against the AVX-512 VNNI path at model-like
// shapes, bit for bit: both quantise x the same way and compute the same integers and chains.
TEST(KernelAmx, MatchesVnniBitForBit) {
  if (!kernel_force_isa("amx")) NPULLM_SKIP_UNSUPPORTED("this CPU or build has no AMX path");
  struct Shape { int64_t M, N, K; };
  const Shape shapes[] = {{3, 40, 512}, {64, 96, 2048}, {77, 70, 1024}, {130, 48, 768}};
  uint32_t seed = 1300;
  // (MXFP4 has no AMX kernel: the AMX build hands it to the AVX-512 path, which this checks too.)
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
    for (const Shape& sh : shapes) {
      SCOPED_TRACE(std::string(ggml_type_name(t)) + " M=" + std::to_string(sh.M) + " N=" + std::to_string(sh.N));
      const Weights w = make_weights(t, sh.N, sh.K, seed++);
      const std::vector<float> x = randn(static_cast<size_t>(sh.M * sh.K), seed++);
      const std::vector<float> bias = randn(static_cast<size_t>(sh.N), seed++);
      ASSERT_TRUE(kernel_force_isa("amx"));
      const std::vector<float> amx = run_matmul(x, sh.M, w, bias.data(), nullptr, {{0, 32}, {32, sh.N}});
      ASSERT_TRUE(kernel_force_isa("avx512"));
      const std::vector<float> vnni = run_matmul(x, sh.M, w, bias.data(), nullptr, {{0, sh.N}});
      for (size_t i = 0; i < amx.size(); ++i)
        ASSERT_TRUE(same_bits(amx[i], vnni[i])) << "element " << i << ": " << amx[i] << " vs " << vnni[i];
    }
  }
  force_best();
}

// stories260K-like shape: F32, dim 64. The scalar path sums in llama2.c's order exactly.
TEST_P(KernelIsa, F32MatmulMatchesSequentialFloatSum) {
  const int64_t K = 64, N = 32;
  const Weights w = make_weights(GgmlType::F32, N, K, 11);
  const std::vector<float> x = randn(K, 12);
  const std::vector<float> got = run_matmul(x, 1, w, nullptr, nullptr, {{0, N}});
  for (int64_t n = 0; n < N; ++n) {
    float seq = 0.0f;
    for (int64_t k = 0; k < K; ++k) seq += w.deq[n * K + k] * x[k];
    if (std::string(GetParam()) == "scalar") {
      EXPECT_TRUE(same_bits(got[n], seq)) << n;
    } else {
      EXPECT_NEAR(got[n], seq, 1e-5) << n;
    }
  }
}

// The K/V scatter's F32 -> F16 conversion (F16C on the vector paths) against the portable one,
// value by value: rounding ties both ways, the overflow edge (65504 stays, 65520 rounds to inf),
// subnormals and their ties, NaNs with payloads, zeros of both signs; a row of 61 so the vector
// paths run their tails.
TEST_P(KernelIsa, ScatterToF16MatchesPortableConversion) {
  std::vector<float> vals = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e9f,
                             std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 8.940697e-08f, 6.1035156e-05f,
                             6.1e-05f, 1e-30f, std::numeric_limits<float>::denorm_min()};
  for (uint32_t bits : {0x7FC00001u, 0x7F800001u, 0xFFBFE000u, 0x3F801000u, 0x3F803000u, 0x3F800FFFu}) {
    float f;
    std::memcpy(&f, &bits, 4);  // NaNs (quiet, signalling, negative with payload), ties at 1 + 2^-11
    vals.push_back(f);
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  while (vals.size() < 61 * 3) vals.push_back(vals.size() % 2 ? u(rng) : u(rng) * 1e-6f);
  const int64_t R = 61, S = static_cast<int64_t>(vals.size()) / R, C = 5;
  const std::vector<int32_t> idx = {4, 0, 2};
  std::vector<uint8_t> dst(static_cast<size_t>(C * R * 2), 0xAB);
  scatter_rows(vals.data(), idx.data(), dst.data(), GgmlType::F16, R, C, 0, S);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < R; ++j) {
      uint16_t got;
      std::memcpy(&got, dst.data() + 2 * (idx[s] * R + j), 2);
      ASSERT_EQ(got, fp32_to_fp16(vals[s * R + j])) << "row " << s << " value " << j << " = " << vals[s * R + j];
    }
  for (int64_t row : {1, 3})  // not in idx: untouched
    for (int64_t j = 0; j < 2 * R; ++j) ASSERT_EQ(dst[static_cast<size_t>(2 * R * row + j)], 0xAB) << "row " << row;
}

TEST_P(KernelIsa, SwigluMatchesReference) {
  for (int64_t n : {1, 5, 8, 16, 31, 100}) {
    std::vector<float> g = randn(n, 20 + n, 3.0f), u = randn(n, 40 + n);
    if (n == 100) {  // extremes: exp overflow / underflow must not give NaN
      g[0] = 100.0f, g[1] = -100.0f, g[2] = 1000.0f, g[3] = -1000.0f, g[4] = 0.0f, g[5] = -87.5f, g[6] = 88.9f;
    }
    std::vector<float> out(n, -1.0f);
    swiglu(g.data(), u.data(), out.data(), 0, n);
    std::vector<float> split(n, -1.0f);
    for (int64_t i = 0; i < n; i += 3) swiglu(g.data(), u.data(), split.data(), i, std::min(n, i + 3));
    std::vector<float> over_gate = g, over_up = u;  // out may alias either input
    swiglu(over_gate.data(), u.data(), over_gate.data(), 0, n);
    swiglu(g.data(), over_up.data(), over_up.data(), 0, n);
    for (int64_t i = 0; i < n; ++i) {
      const double gd = g[i];
      const double want = gd / (1.0 + std::exp(-gd)) * u[i];
      ASSERT_FALSE(std::isnan(out[i])) << i;
      ASSERT_NEAR(out[i], want, 4e-7 * std::fabs(want) + 1e-30) << "n=" << n << " i=" << i << " g=" << g[i];
      ASSERT_TRUE(same_bits(out[i], split[i])) << i;
      ASSERT_TRUE(same_bits(out[i], over_gate[i])) << i;
      ASSERT_TRUE(same_bits(out[i], over_up[i])) << i;
    }
  }
}

// ---- attention -------------------------------------------------------------------------------

const GgmlType kKvTypesForRing[] = {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0};

struct AttnProblem {
  int64_t S, H, Hkv, hd, C;
  GgmlType kt, vt;
  std::vector<float> q, kf, vf, mask;  // kf / vf: cache values as float (after F16 rounding)
  std::vector<uint8_t> k, v;
};

AttnProblem make_attention(int64_t S, int64_t H, int64_t Hkv, int64_t hd, int64_t C, GgmlType kt, GgmlType vt,
                           uint32_t seed) {
  AttnProblem p{S, H, Hkv, hd, C, kt, vt, {}, {}, {}, {}, {}, {}};
  p.q = randn(S * H * hd, seed, 1.0f);
  p.kf = randn(C * Hkv * hd, seed + 1, 1.0f);
  p.vf = randn(C * Hkv * hd, seed + 2, 1.0f);
  auto pack = [](GgmlType t, std::vector<float>& f, std::vector<uint8_t>& out) {
    out.resize(ggml_row_bytes(t, static_cast<int64_t>(f.size())));
    quantize_row(t, f.data(), out.data(), static_cast<int64_t>(f.size()));
    dequantize_row(t, out.data(), f.data(), static_cast<int64_t>(f.size()));  // what the kernel sees
  };
  pack(kt, p.kf, p.k);
  pack(vt, p.vf, p.v);
  // Causal mask with the S tokens at the end of the cache; row 0 also masks everything (to check
  // the fully-masked rule) when S > 1.
  p.mask.assign(S * C, 0.0f);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < C; ++t)
      if (t > C - S + s || (S > 1 && s == 0)) p.mask[s * C + t] = -kInf;
  return p;
}

// sinks: null, or a logit per head that joins the softmax's sum (a key with no value).
std::vector<double> reference_attention(const AttnProblem& p, float scale, const float* sinks = nullptr) {
  std::vector<double> out(p.S * p.H * p.hd, 0.0);
  const int64_t group = p.H / p.Hkv;
  for (int64_t s = 0; s < p.S; ++s)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t g = h / group;
      std::vector<double> sc(p.C);
      double mx = -INFINITY;
      for (int64_t t = 0; t < p.C; ++t) {
        double d = 0.0;
        for (int64_t i = 0; i < p.hd; ++i)
          d += double(p.q[(s * p.H + h) * p.hd + i]) * p.kf[(t * p.Hkv + g) * p.hd + i];
        sc[t] = scale * d + p.mask[s * p.C + t];
        mx = std::max(mx, sc[t]);
      }
      if (mx == -INFINITY) continue;
      if (sinks) mx = std::max(mx, double(sinks[h]));
      double sum = sinks ? std::exp(sinks[h] - mx) : 0.0;
      for (int64_t t = 0; t < p.C; ++t) sum += (sc[t] = std::exp(sc[t] - mx));
      for (int64_t t = 0; t < p.C; ++t)
        for (int64_t i = 0; i < p.hd; ++i)
          out[(s * p.H + h) * p.hd + i] += sc[t] / sum * p.vf[(t * p.Hkv + g) * p.hd + i];
    }
  return out;
}

std::vector<float> run_attention(const AttnProblem& p, float scale, const std::vector<int64_t>& cuts,
                                 bool with_mask = true) {
  std::vector<float> out(p.S * p.H * p.hd, -7.0f);
  std::vector<float> work(attention_work_floats(p.C, p.hd) + 1);
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    attention(p.q.data(), p.k.data(), p.kt, p.v.data(), p.vt, with_mask ? p.mask.data() : nullptr, out.data(),
              p.H, p.Hkv, p.hd, p.C, 0, scale, cuts[i], cuts[i + 1], work.data());
  return out;
}

TEST_P(KernelIsa, AttentionMatchesReference) {
  struct Shape { int64_t S, H, Hkv, hd, C; };
  // (C 1,000: four blocks of keys, merged)
  const Shape shapes[] = {{1, 2, 2, 4, 1}, {3, 8, 2, 32, 19}, {4, 4, 4, 20, 40}, {2, 6, 3, 64, 7}, {5, 8, 1, 13, 70},
                          {2, 8, 2, 64, 1000}};
  uint32_t seed = 500;
  for (const Shape& sh : shapes)
    for (GgmlType kt : {GgmlType::F32, GgmlType::F16})
      for (GgmlType vt : {GgmlType::F32, GgmlType::F16}) {
        SCOPED_TRACE("S=" + std::to_string(sh.S) + " H=" + std::to_string(sh.H) + " hd=" + std::to_string(sh.hd) +
                     " C=" + std::to_string(sh.C) + " k=" + std::string(ggml_type_name(kt)) +
                     " v=" + std::string(ggml_type_name(vt)));
        const AttnProblem p = make_attention(sh.S, sh.H, sh.Hkv, sh.hd, sh.C, kt, vt, seed += 3);
        const float scale = 1.0f / std::sqrt(float(sh.hd));
        const std::vector<double> want = reference_attention(p, scale);
        const int64_t R = sh.S * sh.H;
        const std::vector<float> got = run_attention(p, scale, {0, R});
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << "element " << i;
        if (sh.S > 1) {  // row s = 0 is fully masked: exact zeros
          for (int64_t i = 0; i < sh.H * sh.hd; ++i) ASSERT_EQ(got[i], 0.0f);
        }
        // Any split of the rows gives the same bits.
        const std::vector<float> split = run_attention(p, scale, {0, 1, R / 2, R / 2 + 1, R});
        for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], split[i])) << i;
      }
}

// A ring of K/V rows (a sliding-window layer's): position q in row q mod R. Visited from the row of
// a multiple of 16 at or before the first visible position, the window's keys give the same bits
// as the same keys at rows q of a longer window (each key sums in the lane q mod 16, in the same
// order, and in the same blocks of keys: both start their blocks at that multiple of 16), for
// every K/V type and wherever the window wraps; also for a window of several blocks whose first
// visible position is not on a block boundary of the longer window.
TEST_P(KernelIsa, AttentionOverARingGivesTheBitsOfTheFullWindow) {
  struct Config { int64_t n_swa, R, C; std::vector<int64_t> positions; };
  const Config configs[] = {{20, 48, 112, {5, 20, 47, 48, 60, 77, 95, 100}}, {600, 624, 1400, {300, 700, 1000, 1399}}};
  const int64_t H = 4, Hkv = 2, hd = 64;
  uint32_t seed = 9000;
  for (const Config& cf : configs)
    for (GgmlType kt : kKvTypesForRing)
      for (GgmlType vt : kKvTypesForRing)
        for (int64_t p : cf.positions) {  // the query's position
          const int64_t n_swa = cf.n_swa, R = cf.R, C = cf.C;
          SCOPED_TRACE("position " + std::to_string(p) + " window " + std::to_string(n_swa) + " k=" + std::string(ggml_type_name(kt)) +
                       " v=" + std::string(ggml_type_name(vt)));
          AttnProblem full = make_attention(1, H, Hkv, hd, C, kt, vt, seed += 3);
          const int64_t from = std::max<int64_t>(0, p - n_swa + 1);
          std::fill(full.mask.begin(), full.mask.end(), -kInf);
          for (int64_t q = from; q <= p; ++q) full.mask[q] = 0.0f;
          // The ring holds the last R positions up to p; other rows hold older garbage (masked).
          AttnProblem ring = full;
          ring.C = R;
          const size_t krow = ggml_row_bytes(kt, Hkv * hd), vrow = ggml_row_bytes(vt, Hkv * hd);
          ring.k.assign(R * krow, 0x55);
          ring.v.assign(R * vrow, 0x11);
          ring.mask.assign(R, -kInf);
          for (int64_t q = std::max<int64_t>(0, p - R + 1); q <= p; ++q) {
            std::memcpy(ring.k.data() + (q % R) * krow, full.k.data() + q * krow, krow);
            std::memcpy(ring.v.data() + (q % R) * vrow, full.v.data() + q * vrow, vrow);
            if (q >= from) ring.mask[q % R] = 0.0f;
          }
          const float scale = 0.125f;
          const std::vector<float> want = run_attention(full, scale, {0, H});
          std::vector<float> got(H * hd, -7.0f), work(attention_work_floats(R, hd) + 1);
          attention(ring.q.data(), ring.k.data(), kt, ring.v.data(), vt, ring.mask.data(), got.data(), H, Hkv, hd, R, from / 16 * 16 % R,
                    scale, 0, H, work.data());
          for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << "element " << i;
        }
}

// Heads sharing a K/V head are taken up to 8 at a time (each K/V row read once for all of them);
// every head must still get the bits it gets alone (rows run one at a time), for every K/V type,
// for groups of 2 to 12 heads (more than 8: taken in two runs), with masked keys (the causal
// mask's -inf) and keys whose weight underflows to 0 for some heads only (large scores).
TEST_P(KernelIsa, AttentionGroupsGiveTheBitsOfOneHeadAtATime) {
  struct Shape { int64_t S, H, Hkv, hd, C; };
  const Shape shapes[] = {{1, 32, 4, 64, 77}, {3, 14, 2, 64, 21}, {2, 12, 1, 32, 40}, {2, 6, 2, 128, 33},
                          {1, 16, 8, 64, 50}, {2, 8, 2, 96, 45},  {1, 8, 1, 256, 40}, {1, 10, 2, 128, 300}};
  uint32_t seed = 31000;
  for (const Shape& sh : shapes)
    for (GgmlType kt : kKvTypesForRing)
      for (GgmlType vt : kKvTypesForRing)
        for (float scale : {0.125f, 40.0f}) {
          SCOPED_TRACE("H=" + std::to_string(sh.H) + " Hkv=" + std::to_string(sh.Hkv) + " hd=" + std::to_string(sh.hd) +
                       " k=" + std::string(ggml_type_name(kt)) + " v=" + std::string(ggml_type_name(vt)) +
                       " scale=" + std::to_string(scale));
          const AttnProblem p = make_attention(sh.S, sh.H, sh.Hkv, sh.hd, sh.C, kt, vt, seed += 7);
          const int64_t R = sh.S * sh.H;
          std::vector<int64_t> one_by_one;
          for (int64_t r = 0; r <= R; ++r) one_by_one.push_back(r);
          const std::vector<float> alone = run_attention(p, scale, one_by_one);
          const std::vector<float> grouped = run_attention(p, scale, {0, R});
          for (size_t i = 0; i < alone.size(); ++i) ASSERT_TRUE(same_bits(alone[i], grouped[i])) << "element " << i;
        }
  // A head whose query is NaN sees no key (every score NaN): zeros alone, and zeros in its group,
  // whatever its neighbours see.
  AttnProblem p = make_attention(1, 8, 1, 32, 24, GgmlType::F16, GgmlType::F16, 4242);
  for (int64_t i = 3 * 32; i < 4 * 32; ++i) p.q[static_cast<size_t>(i)] = std::nanf("");
  std::vector<int64_t> one_by_one;
  for (int64_t r = 0; r <= 8; ++r) one_by_one.push_back(r);
  const std::vector<float> alone = run_attention(p, 0.2f, one_by_one), grouped = run_attention(p, 0.2f, {0, 8});
  for (size_t i = 0; i < alone.size(); ++i) ASSERT_TRUE(same_bits(alone[i], grouped[i])) << "element " << i;
  for (int64_t i = 3 * 32; i < 4 * 32; ++i) EXPECT_EQ(grouped[static_cast<size_t>(i)], 0.0f);
}

// A decode row in a cache larger than its context: the mask hides every key from `valid` on (and a
// few before). The result must be the bits of the same cache cut to its first `valid` rows, grouped
// or one head at a time (the AVX-512 group path does not visit the hidden tail at all), for F16 and
// Q8_0 K/V (both take that path).
TEST_P(KernelIsa, AttentionOverAMaskedTailGivesTheBitsOfTheShorterCache) {
  struct Shape { int64_t H, Hkv, hd, C; };
  const Shape shapes[] = {{32, 4, 64, 300}, {14, 2, 64, 1152}, {8, 1, 128, 77}};
  uint32_t seed = 47000;
  for (const Shape& sh : shapes)
    for (GgmlType kv : {GgmlType::F16, GgmlType::Q8_0})
      for (int64_t valid : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{37}, sh.C - 1}) {
        SCOPED_TRACE("H=" + std::to_string(sh.H) + " C=" + std::to_string(sh.C) + " valid=" + std::to_string(valid) +
                     " kv=" + std::string(ggml_type_name(kv)));
        AttnProblem full = make_attention(1, sh.H, sh.Hkv, sh.hd, sh.C, kv, kv, seed += 11);
        for (int64_t t = 0; t < sh.C; ++t) full.mask[t] = t >= valid || (t % 13 == 5 && t + 1 < valid) ? -kInf : 0.0f;
        AttnProblem cut = full;
        cut.C = valid;
        cut.mask.resize(static_cast<size_t>(valid));
        const size_t row = ggml_row_bytes(kv, sh.Hkv * sh.hd);
        cut.k.resize(row * static_cast<size_t>(valid));
        cut.v.resize(row * static_cast<size_t>(valid));
        std::vector<int64_t> one_by_one;
        for (int64_t r = 0; r <= sh.H; ++r) one_by_one.push_back(r);
        const std::vector<float> want = run_attention(cut, 0.125f, {0, sh.H});
        const std::vector<float> grouped = run_attention(full, 0.125f, {0, sh.H});
        const std::vector<float> alone = run_attention(full, 0.125f, one_by_one);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_TRUE(same_bits(want[i], grouped[i])) << "grouped, element " << i;
          ASSERT_TRUE(same_bits(want[i], alone[i])) << "one head at a time, element " << i;
        }
        EXPECT_NE(want[0], 0.0f);
      }
}

TEST_P(KernelIsa, AttentionWithoutMaskAndEmptyCache) {
  AttnProblem p = make_attention(2, 4, 2, 16, 9, GgmlType::F32, GgmlType::F16, 77);
  std::fill(p.mask.begin(), p.mask.end(), 0.0f);
  const std::vector<double> want = reference_attention(p, 0.3f);
  const std::vector<float> got = run_attention(p, 0.3f, {0, 8}, /*with_mask=*/false);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << i;
  // Large scores: the max is subtracted first, so nothing overflows.
  const std::vector<double> want_big = reference_attention(p, 300.0f);
  const std::vector<float> got_big = run_attention(p, 300.0f, {0, 8}, false);
  for (size_t i = 0; i < got_big.size(); ++i) ASSERT_NEAR(got_big[i], want_big[i], 1e-4) << i;
  // C = 0: every row is fully masked.
  AttnProblem e = make_attention(1, 2, 1, 8, 0, GgmlType::F32, GgmlType::F32, 3);
  const std::vector<float> zeros = run_attention(e, 1.0f, {0, 2});
  for (float f : zeros) ASSERT_EQ(f, 0.0f);
}

// Attention sinks (gpt-oss: a logit per head in the softmax's sum, a key with no value) over one
// and several blocks of keys, with the first keys masked (blocks then start at the first visible
// key): within float error of a double-precision softmax with the sink, and each head's bits the
// same grouped or alone, for each K/V type; a sink far above every score leaves almost nothing.
TEST_P(KernelIsa, AttentionSinksJoinTheSoftmaxOverEveryBlock) {
  const int64_t H = 8, Hkv = 2, hd = 64;
  uint32_t seed = 61000;
  for (int64_t C : {int64_t{40}, int64_t{700}})
    for (GgmlType kv : kKvTypesForRing) {
      SCOPED_TRACE("C=" + std::to_string(C) + " kv=" + std::string(ggml_type_name(kv)));
      AttnProblem p = make_attention(1, H, Hkv, hd, C, kv, kv, seed += 5);
      for (int64_t t = 0; t < C; ++t) p.mask[t] = t < C / 3 ? -kInf : 0.0f;
      const std::vector<float> sinks = {-3.0f, 0.0f, 1.5f, 4.0f, -20.0f, 2.0f, 0.5f, 60.0f};
      const float scale = 0.125f;
      const std::vector<double> want = reference_attention(p, scale, sinks.data());
      std::vector<float> grouped(H * hd, -7.0f), alone(H * hd, -7.0f), work(attention_work_floats(C, hd) + 1);
      attention(p.q.data(), p.k.data(), kv, p.v.data(), kv, p.mask.data(), grouped.data(), H, Hkv, hd, C, 0, scale, 0, H,
                work.data(), sinks.data());
      for (int64_t r = 0; r < H; ++r)
        attention(p.q.data(), p.k.data(), kv, p.v.data(), kv, p.mask.data(), alone.data(), H, Hkv, hd, C, 0, scale, r, r + 1,
                  work.data(), sinks.data());
      for (size_t i = 0; i < grouped.size(); ++i) {
        ASSERT_NEAR(grouped[i], want[i], 2e-5) << "element " << i;
        ASSERT_TRUE(same_bits(grouped[i], alone[i])) << "element " << i;
      }
      for (int64_t i = 7 * hd; i < 8 * hd; ++i) EXPECT_LT(std::fabs(grouped[static_cast<size_t>(i)]), 1e-20f);
    }
}

// Decode attention split over its keys (cpu::attention_part over parts of its blocks, then
// cpu::attention_merge), however its blocks are cut into parts, its runs of heads taken, and in
// whatever order the parts run, gives each head the bits attention() gives it on one thread: every
// K/V type pair, groups of 1 to 12 heads (12: runs of 8 and 4), every key visible, masks with
// holes and a masked tail, the first 300 keys masked (blocks start at the first visible key), a
// ring visited from row 48, and sinks.
TEST_P(KernelIsa, AttentionSplitOverKeysGivesTheBitsOfOneThread) {
  struct Shape { int64_t H, Hkv, hd, C; };
  // (40 heads in 8 groups of 5: more than the AVX-512 path takes together, kAttnGroupsHeads.)
  const Shape shapes[] = {{14, 2, 64, 1300}, {4, 4, 64, 700}, {12, 1, 32, 900}, {8, 1, 256, 600}, {10, 2, 96, 820},
                          {40, 8, 64, 600}};
  std::vector<float> sinks = {-3.0f, 0.0f, 1.5f, 4.0f, -20.0f, 2.0f, 0.5f, 6.0f, 1.0f, -1.0f, 0.25f, 3.0f, 2.5f, -0.5f};
  for (size_t h = sinks.size(); h < 40; ++h) sinks.push_back(sinks[h % 14] - 0.5f * static_cast<float>(h / 14));  // one a head
  uint32_t seed = 88000;
  for (const Shape& sh : shapes)
    for (GgmlType kt : kKvTypesForRing)
      for (GgmlType vt : kKvTypesForRing)
        for (int variant = 0; variant < 5; ++variant) {
          SCOPED_TRACE("H=" + std::to_string(sh.H) + " Hkv=" + std::to_string(sh.Hkv) + " hd=" + std::to_string(sh.hd) +
                       " k=" + std::string(ggml_type_name(kt)) + " v=" + std::string(ggml_type_name(vt)) +
                       " variant " + std::to_string(variant));
          const int64_t H = sh.H, hd = sh.hd, C = sh.C;
          AttnProblem p = make_attention(1, H, sh.Hkv, hd, C, kt, vt, seed += 3);
          for (int64_t t = 0; t < C; ++t) {
            float m = 0.0f;
            if (variant == 1) m = t >= C - 100 || t % 13 == 5 ? -kInf : 0.0f;
            if (variant == 2) m = t < 300 ? -kInf : 0.0f;
            p.mask[static_cast<size_t>(t)] = m;
          }
          const int64_t rot = variant == 3 ? 48 : 0;
          const float* sk = variant == 4 ? sinks.data() : nullptr;
          const float scale = 0.125f;
          std::vector<float> want(static_cast<size_t>(H * hd), -7.0f), work(static_cast<size_t>(attention_work_floats(C, hd)) + 1);
          attention(p.q.data(), p.k.data(), kt, p.v.data(), vt, p.mask.data(), want.data(), H, sh.Hkv, hd, C, rot, scale, 0, H,
                    work.data(), sk);
          const AttentionQuery a{p.q.data(), p.k.data(), kt, p.v.data(), vt, p.mask.data(), H, sh.Hkv, hd, C, rot, scale};
          const int64_t nb = attention_key_blocks(p.mask.data(), C, rot), runs = attention_runs(H, sh.Hkv);
          ASSERT_GE(nb, 2);
          std::vector<int64_t> each{0};
          for (int64_t b = 1; b <= nb; ++b) each.push_back(b);
          const std::vector<std::vector<int64_t>> cuts = {{0, nb}, {0, 1, nb}, each, {0, nb / 3, nb / 2, nb}};
          for (const std::vector<int64_t>& cut : cuts)
            for (bool run_by_run : {false, true}) {
              std::vector<float> partials(static_cast<size_t>(runs * attention_partial_floats(C, hd)), std::nanf(""));
              std::vector<float> got(want.size(), -7.0f);
              for (size_t i = cut.size() - 1; i-- > 0;) {  // the last part first
                if (!run_by_run) attention_part(a, 0, runs, cut[i], cut[i + 1], work.data(), partials.data());
                for (int64_t r = 0; run_by_run && r < runs; ++r) attention_part(a, r, r + 1, cut[i], cut[i + 1], work.data(), partials.data());
              }
              if (run_by_run) {
                for (int64_t r = runs; r-- > 0;) attention_merge(a, nb, r, r + 1, partials.data(), got.data(), sk);
              } else {
                attention_merge(a, nb, 0, runs, partials.data(), got.data(), sk);
              }
              for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same_bits(want[i], got[i])) << "element " << i << ", " << cut.size() - 1 << " parts";
            }
        }
}

// ---- K/V cache types (F32, F16, Q8_0) against F32 -------------------------------------------
//
// A value x stored in the cache comes back as x + e with, by the type's precision:
//   F32   e = 0;
//   F16   |e| <= 2^-11 |x| + 2^-25 (half an ulp of an 11-bit significand; 2^-25 is half the
//         smallest subnormal step);
//   Q8_0  |e| <= 0.57 d per block of 32, d = amax / 127: q = round(x / d) is off by at most d / 2,
//         and d itself is stored as fp16, which moves q * d by at most 127 * d * 2^-11 = 0.062 d.
// So these tests bound the error of each kernel against an F32 computation on the original values
// from that per-element bound, not from what the kernel happened to produce.

// Per-element bound on |stored - x| for a row of values x stored as type t (rows of whole blocks).
std::vector<double> storage_error_bound(GgmlType t, const std::vector<float>& x) {
  std::vector<double> e(x.size(), 0.0);
  if (t == GgmlType::F16) {
    for (size_t i = 0; i < x.size(); ++i) e[i] = std::ldexp(std::fabs(double(x[i])), -11) + std::ldexp(1.0, -25);
  } else if (t == GgmlType::Q8_0) {
    for (size_t b = 0; b < x.size(); b += 32) {
      double amax = 0.0;
      for (size_t j = b; j < b + 32; ++j) amax = std::max(amax, std::fabs(double(x[j])));
      for (size_t j = b; j < b + 32; ++j) e[j] = 0.57 * amax / 127.0;
    }
  }
  return e;
}

const GgmlType kKvTypes[] = {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0};

TEST_P(KernelIsa, AttentionReadsEveryKvTypeWithinItsPrecision) {
  struct Shape { int64_t S, H, Hkv, hd, C; };
  const Shape shapes[] = {{1, 2, 2, 32, 1}, {3, 8, 2, 32, 19}, {2, 6, 3, 64, 37}, {4, 4, 1, 128, 70}};
  uint32_t seed = 4000;
  for (const Shape& sh : shapes)
    for (GgmlType kt : kKvTypes)
      for (GgmlType vt : kKvTypes) {
        SCOPED_TRACE("hd=" + std::to_string(sh.hd) + " C=" + std::to_string(sh.C) + " k=" + std::string(ggml_type_name(kt)) +
                     " v=" + std::string(ggml_type_name(vt)));
        // The F32 problem first (its kf / vf are the original values), then the same values
        // stored as kt / vt.
        const AttnProblem exact = make_attention(sh.S, sh.H, sh.Hkv, sh.hd, sh.C, GgmlType::F32, GgmlType::F32, seed += 3);
        AttnProblem p = make_attention(sh.S, sh.H, sh.Hkv, sh.hd, sh.C, kt, vt, seed);
        const float scale = 1.0f / std::sqrt(float(sh.hd));
        const int64_t R = sh.S * sh.H;
        const std::vector<float> got = run_attention(p, scale, {0, R});

        // 1. The kernel reads the stored values exactly: it matches the double reference on the
        //    dequantised cache as tightly as the F32 kernel does.
        const std::vector<double> on_stored = reference_attention(p, scale);
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], on_stored[i], 2e-5) << "element " << i;

        // 2. Against F32 on the original values, within what the storage error allows: a score
        //    moves by at most D = scale * sum_i |q_i| e_k[i], so every softmax weight changes by
        //    a factor within e^(+-2D) and the weights by at most e^(2D) - 1 in total; the output
        //    moves by at most (e^(2D) - 1) max_t |v_t| + max_t e_v[t] (plus float rounding).
        const std::vector<double> want = reference_attention(exact, scale);
        const std::vector<double> ek = storage_error_bound(kt, exact.kf), ev = storage_error_bound(vt, exact.vf);
        const int64_t group = sh.H / sh.Hkv;
        for (int64_t s = 0; s < sh.S; ++s)
          for (int64_t h = 0; h < sh.H; ++h) {
            const int64_t g = h / group;
            double D = 0.0;
            for (int64_t t = 0; t < sh.C; ++t) {
              double d = 0.0;
              for (int64_t i = 0; i < sh.hd; ++i)
                d += std::fabs(double(exact.q[(s * sh.H + h) * sh.hd + i])) * ek[(t * sh.Hkv + g) * sh.hd + i];
              D = std::max(D, scale * d);
            }
            for (int64_t i = 0; i < sh.hd; ++i) {
              double vmax = 0.0, evmax = 0.0;
              for (int64_t t = 0; t < sh.C; ++t) {
                vmax = std::max(vmax, std::fabs(double(exact.vf[(t * sh.Hkv + g) * sh.hd + i])));
                evmax = std::max(evmax, ev[(t * sh.Hkv + g) * sh.hd + i]);
              }
              const size_t at = static_cast<size_t>((s * sh.H + h) * sh.hd + i);
              const double bound = std::expm1(2.0 * D) * vmax + evmax + 2e-5;
              ASSERT_LE(std::fabs(got[at] - want[at]), bound) << "s " << s << " h " << h << " i " << i;
            }
          }
        // Any split of the rows gives the same bits.
        const std::vector<float> split = run_attention(p, scale, {0, 1, R / 2, R / 2 + 1, R});
        for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same_bits(got[i], split[i])) << i;
      }
}

TEST(KernelKvTypes, ScatterRowsStoresEveryKvTypeWithinItsPrecision) {
  const int64_t R = 96, C = 6, S = 5;  // rows of 3 Q8_0 blocks
  std::vector<float> src = randn(S * R, 41, 2.0f);
  src[3 * R + 7] = 0.0f;                                             // a zero, and
  for (int64_t j = 64; j < 96; ++j) src[4 * R + j] = 0.0f;           // an all-zero block (d = 0)
  const std::vector<int32_t> idx = {4, -1, 0, 5, 2};                 // row 1 is skipped
  for (GgmlType t : kKvTypes) {
    SCOPED_TRACE(ggml_type_name(t));
    const size_t rb = ggml_row_bytes(t, R);
    std::vector<uint8_t> dst(rb * C, 0xA5), split(rb * C, 0xA5);
    scatter_rows(src.data(), idx.data(), dst.data(), t, R, C, 0, S);
    for (int64_t s = 0; s < S; ++s) scatter_rows(src.data(), idx.data(), split.data(), t, R, C, s, s + 1);
    EXPECT_EQ(dst, split);  // independent of the [s0, s1) split
    for (int64_t c = 0; c < C; ++c) {
      const auto it = std::find(idx.begin(), idx.end(), static_cast<int32_t>(c));
      const uint8_t* row = dst.data() + c * rb;
      if (it == idx.end()) {  // rows nobody writes keep their bytes
        for (size_t b = 0; b < rb; ++b) ASSERT_EQ(row[b], 0xA5) << "row " << c;
        continue;
      }
      const int64_t s = it - idx.begin();
      const std::vector<float> x(src.begin() + s * R, src.begin() + (s + 1) * R);
      // The bytes are those of the type's definition, written out here.
      std::vector<uint8_t> want(rb);
      if (t == GgmlType::F32) {
        std::memcpy(want.data(), x.data(), rb);
      } else if (t == GgmlType::F16) {
        for (int64_t j = 0; j < R; ++j) {
          const uint16_t h = fp32_to_fp16(x[j]);
          std::memcpy(&want[2 * j], &h, 2);
        }
      } else {  // ggml's quantize_row_q8_0_ref
        for (int64_t b = 0; b < R / 32; ++b) {
          float amax = 0.0f;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
          const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
          const uint16_t dh = fp32_to_fp16(d);
          std::memcpy(&want[b * 34], &dh, 2);
          for (int j = 0; j < 32; ++j) want[b * 34 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[b * 32 + j] * id)));
        }
      }
      ASSERT_EQ(std::vector<uint8_t>(row, row + rb), want) << "row " << c;
      // And the stored values are within the type's precision of the F32 row.
      std::vector<float> back(R);
      dequantize_row(t, row, back.data(), R);
      const std::vector<double> e = storage_error_bound(t, x);
      for (int64_t j = 0; j < R; ++j) ASSERT_LE(std::fabs(double(back[j]) - x[j]), e[j]) << "row " << c << " j " << j;
    }
  }
  // Q8_0 rows must be whole blocks.
  std::vector<uint8_t> d(1024);
  EXPECT_THROW(scatter_rows(src.data(), idx.data(), d.data(), GgmlType::Q8_0, 48, 1, 0, 1), Error);
}

TEST(KernelKvTypes, RopeRotatesF16AndQ8_0StateRowsInPlace) {
  const int64_t C = 7, H = 2;
  const std::vector<int32_t> pos = {0, -3, 5, -40, 0, 1000, -1};  // a position delta per row
  for (int mode : {0, 2})
    for (int64_t hd : {32, 64})
      for (int64_t n_rot : {hd, hd / 2})
        for (GgmlType t : kKvTypes) {
          SCOPED_TRACE(std::string(ggml_type_name(t)) + " mode " + std::to_string(mode) + " hd " + std::to_string(hd) +
                       " n_rot " + std::to_string(n_rot));
          const float base = 10000.0f, fs = 1.0f;
          const std::vector<float> x = randn(C * H * hd, 300 + hd + mode, 1.5f);
          const size_t rb = ggml_row_bytes(t, hd);  // one head row
          std::vector<uint8_t> state(rb * C * H);
          for (int64_t r = 0; r < C * H; ++r) quantize_row(t, x.data() + r * hd, state.data() + r * rb, hd);
          const std::vector<uint8_t> before = state;
          std::vector<float> stored(x.size());
          dequantize_row(t, before.data(), stored.data(), C * H * hd);

          rope(state.data(), t, pos.data(), H, hd, n_rot, base, fs, nullptr, mode, 0, 3);
          rope(state.data(), t, pos.data(), H, hd, n_rot, base, fs, nullptr, mode, 3, C * H);

          // Exactly "convert the row to F32, rotate (the F32 kernel), convert back".
          std::vector<float> f32 = stored;
          rope(f32.data(), pos.data(), H, hd, n_rot, base, fs, nullptr, mode, 0, C * H);
          for (int64_t r = 0; r < C * H; ++r) {
            const uint8_t* got = state.data() + r * rb;
            if (pos[r / H] == 0) {  // a zero delta leaves the bytes alone (no round trip)
              ASSERT_TRUE(std::equal(got, got + rb, before.data() + r * rb)) << "row " << r;
              continue;
            }
            std::vector<uint8_t> want(rb);
            quantize_row(t, f32.data() + r * hd, want.data(), hd);
            ASSERT_TRUE(std::equal(got, got + rb, want.data())) << "row " << r;
          }

          // Against the rotation in double of the original F32 values: the storage error before
          // (rotations keep the length of each pair, so a pair's error grows by at most sqrt 2)
          // and after, plus float rounding.
          std::vector<float> after(x.size());
          dequantize_row(t, state.data(), after.data(), C * H * hd);
          const std::vector<double> e_in = storage_error_bound(t, x);
          std::vector<double> rotated(x.size());
          for (int64_t r = 0; r < C * H; ++r) {
            const double p = pos[r / H];
            for (int64_t j = 0; j < hd; ++j) rotated[r * hd + j] = x[r * hd + j];
            for (int64_t i = 0; i < n_rot / 2; ++i) {
              const double th = p * fs * std::pow(double(base), -2.0 * i / n_rot);
              const int64_t ia = mode == 0 ? 2 * i : i, ib = mode == 0 ? 2 * i + 1 : i + n_rot / 2;
              const double a = x[r * hd + ia], b = x[r * hd + ib];
              rotated[r * hd + ia] = a * std::cos(th) - b * std::sin(th);
              rotated[r * hd + ib] = a * std::sin(th) + b * std::cos(th);
            }
          }
          for (int64_t r = 0; r < C * H; ++r) {
            double in_max = 0.0;
            for (int64_t j = 0; j < hd; ++j) in_max = std::max(in_max, e_in[r * hd + j]);
            const double moved = std::sqrt(2.0) * in_max + 1e-5;  // |rotated stored - exact rotation|
            // What gets converted back differs from the exact rotation by up to `moved`, so its
            // storage error is bounded on magnitudes |exact| + moved.
            std::vector<float> mags(static_cast<size_t>(hd));
            for (int64_t j = 0; j < hd; ++j) mags[j] = static_cast<float>(std::fabs(rotated[r * hd + j]) + moved);
            const std::vector<double> e_out = storage_error_bound(t, mags);
            for (int64_t j = 0; j < hd; ++j)
              ASSERT_LE(std::fabs(after[r * hd + j] - rotated[r * hd + j]), moved + e_out[j]) << "row " << r << " j " << j;
          }
        }
  std::vector<uint8_t> q(34 * 4);
  const int32_t one[2] = {1, 1};
  EXPECT_THROW(rope(q.data(), GgmlType::Q8_0, one, 2, 16, 16, 10000.0f, 1.0f, nullptr, 0, 0, 2), Error);  // hd 16
  EXPECT_THROW(rope(q.data(), GgmlType::Q4_0, one, 1, 32, 32, 10000.0f, 1.0f, nullptr, 0, 0, 1), Error);
}

// The paths agree with each other (different summation orders and exp, so not bit for bit).
TEST(KernelIsaAgreement, AllPathsAgreeWithScalar) {
  uint32_t seed = 900;
  for (const MatmulCase& c : matmul_cases()) {
    for (int64_t M : {1, 4}) {
      const int64_t K = c.Ks.back(), N = 21;
      const Weights w = make_weights(c.type, N, K, seed++);
      const std::vector<float> x = randn(M * K, seed++);
      std::vector<double> want, mag;
      reference_matmul(x, M, w, nullptr, nullptr, want, mag);
      ASSERT_TRUE(kernel_force_isa("scalar"));
      const std::vector<float> ref = run_matmul(x, M, w, nullptr, nullptr, {{0, N}});
      for (const char* isa : kIsas) {
        if (!kernel_force_isa(isa)) continue;
        const std::vector<float> got = run_matmul(x, M, w, nullptr, nullptr, {{0, N}});
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], ref[i], 1e-6 * mag[i] + 1e-30) << c.name << " " << isa << " element " << i;
      }
    }
  }
  // Q8_0 K/V too: the vector loaders widen int8 * d exactly as the scalar one does.
  const AttnProblem pq = make_attention(3, 8, 2, 64, 33, GgmlType::Q8_0, GgmlType::Q8_0, 37);
  ASSERT_TRUE(kernel_force_isa("scalar"));
  const std::vector<float> refq = run_attention(pq, 0.125f, {0, 24});
  for (const char* isa : kIsas) {
    if (!kernel_force_isa(isa)) continue;
    const std::vector<float> got = run_attention(pq, 0.125f, {0, 24});
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], refq[i], 2e-6) << isa << " Q8_0 attention " << i;
  }
  const AttnProblem p = make_attention(3, 8, 2, 40, 33, GgmlType::F16, GgmlType::F16, 31);
  ASSERT_TRUE(kernel_force_isa("scalar"));
  const std::vector<float> ref = run_attention(p, 0.2f, {0, 24});
  std::vector<float> g = randn(77, 5, 4.0f), u = randn(77, 6), sref(77), sgot(77);
  swiglu(g.data(), u.data(), sref.data(), 0, 77);
  for (const char* isa : kIsas) {
    if (!kernel_force_isa(isa)) continue;
    const std::vector<float> got = run_attention(p, 0.2f, {0, 24});
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref[i], 2e-6) << isa << " attention " << i;
    swiglu(g.data(), u.data(), sgot.data(), 0, 77);
    for (int i = 0; i < 77; ++i) ASSERT_NEAR(sgot[i], sref[i], 3e-7 * std::fabs(sref[i]) + 1e-30) << isa << " swiglu " << i;
  }
  force_best();
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelIsa, ::testing::ValuesIn(kIsas),
                         [](const auto& info) {
                           std::string name(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');  // gtest names: letters, digits, _
                           return name;
                         });

// ---- dispatch --------------------------------------------------------------------------------

TEST(KernelDispatch, ReportsAPathAndRefusesUnknownOnes) {
  const std::string isa = kernel_isa();
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512" || isa == "amx") << isa;
  EXPECT_TRUE(kernel_force_isa("scalar"));  // always available
  EXPECT_STREQ(kernel_isa(), "scalar");
  EXPECT_FALSE(kernel_force_isa("sse9"));
  EXPECT_FALSE(kernel_force_isa(nullptr));
  EXPECT_STREQ(kernel_isa(), "scalar");
  force_best();
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    EXPECT_TRUE(std::string(kernel_isa()) == "avx512" || std::string(kernel_isa()) == "amx") << kernel_isa();
  }
#endif
}

TEST(KernelErrors, BadArgumentsThrow) {
  std::vector<float> x(64, 1.0f), out(64), work(matmul_work_floats(64));
  std::vector<uint8_t> w(4096);
  EXPECT_THROW(matmul(x.data(), 1, 64, w.data(), GgmlType::IQ2_XXS, nullptr, nullptr, out.data(), 1, 0, 1, work.data()),
               Error);  // no dequantiser
  EXPECT_THROW(matmul(x.data(), 1, 48, w.data(), GgmlType::Q8_0, nullptr, nullptr, out.data(), 1, 0, 1, work.data()),
               Error);  // K not whole blocks
  EXPECT_THROW(matmul(x.data(), 2, 64, w.data(), GgmlType::Q8_0, nullptr, nullptr, out.data(), 1, 0, 1, nullptr),
               Error);  // needs work
  EXPECT_THROW(matmul(x.data(), 1, 64, w.data(), GgmlType::F32, nullptr, nullptr, out.data(), 4, 2, 5, nullptr),
               Error);  // range
  EXPECT_THROW(attention(x.data(), w.data(), GgmlType::Q8_0, w.data(), GgmlType::F32, nullptr, out.data(), 2, 1, 4, 2,
                         0, 1.0f, 0, 1, work.data()),
               Error);
  EXPECT_THROW(attention(x.data(), w.data(), GgmlType::F32, w.data(), GgmlType::F32, nullptr, out.data(), 3, 2, 4, 2,
                         0, 1.0f, 0, 1, work.data()),
               Error);  // 3 heads over 2 KV heads
  EXPECT_THROW(attention(x.data(), w.data(), GgmlType::F32, w.data(), GgmlType::F32, nullptr, out.data(), 2, 1, 4, 2,
                         2, 1.0f, 0, 1, work.data()),
               Error);  // a ring start outside the window
  EXPECT_THROW(rope(x.data(), nullptr, 1, 8, 8, 10000.0f, 1.0f, nullptr, 1, 0, 1), Error);
  EXPECT_THROW(rope(x.data(), nullptr, 1, 8, 10, 10000.0f, 1.0f, nullptr, 0, 0, 1), Error);
  EXPECT_THROW(scatter_rows(x.data(), nullptr, w.data(), GgmlType::Q4_0, 32, 1, 0, 1), Error);  // not a K/V type
  EXPECT_THROW(attention(x.data(), w.data(), GgmlType::F16, w.data(), GgmlType::Q4_0, nullptr, out.data(), 2, 1, 32, 2,
                         0, 1.0f, 0, 1, work.data()),
               Error);  // Q4_0 is no K/V type
  EXPECT_THROW(attention(x.data(), w.data(), GgmlType::Q8_0, w.data(), GgmlType::Q8_0, nullptr, out.data(), 1, 1, 48, 1,
                         0, 1.0f, 0, 1, work.data()),
               Error);  // Q8_0 heads must be whole blocks of 32
  // Panels16: only the int8 types with whole dwords per row, ranges that start at a panel.
  EXPECT_FALSE(matmul_reads_panels16(GgmlType::F16, 64));
  EXPECT_TRUE(matmul_reads_panels16(GgmlType::Q4_0, 32));  // 18-byte rows, padded to 20
  EXPECT_FALSE(matmul_reads_panels16(GgmlType::Q4_0, 48));  // not whole blocks
  EXPECT_THROW(matmul(x.data(), 1, 64, w.data(), GgmlType::F16, nullptr, nullptr, out.data(), 16, 0, 16, work.data(),
                      nullptr, WeightLayout::Panels16),
               Error);
  EXPECT_THROW(matmul(x.data(), 1, 64, w.data(), GgmlType::Q8_0, nullptr, nullptr, out.data(), 40, 8, 40, work.data(),
                      nullptr, WeightLayout::Panels16),
               Error);
  // F32 decode needs no work buffer.
  std::vector<float> wf(64, 0.5f);
  matmul(x.data(), 1, 64, wf.data(), GgmlType::F32, nullptr, nullptr, out.data(), 1, 0, 1, nullptr);
  EXPECT_EQ(out[0], 32.0f);
}

// ---- the scalar-only kernels -----------------------------------------------------------------

TEST(Kernels, EmbedRowsDequantisesAndZeroesBadIds) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::MXFP4}) {
    const int64_t V = 10, D = 64;
    const Weights w = make_weights(t, V, D, 3);
    const std::vector<int32_t> ids = {3, 0, -1, 9, 10, 3};
    std::vector<float> out(ids.size() * D, -5.0f);
    embed_rows(t, w.bytes.data(), V, D, ids.data(), out.data(), 0, 2);
    embed_rows(t, w.bytes.data(), V, D, ids.data(), out.data(), 2, 6);
    for (size_t s = 0; s < ids.size(); ++s)
      for (int64_t j = 0; j < D; ++j) {
        const float want = (ids[s] < 0 || ids[s] >= V) ? 0.0f : w.deq[ids[s] * D + j];
        ASSERT_TRUE(same_bits(out[s * D + j], want)) << ggml_type_name(t) << " s=" << s << " j=" << j;
      }
  }
  std::vector<float> out(8);
  const int32_t id = 0;
  EXPECT_THROW(embed_rows(GgmlType::IQ2_XXS, out.data(), 1, 256, &id, out.data(), 0, 1), Error);
}

// A tied embedding's table in the Panels16 layout (the output projection's): the same rows, the same
// bits, including the last panel's rows (V not a multiple of 16) and the 2-byte row tails of Q4_0.
TEST(Kernels, EmbedRowsReadsPanels16TablesAsRows) {
  for (auto [t, D] : std::vector<std::pair<GgmlType, int64_t>>{
           {GgmlType::Q8_0, 64}, {GgmlType::Q4_0, 96}, {GgmlType::Q5_0, 64}, {GgmlType::Q4_K, 256}, {GgmlType::Q6_K, 256},
           {GgmlType::MXFP4, 96}}) {
    SCOPED_TRACE(ggml_type_name(t));
    const int64_t V = 37;
    const Weights w = make_weights(t, V, D, 5);
    std::vector<uint8_t> packed(weight_bytes(t, V, D, WeightLayout::Panels16));
    pack_panels16(t, w.bytes.data(), V, D, packed.data(), 0, (V + 15) / 16);
    const std::vector<int32_t> ids = {36, 0, 17, -1, 15, 16, 37, 5};
    const int64_t S = static_cast<int64_t>(ids.size());
    std::vector<float> rows(ids.size() * D, -5.0f), panels(ids.size() * D, 7.0f);
    embed_rows(t, w.bytes.data(), V, D, ids.data(), rows.data(), 0, S);
    embed_rows(t, packed.data(), V, D, ids.data(), panels.data(), 0, 3, WeightLayout::Panels16);
    embed_rows(t, packed.data(), V, D, ids.data(), panels.data(), 3, S, WeightLayout::Panels16);
    for (size_t i = 0; i < rows.size(); ++i) ASSERT_TRUE(same_bits(rows[i], panels[i])) << "element " << i;
  }
  std::vector<float> out(100);
  const int32_t id = 0;
  EXPECT_THROW(embed_rows(GgmlType::Q4_K, out.data(), 1, 100, &id, out.data(), 0, 1, WeightLayout::Panels16), Error);
}

TEST(Kernels, GatherRowsCopiesTheNamedRowsAndZeroesBadIndices) {
  const int64_t S = 6, R = 37;
  const std::vector<float> x = randn(S * R, 9);
  const std::vector<int32_t> idx = {5, 0, 5, -1, 6, 2, 1000};
  std::vector<float> out(idx.size() * R, -7.0f);
  gather_rows(x.data(), S, R, idx.data(), out.data(), 0, 3);
  gather_rows(x.data(), S, R, idx.data(), out.data(), 3, 6);  // row 6 stays as it was
  for (size_t i = 0; i < idx.size(); ++i)
    for (int64_t j = 0; j < R; ++j) {
      const float want = i == 6 ? -7.0f : (idx[i] < 0 || idx[i] >= S) ? 0.0f : x[idx[i] * R + j];
      ASSERT_TRUE(same_bits(out[i * R + j], want)) << "i=" << i << " j=" << j;
    }
}

TEST(Kernels, RmsnormMatchesReferenceInPlace) {
  for (int64_t D : {1, 7, 64, 301}) {
    const int64_t S = 3;
    std::vector<float> x = randn(S * D, 50 + D, 2.0f), w = randn(D, 60 + D);
    std::vector<float> out(S * D);
    rmsnorm_rows(x.data(), w.data(), out.data(), D, 1e-5f, 0, S);
    for (int64_t s = 0; s < S; ++s) {
      double ss = 0.0;
      for (int64_t j = 0; j < D; ++j) ss += double(x[s * D + j]) * x[s * D + j];
      const double sc = 1.0 / std::sqrt(ss / D + 1e-5);
      for (int64_t j = 0; j < D; ++j)
        ASSERT_NEAR(out[s * D + j], x[s * D + j] * sc * w[j], 1e-6 * std::fabs(x[s * D + j] * sc * w[j]) + 1e-12);
    }
    std::vector<float> inplace = x;
    rmsnorm_rows(inplace.data(), w.data(), inplace.data(), D, 1e-5f, 0, 1);
    rmsnorm_rows(inplace.data(), w.data(), inplace.data(), D, 1e-5f, 1, S);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(same_bits(inplace[i], out[i]));
  }
}

TEST(Kernels, AddAddsTheRange) {
  std::vector<float> a = randn(20, 1), b = randn(20, 2), out(20, 9.0f);
  add(a.data(), b.data(), out.data(), 3, 17);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(out[i], (i >= 3 && i < 17) ? a[i] + b[i] : 9.0f);
}

TEST(Kernels, RopeMatchesReference) {
  const int64_t S = 3, H = 2;
  const std::vector<int32_t> pos = {0, 5, 1000};
  for (int mode : {0, 2})
    for (int64_t hd : {8, 64})
      for (int64_t n_rot : {hd, hd / 2})
      for (bool with_factors : {false, true}) {
        std::vector<float> x = randn(S * H * hd, 70 + hd + mode), orig = x;
        const float base = 10000.0f, fs = 0.5f;
        std::vector<float> factors(static_cast<size_t>(n_rot / 2));
        for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.37f * static_cast<float>(i);
        const float* ff = with_factors ? factors.data() : nullptr;
        rope(x.data(), pos.data(), H, hd, n_rot, base, fs, ff, mode, 0, 1);
        rope(x.data(), pos.data(), H, hd, n_rot, base, fs, ff, mode, 1, S * H);
        for (int64_t r = 0; r < S * H; ++r) {
          const double p = pos[r / H];
          std::vector<double> want(orig.begin() + r * hd, orig.begin() + (r + 1) * hd);
          for (int64_t i = 0; i < n_rot / 2; ++i) {
            const double th = p * fs * std::pow(double(base), -2.0 * i / n_rot) / (ff ? ff[i] : 1.0);
            const int64_t ia = mode == 0 ? 2 * i : i, ib = mode == 0 ? 2 * i + 1 : i + n_rot / 2;
            const double a = orig[r * hd + ia], b = orig[r * hd + ib];
            want[ia] = a * std::cos(th) - b * std::sin(th);
            want[ib] = a * std::sin(th) + b * std::cos(th);
          }
          for (int64_t j = 0; j < hd; ++j)
            ASSERT_NEAR(x[r * hd + j], want[j], 1e-5) << "mode " << mode << " n_rot " << n_rot << " r " << r << " j " << j;
        }
      }
}

// rope keeps the last angle tables per thread (every layer rotates by the same angles): a table is
// reused only when all of theta's inputs match, here one at a time changed between calls at one
// position, the frequency factors in place at the same address.
TEST(Kernels, RopeAnglesFollowEveryInput) {
  const int64_t hd = 64, n_rot = 64;
  std::vector<float> factors(n_rot / 2, 1.0f);
  struct Call { float base, scale; bool ff; float bump; int p; };
  const Call calls[] = {{10000.0f, 1.0f, false, 0, 777}, {500000.0f, 1.0f, false, 0, 777}, {10000.0f, 1.0f, false, 0, 777},
                        {10000.0f, 0.25f, false, 0, 777}, {10000.0f, 1.0f, true, 0, 777},  {10000.0f, 1.0f, true, 3.0f, 777},
                        {10000.0f, 1.0f, true, 0, 778},   {10000.0f, 1.0f, false, 0, 778}};
  for (const Call& c : calls) {
    for (float& f : factors) f += c.bump;  // same pointer, new values
    const int32_t at[] = {c.p};
    const float* ff = c.ff ? factors.data() : nullptr;
    std::vector<float> x = randn(hd, 91), orig = x;
    rope(x.data(), at, 1, hd, n_rot, c.base, c.scale, ff, 0, 0, 1);
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double th = c.p * double(c.scale) * std::pow(double(c.base), -2.0 * i / n_rot) / (ff ? ff[i] : 1.0);
      const double a = orig[2 * i], b = orig[2 * i + 1];
      ASSERT_NEAR(x[2 * i], a * std::cos(th) - b * std::sin(th), 1e-5) << "base " << c.base << " scale " << c.scale << " i " << i;
      ASSERT_NEAR(x[2 * i + 1], a * std::sin(th) + b * std::cos(th), 1e-5) << "base " << c.base << " scale " << c.scale << " i " << i;
    }
  }
}

TEST(Kernels, ScatterRowsWritesF32AndF16) {
  const int64_t R = 5, C = 4;
  const std::vector<float> src = randn(3 * R, 4);
  const std::vector<int32_t> idx = {2, -1, 0};
  std::vector<float> d32(C * R, 1.0f);
  std::vector<uint16_t> d16(C * R, 0x3C00);
  scatter_rows(src.data(), idx.data(), d32.data(), GgmlType::F32, R, C, 0, 3);
  scatter_rows(src.data(), idx.data(), d16.data(), GgmlType::F16, R, C, 0, 3);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < R; ++j) {
      const int64_t s = c == 2 ? 0 : c == 0 ? 2 : -1;
      const float want = s < 0 ? 1.0f : src[s * R + j];
      EXPECT_EQ(d32[c * R + j], want);
      EXPECT_EQ(d16[c * R + j], fp32_to_fp16(want));
    }
}

}  // namespace
}  // namespace npullm::cpu
