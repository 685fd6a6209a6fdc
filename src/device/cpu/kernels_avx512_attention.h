// Decode attention of a group of N query heads sharing one K/V head of HD = 16 * NV dims (64, 96,
// 128 or 256), K and V both F16 or both Q8_0, AVX-512 only (included by kernels_avx512.cpp, after
// kernels_impl.h; the linkage rule there applies). It gives every head the bits attention_one_row
// gives it; what changes is how the work is laid out, because the per-key bookkeeping, not the
// arithmetic, was what cost:
//
//  - Scores go 16 keys at a time. A key's dot product with a head is one 16-lane accumulator (the
//    summation order of kernels_impl.h); its lanes are summed by hsum's fixed tree, pairing lane i
//    with i + 8, then i + 4, i + 2, i + 1. Here the same pairs are added for 16 keys together, two
//    vectors at a time, with shuffles (each level halves the vectors), so the 16 sums come out in
//    one vector: scaled, masked, stored and max-ed as a vector instead of one scalar at a time.
//  - Value sums go 16 keys at a time too: where no weight in the tile is 0 (the common case) the
//    weights are normalised with one vector multiply per head and the keys' fma run without a test
//    per head and key; a tile with a zero weight takes the per-key path that skips it, as
//    attention_one_row does (a masked key's V row is never read).
//  - Tiles that are partly masked, wrap around a ring, or run past C go key by key.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace npullm::cpu::detail {
namespace {

inline constexpr int64_t kAttnTile = 16;           // keys per tile (one vector of scores)
// K rows are fetched this many tiles ahead while the scores are computed, V rows as far ahead in
// each pass over the values (its own lines), a few lines per key or pair of keys: in bursts (a
// tile's worth at once) the fetches waited for free fill buffers and held up the arithmetic.
// Into L2: 1,024 keys of TinyLlama's groups from memory took ~147 us on one core this way, 172 us
// with a burst per tile into L1, 254 us with no fetches (~87 us with K/V in cache; bench_kernels
// AttentionDecodeCold / AttentionDecode). Four tiles (8 KiB of a group's K ahead, the distance
// the weight streams settled on too): 86-88 us cold against 96 at two, 91-94 at eight (Zen 5).
// Fetching V during the scores as well gained nothing.
inline constexpr int64_t kAttnPrefetchTiles = 4;

// One head of a K/V row of type T: its bytes, where its vector i (elements 16i ..) starts, and
// vectors [I0, I0 + n) widened to float exactly as Ops' loaders widen them for attention_one_row
// (F16: vcvtph2ps; Q8_0: float(q) * d, d widened once per block). Q8_0 (NV even: whole blocks of
// 32) reads half the bytes of F16 at depth; its heads are 34 bytes a block, so not line-aligned.
template <class Ops, GgmlType T, int NV>
struct AttnHead;

template <class Ops, int NV>
struct AttnHead<Ops, GgmlType::F16, NV> {
  static constexpr int64_t bytes = 32 * NV;
  static constexpr int64_t off(int i) { return 32 * i; }
  template <int I0, int n>
  static void widen(const uint8_t* h, __m512 (&out)[n]) {
#pragma GCC unroll 16
    for (int i = 0; i < n; ++i)
      out[i] = Ops::template load_w<GgmlType::F16>(h, 16 * (I0 + i));  // bytes off(I0 + i) on
  }
};

template <class Ops, int NV>
struct AttnHead<Ops, GgmlType::Q8_0, NV> {
  static_assert(NV % 2 == 0, "a Q8_0 head is whole blocks of 32");
  static constexpr int64_t bytes = NV / 2 * 34;
  static constexpr int64_t off(int i) { return i / 2 * 34 + 2 + i % 2 * 16; }
  template <int I0, int n>
  static void widen(const uint8_t* h, __m512 (&out)[n]) {
    __m512 d = Ops::q8_scale(h + I0 / 2 * 34);
#pragma GCC unroll 16
    for (int i = 0; i < n; ++i) {
      if (i > 0 && (I0 + i) % 2 == 0) d = Ops::q8_scale(h + (I0 + i) / 2 * 34);
      out[i] = Ops::load_q8(h + off(I0 + i), d);
    }
  }
};

// Fetches the lines of bytes [p, p + n) into L2 (or, Hint T0, into L1 and L2).
template <int Hint = _MM_HINT_T1>
inline void attn_fetch(const uint8_t* p, int64_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t l = a & ~uintptr_t{63}; l < a + static_cast<uintptr_t>(n); l += 64)
    _mm_prefetch(reinterpret_cast<const char*>(l), static_cast<_mm_hint>(Hint));
}

// Whole K/V rows (AttnFetch::WholeRow: a part of a query's attention split over keys, whose runs
// together read every head of each row) go into L1 and L2, a row's lines one after another: at
// 30,000 keys of Qwen2.5's two K/V heads on two threads (bench_kernels AttentionByKeys) 792-895 ->
// 672-685 us against each run fetching its own head's piece into L2 (4 alternated pairs; into L2
// as whole rows 702-722, 8 tiles ahead as good as 4 or 16).
inline void attn_fetch_rows(const uint8_t* p, int64_t n) { attn_fetch<_MM_HINT_T0>(p, n); }

// The first tiles a pass reads, which the fetches ahead in the pass's loop never cover: keys [t0,
// min(Ce, t0 + kAttnPrefetchTiles tiles)) of a group (rows from `rot` on, as the pass visits them), all
// at once. Before the scores and before the softmax (whose e^x then run while V's first rows come
// in): AttentionDecodeCold/F16/1024 145-147 -> 134-135 us (Xeon, one thread, 2 runs of 7), warm
// level; TinyLlama Q4_0 at depth 1,024 the attention stage 1.62 -> 1.50-1.56 ms a token, 3 pairs.
// (fetch: as AttnFetch; base: the group's head in row 0 for OwnHead, row 0 itself for WholeRow.)
template <class Head>
inline void attn_fetch_start(const uint8_t* base, int64_t stride, int64_t C, int64_t t0, int64_t Ce, int64_t rot,
                             AttnFetch fetch = AttnFetch::OwnHead) {
  if (fetch == AttnFetch::None) return;
  const int64_t n = Ce - t0 < kAttnPrefetchTiles * kAttnTile ? Ce - t0 : kAttnPrefetchTiles * kAttnTile;
  for (int64_t t = t0; t < t0 + n; ++t) {
    if (fetch == AttnFetch::WholeRow) attn_fetch_rows(base + attn_row(t, rot, C) * stride, stride);
    else attn_fetch(base + attn_row(t, rot, C) * stride, Head::bytes);
  }
}

// One key's dot products with the N heads' queries (q is [N, HD]), in attention_heads' order.
template <class Head, int N, int NV>
inline void attn_key_dots(const float* q, const uint8_t* kr, __m512 (&acc)[N]) {
  __m512 kv[NV];
  Head::template widen<0, NV>(kr, kv);
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j) {
    acc[j] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) acc[j] = _mm512_fmadd_ps(kv[i], _mm512_loadu_ps(q + j * 16 * NV + 16 * i), acc[j]);
  }
}

// Two keys' dot products with the N heads' queries (a for kr0, b for kr1): each lane's sum is
// attn_key_dots' (the same fma chain over the NV vectors), but both keys share each q load and
// the heads' chains are interleaved, so the fma's latency is covered by independent work.
template <class Head, int N, int NV>
inline void attn_key_dots2(const float* q, const uint8_t* kr0, const uint8_t* kr1, __m512 (&a)[N], __m512 (&b)[N]) {
  __m512 ka[NV], kb[NV];
  Head::template widen<0, NV>(kr0, ka);
  Head::template widen<0, NV>(kr1, kb);
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j) {
    const __m512 qv = _mm512_loadu_ps(q + j * 16 * NV);
    a[j] = _mm512_fmadd_ps(ka[0], qv, _mm512_setzero_ps());
    b[j] = _mm512_fmadd_ps(kb[0], qv, _mm512_setzero_ps());
  }
#pragma GCC unroll 16
  for (int i = 1; i < NV; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) {
      const __m512 qv = _mm512_loadu_ps(q + j * 16 * NV + 16 * i);
      a[j] = _mm512_fmadd_ps(ka[i], qv, a[j]);
      b[j] = _mm512_fmadd_ps(kb[i], qv, b[j]);
    }
}

// hsum's tree for 16 keys at once: vector m of lvl1 (floats 16m ..) holds keys 2m and 2m + 1 after
// the first level (each 256-bit half one key's v[i] + v[i + 8]); returns the 16 sums in key order.
inline __m512 attn_reduce16(const float* lvl1) {
  __m512 u[4];
#pragma GCC unroll 4
  for (int n = 0; n < 4; ++n) {  // i + 4: one key's 4 partial sums per 128-bit lane, keys 4n..4n+3
    const __m512 s = _mm512_load_ps(lvl1 + 32 * n), t = _mm512_load_ps(lvl1 + 32 * n + 16);
    u[n] = _mm512_add_ps(_mm512_shuffle_f32x4(s, t, 0x88), _mm512_shuffle_f32x4(s, t, 0xDD));
  }
  // i + 2: lane k holds keys k (elements 0, 1) and 4 + k (elements 2, 3); then 8 + k and 12 + k.
  const __m512 x0 = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x44), _mm512_shuffle_ps(u[0], u[1], 0xEE));
  const __m512 x1 = _mm512_add_ps(_mm512_shuffle_ps(u[2], u[3], 0x44), _mm512_shuffle_ps(u[2], u[3], 0xEE));
  // i + 1: element 4k + m is key 4m + k.
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x88), _mm512_shuffle_ps(x0, x1, 0xDD));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(order, z);
}

// Keys [t0, t1) of the block one at a time into acc, vectors [D0, D0 + ND) of NH heads (scores,
// inv, live: those heads'; head j's key t at j * kAttnBlock + t - tb): a key of weight 0 adds nothing,
// and a key no head sees is not read.
template <class Head, int NH, int D0, int ND>
inline void attn_value_keys(const uint8_t* vg, int64_t stride, int64_t C, int64_t rot, int64_t t0, int64_t t1, int64_t tb,
                            const float* scores, const float* inv, const bool* live, __m512 (&acc)[NH][ND]) {
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t row = attn_row(t, rot, C);
    float p[NH];
    bool any = false;
#pragma GCC unroll 16
    for (int j = 0; j < NH; ++j) {
      p[j] = live[j] ? scores[j * kAttnBlock + t - tb] : 0.0f;
      any = any || p[j] != 0.0f;
    }
    if (!any) continue;
    __m512 vv[ND];
    Head::template widen<D0, ND>(vg + row * stride, vv);
#pragma GCC unroll 16
    for (int j = 0; j < NH; ++j) {
      if (p[j] == 0.0f) continue;
      const __m512 pv = _mm512_set1_ps(p[j] * inv[j]);
#pragma GCC unroll 16
      for (int i = 0; i < ND; ++i) acc[j][i] = _mm512_fmadd_ps(vv[i], pv, acc[j][i]);
    }
  }
}

// Heads [J0, J0 + NH) of the group, value vectors [D0, D0 + ND) of HD: out_j = sum_t p_jt v_t over
// the block's keys [tb, te) in order (scores: the block's, head j's key t at j * kAttnBlock + t - tb),
// accumulators in registers across the keys.
template <class Head, int N, int NV, int J0, int NH, int D0, int ND>
inline void attn_value_pass(const uint8_t* vg, int64_t stride, int64_t C, int64_t Ce, int64_t tb, int64_t te, int64_t rot,
                            const float* scores, const float (&inv)[N], const bool (&live)[N], float* out, int64_t g_off,
                            AttnFetch fetch_mode) {
  constexpr int HD = 16 * NV;
  bool all_live = true;
  for (int j = J0; j < J0 + NH; ++j) all_live = all_live && live[j];
  __m512 acc[NH][ND];
#pragma GCC unroll 16
  for (int j = 0; j < NH; ++j)
#pragma GCC unroll 16
    for (int i = 0; i < ND; ++i) acc[j][i] = _mm512_setzero_ps();
  alignas(64) float pn[NH][kAttnTile];
  for (int64_t t0 = tb; t0 < te; t0 += kAttnTile) {  // the block's keys [tb, te): past Ce every weight is 0
    const int64_t row0 = attn_row(t0, rot, C);
    if (all_live && t0 + kAttnTile <= te && row0 + kAttnTile <= C) {
      __mmask16 zero = 0;
#pragma GCC unroll 16
      for (int j = 0; j < NH; ++j) {
        const __m512 e = _mm512_loadu_ps(scores + (J0 + j) * kAttnBlock + t0 - tb);
        zero |= _mm512_cmp_ps_mask(e, _mm512_setzero_ps(), _CMP_EQ_OQ);
        _mm512_store_ps(pn[j], _mm512_mul_ps(e, _mm512_set1_ps(inv[J0 + j])));
      }
      if (zero == 0) {
        const uint8_t* vt = vg + row0 * stride;
        // Each pass fetches the lines of its own vectors (an 8-head group of 64 dims: line 0 in the
        // first pass, line 1 in the second). The first pass fetching all of them left it waiting on
        // memory and the second with nothing to fetch: AttentionDecodeCold/F16/1024 median 137 ->
        // 133 us (5 runs of 9 each), the attention stage at depth 1,024 (TinyLlama Q4_0) 1.47-1.50
        // -> 1.41-1.44 ms a token, 3 alternated pairs.
        // (Whole rows: the first pass of the group's first run fetches each row, from its start.)
        const bool fetch = J0 == 0 && row0 + (kAttnPrefetchTiles + 1) * kAttnTile <= Ce &&
                           (fetch_mode == AttnFetch::OwnHead || (fetch_mode == AttnFetch::WholeRow && D0 == 0));
        // (From the head's start in the first pass, so a Q8_0 block's d comes in with its values.)
        constexpr int64_t f0 = D0 == 0 ? 0 : Head::off(D0), f1 = Head::off(D0 + ND - 1) + 16;
        const int64_t ahead = kAttnPrefetchTiles * kAttnTile * stride;
        for (int64_t tt = 0; tt < kAttnTile; ++tt, vt += stride) {
          if (fetch && fetch_mode == AttnFetch::WholeRow) attn_fetch_rows(vt - g_off + ahead, stride);
          else if (fetch) attn_fetch(vt + ahead + f0, f1 - f0);
          __m512 vv[ND];
          Head::template widen<D0, ND>(vt, vv);
#pragma GCC unroll 16
          for (int j = 0; j < NH; ++j) {
            const __m512 p = _mm512_set1_ps(pn[j][tt]);
#pragma GCC unroll 16
            for (int i = 0; i < ND; ++i) acc[j][i] = _mm512_fmadd_ps(vv[i], p, acc[j][i]);
          }
        }
        continue;
      }
    }
    // Key by key: a key of weight 0 adds nothing (and a key no head sees is not read).
    const int64_t t1 = t0 + kAttnTile < te ? t0 + kAttnTile : te;
    attn_value_keys<Head, NH, D0, ND>(vg, stride, C, rot, t0, t1, tb, scores + J0 * kAttnBlock, inv + J0, live + J0, acc);
  }
#pragma GCC unroll 16
  for (int j = 0; j < NH; ++j)
#pragma GCC unroll 16
    for (int i = 0; i < ND; ++i) _mm512_storeu_ps(out + (J0 + j) * HD + 16 * (D0 + i), acc[j][i]);
}

// Passes over the values: all heads (up to 8) and as many vectors as make 16 accumulators or
// fewer, so each V vector is widened once (8 heads of 64: two passes of 2 vectors).
template <class Head, int N, int NV, int J0, int D0>
inline void attn_value_passes(const uint8_t* vg, int64_t stride, int64_t C, int64_t Ce, int64_t tb, int64_t te, int64_t rot,
                              const float* scores, const float (&inv)[N], const bool (&live)[N], float* out, int64_t g_off,
                              AttnFetch fetch) {
  constexpr int NH = N - J0 < 8 ? N - J0 : 8;
  constexpr int ND = NV - D0 < 16 / NH ? NV - D0 : 16 / NH;
  attn_value_pass<Head, N, NV, J0, NH, D0, ND>(vg, stride, C, Ce, tb, te, rot, scores, inv, live, out, g_off, fetch);
  if constexpr (D0 + ND < NV)
    attn_value_passes<Head, N, NV, J0, D0 + ND>(vg, stride, C, Ce, tb, te, rot, scores, inv, live, out, g_off, fetch);
  else if constexpr (J0 + NH < N)
    attn_value_passes<Head, N, NV, J0 + NH, 0>(vg, stride, C, Ce, tb, te, rot, scores, inv, live, out, g_off, fetch);
}

// Group g's N heads (q: [N, HD], mrow the query's mask row or null): the partial states of blocks
// [b0, b1) of sp into w (kernels_impl.h: the blocks, their partial states and the merge, as
// attn_head_blocks computes them).
template <class Ops, GgmlType T, int N, int NV>
void attention_group(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t Hkv, int64_t g,
                     int64_t C, int64_t rot, float scale, const AttnSpan& sp, int64_t b0, int64_t b1, const AttnWork& w,
                     AttnFetch fetch_mode) {
  using Head = AttnHead<Ops, T, NV>;
  constexpr int64_t head = Head::bytes;  // bytes of one head in a K/V row
  constexpr int64_t KB = kAttnBlock;
  constexpr int64_t G = kGroupHeads;
  constexpr float kNegInf = -__builtin_inff();
  const int64_t stride = Hkv * head;
  const uint8_t* kg = k + g * head;
  const uint8_t* vg = v + g * head;
  const __m512 neg_inf = _mm512_set1_ps(kNegInf), scale_v = _mm512_set1_ps(scale);
  float* scores = w.scores;  // the block's: head j's key t at j * KB + t - tb
  const int64_t Ce = sp.end;
  if (b0 >= b1) return;

  // The first K rows; later blocks' first rows are fetched by the pass before them, which fetches
  // ahead across the block's end (as far as Ce).
  const bool rows = fetch_mode == AttnFetch::WholeRow;
  attn_fetch_start<Head>(rows ? k : kg, stride, C, sp.first + b0 * KB, Ce, rot, fetch_mode);
  alignas(64) float lvl1[N][kAttnTile / 2][16];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t tb = sp.first + b * KB, te = tb + KB < Ce ? tb + KB : Ce;
    __m512 mx[N];
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) mx[j] = neg_inf;
    for (int64_t t0 = tb; t0 < te; t0 += kAttnTile) {
      const int64_t row0 = attn_row(t0, rot, C);
      float* st = scores + t0 - tb;
      if (t0 + kAttnTile <= te && row0 + kAttnTile <= C) {
        const __m512 mv = mrow ? _mm512_loadu_ps(mrow + row0) : _mm512_setzero_ps();
        const __mmask16 masked = _mm512_cmp_ps_mask(mv, neg_inf, _CMP_EQ_OQ);
        if (masked == 0xFFFF) {
#pragma GCC unroll 16
          for (int j = 0; j < N; ++j) _mm512_storeu_ps(st + j * KB, neg_inf);
          continue;
        }
        if (masked == 0) {
          const uint8_t* kt = kg + row0 * stride;
          const bool fetch = row0 + (kAttnPrefetchTiles + 1) * kAttnTile <= Ce && fetch_mode != AttnFetch::None;
          const int64_t ahead = (kAttnPrefetchTiles * kAttnTile) * stride;
          for (int m = 0; m < kAttnTile / 2; ++m) {
            if (fetch && rows) {
              attn_fetch_rows(kt - g * head + ahead + 2 * m * stride, 2 * stride);
            } else if (fetch) {
              attn_fetch(kt + ahead + 2 * m * stride, head);
              attn_fetch(kt + ahead + (2 * m + 1) * stride, head);
            }
            __m512 a[N], bv[N];
            attn_key_dots2<Head, N, NV>(q, kt + 2 * m * stride, kt + (2 * m + 1) * stride, a, bv);
#pragma GCC unroll 16
            for (int j = 0; j < N; ++j)  // i + 8: one key per 256-bit half
              _mm512_store_ps(lvl1[j][m], _mm512_add_ps(_mm512_shuffle_f32x4(a[j], bv[j], 0x44), _mm512_shuffle_f32x4(a[j], bv[j], 0xEE)));
          }
#pragma GCC unroll 16
          for (int j = 0; j < N; ++j) {
            const __m512 sc = _mm512_fmadd_ps(scale_v, attn_reduce16(lvl1[j][0]), mv);  // scale * dot + mask
            _mm512_storeu_ps(st + j * KB, sc);
            mx[j] = _mm512_max_ps(sc, mx[j]);  // sc > mx ? sc : mx, lane by lane: a NaN score is never the max
          }
          continue;
        }
      }
      const int64_t t1 = t0 + kAttnTile < te ? t0 + kAttnTile : te;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = attn_row(t, rot, C);
        const float mval = mrow ? mrow[row] : 0.0f;
        if (mval == kNegInf) {
          for (int j = 0; j < N; ++j) scores[j * KB + t - tb] = kNegInf;
          continue;
        }
        __m512 a[N];
        attn_key_dots<Head, N, NV>(q, kg + row * stride, a);
#pragma GCC unroll 16
        for (int j = 0; j < N; ++j) {
          const float sc = scale * Ops::hsum(a[j]) + mval;
          scores[j * KB + t - tb] = sc;
          mx[j] = _mm512_max_ps(_mm512_set1_ps(sc), mx[j]);
        }
      }
    }

    // The value pass's first rows come in while the weights' e^x are taken (later blocks': fetched
    // by the pass before).
    if (b == b0) attn_fetch_start<Head>(rows ? v : vg, stride, C, tb, Ce, rot, fetch_mode);
    float inv[N];
    bool live[N];
    bool any_live = false;
    for (int j = 0; j < N; ++j) {
      const float m = _mm512_reduce_max_ps(mx[j]);
      live[j] = m != kNegInf;
      w.m[b * G + j] = m;
      inv[j] = 0.0f;
      if (!live[j]) continue;
      const float total = softmax_numerators<Ops>(scores + j * KB, te - tb, m);
      w.l[b * G + j] = total;
      inv[j] = 1.0f / total;
      any_live = true;
    }
    if (any_live)
      attn_value_passes<Head, N, NV, 0, 0>(vg, stride, C, Ce, tb, te, rot, scores, inv, live, w.o + b * G * 16 * NV, g * head,
                                           fetch_mode);
  }
}

// attn_heads_blocks' hook (kernels_impl.h): the group when K and V are both T (F16 or Q8_0) and HD
// one of the common sizes.
template <class Ops, GgmlType T>
bool attention_group_dispatch(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t n, int64_t Hkv,
                              int64_t g, int64_t hd, int64_t C, int64_t rot, float scale, const AttnSpan& sp, int64_t b0,
                              int64_t b1, const AttnWork& w, AttnFetch fetch) {
  auto run = [&]<int NV>() {
    switch (n) {
      case 2: attention_group<Ops, T, 2, NV>(q, k, v, mrow, Hkv, g, C, rot, scale, sp, b0, b1, w, fetch); return true;
      case 3: attention_group<Ops, T, 3, NV>(q, k, v, mrow, Hkv, g, C, rot, scale, sp, b0, b1, w, fetch); return true;
      case 4: attention_group<Ops, T, 4, NV>(q, k, v, mrow, Hkv, g, C, rot, scale, sp, b0, b1, w, fetch); return true;
      case 5: attention_group<Ops, T, 5, NV>(q, k, v, mrow, Hkv, g, C, rot, scale, sp, b0, b1, w, fetch); return true;
      case 6: attention_group<Ops, T, 6, NV>(q, k, v, mrow, Hkv, g, C, rot, scale, sp, b0, b1, w, fetch); return true;
      case 7: attention_group<Ops, T, 7, NV>(q, k, v, mrow, Hkv, g, C, rot, scale, sp, b0, b1, w, fetch); return true;
      case 8: attention_group<Ops, T, 8, NV>(q, k, v, mrow, Hkv, g, C, rot, scale, sp, b0, b1, w, fetch); return true;
      default: return false;
    }
  };
  switch (hd) {  // Phi-3's 96, Llama / Qwen's 64 and 128, Gemma 3's 256
    case 64: return run.template operator()<4>();
    case 96: return run.template operator()<6>();
    case 128: return run.template operator()<8>();
    case 256: return run.template operator()<16>();
    default: return false;
  }
}

// ---- A query's groups together ------------------------------------------------------------------
//
// A part of a query's attention split over keys (cpu::attention_part) holds every run of heads; when
// each K/V head's heads are one run of N (2 to 8), attention_groups takes the part's blocks for
// groups [g0, g1) together, tile by tile: a tile's K rows give every group's scores, then its V rows
// every group's value sums, before the next tile. Run by run, the first run read a block's rows from
// memory around its own group's arithmetic only and the others computed from cache with the memory
// idle. Tile by tile, 30,000 keys of Qwen2.5's two groups on two threads from memory (a stand-alone
// copy, 6 alternated pairs, Zen 5) went 681 -> 652 us (F16) and 612 -> 575 us (Q8_0), 1,024 keys
// 29.7 -> 26.3 us. (Reading those bytes alone takes ~380 us, the arithmetic in cache ~420: what is
// left is that the two still overlap poorly; without the fetches ahead it takes 1,200.) The bits are
// attention_group's: each group's scores, numerators and value sums come from the same operations in
// the same order; the value accumulators are held in the block's partial output between tiles,
// which changes no sum.
inline constexpr int64_t kAttnGroupsHeads = 32;  // heads of the groups taken together at most

// Value vectors [D0, D0 + ND) of one group's N heads over keys [t0, t1) of the block (o: the
// block's [N][HD] partial output, read and written back): attn_value_pass's tile, either the vector
// path (vec: a whole tile, every weight nonzero, pn the normalised weights) or key by key.
template <class Head, int N, int NV, int D0>
inline void attn_value_tile(const uint8_t* vg, int64_t stride, int64_t C, int64_t rot, int64_t t0,
                            int64_t t1, int64_t tb, bool vec, const float (&pn)[N][kAttnTile], const float* scores,
                            const float (&inv)[N], const bool (&live)[N], float* o, const uint8_t* fetch_rows) {
  constexpr int HD = 16 * NV;
  constexpr int ND = NV - D0 < 16 / N ? NV - D0 : 16 / N;
  __m512 acc[N][ND];
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j)
#pragma GCC unroll 16
    for (int i = 0; i < ND; ++i) acc[j][i] = _mm512_loadu_ps(o + j * HD + 16 * (D0 + i));
  if (vec) {
    const uint8_t* vt = vg + attn_row(t0, rot, C) * stride;
    for (int64_t tt = 0; tt < kAttnTile; ++tt, vt += stride) {
      // The first pass of the first group fetches whole rows ahead (fetch_rows: tile t0's, or null).
      if (D0 == 0 && fetch_rows) attn_fetch_rows(fetch_rows + tt * stride, stride);
      __m512 vv[ND];
      Head::template widen<D0, ND>(vt, vv);
#pragma GCC unroll 16
      for (int j = 0; j < N; ++j) {
        const __m512 p = _mm512_set1_ps(pn[j][tt]);
#pragma GCC unroll 16
        for (int i = 0; i < ND; ++i) acc[j][i] = _mm512_fmadd_ps(vv[i], p, acc[j][i]);
      }
    }
  } else {
    attn_value_keys<Head, N, D0, ND>(vg, stride, C, rot, t0, t1, tb, scores, inv, live, acc);
  }
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j)
#pragma GCC unroll 16
    for (int i = 0; i < ND; ++i) _mm512_storeu_ps(o + j * HD + 16 * (D0 + i), acc[j][i]);
  if constexpr (D0 + ND < NV)
    attn_value_tile<Head, N, NV, D0 + ND>(vg, stride, C, rot, t0, t1, tb, vec, pn, scores, inv, live, o, fetch_rows);
}

// Groups [g0, g1) of a query's N-head groups (q: [Hkv][N][HD]), blocks [b0, b1) of sp: group g's
// partial states into partials + g * pstride (attn_partials), as attention_group gives them.
template <class Ops, GgmlType T, int N, int NV>
void attention_groups(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t g0, int64_t g1,
                      int64_t Hkv, int64_t C, int64_t rot, float scale, const AttnSpan& sp, int64_t b0, int64_t b1,
                      float* partials, int64_t pstride) {
  using Head = AttnHead<Ops, T, NV>;
  constexpr int64_t head = Head::bytes;
  constexpr int64_t KB = kAttnBlock;
  constexpr int64_t G = kGroupHeads;
  constexpr int HD = 16 * NV;
  constexpr int NG = kAttnGroupsHeads / N;  // groups at most
  constexpr float kNegInf = -__builtin_inff();
  const int64_t ng = g1 - g0, stride = Hkv * head, Ce = sp.end;
  const __m512 neg_inf = _mm512_set1_ps(kNegInf), scale_v = _mm512_set1_ps(scale);
  if (b0 >= b1 || ng <= 0 || ng > NG) return;
  alignas(64) float scores[NG][N * KB];  // group gi's head j, key t at [gi][j * KB + t - tb]
  alignas(64) float mx[NG][N][16];
  alignas(64) float lvl1[N][kAttnTile / 2][16];
  AttnWork w[NG];
  for (int64_t gi = 0; gi < ng; ++gi) w[gi] = attn_partials(nullptr, partials + (g0 + gi) * pstride, C);
  const int64_t ahead = kAttnPrefetchTiles * kAttnTile;  // keys

  attn_fetch_start<Head>(k, stride, C, sp.first + b0 * KB, Ce, rot, AttnFetch::WholeRow);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t tb = sp.first + b * KB, te = tb + KB < Ce ? tb + KB : Ce;
    for (int64_t gi = 0; gi < ng; ++gi)
      for (int j = 0; j < N; ++j) _mm512_store_ps(mx[gi][j], neg_inf);

    // Scores, tile by tile: each group's 16 keys as attention_group takes them.
    for (int64_t t0 = tb; t0 < te; t0 += kAttnTile) {
      const int64_t row0 = attn_row(t0, rot, C);
      if (t0 + kAttnTile <= te && row0 + kAttnTile <= C) {
        const __m512 mv = mrow ? _mm512_loadu_ps(mrow + row0) : _mm512_setzero_ps();
        const __mmask16 masked = _mm512_cmp_ps_mask(mv, neg_inf, _CMP_EQ_OQ);
        if (masked == 0xFFFF) {
          for (int64_t gi = 0; gi < ng; ++gi)
#pragma GCC unroll 16
            for (int j = 0; j < N; ++j) _mm512_storeu_ps(scores[gi] + j * KB + t0 - tb, neg_inf);
          continue;
        }
        if (masked == 0) {
          const bool fetch = row0 + ahead + kAttnTile <= Ce;
          for (int64_t gi = 0; gi < ng; ++gi) {
            const float* qg = q + (g0 + gi) * N * HD;
            const uint8_t* kt = k + row0 * stride + (g0 + gi) * head;
            for (int m = 0; m < kAttnTile / 2; ++m) {
              if (fetch && gi == 0) attn_fetch_rows(k + (row0 + ahead + 2 * m) * stride, 2 * stride);
              __m512 a[N], bv[N];
              attn_key_dots2<Head, N, NV>(qg, kt + 2 * m * stride, kt + (2 * m + 1) * stride, a, bv);
#pragma GCC unroll 16
              for (int j = 0; j < N; ++j)  // i + 8: one key per 256-bit half
                _mm512_store_ps(lvl1[j][m], _mm512_add_ps(_mm512_shuffle_f32x4(a[j], bv[j], 0x44),
                                                          _mm512_shuffle_f32x4(a[j], bv[j], 0xEE)));
            }
#pragma GCC unroll 16
            for (int j = 0; j < N; ++j) {
              const __m512 sc = _mm512_fmadd_ps(scale_v, attn_reduce16(lvl1[j][0]), mv);
              _mm512_storeu_ps(scores[gi] + j * KB + t0 - tb, sc);
              _mm512_store_ps(mx[gi][j], _mm512_max_ps(sc, _mm512_load_ps(mx[gi][j])));
            }
          }
          continue;
        }
      }
      const int64_t t1 = t0 + kAttnTile < te ? t0 + kAttnTile : te;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t row = attn_row(t, rot, C);
        const float mval = mrow ? mrow[row] : 0.0f;
        for (int64_t gi = 0; gi < ng; ++gi) {
          if (mval == kNegInf) {
            for (int j = 0; j < N; ++j) scores[gi][j * KB + t - tb] = kNegInf;
            continue;
          }
          __m512 a[N];
          attn_key_dots<Head, N, NV>(q + (g0 + gi) * N * HD, k + row * stride + (g0 + gi) * head, a);
#pragma GCC unroll 16
          for (int j = 0; j < N; ++j) {
            const float sc = scale * Ops::hsum(a[j]) + mval;
            scores[gi][j * KB + t - tb] = sc;
            _mm512_store_ps(mx[gi][j], _mm512_max_ps(_mm512_set1_ps(sc), _mm512_load_ps(mx[gi][j])));
          }
        }
      }
    }

    // Numerators per group and head (the first V rows come in meanwhile).
    if (b == b0) attn_fetch_start<Head>(v, stride, C, tb, Ce, rot, AttnFetch::WholeRow);
    float inv[NG][N];
    bool live[NG][N], any_live[NG], all_live[NG];
    for (int64_t gi = 0; gi < ng; ++gi) {
      any_live[gi] = false;
      all_live[gi] = true;
      for (int j = 0; j < N; ++j) {
        const float m = _mm512_reduce_max_ps(_mm512_load_ps(mx[gi][j]));
        live[gi][j] = m != kNegInf;
        w[gi].m[b * G + j] = m;
        inv[gi][j] = 0.0f;
        all_live[gi] = all_live[gi] && live[gi][j];
        if (!live[gi][j]) continue;
        const float total = softmax_numerators<Ops>(scores[gi] + j * KB, te - tb, m);
        w[gi].l[b * G + j] = total;
        inv[gi][j] = 1.0f / total;
        any_live[gi] = true;
      }
      if (any_live[gi]) {
        float* o = w[gi].o + b * G * HD;
        for (int64_t i = 0; i < N * HD; i += 16) _mm512_storeu_ps(o + i, _mm512_setzero_ps());
      }
    }

    // Value sums, tile by tile: each group's heads over the tile's V rows.
    for (int64_t t0 = tb; t0 < te; t0 += kAttnTile) {
      const int64_t row0 = attn_row(t0, rot, C), t1 = t0 + kAttnTile < te ? t0 + kAttnTile : te;
      const bool whole = t0 + kAttnTile <= te && row0 + kAttnTile <= C;
      const uint8_t* fetch_rows = whole && row0 + ahead + kAttnTile <= Ce ? v + (row0 + ahead) * stride : nullptr;
      for (int64_t gi = 0; gi < ng; ++gi) {
        if (!any_live[gi]) continue;
        alignas(64) float pn[N][kAttnTile];
        bool vec = false;
        if (all_live[gi] && whole) {
          __mmask16 zero = 0;
#pragma GCC unroll 16
          for (int j = 0; j < N; ++j) {
            const __m512 e = _mm512_loadu_ps(scores[gi] + j * KB + t0 - tb);
            zero |= _mm512_cmp_ps_mask(e, _mm512_setzero_ps(), _CMP_EQ_OQ);
            _mm512_store_ps(pn[j], _mm512_mul_ps(e, _mm512_set1_ps(inv[gi][j])));
          }
          vec = zero == 0;
        }
        attn_value_tile<Head, N, NV, 0>(v + (g0 + gi) * head, stride, C, rot, t0, t1, tb, vec, pn, scores[gi], inv[gi],
                                        live[gi], w[gi].o + b * G * HD, gi == 0 && vec ? fetch_rows : nullptr);
      }
    }
  }
}

// attention_part_impl's hook (kernels_impl.h): a part holding every run of a query whose K/V heads
// each have one run of 2 to 8 heads, K and V both T, HD one of the common sizes; groups taken
// kAttnGroupsHeads heads at a time. False: not a case it takes (nothing was computed).
template <class Ops, GgmlType T>
bool attention_groups_dispatch(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t H,
                               int64_t Hkv, int64_t hd, int64_t C, int64_t rot, float scale, const AttnSpan& sp, int64_t b0,
                               int64_t b1, float* partials, int64_t pstride) {
  const int64_t n = H / Hkv;
  auto run = [&]<int NV>() {
    auto groups = [&]<int N>() {
      constexpr int64_t per = kAttnGroupsHeads / N;
      for (int64_t g0 = 0; g0 < Hkv; g0 += per)
        attention_groups<Ops, T, N, NV>(q, k, v, mrow, g0, g0 + per < Hkv ? g0 + per : Hkv, Hkv, C, rot, scale, sp, b0, b1,
                                        partials, pstride);
      return true;
    };
    switch (n) {
      case 2: return groups.template operator()<2>();
      case 3: return groups.template operator()<3>();
      case 4: return groups.template operator()<4>();
      case 5: return groups.template operator()<5>();
      case 6: return groups.template operator()<6>();
      case 7: return groups.template operator()<7>();
      case 8: return groups.template operator()<8>();
      default: return false;
    }
  };
  if (T == GgmlType::Q8_0 && hd % 32 != 0) return false;
  switch (hd) {
    case 64: return run.template operator()<4>();
    case 96: return run.template operator()<6>();
    case 128: return run.template operator()<8>();
    case 256: return run.template operator()<16>();
    default: return false;
  }
}

}  // namespace
}  // namespace npullm::cpu::detail
