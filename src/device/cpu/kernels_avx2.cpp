// AVX2 + FMA + F16C code path (W = 8 lanes). Compiled with -mavx2 -mfma -mf16c and entered only
// after kernels.cpp has checked all three at run time. See kernels_impl.h for the linkage rule
// (nothing here may have external linkage except avx2_kernels) and the summation order.
#include <immintrin.h>

#include <cstring>

#include "device/cpu/kernels_impl.h"
#include "device/cpu/kernels_int8.h"

namespace npullm::cpu::detail {
namespace {

inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Lane mask with the first n of 8 lanes set (0 <= n <= 8), for maskload / maskstore.
inline __m256i first_lanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

struct Avx2Ops {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int TM = 2, TN = 4;  // prefill tile: 8 accumulators + 2 x + 1 w of 16 registers
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_tail(const float* p, int n) { return _mm256_maskload_ps(p, first_lanes(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_tail(float* p, V v, int n) { _mm256_maskstore_ps(p, first_lanes(n), v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }

  // Fixed tree: (l0+l4, l1+l5, l2+l6, l3+l7) -> (a0+a2, a1+a3) -> b0+b1.
  static float hsum(V v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
  }

  // e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact n ln2), e^r by its
  // degree-7 Taylor polynomial (truncation < 1e-8 relative), times 2^n built in the exponent
  // field. About 2 ulp. Inputs below -87.3 give 0 (so -inf gives 0), above 88.72 give +inf, and
  // those in (88, 88.72] give e^88 = 1.65e38 (2^n must stay below 2^128): only results that big
  // are inexact, which neither softmax (inputs <= 0) nor silu (a quotient near 0) can notice.
  static V exp(V x) {
    const V lo_mask = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
    const V hi_mask = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283f), _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.0f));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    V y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    y = _mm256_andnot_ps(lo_mask, y);
    return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), hi_mask);
  }

  // 8 halves / bfloat16s -> 8 floats (exact).
  static V cvt_f16(__m128i h) { return _mm256_cvtph_ps(h); }
  static V cvt_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

  template <GgmlType T>
  static V load_w(const uint8_t* row, int64_t k) {
    if constexpr (T == GgmlType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
      if constexpr (T == GgmlType::F16) return cvt_f16(h);
      else return cvt_bf16(h);
    }
  }
  // Q8_0 K/V cache (kernels_impl.h): 8 int8 of one block times its d.
  static V q8_scale(const uint8_t* block) { return _mm256_set1_ps(_cvtsh_ss(u16_at(block))); }
  static V load_q8(const uint8_t* qs, V d) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
  }

  template <GgmlType T>
  static V load_w_tail(const uint8_t* row, int64_t k, int n) {
    if constexpr (T == GgmlType::F32) {
      return load_tail(reinterpret_cast<const float*>(row) + k, n);
    } else {
      // No 16-bit masked load in AVX2: copy the n halves into a zeroed buffer.
      alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::memcpy(tmp, row + 2 * k, static_cast<size_t>(n) * 2);
      const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
      if constexpr (T == GgmlType::F16) return cvt_f16(h);
      else return cvt_bf16(h);
    }
  }
};


// ---- int8 matmul ops (kernels_int8.h): a panel is 8 weight rows, one per lane -------------------
//
// No VNNI: a dot step is vpmaddubsw (u8 x s8 -> pairs summed into saturating int16) then vpmaddwd
// by ones (-> int32). The int16 pair sum cannot saturate when the unsigned weight byte is at most
// 63 (2 * 63 * 127 < 32767), which holds for every type but Q8_0: Q8_0 keeps its signed bytes and
// uses the sign trick instead (|w| x sign(w) * q, at most 2 * 128 * 127 = 32512).

struct Avx2IO {
  using VI = __m256i;
  using VF = __m256;
  static constexpr int R = 8;
  static constexpr bool kVnni = false;

  NPULLM_HOT static VI zero() { return _mm256_setzero_si256(); }
  NPULLM_HOT static VI set1(int32_t v) { return _mm256_set1_epi32(v); }
  NPULLM_HOT static VI bcast32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  NPULLM_HOT static VI and_(VI v, int32_t imm) { return _mm256_and_si256(v, _mm256_set1_epi32(imm)); }
  NPULLM_HOT static VI or_(VI a, VI b) { return _mm256_or_si256(a, b); }
  NPULLM_HOT static VI xor_(VI v, int32_t imm) { return _mm256_xor_si256(v, _mm256_set1_epi32(imm)); }
  NPULLM_HOT static VI add(VI a, VI b) { return _mm256_add_epi32(a, b); }
  NPULLM_HOT static VI mullo(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
  NPULLM_HOT static VI srli(VI v, int n) { return _mm256_srli_epi32(v, n); }
  NPULLM_HOT static VI slli(VI v, int n) { return _mm256_slli_epi32(v, n); }
  NPULLM_HOT static VI dot_u8(VI acc, VI w, VI x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
  }
  // 2 or 4 groups: the int16 pair sums are added before widening (no saturation for weight bytes
  // up to 63 / 31: 2 * 2 * 63 * 127 and 4 * 2 * 31 * 127 are below 32768).
  NPULLM_HOT static VI dot2_u8(VI acc, const VI* w, const VI* x) {
    const VI p = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], x[0]), _mm256_maddubs_epi16(w[1], x[1]));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  NPULLM_HOT static VI dot4_u8(VI acc, const VI* w, const VI* x) {
    const VI p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], x[0]), _mm256_maddubs_epi16(w[1], x[1]));
    const VI p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[2], x[2]), _mm256_maddubs_epi16(w[3], x[3]));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(p01, p23), _mm256_set1_epi16(1)));
  }
  NPULLM_HOT static VI dot_s8(VI acc, VI w, VI x) {
    const VI p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  NPULLM_HOT static VI madd16(VI acc, VI a, VI b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
  NPULLM_HOT static VI sext8(VI v, int i) { return _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * i), 24); }
  // Byte s / 8 of each lane copied to its 4 bytes (vpshufb), then byte i keeps bit s % 8 + i:
  // compare with the single-bit masks gives 0xFF where set, and 0x10 of that.
  NPULLM_HOT static VI hbit4(VI h, int s) {
    const int byte = s / 8, bit = s % 8;
    const VI idx = _mm256_add_epi8(_mm256_set1_epi8(static_cast<char>(byte)),
                                   _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4,
                                                    4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    const VI mask = _mm256_set1_epi32(static_cast<int32_t>(0x08040201u << bit));
    const VI rep = _mm256_shuffle_epi8(h, idx);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, mask), mask), _mm256_set1_epi8(0x10));
  }

  // 16 bytes of rows 0..7 -> 4 vectors (dword g of row r in lane r of out[g]): vector i holds rows
  // i and 4 + i in its 128-bit lanes, then a 4x4 dword transpose inside each lane.
  NPULLM_HOT static void tload4(const uint8_t* const* rows, int64_t off, VI* out) {
    VI z[4];
    for (int i = 0; i < 4; ++i)
      z[i] = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + off))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[4 + i] + off)), 1);
    const VI t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const VI t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
  }
  // 32 bytes of rows 0..7 -> 8 vectors: the classic 8x8 dword transpose.
  NPULLM_HOT static void tload8(const uint8_t* const* rows, int64_t off, VI* out) {
    VI y[8], u[8];
    for (int i = 0; i < 8; ++i) y[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + off));
    for (int h = 0; h < 2; ++h) {
      const VI* a = y + 4 * h;
      const VI t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
      const VI t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
      u[4 * h + 0] = _mm256_unpacklo_epi64(t0, t2);  // lane 0: dword 0 of 4 rows; lane 1: dword 4
      u[4 * h + 1] = _mm256_unpackhi_epi64(t0, t2);
      u[4 * h + 2] = _mm256_unpacklo_epi64(t1, t3);
      u[4 * h + 3] = _mm256_unpackhi_epi64(t1, t3);
    }
    for (int k = 0; k < 4; ++k) {
      out[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
      out[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
    }
  }
  // 8 dword loads into one vector (vmovd / vpinsrd: faster than vpgatherdd on AMD).
  NPULLM_HOT static VI loadp(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  NPULLM_HOT static VI gather32(const Panel<Avx2IO>& p, int64_t off) {
    alignas(32) int32_t v[8];
    for (int r = 0; r < 8; ++r) std::memcpy(&v[r], p.rows[r] + off, 4);
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
  }

  // Low halves of the 8 lanes packed to 8 words (packus keeps them: they are below 65536).
  NPULLM_HOT static __m128i low_halves(VI v) {
    const VI p = _mm256_packus_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256());
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
  }
  NPULLM_HOT static VF f16lo(VI v) { return _mm256_cvtph_ps(low_halves(v)); }
  NPULLM_HOT static VF f16hi(VI v) { return _mm256_cvtph_ps(low_halves(_mm256_srli_epi32(v, 16))); }
  // (The table is a constant: its broadcast is hoisted out of the loops.)
  NPULLM_HOT static VI lut16(VI v, const uint8_t (&t)[16]) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))), v);
  }
  NPULLM_HOT static VI max_s32(VI a, VI b) { return _mm256_max_epi32(a, b); }
  NPULLM_HOT static VF as_float(VI v) { return _mm256_castsi256_ps(v); }

  NPULLM_HOT static VF zerof() { return _mm256_setzero_ps(); }
  NPULLM_HOT static VF bcastf(float f) { return _mm256_set1_ps(f); }
  NPULLM_HOT static VF addf(VF a, VF b) { return _mm256_add_ps(a, b); }
  NPULLM_HOT static VF mulf(VF a, VF b) { return _mm256_mul_ps(a, b); }
  NPULLM_HOT static VF fmaf(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
  NPULLM_HOT static VF cvt(VI v) { return _mm256_cvtepi32_ps(v); }
  NPULLM_HOT static VF loadf_n(const float* p, int n) { return _mm256_maskload_ps(p, first_lanes(n)); }
  NPULLM_HOT static void storef_n(float* p, VF v, int n) { _mm256_maskstore_ps(p, first_lanes(n), v); }

  NPULLM_HOT static float hmax(VF v) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
  }
  NPULLM_HOT static int32_t hadd(VI v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4E));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xB1));
    return _mm_cvtsi128_si32(a);
  }
  NPULLM_HOT static VF absf(VF v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
  // 32 int32 in [-127, 127] -> 32 bytes in order (packs work per 128-bit lane; the permute undoes it).
  NPULLM_HOT static void store_i8x32(int8_t* q, VI i0, VI i1, VI i2, VI i3) {
    const VI p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }

  // Activation blocks (kernels_int8.h, Numerics).
  static void quant_row32(const float* x, int64_t nb, int8_t* q, float* d, int32_t* sum) {
    for (int64_t b = 0; b < nb; ++b, x += 32, q += 32) {
      VF v[4];
      VF mx = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) mx = _mm256_max_ps(mx, absf(v[i] = _mm256_loadu_ps(x + 8 * i)));
      const float amax = hmax(mx);
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      VI iv[4];
      for (int i = 0; i < 4; ++i) iv[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
      store_i8x32(q, iv[0], iv[1], iv[2], iv[3]);
      sum[b] = hadd(_mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3])));
      d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  NPULLM_HOT static void quant_block256(const float* x, int8_t* q, float* d, int32_t* s16) {
    VF mx = _mm256_setzero_ps();
    for (int i = 0; i < 32; ++i) mx = _mm256_max_ps(mx, absf(_mm256_loadu_ps(x + 8 * i)));
    const float amax = hmax(mx);
    if (amax == 0.0f) {
      std::memset(q, 0, 256);
      for (int i = 0; i < 16; ++i) s16[i] = 0;
      *d = 0.0f;
      return;
    }
    const float id = 127.0f / amax;
    const VF vid = _mm256_set1_ps(id);
    for (int b = 0; b < 8; ++b) {  // 32 values at a time
      VI iv[4];
      for (int i = 0; i < 4; ++i) {
        const VI v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * b + 8 * i), vid));
        iv[i] = _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
      }
      store_i8x32(q + 32 * b, iv[0], iv[1], iv[2], iv[3]);
      s16[2 * b] = hadd(_mm256_add_epi32(iv[0], iv[1]));
      s16[2 * b + 1] = hadd(_mm256_add_epi32(iv[2], iv[3]));
    }
    *d = 1.0f / id;
  }
};

void avx2_matmul(const float* x, int64_t M, int64_t K, const void* W, GgmlType wt, size_t row_bytes, bool packed,
                 const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1,
                 float* work, const void* xq) {
  if (int8_supported(wt)) {
    int8_matmul<Avx2IO>(x, M, K, W, wt, row_bytes, packed, bias, res, out, N, n0, n1, work, xq);
    return;
  }
  matmul_impl<Avx2Ops>(x, M, K, W, wt, row_bytes, bias, res, out, N, n0, n1, work);
}
void avx2_quantize_x(GgmlType wt, const float* x, int64_t M, int64_t K, void* dst, int64_t m0, int64_t m1) {
  int8_quantize_x<Avx2IO>(wt, x, M, K, dst, m0, m1);
}
void avx2_attention(const float* q, const void* k, GgmlType k_type, const void* v, GgmlType v_type,
                    const float* mask, float* out, int64_t H, int64_t Hkv, int64_t hd, int64_t C,
                    int64_t rot, float scale, int64_t r0, int64_t r1, float* work, const float* sinks) {
  attention_impl<Avx2Ops>(q, k, k_type, v, v_type, mask, out, H, Hkv, hd, C, rot, scale, r0, r1, work, sinks);
}
void avx2_attention_part(const AttentionQuery& a, int64_t run0, int64_t run1, int64_t b0, int64_t b1, float* work,
                    float* partials) {
  attention_part_impl<Avx2Ops>(a, run0, run1, b0, b1, work, partials);
}
void avx2_attention_merge(const AttentionQuery& a, int64_t nb, int64_t run0, int64_t run1, float* partials, float* out,
                     const float* sinks) {
  attention_merge_impl<Avx2Ops>(a, nb, run0, run1, partials, out, sinks);
}
void avx2_swiglu(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
  swiglu_impl<Avx2Ops>(gate, up, out, i0, i1);
}

void avx2_to_f16(const float* src, uint8_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) {
    const uint16_t h = static_cast<uint16_t>(_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

constexpr IsaKernels kAvx2{"avx2", avx2_matmul, avx2_quantize_x, avx2_attention, avx2_attention_part, avx2_attention_merge, avx2_swiglu, avx2_to_f16};

}  // namespace

const IsaKernels& avx2_kernels() { return kAvx2; }

}  // namespace npullm::cpu::detail
