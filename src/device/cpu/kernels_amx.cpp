// AMX (Advanced Matrix Extensions: AMX-TILE + AMX-INT8) code path for the prefill matmul with
// int8 activations (kernels_int8.h): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32) and Q4_K, Q5_K,
// Q6_K (super-blocks of 256), for M >= amx_min_rows(type). Everything else (decode and small M;
// the F32-activation types) and the other kernels (quantize_x, attention, swiglu) are the AVX-512
// path's: amx_kernels() is avx512_best_kernels() with another matmul.
//
// Built with the AVX-512 flags plus -mamx-tile -mamx-int8 when the compiler has them
// (CMakeLists.txt); otherwise this file only says "no AMX here" (amx_kernels() returns null).
// kernels.cpp enters it only after CPUID has reported AMX-TILE and AMX-INT8 (and everything the
// AVX-512 path needs), XCR0 has the tile state enabled, and Linux has granted the process the
// tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM, once, for all threads). Each call loads
// the tile configuration on its own thread (LDTILECFG) and releases the tiles when it returns.
// See kernels_impl.h for the linkage rule (nothing here has external linkage but amx_kernels).
//
// ---- Numerics: the same bits as every other path -------------------------------------------
//
// TDPBSSD / TDPBSUD C += A . B multiply int8 tiles exactly into int32: A is 16 rows of signed
// bytes, B holds K/4 rows of 16 columns x 4 bytes ("VNNI layout": row g, column n = elements
// 4g .. 4g + 3 of column n; signed or unsigned), C is 16 x 16 int32. A is always 16 rows of the
// quantised activations straight from XQ (x.q + m * ldq, stride ldq); B is a panel of 16 weight
// rows decoded into kernels_int8.h's vector layout (G vectors, lane = weight row).
//  - Blocks of 32: one multiply with K = 32 is one block u, B holding the signed weights w (no
//    offset, so no start term c): C[m][n] = I exactly. C goes to memory and row m takes the float
//    step of every path, acc[m] = fma(float(I), dx[m] * dw, acc[m]) (then fma(mw, s[m], acc[m])
//    for Q4_1 / Q5_1), once per block.
//  - Super-blocks: a sub-block scale sc multiplies each weight, so the weights are decoded with
//    the scale folded in, split in parts small enough that every product is a byte, and the
//    parts' integer sums are put back together exactly (layout below): Q4_K / Q5_K give
//    Isc = C_lo + 2^S C_hi and Imn = C_mn, Q6_K Isc = C_0 + 4 C_1 + 16 C_2 + 64 C_3, each C a
//    tile accumulated over the whole super-block (4 multiplies of K = 64). Then the float steps
//    of kernels_int8.h, once per super-block.
// Units go in increasing order and the 16 acc vectors of a tile are the same float chains as in
// the VNNI and scalar paths, whatever the tile, chunk, slice or [n0, n1) split an output falls in
// (between K slices they are parked in memory and reloaded exactly).
//
// ---- Cost ----------------------------------------------------------------------------------------
//
// Per 16 x 16 tile and block of 32, a multiply (~13 reference cycles) and a tile store (~11) on
// the tile unit, and the float step (convert, multiply, fma per 16 outputs: 48 vector ops) on the
// AVX-512 ports. On the Xeon this was written on, tile instructions and AVX-512 work did not run
// in parallel (a loop of both took the sum of their times), so the blocks of 32 gain little
// (~1.2-1.4x over VNNI): the float step, one per block, stays. The super-blocks need one float
// step per 256 values and so gain more (~1.5-2x). Measurements: bench/bench_kernels.cpp, PrefillIsa.
#include "device/cpu/kernels_impl.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512BW__)

#if defined(__GNUC__) && !defined(__clang__)
// As in kernels_avx512.cpp: GCC 12's AVX-512 headers trip -W(maybe-)uninitialized when inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "device/cpu/kernels_int8.h"
#include "device/cpu/kernels_avx512_io.h"
#include "device/cpu/kernels_amx.h"

namespace npullm::cpu::detail {
namespace {

// ---- tiles -----------------------------------------------------------------------------------

struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];  // bytes per row of tile i
  uint8_t rows[16];    // rows of tile i
};
// Blocks of 32 (Q4_0 ... Q8_0): tmm0, tmm1 A (16 rows x 32 bytes); tmm2, tmm3 B (8 rows x 64
// bytes); tmm4, tmm5 C (16 x 16 int32).
// Super-blocks of 256 (K-quants): every tile 16 rows x 64 bytes (K = 64 per multiply): tmm0, tmm1
// A; tmm2, tmm3 (and tmm7 for Q4_K / Q5_K) B; tmm4 .. tmm6 (tmm7 for Q6_K) C.
// In read-only memory: GCC's _tile_loadconfig tells the compiler it reads 8 bytes only, so a
// configuration built on the stack could be partly optimised away.
constexpr TileConfig kConfig32 = {1, 0, {}, {32, 32, 64, 64, 64, 64}, {16, 16, 8, 8, 16, 16}};
constexpr TileConfig kConfig256 = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

// GCC's tile loads are asm statements that do not tell the compiler they read memory: every
// buffer a tile load reads must be written before this barrier.
inline void compiler_barrier() { asm volatile("" ::: "memory"); }

// ---- weight panels: kernels_int8.h's panels for Avx512IO (16 rows, one per lane), read with its
// loads (ld<4>, ld<8>, ld1), in the GGUF layout (Rows16) or Panels16 (Packed16) ------------------

using IO = Avx512IO;
using Rows16 = Panel<IO>;
using Packed16 = PackedPanel<IO>;

// Each byte of g times the lane's s (a dword per lane): unsigned bytes, products <= 255.
NPULLM_HOT __m512i mul_u8(__m512i g, __m512i s) {
  const __m512i s16 = _mm512_or_si512(s, _mm512_slli_epi32(s, 16));
  const __m512i even = _mm512_mullo_epi16(_mm512_and_si512(g, _mm512_set1_epi16(0x00FF)), s16);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(g, 8), s16);
  return _mm512_or_si512(even, _mm512_slli_epi16(odd, 8));
}
// The same for signed bytes and a signed s (products in [-128, 127]).
NPULLM_HOT __m512i mul_s8(__m512i g, __m512i s) {
  const __m512i s16 = _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s, 16));
  const __m512i even = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(g, 8), 8), s16);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srai_epi16(g, 8), s16);
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0x00FF)), _mm512_slli_epi16(odd, 8));
}

// ---- per-type layout of a decoded panel ----------------------------------------------------------
//
// A panel holds all units (blocks of 32, or super-blocks of 256) of 16 weight rows, unit u at
// bp + u * unit_bytes:
//   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: the B tile (512 bytes: G_0..G_7, signed weights), dw, mw (floats)
//   Q4_K, Q5_K: 3 x 4 B tiles of 1 KiB (K = 64 each): w * (sc & L), w * (sc >> S), mn (the scale
//               split so every product is a byte: L, S = 15, 4 for Q4_K, 7, 3 for Q5_K; mn the
//               6-bit min of the sub-block), then d, dmin (floats). With them
//               Isc = C_lo + 2^S C_hi and Imn = C_mn exactly.
//   Q6_K: 4 x 4 B tiles: (w - 32) * e_i, sc = e_0 + 4 e_1 + 16 e_2 + 64 e_3 with e_0..e_2 in
//         [-1, 2] and e_3 in [-2, 2] (so every product is a signed byte), then d (floats). With
//         them Isc = C_0 + 4 C_1 + 16 C_2 + 64 C_3 exactly.
template <GgmlType T>
constexpr bool kquant() { return T == GgmlType::Q4_K || T == GgmlType::Q5_K || T == GgmlType::Q6_K; }
template <GgmlType T>
constexpr int64_t unit_elems_amx() { return kquant<T>() ? 256 : 32; }
template <GgmlType T>
constexpr int64_t unit_bytes() { return T == GgmlType::Q6_K ? 16 * 1024 + 64 : kquant<T>() ? 12 * 1024 + 128 : 640; }
template <GgmlType T>
constexpr int64_t block_size() {
  return T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22 : T == GgmlType::Q5_1 ? 24
       : T == GgmlType::Q8_0 ? 34 : T == GgmlType::Q4_K ? 144 : T == GgmlType::Q5_K ? 176 : 210;
}
template <GgmlType T>
constexpr bool has_min() { return T == GgmlType::Q4_1 || T == GgmlType::Q5_1; }
static_assert(unit_bytes<GgmlType::Q6_K>() <= kAmxUnitBytes256 && unit_bytes<GgmlType::Q4_K>() <= kAmxUnitBytes256 &&
              unit_bytes<GgmlType::Q8_0>() <= kAmxUnitBytes32);

// Blocks of 32: unit u of the panel from the block at byte o of each row.
template <GgmlType T, class PR>
NPULLM_HOT void decode_block32(const PR& p, int64_t o, uint8_t* up) {
  __m512i g[8];
  if constexpr (T == GgmlType::Q8_0) {
    ld<8>(p, o + 2, g);  // already signed bytes
  } else {
    constexpr int64_t qs = T == GgmlType::Q4_0 ? 2 : T == GgmlType::Q4_1 ? 4 : T == GgmlType::Q5_0 ? 6 : 8;
    __m512i t[4];
    ld<4>(p, o + qs, t);  // byte j of qs: element j (low nibble), j + 16 (high nibble)
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    for (int i = 0; i < 4; ++i) {
      g[i] = _mm512_and_si512(t[i], lo4);
      g[i + 4] = _mm512_and_si512(_mm512_srli_epi32(t[i], 4), lo4);
    }
    if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
      const __m512i qh = ld1<IO>(p, o + (T == GgmlType::Q5_0 ? 2 : 4));  // bit j: bit 4 of element j
      for (int i = 0; i < 8; ++i) g[i] = _mm512_or_si512(g[i], IO::hbit4(qh, 4 * i));
    }
    if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q5_0) {
      const __m512i off = _mm512_set1_epi8(T == GgmlType::Q4_0 ? 8 : 16);
      for (int i = 0; i < 8; ++i) g[i] = _mm512_sub_epi8(g[i], off);
    }
  }
  for (int i = 0; i < 8; ++i) _mm512_store_si512(up + 64 * i, g[i]);
  const __m512i dm = ld1<IO>(p, o);  // d (low half), m (high half) for Q4_1 / Q5_1
  _mm512_store_ps(reinterpret_cast<float*>(up + 512), IO::f16lo(dm));
  if constexpr (has_min<T>()) _mm512_store_ps(reinterpret_cast<float*>(up + 576), IO::f16hi(dm));
}

// Q4_K / Q5_K super-block at byte o. Chunk c (elements 64 c ..) is sub-blocks 2c (low nibbles of
// qs bytes 32c ..) and 2c + 1 (high nibbles): B tile rows 0..7 and 8..15.
template <GgmlType T, class PR>
NPULLM_HOT void decode_k4(const PR& p, int64_t o, uint8_t* up) {
  constexpr bool five = T == GgmlType::Q5_K;
  constexpr int split = five ? 3 : 4;  // sc = (sc >> split) << split | (sc & low)
  constexpr int32_t low = (1 << split) - 1;
  __m512i hdr[4], qh[8];
  ld<4>(p, o, hdr);  // d | dmin << 16, scale bytes 0..3, 4..7, 8..11
  if constexpr (five) ld<8>(p, o + 16, qh);  // bit j of qh byte l: bit 4 of element l of sub-block j
  for (int c = 0; c < 4; ++c) {
    __m512i t[8];
    ld<8>(p, o + (five ? 48 : 16) + 32 * c, t);
    const int j0 = 2 * c, j1 = 2 * c + 1;
    const __m512i sc0 = k4_scale<IO>(hdr, j0), sc1 = k4_scale<IO>(hdr, j1);
    const __m512i mn0 = k4_min<IO>(hdr, j0), mn1 = k4_min<IO>(hdr, j1);
    const __m512i sl0 = _mm512_and_si512(sc0, _mm512_set1_epi32(low)), sh0 = _mm512_srli_epi32(sc0, split);
    const __m512i sl1 = _mm512_and_si512(sc1, _mm512_set1_epi32(low)), sh1 = _mm512_srli_epi32(sc1, split);
    const __m512i rep = _mm512_set1_epi32(0x01010101);
    const __m512i m0 = _mm512_mullo_epi32(mn0, rep), m1 = _mm512_mullo_epi32(mn1, rep);
    uint8_t* lo_t = up + 1024 * c;
    uint8_t* hi_t = up + 1024 * (4 + c);
    uint8_t* mn_t = up + 1024 * (8 + c);
    for (int g = 0; g < 8; ++g) {
      __m512i a = _mm512_and_si512(t[g], _mm512_set1_epi8(0x0F));
      __m512i b = _mm512_and_si512(_mm512_srli_epi32(t[g], 4), _mm512_set1_epi8(0x0F));
      if constexpr (five) {  // bit j0 / j1 of each qh byte -> bit 4
        a = _mm512_or_si512(a, _mm512_and_si512(j0 <= 4 ? _mm512_slli_epi32(qh[g], 4 - j0) : _mm512_srli_epi32(qh[g], j0 - 4),
                                                _mm512_set1_epi8(0x10)));
        b = _mm512_or_si512(b, _mm512_and_si512(j1 <= 4 ? _mm512_slli_epi32(qh[g], 4 - j1) : _mm512_srli_epi32(qh[g], j1 - 4),
                                                _mm512_set1_epi8(0x10)));
      }
      _mm512_store_si512(lo_t + 64 * g, mul_u8(a, sl0));
      _mm512_store_si512(lo_t + 64 * (8 + g), mul_u8(b, sl1));
      _mm512_store_si512(hi_t + 64 * g, mul_u8(a, sh0));
      _mm512_store_si512(hi_t + 64 * (8 + g), mul_u8(b, sh1));
      _mm512_store_si512(mn_t + 64 * g, m0);
      _mm512_store_si512(mn_t + 64 * (8 + g), m1);
    }
  }
  _mm512_store_ps(reinterpret_cast<float*>(up + 12 * 1024), IO::f16lo(hdr[0]));
  _mm512_store_ps(reinterpret_cast<float*>(up + 12 * 1024 + 64), IO::f16hi(hdr[0]));
}

// Q6_K super-block at byte o: the weights w - 32 as kernels_int8.h decodes them (G_{4j + g} for
// sub-block j of 16), chunk c = sub-blocks 4c .. 4c + 3 = G_{16c} .. G_{16c + 15} = B tile rows.
template <class PR>
NPULLM_HOT void decode_q6k(const PR& p, int64_t o, uint8_t* up) {
  __m512i scw[4];
  ld<4>(p, o + 192, scw);
  __m512i e[16][4];  // digits of the 16 sub-block scales
  for (int j = 0; j < 16; ++j) {
    __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(scw[j / 4], 24 - 8 * (j % 4)), 24);
    for (int i = 0; i < 3; ++i) {  // e = ((sc + 1) & 3) - 1 in [-1, 2]; sc = (sc - e) / 4
      e[j][i] = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(sc, _mm512_set1_epi32(1)), _mm512_set1_epi32(3)),
                                 _mm512_set1_epi32(1));
      sc = _mm512_srai_epi32(_mm512_sub_epi32(sc, e[j][i]), 2);
    }
    e[j][3] = sc;  // in [-2, 2]
  }
  for (int h = 0; h < 2; ++h) {
    __m512i a[8], b[8], qh[8];
    ld<8>(p, o + 64 * h, a);
    ld<8>(p, o + 64 * h + 32, b);
    ld<8>(p, o + 128 + 32 * h, qh);
    for (int g = 0; g < 8; ++g) {
      // Element 128h + 32Q + 4g + i: G index 32h + 8Q + g (sub-block 8h + 2Q + g / 4).
      const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30), off = _mm512_set1_epi8(32);
      __m512i w[4];
      w[0] = _mm512_or_si512(_mm512_and_si512(a[g], m4), _mm512_and_si512(_mm512_slli_epi32(qh[g], 4), m2));
      w[1] = _mm512_or_si512(_mm512_and_si512(b[g], m4), _mm512_and_si512(_mm512_slli_epi32(qh[g], 2), m2));
      w[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a[g], 4), m4), _mm512_and_si512(qh[g], m2));
      w[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(b[g], 4), m4), _mm512_and_si512(_mm512_srli_epi32(qh[g], 2), m2));
      for (int q = 0; q < 4; ++q) {
        const int G = 32 * h + 8 * q + g, j = G / 4, c = G / 16, row = G % 16;
        const __m512i ws = _mm512_sub_epi8(w[q], off);
        for (int i = 0; i < 4; ++i) _mm512_store_si512(up + 1024 * (4 * i + c) + 64 * row, mul_s8(ws, e[j][i]));
      }
    }
  }
  _mm512_store_ps(reinterpret_cast<float*>(up + 16 * 1024), IO::f16hi(ld1<IO>(p, o + 206)));
}

// Decodes units [0, nu) of a panel into pb (unit stride unit_bytes<T>()).
template <GgmlType T, class PR>
void decode_panel(const PR& p, int64_t nu, uint8_t* pb) {
  for (int64_t u = 0; u < nu; ++u) {
    uint8_t* up = pb + u * unit_bytes<T>();
    const int64_t o = u * block_size<T>();
    if constexpr (T == GgmlType::Q6_K) decode_q6k(p, o, up);
    else if constexpr (kquant<T>()) decode_k4<T>(p, o, up);
    else decode_block32<T>(p, o, up);
  }
}

// ---- the float steps (kernels_int8.h, Numerics), 16 rows of x at a time ------------------------

// Blocks of 32: block u from its C tile at c (16 x 16 int32).
template <GgmlType T>
NPULLM_HOT void scale_block32(const int32_t* c, const float* xd, const float* xs, int64_t ldd, int64_t u,
                              const uint8_t* up, __m512 (&acc)[16]) {
  const __m512 dwv = _mm512_load_ps(reinterpret_cast<const float*>(up + 512));
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    const __m512 s = _mm512_mul_ps(_mm512_set1_ps(xd[m * ldd + u]), dwv);
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), s, acc[m]);
    if constexpr (has_min<T>())
      acc[m] = _mm512_fmadd_ps(_mm512_load_ps(reinterpret_cast<const float*>(up + 576)), _mm512_set1_ps(xs[m * ldd + u]), acc[m]);
  }
}

// Super-blocks: u from the C tiles at c (Q4_K / Q5_K: lo, hi, mn; Q6_K: the 4 digit tiles).
template <GgmlType T>
NPULLM_HOT void scale_block256(const int32_t* c, const float* xd, int64_t ldd, int64_t u, const uint8_t* up,
                               __m512 (&acc)[16]) {
  const __m512 d = _mm512_load_ps(reinterpret_cast<const float*>(up + (T == GgmlType::Q6_K ? 16 : 12) * 1024));
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    const __m512 dx = _mm512_set1_ps(xd[m * ldd + u]);
    const int32_t* r = c + 16 * m;
    if constexpr (T == GgmlType::Q6_K) {
      __m512i isc = _mm512_load_si512(r + 3 * 256);
      for (int i = 2; i >= 0; --i) isc = _mm512_add_epi32(_mm512_slli_epi32(isc, 2), _mm512_load_si512(r + i * 256));
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isc), _mm512_mul_ps(dx, d), acc[m]);
    } else {
      const __m512 dmin = _mm512_load_ps(reinterpret_cast<const float*>(up + 12 * 1024 + 64));
      const __m512i isc = _mm512_add_epi32(_mm512_load_si512(r), _mm512_slli_epi32(_mm512_load_si512(r + 256), T == GgmlType::Q5_K ? 3 : 4));
      const __m512i imn = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_load_si512(r + 512));
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isc), _mm512_mul_ps(dx, d), acc[m]);
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imn), _mm512_mul_ps(dx, dmin), acc[m]);
    }
  }
}

// out[m0 + i, n .. n + valid) for i < rows: (acc + bias) + res, as store_outputs in kernels_int8.h.
NPULLM_HOT void store_rows(const __m512 (&acc)[16], int rows, int valid, const float* bias, const float* res,
                           float* out, int64_t N, int64_t m0, int64_t n) {
  const __mmask16 k = static_cast<__mmask16>((1u << valid) - 1u);
  const __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + n) : _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    if (i >= rows) break;
    __m512 v = acc[i];
    if (bias) v = _mm512_add_ps(v, b);
    if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, res + (m0 + i) * N + n));
    _mm512_mask_storeu_ps(out + (m0 + i) * N + n, k, v);
  }
}

// ---- one 16 x 16 output tile, one K slice ----------------------------------------------------------

// x rows [m0, m0 + rows) (rows <= 16; a, xd, xs: the tile's first row of q, d, s with row strides
// ldq, ldd, ldd; 16 rows are read) against the panel's weight rows [n, n + valid), units [u0, u1)
// in order. The 16 accumulators stay in registers for the slice; between slices they are parked
// in `save` (16 x 16 floats, stored and reloaded exactly). The first slice starts them at +0, the
// last stores the outputs as store_rows does.
struct TileArgs {
  const int8_t* a;
  int64_t ldq;
  const float *xd, *xs;
  int64_t ldd;
  int rows, valid;
  const float *bias, *res;
  float* out;
  int64_t N, m0, n;
};

template <GgmlType T>
void tile_slice(const TileArgs& t, const uint8_t* pb, int64_t u0, int64_t u1, bool first, bool last, float* save,
                int32_t* cbuf) {
  constexpr int64_t UB = unit_bytes<T>();
  const int8_t* a = t.a;
  const int64_t ldq = t.ldq, ldd = t.ldd;
  if (last) {
    // The outputs' cache lines, for writing, while the slice runs: out is large and cold, and a
    // tile store waits for the stores before it, so 16 store misses at the end of every tile
    // stalled the tile pipeline (measured: M = 512, K = 2048, N = 5632 ran at VNNI speed).
    for (int i = 0; i < t.rows; ++i) {
      const float* o = t.out + (t.m0 + i) * t.N + t.n;
      asm volatile("prefetchw %0" ::"m"(*o));
      asm volatile("prefetchw %0" ::"m"(o[t.valid - 1]));
    }
  }
  __m512 acc[16];
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) acc[m] = first ? _mm512_setzero_ps() : _mm512_load_ps(save + 16 * m);
  if constexpr (!kquant<T>()) {
    // Two blocks in flight: tiles 0 / 2 / 4 and 1 / 3 / 5.
    int32_t* c0 = cbuf;
    int32_t* c1 = cbuf + 256;
    int64_t u = u0;
    for (; u + 2 <= u1; u += 2) {
      _tile_loadd(0, a + 32 * u, ldq);
      _tile_loadd(2, pb + UB * u, 64);
      _tile_zero(4);
      _tile_dpbssd(4, 0, 2);
      _tile_loadd(1, a + 32 * (u + 1), ldq);
      _tile_loadd(3, pb + UB * (u + 1), 64);
      _tile_zero(5);
      _tile_dpbssd(5, 1, 3);
      _tile_stored(4, c0, 64);
      scale_block32<T>(c0, t.xd, t.xs, ldd, u, pb + UB * u, acc);
      _tile_stored(5, c1, 64);
      scale_block32<T>(c1, t.xd, t.xs, ldd, u + 1, pb + UB * (u + 1), acc);
    }
    if (u < u1) {
      _tile_loadd(0, a + 32 * u, ldq);
      _tile_loadd(2, pb + UB * u, 64);
      _tile_zero(4);
      _tile_dpbssd(4, 0, 2);
      _tile_stored(4, c0, 64);
      scale_block32<T>(c0, t.xd, t.xs, ldd, u, pb + UB * u, acc);
    }
  } else {
    for (int64_t u = u0; u < u1; ++u) {
      const int8_t* au = a + 256 * u;
      const uint8_t* up = pb + UB * u;
      _tile_zero(4);
      _tile_zero(5);
      _tile_zero(6);
      if constexpr (T == GgmlType::Q6_K) {
        _tile_zero(7);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {  // signed weights: TDPBSSD
          if (c % 2 == 0) _tile_loadd(0, au + 64 * c, ldq);
          else _tile_loadd(1, au + 64 * c, ldq);
          _tile_loadd(2, up + 1024 * (0 + c), 64);
          _tile_loadd(3, up + 1024 * (4 + c), 64);
          if (c % 2 == 0) {
            _tile_dpbssd(4, 0, 2);
            _tile_dpbssd(5, 0, 3);
          } else {
            _tile_dpbssd(4, 1, 2);
            _tile_dpbssd(5, 1, 3);
          }
          _tile_loadd(2, up + 1024 * (8 + c), 64);
          _tile_loadd(3, up + 1024 * (12 + c), 64);
          if (c % 2 == 0) {
            _tile_dpbssd(6, 0, 2);
            _tile_dpbssd(7, 0, 3);
          } else {
            _tile_dpbssd(6, 1, 2);
            _tile_dpbssd(7, 1, 3);
          }
        }
        _tile_stored(4, cbuf, 64);
        _tile_stored(5, cbuf + 256, 64);
        _tile_stored(6, cbuf + 512, 64);
        _tile_stored(7, cbuf + 768, 64);
      } else {
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {  // unsigned weight bytes: TDPBSUD
          if (c % 2 == 0) _tile_loadd(0, au + 64 * c, ldq);
          else _tile_loadd(1, au + 64 * c, ldq);
          _tile_loadd(2, up + 1024 * (0 + c), 64);
          _tile_loadd(3, up + 1024 * (4 + c), 64);
          _tile_loadd(7, up + 1024 * (8 + c), 64);
          if (c % 2 == 0) {
            _tile_dpbsud(4, 0, 2);
            _tile_dpbsud(5, 0, 3);
            _tile_dpbsud(6, 0, 7);
          } else {
            _tile_dpbsud(4, 1, 2);
            _tile_dpbsud(5, 1, 3);
            _tile_dpbsud(6, 1, 7);
          }
        }
        _tile_stored(4, cbuf, 64);
        _tile_stored(5, cbuf + 256, 64);
        _tile_stored(6, cbuf + 512, 64);
      }
      scale_block256<T>(cbuf, t.xd, ldd, u, up, acc);
    }
  }
  if (last) {
    store_rows(acc, t.rows, t.valid, t.bias, t.res, t.out, t.N, t.m0, t.n);
  } else {
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m) _mm512_store_ps(save + 16 * m, acc[m]);
  }
}

// ---- driver --------------------------------------------------------------------------------------
//
// Cache blocking. A tile multiply reads 512 bytes (1 KiB for the K-quants) of x and as much of
// decoded weights per unit, and a tile load that misses L1 stalls the tile pipeline. So a group of
// panels is decoded at a time, and K runs in slices: for each slice, every 16-row tile of x runs
// against the panels of the group, so the tile's x slice comes from L2 once and is reused from L1
// by every panel, while the panels' slices stay in L1 for all tiles. The accumulators of the
// tiles x panels in flight are parked in `work` between slices, for up to kAmxSuperRows rows of x
// at a time (kernels_amx.h). Blocks of 32: kAmxGroup32 panels, slices of kAmxSlice32 blocks;
// super-blocks: kAmxGroup256 panels, slices of one super-block.

template <GgmlType T, class PR>
void amx_gemm(const float* x, int64_t M, int64_t K, const uint8_t* W, size_t row_bytes, const float* bias,
              const float* res, float* out, int64_t N, int64_t n0, int64_t n1, void* work, const void* xpre) {
  constexpr int kGroup = kquant<T>() ? kAmxGroup256 : kAmxGroup32;
  constexpr int64_t kSlice = kquant<T>() ? 1 : kAmxSlice32;
  const int64_t nu = K / unit_elems_amx<T>();
  const int64_t pbytes = nu * unit_bytes<T>();
  auto* base = static_cast<uint8_t*>(work);
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  const XQ wq = xq_view(base, kChunkRows, K, 0);  // x quantised here, or the padded last rows
  uint8_t* panels = base + align64(xq_all_bytes(kChunkRows, K));
  float* parked = reinterpret_cast<float*>(panels + kGroup * pbytes);
  alignas(64) int32_t cbuf[1024];

  _tile_loadconfig(kquant<T>() ? &kConfig256 : &kConfig32);
  const int64_t chunk = xpre ? M : kChunkRows;
  for (int64_t m0 = 0; m0 < M; m0 += chunk) {
    const int64_t mc = M - m0 < chunk ? M - m0 : chunk;
    XQ xq;
    if (xpre) {
      xq = xq_view(xpre, M, K, m0);
    } else {
      avx512_kernels().quantize_x(T, x + m0 * K, kChunkRows, K, base, 0, mc);  // into wq, rows [0, mc)
      xq = wq;
    }
    // The last mc % 16 rows: a 16-row XQ whose rows past the chunk are zeros (q and scales).
    const int64_t full = mc / 16 * 16, tail = mc - full;
    XQ tq = wq;
    if (tail) {
      if (xpre) {  // copy them into wq (unused: x came quantised)
        for (int64_t i = 0; i < tail; ++i) {
          std::memcpy(wq.q + i * wq.ldq, xq.q + (full + i) * xq.ldq, static_cast<size_t>(K));
          std::memcpy(wq.d + i * wq.ldd, xq.d + (full + i) * xq.ldd, static_cast<size_t>(4 * (K / 32)));
          std::memcpy(wq.s + i * wq.ldd, xq.s + (full + i) * xq.ldd, static_cast<size_t>(4 * (K / 32)));
        }
      } else {  // already in wq at rows [full, mc); rows up to full + 16 <= kChunkRows exist
        tq.q += full * wq.ldq;
        tq.d += full * wq.ldd;
        tq.s += full * wq.ldd;
      }
      for (int64_t i = tail; i < 16; ++i) {
        std::memset(tq.q + i * tq.ldq, 0, static_cast<size_t>(K));
        std::memset(tq.d + i * tq.ldd, 0, static_cast<size_t>(4 * (K / 32)));
        std::memset(tq.s + i * tq.ldd, 0, static_cast<size_t>(4 * (K / 32)));
      }
    }
    const int64_t tiles = (mc + 15) / 16;  // tile i: rows [16 i, 16 i + 16) of the chunk (the last may be tq)
    for (int64_t ng = n0; ng < n1; ng += 16 * kGroup) {
      PR pr[kGroup];
      int np = 0;
      for (; np < kGroup && ng + 16 * np < n1; ++np) {
        make_panel<IO>(W, row_bytes, ng + 16 * np, n1, pr[np]);
        decode_panel<T>(pr[np], nu, panels + np * pbytes);
      }
      compiler_barrier();
      for (int64_t t0 = 0; t0 < tiles; t0 += kAmxSuperRows / 16) {
        const int64_t t1 = tiles - t0 < kAmxSuperRows / 16 ? tiles : t0 + kAmxSuperRows / 16;
        for (int64_t u0 = 0; u0 < nu; u0 += kSlice) {
          const int64_t u1 = nu - u0 < kSlice ? nu : u0 + kSlice;
          for (int64_t i = t0; i < t1; ++i) {
            const bool is_tail = 16 * i >= full;
            const XQ& src = is_tail ? tq : xq;
            const int64_t r = is_tail ? 0 : 16 * i;
            for (int q = 0; q < np; ++q) {
              const TileArgs ta{src.q + r * src.ldq, src.ldq, src.d + r * src.ldd, src.s + r * src.ldd, src.ldd,
                                is_tail ? static_cast<int>(tail) : 16, pr[q].valid, bias, res, out, N, m0 + 16 * i,
                                ng + 16 * q};
              tile_slice<T>(ta, panels + q * pbytes, u0, u1, u0 == 0, u1 == nu,
                            parked + ((i - t0) * kGroup + q) * 256, cbuf);
            }
          }
        }
      }
    }
  }
  _tile_release();
}

// Fewest rows of x for which the AMX path beats the VNNI one: below them the panels' decode, done
// once per call and shared by few tiles, and the padding of the last tile to 16 rows cost more
// than the tiles save (measured on M x 2048 x 2048: AMX is slower at M = 8 for every type, at
// M = 16 for the K-quants, at M = 32 for Q6_K, whose decode is the dearest). Either path gives
// the same bits, so this only moves time.
constexpr int64_t amx_min_rows(GgmlType t) {
  return t == GgmlType::Q6_K ? 64 : (t == GgmlType::Q4_K || t == GgmlType::Q5_K) ? 32 : 16;
}

template <class PR>
bool amx_try(const float* x, int64_t M, int64_t K, const uint8_t* W, GgmlType wt, size_t row_bytes, const float* bias,
             const float* res, float* out, int64_t N, int64_t n0, int64_t n1, float* work, const void* xq) {
  switch (wt) {
#define NPULLM_AMX_CASE(TYPE) \
    case GgmlType::TYPE: amx_gemm<GgmlType::TYPE, PR>(x, M, K, W, row_bytes, bias, res, out, N, n0, n1, work, xq); return true;
    NPULLM_AMX_CASE(Q4_0) NPULLM_AMX_CASE(Q4_1) NPULLM_AMX_CASE(Q5_0) NPULLM_AMX_CASE(Q5_1) NPULLM_AMX_CASE(Q8_0)
    NPULLM_AMX_CASE(Q4_K) NPULLM_AMX_CASE(Q5_K) NPULLM_AMX_CASE(Q6_K)
#undef NPULLM_AMX_CASE
    default: return false;
  }
}

void amx_matmul(const float* x, int64_t M, int64_t K, const void* Wv, GgmlType wt, size_t row_bytes, bool packed,
                const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1, float* work,
                const void* xq) {
  const auto* W = static_cast<const uint8_t*>(Wv);
  if (M > kGemvMaxM && M >= amx_min_rows(wt)) {
    const bool done = packed ? amx_try<Packed16>(x, M, K, W, wt, row_bytes, bias, res, out, N, n0, n1, work, xq)
                             : amx_try<Rows16>(x, M, K, W, wt, row_bytes, bias, res, out, N, n0, n1, work, xq);
    if (done) return;
  }
  avx512_best_kernels().matmul(x, M, K, Wv, wt, row_bytes, packed, bias, res, out, N, n0, n1, work, xq);
}

}  // namespace

const IsaKernels* amx_kernels() {
  // The AVX-512 entry points with the AMX matmul (a copy, so entries added to IsaKernels later
  // are the AVX-512 ones here too).
  static const IsaKernels k = [] {
    IsaKernels t = avx512_best_kernels();
    t.name = "amx";
    t.matmul = amx_matmul;
    return t;
  }();
  return &k;
}

}  // namespace npullm::cpu::detail

#else  // the compiler cannot build the AMX path

namespace npullm::cpu::detail {
const IsaKernels* amx_kernels() { return nullptr; }
}  // namespace npullm::cpu::detail

#endif
