// Internal to the CPU kernels: Avx512IO, the integer-ops class kernels_int8.h's templates run on
// with AVX-512 (F, BW, VL, DQ, VNNI): a panel is 16 weight rows, one per lane. Shared by
// kernels_avx512.cpp (VNNI) and kernels_amx.cpp (whose AMX path decodes panels with the same loads).
// Include after kernels_int8.h, from a file compiled with those ISA flags; everything is in an
// anonymous namespace (the linkage rule in kernels_impl.h).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace npullm::cpu::detail {
namespace {

inline __mmask16 first_lanes(int n) { return static_cast<__mmask16>((1u << n) - 1u); }

// ---- int8 matmul ops (kernels_int8.h): a panel is 16 weight rows, one per lane -----------------

struct Avx512IO {
  using VI = __m512i;
  using VF = __m512;
  static constexpr int R = 16;
  static constexpr bool kVnni = true;

  NPULLM_HOT static VI zero() { return _mm512_setzero_si512(); }
  NPULLM_HOT static VI set1(int32_t v) { return _mm512_set1_epi32(v); }
  NPULLM_HOT static VI bcast32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  NPULLM_HOT static VI and_(VI v, int32_t imm) { return _mm512_and_si512(v, _mm512_set1_epi32(imm)); }
  NPULLM_HOT static VI or_(VI a, VI b) { return _mm512_or_si512(a, b); }
  NPULLM_HOT static VI xor_(VI v, int32_t imm) { return _mm512_xor_si512(v, _mm512_set1_epi32(imm)); }
  NPULLM_HOT static VI add(VI a, VI b) { return _mm512_add_epi32(a, b); }
  NPULLM_HOT static VI mullo(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
  NPULLM_HOT static VI srli(VI v, int n) { return _mm512_srli_epi32(v, static_cast<unsigned>(n)); }
  NPULLM_HOT static VI slli(VI v, int n) { return _mm512_slli_epi32(v, static_cast<unsigned>(n)); }
  NPULLM_HOT static VI srai(VI v, int n) { return _mm512_srai_epi32(v, static_cast<unsigned>(n)); }
#ifdef __AVX512VBMI2__
  NPULLM_HOT static VI mid16(VI lo, VI hi) { return _mm512_shrdi_epi32(lo, hi, 16); }
  template <int L>
  NPULLM_HOT static VI shr_bytes(VI lo, VI hi) { return _mm512_shrdi_epi32(lo, hi, 8 * L); }
#endif
  // (The table is a constant: its broadcast is hoisted out of the loops.)
  NPULLM_HOT static VI lut16(VI v, const uint8_t (&t)[16]) {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))), v);
  }
  NPULLM_HOT static VI max_s32(VI a, VI b) { return _mm512_max_epi32(a, b); }
  NPULLM_HOT static VF as_float(VI v) { return _mm512_castsi512_ps(v); }
  NPULLM_HOT static VI dot_u8(VI acc, VI w, VI x) { return _mm512_dpbusd_epi32(acc, w, x); }
  NPULLM_HOT static VI dot2_u8(VI acc, const VI* w, const VI* x) {
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, w[0], x[0]), w[1], x[1]);
  }
  NPULLM_HOT static VI dot4_u8(VI acc, const VI* w, const VI* x) { return dot2_u8(dot2_u8(acc, w, x), w + 2, x + 2); }
  NPULLM_HOT static VI madd16(VI acc, VI a, VI b) { return _mm512_dpwssd_epi32(acc, a, b); }
  NPULLM_HOT static VI sext8(VI v, int i) { return _mm512_srai_epi32(_mm512_slli_epi32(v, static_cast<unsigned>(24 - 8 * i)), 24); }
  // Bits s..s+3 of each lane pick one of 16 dwords that have 0x10 in byte i where bit i is set.
  NPULLM_HOT static VI hbit4(VI h, int s) {
    const VI table = _mm512_setr_epi32(0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010,
                                       0x00101000, 0x00101010, 0x10000000, 0x10000010, 0x10001000, 0x10001010,
                                       0x10100000, 0x10100010, 0x10101000, 0x10101010);
    return _mm512_permutexvar_epi32(srli(h, s), table);
  }
#ifdef __AVX512BITALG__
  // v | hbit4(h, s) for bytes below 0x10: one bit-gather to a byte mask (byte 4 l + i of each
  // qword takes bit 32 l + s + i of it: lane l of the pair) and one masked byte add, in place of
  // a shift, a permute and an or.
  NPULLM_HOT static VI or_hbit4(VI v, VI h, int s) {
    uint64_t ctl = 0;
    for (int b = 0; b < 8; ++b) ctl |= static_cast<uint64_t>(32 * (b / 4) + s + b % 4) << (8 * b);
    const __mmask64 k = _mm512_bitshuffle_epi64_mask(h, _mm512_set1_epi64(static_cast<long long>(ctl)));
    return _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(0x10));
  }
#endif

  // 16 bytes of rows 0..15 -> 4 vectors, dword g of row r in lane r of out[g]. Vector i holds
  // rows i, 4 + i, 8 + i, 12 + i in its four 128-bit lanes; a 4x4 dword transpose inside each
  // 128-bit lane then puts row 4p + i in lane 4p + i.
  NPULLM_HOT static void tload4(const uint8_t* const* rows, int64_t off, VI* out) {
    VI z[4];
    for (int i = 0; i < 4; ++i) {
      __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + off)));
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[4 + i] + off)), 1);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[8 + i] + off)), 2);
      z[i] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[12 + i] + off)), 3);
    }
    const VI t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const VI t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
  }
  // 32 bytes of rows 0..15 -> 8 vectors. Vector i holds rows i (low 256 bits) and 8 + i (high);
  // an 8x8 dword transpose inside each 256-bit half (two unpack stages, then 128-bit lane moves).
  NPULLM_HOT static void tload8(const uint8_t* const* rows, int64_t off, VI* out) {
    VI y[8];
    for (int i = 0; i < 8; ++i) {
      const __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + off)));
      y[i] = _mm512_inserti64x4(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[8 + i] + off)), 1);
    }
    VI u[8];
    for (int h = 0; h < 2; ++h) {  // rows 0..3, then 4..7 (of each half)
      const VI* a = y + 4 * h;
      const VI t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
      const VI t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
      u[4 * h + 0] = _mm512_unpacklo_epi64(t0, t2);  // 128-bit lane 0: dword 0 of 4 rows; lane 1: dword 4
      u[4 * h + 1] = _mm512_unpackhi_epi64(t0, t2);  // dwords 1 / 5
      u[4 * h + 2] = _mm512_unpacklo_epi64(t1, t3);  // dwords 2 / 6
      u[4 * h + 3] = _mm512_unpackhi_epi64(t1, t3);  // dwords 3 / 7
    }
    for (int k = 0; k < 4; ++k) {
      // dword k: lanes (0, 2) of u[k] stay, lanes (1, 3) come from lanes (0, 2) of u[k + 4].
      out[k] = _mm512_mask_shuffle_i32x4(u[k], 0xF0F0, u[k + 4], u[k + 4], _MM_SHUFFLE(2, 2, 0, 0));
      // dword k + 4: lanes (1, 3) of u[k + 4] stay, lanes (0, 2) come from lanes (1, 3) of u[k].
      out[k + 4] = _mm512_mask_shuffle_i32x4(u[k + 4], 0x0F0F, u[k], u[k], _MM_SHUFFLE(3, 3, 1, 1));
    }
  }
  // 16 dword loads into one vector. Written as scalar loads into an array: GCC turns this into
  // vmovd / vpinsrd chains, which measured faster than vpgatherdd (slow on AMD) and than a
  // store-then-load through memory (store forwarding fails).
  NPULLM_HOT static VI loadp(const uint8_t* p) { return _mm512_loadu_si512(p); }
  NPULLM_HOT static VI gather32(const Panel<Avx512IO>& p, int64_t off) {
    alignas(64) int32_t v[16];
    for (int r = 0; r < 16; ++r) std::memcpy(&v[r], p.rows[r] + off, 4);
    return _mm512_load_si512(v);
  }

  // ---- row-wise Q8_0 decode (kernels_int8.h, gemv_panel_q8_rows) ----
  static constexpr bool kRowQ8 = true;
  // The activations of the block pair (j, j + 1) at q (64 bytes), laid out like the weight
  // window q8_rows loads (bytes 2 .. 65 of the pair): [x_j | 0, 0 | x_j+1[0..29]], the zeros
  // facing d_j+1; one block: [x_j | 0 ...]. x4[i] = dword i of each 128-bit lane, copied over its
  // lane (the activations of the transposed vector i of q8_rows).
  template <bool kPair>
  NPULLM_HOT static void q8_act(const int8_t* q, VI* x4) {
    VI X;
    if constexpr (kPair) {
      // word i <- word i (i < 16), word 16 <- 0 (masked off), word i <- word i - 1 (i > 16)
      const VI idx = _mm512_setr_epi32(0x00010000, 0x00030002, 0x00050004, 0x00070006, 0x00090008, 0x000B000A,
                                       0x000D000C, 0x000F000E, 0x00100010, 0x00120011, 0x00140013, 0x00160015,
                                       0x00180017, 0x001A0019, 0x001C001B, 0x001E001D);
      X = _mm512_maskz_permutexvar_epi16(0xFFFEFFFFu, idx, _mm512_loadu_si512(q));
    } else {
      X = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    }
    x4[0] = _mm512_shuffle_epi32(X, _MM_PERM_AAAA);
    x4[1] = _mm512_shuffle_epi32(X, _MM_PERM_BBBB);
    x4[2] = _mm512_shuffle_epi32(X, _MM_PERM_CCCC);
    x4[3] = _mm512_shuffle_epi32(X, _MM_PERM_DDDD);
  }
  // Integer dots of the 16 rows with the Q8_0 block pair at byte `off` of each row (kPair), or
  // with one block. Each row's window, the 64 bytes at off + 2 (qs_j, d_j+1, qs_j+1[0..29]; one
  // block: the 32 bytes of qs_j), is one load; per 4 rows a 4x4 dword transpose inside 128-bit
  // lanes puts dword i of every lane into vector i, so four dot steps against x4 (weights + 128,
  // as in tile_unit) leave in lane 4L + i row 4g + i's sum over the 16 bytes of lane L: the dot
  // itself does the first two reduction stages. Three lane moves then give i0 / i1 (lane r: row
  // r's dot with block j / j + 1; qs_j+1[30..31] not included), and dodd = dword 8 of every
  // window (row r's d_j+1 in its low half), taken from the transposed vectors.
  template <bool kPair>
  NPULLM_HOT static void q8_rows(const uint8_t* const* rows, int64_t off, const VI* x4, VI& i0, VI& i1, VI& dodd) {
    const VI flip = _mm512_set1_epi32(static_cast<int32_t>(0x80808080u));
    VI acc[4], d8[4];
    auto load = [&](int r) {
      const uint8_t* p = rows[r] + off + 2;
      VI v;
      if constexpr (kPair) v = _mm512_loadu_si512(p);
      else v = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      // In a register: without this GCC 12 passes some loads through the stack on their way to
      // the unpacks (a store and a reload each; measured ~15 % slower).
      asm("" : "+v"(v));
      return v;
    };
    _Pragma("GCC unroll 4")
    for (int g = 0; g < 4; ++g) {
      const VI w0 = load(4 * g), w1 = load(4 * g + 1), w2 = load(4 * g + 2), w3 = load(4 * g + 3);
      const VI t0 = _mm512_unpacklo_epi32(w0, w1), t1 = _mm512_unpackhi_epi32(w0, w1);
      const VI t2 = _mm512_unpacklo_epi32(w2, w3), t3 = _mm512_unpackhi_epi32(w2, w3);
      const VI T0 = _mm512_unpacklo_epi64(t0, t2), T1 = _mm512_unpackhi_epi64(t0, t2);
      const VI T2 = _mm512_unpacklo_epi64(t1, t3), T3 = _mm512_unpackhi_epi64(t1, t3);
      d8[g] = T0;
      VI a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(T0, flip), x4[0]);
      a = _mm512_dpbusd_epi32(a, _mm512_xor_si512(T1, flip), x4[1]);
      a = _mm512_dpbusd_epi32(a, _mm512_xor_si512(T2, flip), x4[2]);
      acc[g] = _mm512_dpbusd_epi32(a, _mm512_xor_si512(T3, flip), x4[3]);
    }
    // 128-bit lanes of acc[g]: rows 4g..4g+3 over window bytes 0-15, 16-31 (block j), 32-47,
    // 48-63 (block j + 1). a: rows 0-3 block j, rows 0-3 block j + 1, rows 4-7 block j, rows 4-7
    // block j + 1; b: the same for rows 8..15.
    const VI a = _mm512_add_epi32(_mm512_shuffle_i32x4(acc[0], acc[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_i32x4(acc[0], acc[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const VI b = _mm512_add_epi32(_mm512_shuffle_i32x4(acc[2], acc[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_i32x4(acc[2], acc[3], _MM_SHUFFLE(3, 1, 3, 1)));
    i0 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    if constexpr (kPair) {
      i1 = _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
      dodd = _mm512_shuffle_i32x4(_mm512_shuffle_i32x4(d8[0], d8[1], _MM_SHUFFLE(2, 2, 2, 2)),
                                  _mm512_shuffle_i32x4(d8[2], d8[3], _MM_SHUFFLE(2, 2, 2, 2)), _MM_SHUFFLE(2, 0, 2, 0));
    }
  }
  // Byte offsets of the panel's rows from rows[0] (rows past `valid` repeat the last one), for
  // gather_at: lane r = the 4 bytes at base + idx[r], one vpgatherdd.
  NPULLM_HOT static VI row_index(const Panel<Avx512IO>& p, size_t row_bytes) {
    const VI iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_mullo_epi32(_mm512_min_epi32(iota, _mm512_set1_epi32(p.valid - 1)),
                              _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
  }
  NPULLM_HOT static VI gather_at(const uint8_t* base, VI idx) { return _mm512_i32gather_epi32(idx, base, 1); }
  // f16lo / f16hi by one vpermw (vpmovdw is two uops, and f16hi needs a shift before it).
  NPULLM_HOT static VF f16lo_w(VI v) {
    const VI idx = _mm512_setr_epi32(0x00020000, 0x00060004, 0x000A0008, 0x000E000C, 0x00120010, 0x00160014,
                                     0x001A0018, 0x001E001C, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, v)));
  }
  NPULLM_HOT static VF f16hi_w(VI v) {
    const VI idx = _mm512_setr_epi32(0x00030001, 0x00070005, 0x000B0009, 0x000F000D, 0x00130011, 0x00170015,
                                     0x001B0019, 0x001F001D, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, v)));
  }

  NPULLM_HOT static VF f16lo(VI v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
  NPULLM_HOT static VF f16hi(VI v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))); }

  NPULLM_HOT static VF zerof() { return _mm512_setzero_ps(); }
  NPULLM_HOT static VF bcastf(float f) { return _mm512_set1_ps(f); }
  NPULLM_HOT static VF addf(VF a, VF b) { return _mm512_add_ps(a, b); }
  NPULLM_HOT static VF mulf(VF a, VF b) { return _mm512_mul_ps(a, b); }
  NPULLM_HOT static VF fmaf(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
  NPULLM_HOT static VF cvt(VI v) { return _mm512_cvtepi32_ps(v); }
  NPULLM_HOT static VF loadf_n(const float* p, int n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
  NPULLM_HOT static void storef_n(float* p, VF v, int n) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }

  // Lane j of the result = the sum (or max) of the 16 lanes of v[j]: a transposing reduction,
  // pairs within 128-bit lanes (32- then 64-bit interleaves), then across 128-bit lanes; the
  // result comes out in order. 45 instructions for what 16 horizontal reductions do in ~100.
  template <class Op>
  NPULLM_HOT static VI reduce16(const VI* v, Op op) {
    VI w[8], u[4];
    for (int k = 0; k < 8; ++k)
      w[k] = op(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; ++k)
      u[k] = op(_mm512_unpacklo_epi64(w[2 * k], w[2 * k + 1]), _mm512_unpackhi_epi64(w[2 * k], w[2 * k + 1]));
    const VI x = op(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const VI y = op(_mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return op(_mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  NPULLM_HOT static VI add_i(VI a, VI b) { return _mm512_add_epi32(a, b); }
  // The max of non-negative floats is the max of their bit patterns as int32.
  NPULLM_HOT static VI max_i(VI a, VI b) { return _mm512_max_epi32(a, b); }

  // Activation blocks (kernels_int8.h, Numerics). cvtps_epi32 rounds to nearest even (MXCSR
  // default), as nearbyint does in the scalar path. Blocks of 32 go 16 at a time: their maxima and
  // sums are reduced together and their scales computed as one vector.
  static void quant_row32(const float* x, int64_t nb, int8_t* q, float* d, int32_t* sum) {
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) {
      const float* xb = x + 32 * b;
      VI mx[16];
      for (int i = 0; i < 16; ++i)
        mx[i] = _mm512_castps_si512(_mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i)),
                                                  _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i + 16))));
      const VF amax = _mm512_castsi512_ps(reduce16(mx, max_i));
      const __mmask16 nz = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_OQ);
      alignas(64) float id[16];
      _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), amax));
      const VF dv = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
      _mm512_storeu_ps(d + b, _mm512_cvtph_ps(_mm512_cvtps_ph(dv, _MM_FROUND_TO_NEAREST_INT)));
      VI sv[16];
      for (int i = 0; i < 16; ++i) {
        const VF vid = _mm512_set1_ps(id[i]);
        const VI i0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i), vid));
        const VI i1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i + 16), vid));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * (b + i)), _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * (b + i) + 16), _mm512_cvtsepi32_epi8(i1));
        sv[i] = _mm512_add_epi32(i0, i1);
      }
      _mm512_storeu_si512(sum + b, reduce16(sv, add_i));
    }
    for (; b < nb; ++b) {  // the last nb % 16 blocks one at a time
      const float* xb = x + 32 * b;
      const VF v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const VI i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
      const VI i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtsepi32_epi8(i0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtsepi32_epi8(i1));
      sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
      d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  NPULLM_HOT static void quant_block256(const float* x, int8_t* q, float* d, int32_t* s16) {
    VF mx = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)));
    const float amax = _mm512_reduce_max_ps(mx);
    if (amax == 0.0f) {
      std::memset(q, 0, 256);
      for (int i = 0; i < 16; ++i) s16[i] = 0;
      *d = 0.0f;
      return;
    }
    const float id = 127.0f / amax;
    const VF vid = _mm512_set1_ps(id);
    VI v[16];
    for (int i = 0; i < 16; ++i) {
      v[i] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), vid));
      v[i] = _mm512_min_epi32(_mm512_max_epi32(v[i], _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * i), _mm512_cvtepi32_epi8(v[i]));
    }
    _mm512_storeu_si512(s16, reduce16(v, add_i));
    *d = 1.0f / id;
  }
};

}  // namespace
}  // namespace npullm::cpu::detail
