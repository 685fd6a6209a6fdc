// AMX (Advanced Matrix Extensions: AMX-TILE + AMX-INT8) code path for the prefill matmul with
// int8 activations (kernels_int8.h), for the weight types with Q8_0-style activations: Q4_0,
// Q4_1, Q5_0, Q5_1 and Q8_0. Everything else (decode, M <= kGemvMaxM; the K-quants; the
// F32-activation types) and the other kernels (quantize_x, attention, swiglu) are the AVX-512
// path's: amx_kernels() is avx512_kernels() with another matmul.
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
// TDPBSSD C += A . B multiplies int8 tiles exactly into int32: A is 16 rows of int8, B holds K/4
// rows of 16 columns x 4 bytes ("VNNI layout": row g, column n = elements 4g .. 4g + 3 of
// column n), C is 16 x 16 int32. With K = 32, one multiply is one weight block u:
//   A = 16 rows of quantised activations, x.q + m * ldq + 32 u (XQ as it is, stride ldq)
//   B = the block of a panel of 16 weight rows: the vectors G_0..G_7 of kernels_int8.h's vector
//       layout, but holding the weights as signed bytes w (no offset, so no start term c)
//   C[m][n] = sum_k q[m][k] w[n][k] = I, the exact integer of the numerics.
// C goes to memory and row m (16 outputs of one x row) takes the float step of every path:
//   acc[m] = fma(float(I), dx[m] * dw, acc[m])  (then fma(mw, s[m], acc[m]) for Q4_1 / Q5_1),
// blocks in increasing order, the 16 acc vectors staying in registers from the first block to
// the last. Each output is therefore the same chain of the same IEEE operations as in the VNNI
// and scalar paths, whatever the tile, chunk or [n0, n1) split it falls in.
//
// ---- Loop structure -------------------------------------------------------------------------
//
// For each chunk of x rows (all M rows when x comes pre-quantised, else kChunkRows quantised into
// `work`), for each panel of 16 weight rows: the panel's blocks are decoded once into `work`
// (B tiles 512 bytes each, then dw and mw as float vectors), then every 16-row tile of the chunk
// runs over all blocks. Two blocks are in flight (A, B, C tiles 0/2/4 and 1/3/5), so the tile
// unit multiplies block u + 1 while the vector units scale block u. The float step (convert,
// multiply, fma per 16 outputs and block) is the bottleneck: the integer products cost the tile
// unit 16 cycles per block and tile, the float step about 24 on the two vector ports.
// The last rows of a chunk (M % 16) run as one more tile, padded with zero rows (zero scales).
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
// tmm0, tmm1: A (16 rows x 32 bytes); tmm2, tmm3: B (8 rows x 64 bytes); tmm4, tmm5: C (16 x 64).
// In read-only memory: GCC's _tile_loadconfig tells the compiler it reads 8 bytes only, so a
// configuration built on the stack could be partly optimised away.
constexpr TileConfig kConfig = {1, 0, {}, {32, 32, 64, 64, 64, 64}, {16, 16, 8, 8, 16, 16}};

// GCC's tile loads are asm statements that do not tell the compiler they read memory: every
// buffer a tile load reads must be written before this barrier.
inline void compiler_barrier() { asm volatile("" ::: "memory"); }

// ---- weight panels: 16 rows, one per lane (as kernels_int8.h's Panel for Avx512IO) -------------

struct Rows16 {
  const uint8_t* r[16];
  int valid;  // rows that exist (1..16); the others repeat the last one, so loads stay inside W
};

inline void make_rows(const uint8_t* W, size_t row_bytes, int64_t n, int64_t n_end, Rows16& p) {
  const int64_t left = n_end - n;
  p.valid = static_cast<int>(left < 16 ? left : 16);
  for (int r = 0; r < 16; ++r) p.r[r] = W + (n + (r < p.valid ? r : p.valid - 1)) * static_cast<int64_t>(row_bytes);
}

// 16 bytes at rows[r] + off -> 4 vectors, dword g of row r in lane r of out[g] (Avx512IO::tload4).
NPULLM_HOT void tload4(const Rows16& p, int64_t off, __m512i* out) {
  __m512i z[4];
  for (int i = 0; i < 4; ++i) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.r[i] + off)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.r[4 + i] + off)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.r[8 + i] + off)), 2);
    z[i] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.r[12 + i] + off)), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// 32 bytes at rows[r] + off -> 8 vectors, dword g of row r in lane r of out[g] (Avx512IO::tload8).
NPULLM_HOT void tload8(const Rows16& p, int64_t off, __m512i* out) {
  __m512i y[8];
  for (int i = 0; i < 8; ++i) {
    const __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.r[i] + off)));
    y[i] = _mm512_inserti64x4(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.r[8 + i] + off)), 1);
  }
  __m512i u[8];
  for (int h = 0; h < 2; ++h) {
    const __m512i* a = y + 4 * h;
    const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
    u[4 * h + 0] = _mm512_unpacklo_epi64(t0, t2);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t0, t2);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t1, t3);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t1, t3);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm512_mask_shuffle_i32x4(u[k], 0xF0F0, u[k + 4], u[k + 4], _MM_SHUFFLE(2, 2, 0, 0));
    out[k + 4] = _mm512_mask_shuffle_i32x4(u[k + 4], 0x0F0F, u[k], u[k], _MM_SHUFFLE(3, 3, 1, 1));
  }
}

// Lane r = the 4 bytes at rows[r] + off.
NPULLM_HOT __m512i gather32(const Rows16& p, int64_t off) {
  alignas(64) int32_t v[16];
  for (int r = 0; r < 16; ++r) std::memcpy(&v[r], p.r[r] + off, 4);
  return _mm512_load_si512(v);
}

// Byte i of each lane = 0x10 if bit s + i of the lane is set (Avx512IO::hbit4).
NPULLM_HOT __m512i hbit4(__m512i h, int s) {
  const __m512i table = _mm512_setr_epi32(0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010,
                                          0x00101000, 0x00101010, 0x10000000, 0x10000010, 0x10001000, 0x10001010,
                                          0x10100000, 0x10100010, 0x10101000, 0x10101010);
  return _mm512_permutexvar_epi32(_mm512_srli_epi32(h, static_cast<unsigned>(s)), table);
}

template <GgmlType T>
constexpr int64_t block_size() {
  return T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22 : T == GgmlType::Q5_1 ? 24 : 34;
}
template <GgmlType T>
constexpr bool has_min() { return T == GgmlType::Q4_1 || T == GgmlType::Q5_1; }

// Decodes the nb blocks of a panel: B tile of block u at bt + 512 u (signed weights), its scales
// at dw + 16 u and, for Q4_1 / Q5_1, its mins at mw + 16 u (lane r = row r, as floats).
template <GgmlType T>
void decode_panel(const Rows16& p, int64_t nb, uint8_t* bt, float* dw, float* mw) {
  constexpr int64_t bs = block_size<T>();
  for (int64_t u = 0; u < nb; ++u) {
    const int64_t o = u * bs;
    __m512i g[8];
    if constexpr (T == GgmlType::Q8_0) {
      tload8(p, o + 2, g);  // already signed bytes
    } else {
      constexpr int64_t qs = T == GgmlType::Q4_0 ? 2 : T == GgmlType::Q4_1 ? 4 : T == GgmlType::Q5_0 ? 6 : 8;
      __m512i t[4];
      tload4(p, o + qs, t);  // byte j of qs: element j (low nibble), j + 16 (high nibble)
      const __m512i lo4 = _mm512_set1_epi8(0x0F);
      for (int i = 0; i < 4; ++i) {
        g[i] = _mm512_and_si512(t[i], lo4);
        g[i + 4] = _mm512_and_si512(_mm512_srli_epi32(t[i], 4), lo4);
      }
      if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
        const __m512i qh = gather32(p, o + (T == GgmlType::Q5_0 ? 2 : 4));  // bit j: bit 4 of element j
        for (int i = 0; i < 8; ++i) g[i] = _mm512_or_si512(g[i], hbit4(qh, 4 * i));
      }
      if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q5_0) {
        const __m512i off = _mm512_set1_epi8(T == GgmlType::Q4_0 ? 8 : 16);
        for (int i = 0; i < 8; ++i) g[i] = _mm512_sub_epi8(g[i], off);
      }
    }
    for (int i = 0; i < 8; ++i) _mm512_store_si512(bt + 512 * u + 64 * i, g[i]);
    const __m512i dm = gather32(p, o);  // d (low half), m (high half) for Q4_1 / Q5_1
    _mm512_store_ps(dw + 16 * u, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
    if constexpr (has_min<T>())
      _mm512_store_ps(mw + 16 * u, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16))));
  }
}

// ---- one 16 x 16 output tile -------------------------------------------------------------------

// The float step of block u for the 16 rows of the tile, from its C tile at c (16 x 16 int32).
template <bool kMin>
NPULLM_HOT void scale_block(const int32_t* c, const float* xd, const float* xs, int64_t ldd, int64_t u,
                            const float* dw, const float* mw, __m512 (&acc)[16]) {
  const __m512 dwv = _mm512_load_ps(dw + 16 * u);
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) {
    const __m512 s = _mm512_mul_ps(_mm512_set1_ps(xd[m * ldd + u]), dwv);
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), s, acc[m]);
    if constexpr (kMin) acc[m] = _mm512_fmadd_ps(_mm512_load_ps(mw + 16 * u), _mm512_set1_ps(xs[m * ldd + u]), acc[m]);
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

// One tile: x rows [m0, m0 + rows) (rows <= 16; a, xd, xs: the tile's first row of q, d, s, row
// strides ldq, ldd, ldd; 16 rows are read) against the panel's weight rows [n, n + valid), all nb
// blocks in order, stored as store_rows does. The 16 accumulators stay in registers throughout.
template <bool kMin>
void tile_rows(const int8_t* a, int64_t ldq, const float* xd, const float* xs, int64_t ldd, const uint8_t* bt,
               const float* dw, const float* mw, int64_t nb, int32_t* cbuf, int rows, int valid,
               const float* bias, const float* res, float* out, int64_t N, int64_t m0, int64_t n) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int m = 0; m < 16; ++m) acc[m] = _mm512_setzero_ps();
  int32_t* c0 = cbuf;
  int32_t* c1 = cbuf + 256;
  int64_t u = 0;
  for (; u + 2 <= nb; u += 2) {
    _tile_loadd(0, a + 32 * u, ldq);
    _tile_loadd(2, bt + 512 * u, 64);
    _tile_zero(4);
    _tile_dpbssd(4, 0, 2);
    _tile_loadd(1, a + 32 * (u + 1), ldq);
    _tile_loadd(3, bt + 512 * (u + 1), 64);
    _tile_zero(5);
    _tile_dpbssd(5, 1, 3);
    _tile_stored(4, c0, 64);
    scale_block<kMin>(c0, xd, xs, ldd, u, dw, mw, acc);
    _tile_stored(5, c1, 64);
    scale_block<kMin>(c1, xd, xs, ldd, u + 1, dw, mw, acc);
  }
  if (u < nb) {
    _tile_loadd(0, a + 32 * u, ldq);
    _tile_loadd(2, bt + 512 * u, 64);
    _tile_zero(4);
    _tile_dpbssd(4, 0, 2);
    _tile_stored(4, c0, 64);
    scale_block<kMin>(c0, xd, xs, ldd, u, dw, mw, acc);
  }
  store_rows(acc, rows, valid, bias, res, out, N, m0, n);
}

// ---- driver --------------------------------------------------------------------------------------

// work = [XQ of kChunkRows rows (xq_view layout) | panel: B tiles 512 nb | dw 64 nb | mw 64 nb].
// That is within int8_work_bytes(K), which kernels.cpp sizes `work` for: its activation part is
// larger than xq_all_bytes(kChunkRows, K) and its panel part holds 2 x 704 bytes per block.
constexpr int64_t amx_work_bytes(int64_t K) { return align64(xq_all_bytes(kChunkRows, K)) + 640 * (K / 32); }
static_assert(amx_work_bytes(32) <= int8_work_bytes(32) && amx_work_bytes(4096) <= int8_work_bytes(4096) &&
              amx_work_bytes(32 * 1023) <= int8_work_bytes(32 * 1023));

template <GgmlType T>
void amx_gemm(const float* x, int64_t M, int64_t K, const uint8_t* W, size_t row_bytes, const float* bias,
              const float* res, float* out, int64_t N, int64_t n0, int64_t n1, void* work, const void* xpre) {
  constexpr bool kMin = has_min<T>();
  auto* base = static_cast<uint8_t*>(work);
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  const XQ wq = xq_view(base, kChunkRows, K, 0);  // x quantised here, or the padded last rows
  const int64_t nb = K / 32;
  uint8_t* bt = base + align64(xq_all_bytes(kChunkRows, K));
  float* dw = reinterpret_cast<float*>(bt + 512 * nb);
  float* mw = dw + 16 * nb;
  alignas(64) int32_t cbuf[512];

  _tile_loadconfig(&kConfig);
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
    for (int64_t n = n0; n < n1; n += 16) {
      Rows16 p;
      make_rows(W, row_bytes, n, n1, p);
      decode_panel<T>(p, nb, bt, dw, mw);
      compiler_barrier();
      for (int64_t m = 0; m < full; m += 16)
        tile_rows<kMin>(xq.q + m * xq.ldq, xq.ldq, xq.d + m * xq.ldd, xq.s + m * xq.ldd, xq.ldd, bt, dw, mw, nb,
                        cbuf, 16, p.valid, bias, res, out, N, m0 + m, n);
      if (tail)
        tile_rows<kMin>(tq.q, tq.ldq, tq.d, tq.s, tq.ldd, bt, dw, mw, nb, cbuf, static_cast<int>(tail), p.valid,
                        bias, res, out, N, m0 + full, n);
    }
  }
  _tile_release();
}

void amx_matmul(const float* x, int64_t M, int64_t K, const void* Wv, GgmlType wt, size_t row_bytes,
                const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1, float* work,
                const void* xq) {
  const auto* W = static_cast<const uint8_t*>(Wv);
  if (M > kGemvMaxM) {
    switch (wt) {
      case GgmlType::Q4_0: amx_gemm<GgmlType::Q4_0>(x, M, K, W, row_bytes, bias, res, out, N, n0, n1, work, xq); return;
      case GgmlType::Q4_1: amx_gemm<GgmlType::Q4_1>(x, M, K, W, row_bytes, bias, res, out, N, n0, n1, work, xq); return;
      case GgmlType::Q5_0: amx_gemm<GgmlType::Q5_0>(x, M, K, W, row_bytes, bias, res, out, N, n0, n1, work, xq); return;
      case GgmlType::Q5_1: amx_gemm<GgmlType::Q5_1>(x, M, K, W, row_bytes, bias, res, out, N, n0, n1, work, xq); return;
      case GgmlType::Q8_0: amx_gemm<GgmlType::Q8_0>(x, M, K, W, row_bytes, bias, res, out, N, n0, n1, work, xq); return;
      default: break;
    }
  }
  avx512_kernels().matmul(x, M, K, Wv, wt, row_bytes, bias, res, out, N, n0, n1, work, xq);
}

}  // namespace

const IsaKernels* amx_kernels() {
  // The AVX-512 entry points with the AMX matmul (a copy, so entries added to IsaKernels later
  // are the AVX-512 ones here too).
  static const IsaKernels k = [] {
    IsaKernels t = avx512_kernels();
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
