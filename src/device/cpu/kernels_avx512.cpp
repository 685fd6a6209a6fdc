// AVX-512 code path (W = 16 lanes), using F, BW (16-bit masked loads), VL and DQ, plus FMA/F16C,
// and VNNI (vpdpbusd / vpdpwssd) for the int8 matmul of kernels_int8.h. kernels.cpp checks
// F/BW/VL/DQ/VNNI (and AVX2/FMA/F16C) before entering. See kernels_impl.h for the linkage rule
// (nothing here may have external linkage except avx512_kernels) and the summation order.
// GCC 12's avx512fintrin.h initialises its "undefined" vectors from themselves, which trips
// -W(maybe-)uninitialized wherever the conversions are inlined: a false positive in the header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

// kernels_avx512vbmi2.cpp builds this file once more, with VBMI2, under another name.
#ifndef NPULLM_AVX512_EXPORT
#define NPULLM_AVX512_EXPORT avx512_kernels
#endif

#include "device/cpu/kernels_impl.h"
#include "device/cpu/kernels_int8.h"
#include "device/cpu/kernels_avx512_io.h"
#include "device/cpu/kernels_avx512_attention.h"

namespace npullm::cpu::detail {
namespace {

inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

struct Avx512Ops {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr int TM = 4, TN = 4;  // prefill tile: 16 accumulators + 4 x + 1 w of 32 registers
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_tail(const float* p, int n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_tail(float* p, V v, int n) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }

  // Fixed tree: 256-bit halves, then 128-bit halves, then as in the AVX2 path.
  static float hsum(V v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
  }

  // e^x, the same algorithm and constants as Avx2Ops::exp (so both paths agree lane for lane).
  static V exp(V x) {
    const __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_LT_OQ);
    const __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.0f));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    // p * 2^n in one instruction instead of building 2^n's bits and multiplying: n is in
    // [-126, 127] after the clamp, so 2^n is a normal float and both round the exact p * 2^n the
    // same way (the same bits as the AVX2 path's multiply).
    V y = _mm512_scalef_ps(p, n);
    y = _mm512_maskz_mov_ps(static_cast<__mmask16>(~lo), y);
    return _mm512_mask_mov_ps(y, hi, _mm512_set1_ps(__builtin_inff()));
  }

  static V cvt_f16(__m256i h) { return _mm512_cvtph_ps(h); }
  static V cvt_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

  template <GgmlType T>
  static V load_w(const uint8_t* row, int64_t k) {
    if constexpr (T == GgmlType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
      if constexpr (T == GgmlType::F16) return cvt_f16(h);
      else return cvt_bf16(h);
    }
  }
  // Q8_0 K/V cache (kernels_impl.h): 16 int8 of one block times its d.
  static V q8_scale(const uint8_t* block) { return _mm512_set1_ps(_cvtsh_ss(u16_at(block))); }
  static V load_q8(const uint8_t* qs, V d) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
  }

  // Decode attention of a group of heads over K/V both of type T, F16 or Q8_0 (false: not a type
  // or shape it handles).
  template <GgmlType T>
  static bool attention_group(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t n,
                              int64_t Hkv, int64_t g, int64_t hd, int64_t C, int64_t rot, float scale, const AttnSpan& sp,
                              int64_t b0, int64_t b1, const AttnWork& w, AttnFetch fetch) {
    if constexpr (T == GgmlType::F16 || T == GgmlType::Q8_0)
      return attention_group_dispatch<Avx512Ops, T>(q, k, v, mrow, n, Hkv, g, hd, C, rot, scale, sp, b0, b1, w, fetch);
    else
      return false;
  }

  // A part of a query's attention split over keys holding all its runs, every group one run (false:
  // not a case it takes).
  template <GgmlType T>
  static bool attention_groups(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t H,
                               int64_t Hkv, int64_t hd, int64_t C, int64_t rot, float scale, const AttnSpan& sp,
                               int64_t b0, int64_t b1, float* partials, int64_t pstride) {
    if constexpr (T == GgmlType::F16 || T == GgmlType::Q8_0)
      return attention_groups_dispatch<Avx512Ops, T>(q, k, v, mrow, H, Hkv, hd, C, rot, scale, sp, b0, b1, partials,
                                                     pstride);
    else
      return false;
  }

  template <GgmlType T>
  static V load_w_tail(const uint8_t* row, int64_t k, int n) {
    if constexpr (T == GgmlType::F32) {
      return load_tail(reinterpret_cast<const float*>(row) + k, n);
    } else {
      const __m256i h = _mm256_maskz_loadu_epi16(first_lanes(n), row + 2 * k);  // AVX512BW+VL
      if constexpr (T == GgmlType::F16) return cvt_f16(h);
      else return cvt_bf16(h);
    }
  }
};


void avx512_matmul(const float* x, int64_t M, int64_t K, const void* W, GgmlType wt, size_t row_bytes, bool packed,
                   const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1,
                   float* work, const void* xq) {
  if (int8_supported(wt)) {
    int8_matmul<Avx512IO>(x, M, K, W, wt, row_bytes, packed, bias, res, out, N, n0, n1, work, xq);
    return;
  }
  matmul_impl<Avx512Ops>(x, M, K, W, wt, row_bytes, bias, res, out, N, n0, n1, work);
}
void avx512_quantize_x(GgmlType wt, const float* x, int64_t M, int64_t K, void* dst, int64_t m0, int64_t m1) {
  int8_quantize_x<Avx512IO>(wt, x, M, K, dst, m0, m1);
}
void avx512_attention(const float* q, const void* k, GgmlType k_type, const void* v, GgmlType v_type,
                      const float* mask, float* out, int64_t H, int64_t Hkv, int64_t hd, int64_t C,
                      int64_t rot, float scale, int64_t r0, int64_t r1, float* work, const float* sinks) {
  attention_impl<Avx512Ops>(q, k, k_type, v, v_type, mask, out, H, Hkv, hd, C, rot, scale, r0, r1, work, sinks);
}
void avx512_attention_part(const AttentionQuery& a, int64_t run0, int64_t run1, int64_t b0, int64_t b1, float* work,
                    float* partials) {
  attention_part_impl<Avx512Ops>(a, run0, run1, b0, b1, work, partials);
}
void avx512_attention_merge(const AttentionQuery& a, int64_t nb, int64_t run0, int64_t run1, float* partials, float* out,
                     const float* sinks) {
  attention_merge_impl<Avx512Ops>(a, nb, run0, run1, partials, out, sinks);
}
void avx512_swiglu(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
  swiglu_impl<Avx512Ops>(gate, up, out, i0, i1);
}

void avx512_to_f16(const float* src, uint8_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + 2 * i, m, h);  // AVX512BW+VL
  }
}

constexpr IsaKernels kAvx512{"avx512", avx512_matmul, avx512_quantize_x, avx512_attention, avx512_attention_part, avx512_attention_merge, avx512_swiglu, avx512_to_f16};

}  // namespace

const IsaKernels& NPULLM_AVX512_EXPORT() { return kAvx512; }

}  // namespace npullm::cpu::detail
