// Reference quantisers for the ggml block types beyond the simple ones in ggml_types.cpp:
// Q4_1, Q5_0, Q5_1, the k-quants Q2_K..Q6_K, the non-linear IQ4_NL / IQ4_XS, and Q8_K.
//
// Each one follows the algorithm of ggml's reference quantiser for that type (the path
// llama-quantize takes when no importance matrix is given), evaluating the same float expressions
// in the same order, so that a model quantised here is the model llama.cpp would have made:
//   * Q4_1 / Q5_0 / Q5_1: one scale (and min) per 32 elements from the block's range, then
//     round-to-nearest — simple enough to match llama-quantize byte for byte.
//   * k-quants: each 16- or 32-element sub-block gets the scale (and min) of a small search that
//     minimises a weighted error; the sub-block scales are then themselves quantised to 4, 6 or 8
//     bits against one f16 super-block scale, and the elements re-rounded with the final scales.
//   * IQ4_NL / IQ4_XS: 4-bit indices into a fixed non-uniform table; the block scale is searched
//     over 15 candidates around the one that maps the extreme element onto the table's end.
//   * MXFP4: a power-of-two scale from the block's largest magnitude, then each element to the
//     nearest table entry (no search: ggml ignores an importance matrix for this type).
// The tests compare every type against llama-quantize's bytes on golden data.
//
// Block layouts: see ggml_types.cpp (the dequantisers) and ../shared/golden/dequant/README.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "formats/ggml_types.h"

namespace npullm {

namespace {

constexpr int kQK = 256;  // elements per k-quant super-block

// Sub-blocks whose largest magnitude is below this are treated as all zero (as ggml does), so a
// scale is never computed from denormal noise.
constexpr float kGroupMaxEps = 1e-15f;

inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void store_f16(uint8_t* p, float f) { store_u16(p, fp32_to_fp16(f)); }
inline float load_f16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return fp16_to_fp32(v);
}

// Round to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 pushes the fraction bits out
// of the mantissa, so the FPU's own rounding does the work. ggml uses exactly this trick, and its
// tie-breaking (to even, not away from zero) decides quants at exact halves — so we do too.
inline int nearest_int(float x) {
  const float v = x + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

// ---------------------------------------------------------------------------------------------
// 32-element types with one scale (Q5_0) or a scale and a min (Q4_1, Q5_1).

// Smallest and largest element of a 32-element block.
inline void block_range(const float* x, float& min, float& max) {
  min = x[0];
  max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
}

// Q4_1, 20 B: d f16 | m f16 | qs[16]. x = q*d + m with q in 0..15 spanning [min, max].
void quant_q4_1(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += 20) {
    float min, max;
    block_range(x, min, max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    store_f16(dst + 2, min);
    uint8_t* qs = dst + 4;
    for (int j = 0; j < 16; ++j) {
      // (x - min)*id lies in [0, 15]; +0.5 then truncation rounds to nearest.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
      qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Packs 32 five-bit quants: low nibbles as in Q4_x, the fifth bits into the u32 qh (bit j for element j).
inline void pack_q5(const int* q, uint8_t* qh_dst, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_dst, &qh, 4);
}

// Q5_0, 22 B: d f16 | qh u32 | qs[16]. Like Q4_0: the signed extreme element maps to -16.
void quant_q5_0(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += 22) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    pack_q5(q, dst + 2, dst + 6);
  }
}

// Q5_1, 24 B: d f16 | m f16 | qh u32 | qs[16]. x = q*d + m with q in 0..31 spanning [min, max].
void quant_q5_1(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += 24) {
    float min, max;
    block_range(x, min, max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    store_f16(dst + 2, min);
    int q[32];
    // No clamp needed: (x - min)*id + 0.5 stays below 32 (ggml has none either).
    for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
    pack_q5(q, dst + 4, dst + 8);
  }
}

// ---------------------------------------------------------------------------------------------
// Scale searches of the k-quants: for each sub-block, the quants (in L) and the scale that fit it best.

// The scales of the 16 sub-blocks (16 elements each) of a Q6_K super-block, and their quants in
// L[0..256) as q + 32 with q in [-32, 31]. Per sub-block: start from the scale that maps the signed
// extreme element to -32, take the x²-weighted least-squares scale for those quants, then try 18
// nearby starting scales and keep the best fit (ggml's make_qx_quants).
//
// The 16 searches run side by side, four sub-blocks per 4-float vector (GCC/Clang vector
// extensions, plain SSE2 on x86-64): each lane performs exactly the float operations of the
// one-sub-block search, in the same order, so the result is bit-identical, but four times as many
// run at once and the sums no longer wait on each other. This is most of the time of writing a
// Q4_0 model, whose output matrix is Q6_K.
using Vec4 = float __attribute__((vector_size(16)));

void q6k_subblock_scales(const float* x, int8_t* L, float* scales) {
  constexpr int nmax = 32;
  // [element][lane group]: lane b of group g is sub-block 4*g + b.
  Vec4 xt[16][4], w[16][4], wx[16][4];
  float max[16];
  bool active[16];
  for (int sb = 0; sb < 16; ++sb) {
    float amax = 0.0f;
    max[sb] = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const float v = x[16 * sb + i];
      xt[i][sb / 4][sb % 4] = v;
      w[i][sb / 4][sb % 4] = v * v;
      wx[i][sb / 4][sb % 4] = v * v * v;  // the search's w*x*l is (w*x)*l: precomputing w*x changes nothing
      if (std::fabs(v) > amax) {
        amax = std::fabs(v);
        max[sb] = v;
      }
    }
    active[sb] = amax >= kGroupMaxEps;
    if (!active[sb]) max[sb] = 1.0f;  // an all-zero sub-block: computed along, results ignored
  }
  const Vec4 lo = {-32.0f, -32.0f, -32.0f, -32.0f}, hi = {31.0f, 31.0f, 31.0f, 31.0f};
  const Vec4 magic = {12582912.0f, 12582912.0f, 12582912.0f, 12582912.0f};
  float best[16];
  // One pass over the elements at the given inverse scales: the weighted sums of x*l and l*l.
  auto fit = [&](const float* iscale, float* sumlx_out, float* suml2_out) {
    Vec4 isc[4], sumlx[4] = {}, suml2[4] = {};
    for (int g = 0; g < 4; ++g) isc[g] = Vec4{iscale[4 * g], iscale[4 * g + 1], iscale[4 * g + 2], iscale[4 * g + 3]};
    for (int i = 0; i < 16; ++i) {
      for (int g = 0; g < 4; ++g) {
        Vec4 v = isc[g] * xt[i][g];
        v = v < lo ? lo : v;  // clamping before rounding gives the same integer (the bounds are integers)
        v = v > hi ? hi : v;
        const Vec4 l = (v + magic) - magic;  // round to nearest even, exactly as nearest_int
        sumlx[g] += wx[i][g] * l;
        suml2[g] += w[i][g] * l * l;
      }
    }
    for (int sb = 0; sb < 16; ++sb) {
      sumlx_out[sb] = sumlx[sb / 4][sb % 4];
      suml2_out[sb] = suml2[sb / 4][sb % 4];
    }
  };
  auto quant = [&](float iscale, int sb, int i) {
    return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[16 * sb + i])));
  };
  float iscale[16], sumlx[16], suml2[16];
  for (int sb = 0; sb < 16; ++sb) iscale[sb] = static_cast<float>(-nmax) / max[sb];
  fit(iscale, sumlx, suml2);
  for (int sb = 0; sb < 16; ++sb) {
    for (int i = 0; i < 16; ++i) L[16 * sb + i] = static_cast<int8_t>(nmax + quant(iscale[sb], sb, i));
    scales[sb] = suml2[sb] != 0.0f ? sumlx[sb] / suml2[sb] : 0.0f;
    best[sb] = scales[sb] * sumlx[sb];  // the weighted fit's gain; larger is better
  }
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    for (int sb = 0; sb < 16; ++sb) iscale[sb] = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max[sb];
    fit(iscale, sumlx, suml2);
    for (int sb = 0; sb < 16; ++sb) {
      if (suml2[sb] > 0.0f && sumlx[sb] * sumlx[sb] > best[sb] * suml2[sb]) {
        for (int i = 0; i < 16; ++i) L[16 * sb + i] = static_cast<int8_t>(nmax + quant(iscale[sb], sb, i));
        scales[sb] = sumlx[sb] / suml2[sb];
        best[sb] = scales[sb] * sumlx[sb];
      }
    }
  }
  for (int sb = 0; sb < 16; ++sb) {
    if (active[sb]) continue;
    std::fill(L + 16 * sb, L + 16 * sb + 16, int8_t{0});
    scales[sb] = 0.0f;
  }
}

// Symmetric quants in [-nmax, nmax-1] (stored as L + nmax) for Q3_K: round with the extreme-element
// scale, then up to 5 passes of coordinate descent that move one quant at a time whenever that
// improves the x²-weighted least-squares fit.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (!(slx > 0.0f)) continue;  // written so that a NaN also skips, as in ggml
      float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
      const int new_l = std::max(-nmax, std::min(nmax - 1, nearest_int(x[i] * sl2 / slx)));
      if (new_l == L[i]) continue;
      slx += w * x[i] * static_cast<float>(new_l);
      sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
      // The fit's gain is sumlx²/suml2; compare the two fractions without dividing.
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quants in [0, nmax] with x ≈ scale*L - min (min >= 0 returned in *the_min), for Q2_K,
// Q4_K and Q5_K. Starts from the range [min(x, 0), max(x)], then tries nstep+1 scales between
// (nmax + rmin) and (nmax + rmin + nstep*rdelta) over the range: for each rounding it solves the
// weighted least-squares scale and offset, and keeps the one with the smallest weighted error
// (absolute error when use_mad, squared otherwise).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;  // the offset only ever shifts down: quants start at zero
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  auto error_of = [&](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    best_error += weights[i] * error_of(scale * static_cast<float>(L[i]) + min - x[i]);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0.0f)) continue;  // a degenerate rounding (all quants equal); NaN skips too
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0.0f) {  // a positive offset is not representable: refit the scale alone
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0.0f;
    for (int i = 0; i < n; ++i)
      cur_error += weights[i] * error_of(this_scale * static_cast<float>(Laux[i]) + this_min - x[i]);
    if (cur_error < best_error) {
      std::copy(Laux, Laux + n, L);
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// Packs 256 two-bit values the way Q2_K and Q3_K store them: in each 128-element half, byte l
// holds elements l, l+32, l+64, l+96 in bit pairs 0, 2, 4, 6.
inline void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// ---------------------------------------------------------------------------------------------
// Q2_K, 84 B: scales[16] (low nibble scale, high nibble min) | qs[64] | d f16 | dmin f16.
// 16 sub-blocks of 16 elements, x ≈ d*sc*q - dmin*m with q in 0..3.
void quant_q2_k(const float* x, uint8_t* dst, int64_t n) {
  uint8_t L[kQK], Laux[16];
  float weights[16], mins[16], scales[16];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 84) {
    uint8_t* sc = dst;
    uint8_t* qs = dst + 16;
    float max_scale = 0.0f, max_min = 0.0f;  // scales are positive: the min absorbs the sign
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // Sub-block scales and mins become 4-bit multiples of d = max/15 and dmin = max_min/15.
    if (max_scale > 0.0f) {
      const float iscale = 15.0f / max_scale;
      for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      store_f16(dst + 80, max_scale / 15.0f);
    } else {
      std::fill(sc, sc + 16, uint8_t{0});
      store_f16(dst + 80, 0.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = 15.0f / max_min;
      for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(sc[j] | (nearest_int(iscale * mins[j]) << 4));
      store_f16(dst + 82, max_min / 15.0f);
    } else {
      store_f16(dst + 82, 0.0f);
    }
    // Re-round every element against the scales actually stored.
    const float d_all = load_f16(dst + 80), m_all = load_f16(dst + 82);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(sc[j] & 0x0F);
      if (d == 0.0f) continue;
      const float dm = m_all * static_cast<float>(sc[j] >> 4);
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<uint8_t>(std::max(0, std::min(3, nearest_int((x[16 * j + i] + dm) / d))));
    }
    pack_2bit(L, qs);
  }
}

// Q3_K, 110 B: hmask[32] | qs[64] | scales[12] | d f16. 16 sub-blocks of 16 elements,
// x ≈ d*(sc-32)*(q-4) with q in 0..7: 2 low bits in qs (as Q2_K), the high bit in hmask.
void quant_q3_k(const float* x, uint8_t* dst, int64_t n) {
  int8_t L[kQK];
  float scales[16];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 110) {
    uint8_t* hmask = dst;
    uint8_t* qs = dst + 32;
    uint8_t* sc = dst + 96;
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    // Signed 6-bit sub-block scales (bias 32): low nibbles in bytes 0..7 (j and j+8 share a byte),
    // high bit pairs in bytes 8..11.
    std::memset(sc, 0, 12);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = std::max(-32, std::min(31, static_cast<int>(static_cast<int8_t>(nearest_int(iscale * scales[j]))))) + 32;
        if (j < 8) sc[j] = static_cast<uint8_t>(l & 0x0F);
        else sc[j - 8] = static_cast<uint8_t>(sc[j - 8] | ((l & 0x0F) << 4));
        sc[8 + j % 4] = static_cast<uint8_t>(sc[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
      }
      store_f16(dst + 108, 1.0f / iscale);
    } else {
      store_f16(dst + 108, 0.0f);
    }
    const float d_all = load_f16(dst + 108);
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? (sc[j] & 0x0F) : (sc[j - 8] >> 4);
      const int s = (low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      const float d = d_all * static_cast<float>(s);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<int8_t>(std::max(-4, std::min(3, nearest_int(x[16 * j + i] / d))) + 4);
    }
    // High bits: element j goes to bit (j / 32) of hmask[j % 32].
    std::memset(hmask, 0, 32);
    uint8_t low2[kQK];
    for (int j = 0; j < kQK; ++j) {
      int l = L[j];
      if (l > 3) {
        hmask[j % 32] = static_cast<uint8_t>(hmask[j % 32] | (1 << (j / 32)));
        l -= 4;
      }
      low2[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(low2, qs);
  }
}

// Q4_K and Q5_K keep 8 six-bit scales and 8 six-bit mins in 12 bytes (see k4_scale_min in
// ggml_types.cpp for the layout); this is the inverse.
inline void pack_k4_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* sc) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = ls[j];
      sc[j + 4] = lm[j];
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4));
      sc[j - 4] = static_cast<uint8_t>(sc[j - 4] | ((ls[j] >> 4) << 6));
      sc[j] = static_cast<uint8_t>(sc[j] | ((lm[j] >> 4) << 6));
    }
  }
}

inline void unpack_k4_scale(const uint8_t* sc, int j, int& scale, int& min) {
  if (j < 4) {
    scale = sc[j] & 63;
    min = sc[j + 4] & 63;
  } else {
    scale = (sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4);
    min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

// The common part of Q4_K and Q5_K: 8 sub-blocks of 32 elements, x ≈ d*sc*q - dmin*m with q in
// 0..nmax. Writes d, dmin and the packed scales into the block header and leaves the quants in L.
// `rmin`/`nstep` are the search ranges ggml uses for each type.
void quant_k4_common(const float* x, uint8_t* hdr, int nmax, float rmin, int nstep, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    // Weight each element by the sub-block's RMS plus its own magnitude: large elements matter
    // more, but small ones are not ignored.
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  store_f16(hdr, max_scale / 63.0f);
  store_f16(hdr + 2, max_min / 63.0f);
  pack_k4_scales(ls, lm, hdr + 4);
  const float d_all = load_f16(hdr), m_all = load_f16(hdr + 2);
  for (int j = 0; j < 8; ++j) {
    int s, m;
    unpack_k4_scale(hdr + 4, j, s, m);
    const float d = d_all * static_cast<float>(s);
    if (d == 0.0f) continue;
    const float dm = m_all * static_cast<float>(m);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int((x[32 * j + i] + dm) / d))));
  }
}

// Q4_K, 144 B: d f16 | dmin f16 | scales[12] | qs[128]; each 64 elements take 32 bytes of qs,
// the first 32 in the low nibbles, the next 32 in the high nibbles.
void quant_q4_k(const float* x, uint8_t* dst, int64_t n) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 144) {
    quant_k4_common(x, dst, 15, -1.0f, 20, L);
    uint8_t* q = dst + 16;
    for (int j = 0; j < kQK; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Q5_K, 176 B: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; nibbles as Q4_K, and the fifth
// bit of element l of sub-block j in bit j of qh[l].
void quant_q5_k(const float* x, uint8_t* dst, int64_t n) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 176) {
    quant_k4_common(x, dst, 31, -0.5f, 15, L);
    uint8_t* qh = dst + 16;
    uint8_t* ql = dst + 48;
    std::memset(qh, 0, 32);
    for (int g = 0; g < 4; ++g, ql += 32) {
      for (int l = 0; l < 32; ++l) {
        int l1 = L[64 * g + l], l2 = L[64 * g + l + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[l] = static_cast<uint8_t>(qh[l] | (1 << (2 * g)));
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[l] = static_cast<uint8_t>(qh[l] | (2 << (2 * g)));
        }
        ql[l] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

// Q6_K, 210 B: ql[128] | qh[64] | scales[16] int8 | d f16. 16 sub-blocks of 16 elements,
// x ≈ d*sc*(q-32) with q in 0..63 and signed 8-bit sub-block scales.
void quant_q6_k(const float* x, uint8_t* dst, int64_t n) {
  int8_t L[kQK];
  float scales[16];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 210) {
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    auto* sc = reinterpret_cast<int8_t*>(dst + 192);
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    q6k_subblock_scales(x, L, scales);
    for (int ib = 0; ib < 16; ++ib) {
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {  // an all-zero super-block
      std::memset(dst, 0, 210);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    store_f16(dst + 208, 1.0f / iscale);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    const float d_all = load_f16(dst + 208);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(sc[j]);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<int8_t>(std::max(-32, std::min(31, nearest_int(x[16 * j + i] / d))) + 32);
    }
    // Each 128-element half: ql[l] holds elements l (low) and l+64 (high), ql[l+32] holds l+32 and
    // l+96; qh[l] holds the top 2 bits of l, l+32, l+64, l+96 in bit pairs 0, 2, 4, 6.
    for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0x0F) | ((q4 & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// IQ4_NL / IQ4_XS: each element is the index of the nearest entry of a fixed 16-value table
// (denser near zero, fitted to weight distributions), times a per-block scale.

constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Index of the table entry nearest to x (the table is sorted: binary search for the pair
// val[lo] <= x < val[hi], then the nearer of the two, compared exactly as ggml does).
inline int iq4_best_index(float x) {
  if (x <= kIq4Values[0]) return 0;
  if (x >= kIq4Values[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < kIq4Values[mid]) hi = mid;
    else lo = mid;
  }
  return x - kIq4Values[hi - 1] < kIq4Values[hi] - x ? hi - 1 : hi;
}

// The scale of one 32-element block for the IQ4 table: starts from the scale that maps the signed
// extreme element onto the table's -127 end, then tries 15 starting points around it and keeps the
// x²-weighted least-squares scale of the best one. L receives the indices for the first candidate.
float iq4_block_scale(const float* xb, uint8_t* L) {
  constexpr int kTries = 7;
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(xb[j]) > amax) {
      amax = std::fabs(xb[j]);
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  float d = -max / static_cast<float>(kIq4Values[0]);
  float id = 1.0f / d;
  float sumqx = 0.0f, sumq2 = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const int l = iq4_best_index(id * xb[j]);
    L[j] = static_cast<uint8_t>(l);
    const float q = kIq4Values[l];
    const float w = xb[j] * xb[j];
    sumqx += w * q * xb[j];
    sumq2 += w * q * q;
  }
  d = sumqx / sumq2;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    id = static_cast<float>(itry + kIq4Values[0]) / max;
    sumqx = sumq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = kIq4Values[iq4_best_index(id * xb[j])];
      const float w = xb[j] * xb[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Packs 32 indices like Q4_0: element j in the low nibble of byte j, element j+16 in the high one.
inline void pack_nibbles32(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

// IQ4_NL, 18 B: d f16 | qs[16].
void quant_iq4_nl(const float* x, uint8_t* dst, int64_t n) {
  uint8_t L[32];
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += 18) {
    const float d = iq4_block_scale(x, L);
    store_f16(dst, d);
    // Final indices against the exact (not f16-rounded) scale, as ggml does.
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(iq4_best_index(id * x[j]));
    pack_nibbles32(L, dst + 2);
  }
}

// IQ4_XS, 136 B: d f16 | scales_h u16 | scales_l[4] | qs[128]. Eight 32-element blocks whose
// scales become signed 6-bit multiples (bias 32) of one f16 d.
void quant_iq4_xs(const float* x, uint8_t* dst, int64_t n) {
  uint8_t L[kQK];
  float scales[8];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 136) {
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = iq4_block_scale(x + 32 * ib, L + 32 * ib);
      if (std::fabs(scales[ib]) > amax_scale) {
        amax_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    const float d = -max_scale / 32.0f;
    store_f16(dst, d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t scales_h = 0;
    uint8_t* scales_l = dst + 4;
    std::memset(scales_l, 0, 4);
    for (int ib = 0; ib < 8; ++ib) {
      const int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<uint8_t>(iq4_best_index(idl * x[32 * ib + j]));
      const int biased = l + 32;
      scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | ((biased & 0x0F) << (4 * (ib % 2))));
      scales_h = static_cast<uint16_t>(scales_h | ((biased >> 4) << (2 * ib)));
    }
    store_u16(dst + 2, scales_h);
    for (int ib = 0; ib < 8; ++ib) pack_nibbles32(L + 32 * ib, dst + 8 + 16 * ib);
  }
}

// ---------------------------------------------------------------------------------------------
// Q8_K, 292 B: d f32 | qs[256] int8 | bsums[16] int16 (sums of each 16 quants). The activation
// type that k-quant dot products pair with; kernels that mimic llama.cpp's arithmetic need it.
void quant_q8_k(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, dst += 292) {
    auto* qs = reinterpret_cast<int8_t*>(dst + 4);
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(dst, 0, 292);
      continue;
    }
    // -127 (not -128): the extreme element lands on ±127, so every quant negates without overflow.
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK; ++j) qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qs[16 * j + i];
      const auto s = static_cast<int16_t>(sum);
      std::memcpy(dst + 260 + 2 * j, &s, 2);
    }
    const float d = 1.0f / iscale;
    std::memcpy(dst, &d, 4);
  }
}

// ---------------------------------------------------------------------------------------------
// MXFP4 (quantize_row_mxfp4_ref). The scale exponent puts amax in [8, 16) scale units:
// e = floor(log2(amax)) - 2 + 127, so d = mxfp4_scale(e) = 2^(floor(log2 amax) - 3) and the largest
// element lands on table entry 8 or 12. Each element then takes the first table index of least
// |value * d - x| (ties go to the lower index, so 0 is code 0, never the -0 of code 8; x = 5d is 4,
// not 6).

// ggml converts the float e to uint8_t directly; for amax below 2^-125 that float is negative, which
// C leaves undefined and x86 compilers do as a truncation to int32 (cvttss2si: out of range gives
// INT32_MIN) keeping the low byte. The same here, defined.
inline uint8_t mxfp4_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float v = std::floor(std::log2(amax)) - 2.0f + 127.0f;
  const int32_t i = (v >= -2147483648.0f && v < 2147483648.0f) ? static_cast<int32_t>(v) : INT32_MIN;
  return static_cast<uint8_t>(static_cast<uint32_t>(i) & 0xFFu);
}

inline uint8_t mxfp4_best_index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

void quant_mxfp4(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += 17) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));  // (NaN never wins, as in ggml)
    const uint8_t e = mxfp4_exponent(amax);
    const float d = mxfp4_scale(e);
    dst[0] = e;
    for (int j = 0; j < 16; ++j)
      dst[1 + j] = static_cast<uint8_t>(mxfp4_best_index(x[j], d) | (mxfp4_best_index(x[j + 16], d) << 4));
  }
}

}  // namespace

namespace detail {

bool quantize_row_extended(GgmlType t, const float* src, uint8_t* dst, int64_t n) {
  switch (t) {
    case GgmlType::Q4_1: quant_q4_1(src, dst, n); return true;
    case GgmlType::Q5_0: quant_q5_0(src, dst, n); return true;
    case GgmlType::Q5_1: quant_q5_1(src, dst, n); return true;
    case GgmlType::Q2_K: quant_q2_k(src, dst, n); return true;
    case GgmlType::Q3_K: quant_q3_k(src, dst, n); return true;
    case GgmlType::Q4_K: quant_q4_k(src, dst, n); return true;
    case GgmlType::Q5_K: quant_q5_k(src, dst, n); return true;
    case GgmlType::Q6_K: quant_q6_k(src, dst, n); return true;
    case GgmlType::IQ4_NL: quant_iq4_nl(src, dst, n); return true;
    case GgmlType::IQ4_XS: quant_iq4_xs(src, dst, n); return true;
    case GgmlType::Q8_K: quant_q8_k(src, dst, n); return true;
    case GgmlType::MXFP4: quant_mxfp4(src, dst, n); return true;
    default: return false;
  }
}

}  // namespace detail

bool can_quantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: case GgmlType::Q4_0:
    case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q2_K: case GgmlType::Q3_K:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
    case GgmlType::Q8_K: case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

}  // namespace npullm
