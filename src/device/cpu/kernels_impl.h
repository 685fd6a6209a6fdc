// Internal to the CPU kernels (not for other layers): the loop structure of the hot kernels,
// written once as templates over an `Ops` class of vector primitives, and the table of entry
// points each instruction-set file exports.
//
// Files:  kernels.cpp         baseline x86-64: dispatch, argument checks, the cheap kernels, and
//                             the scalar Ops (W = 1) and integer ops (one row per panel)
//         kernels_avx2.cpp    AVX2 + FMA + F16C Ops (W = 8), integer ops (8 rows per panel)
//         kernels_avx512.cpp  AVX-512 F/BW/VL/DQ Ops (W = 16), VNNI integer ops (16 rows per panel)
//         kernels_amx.cpp     AMX tiles for the prefill matmul with int8 activations; the rest is
//                             the AVX-512 path
//         kernels_int8.h      matmul with int8 activations for the block-quantised types (own
//                             numerics and layout: see there); this file has the F32 paths
//
// Linkage rule. Each ISA file defines its Ops in an anonymous namespace and instantiates the
// templates below with it, and everything in this header is in an anonymous namespace too, so
// every instantiation is private to one file and compiled with that file's flags only. An inline
// function with external linkage compiled in the AVX-512 file could otherwise be chosen by the
// linker for baseline callers as well and crash CPUs without AVX-512. For the same reason the ISA
// files use no standard-library templates and do not include fmt or common/error.h: argument checks
// and errors all live in kernels.cpp, which calls the ISA entry points only with valid arguments.
//
// Summation order (F32 activations; kernels_int8.h has its own). A dot product of length K in a
// path with W lanes keeps one W-lane accumulator:
// element k is added (fused multiply-add, or multiply then add for W = 1) to lane k % W, in
// increasing k, with zeros in the lanes past K; the lanes are then summed by a fixed tree (hsum).
// Every tile shape and every weight type follows this order, so an output never depends on the
// tile it fell in, on the [n0, n1) split, or on M; dequantised values are exact, so fused
// dequantise-and-dot equals dequantise-into-work then dot. Parallelism comes from computing
// several outputs at once (one chain each), not from splitting a chain.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "device/cpu/kernels.h"
#include "formats/ggml_types.h"

namespace npullm::cpu::detail {

// Entry points of one ISA; arguments are already validated by kernels.cpp.
struct IsaKernels {
  const char* name;
  // As cpu::matmul, with row_bytes = ggml_row_bytes(wt, K), or for packed (W in the Panels16
  // layout, only for types with int8 kernels) panels16_stride(wt, K). Types with int8 kernels go to
  // kernels_int8.h; other types than F32, F16, BF16 go through dequantize_row().
  void (*matmul)(const float* x, int64_t M, int64_t K, const void* W, GgmlType wt, size_t row_bytes, bool packed,
                 const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1,
                 float* work, const void* xq);
  // As cpu::prequantize_x.
  void (*quantize_x)(GgmlType wt, const float* x, int64_t M, int64_t K, void* dst, int64_t m0, int64_t m1);
  // As cpu::attention; k_type, v_type are F32, F16 or Q8_0 (then hd is a multiple of 32), H a
  // multiple of Hkv.
  void (*attention)(const float* q, const void* k, GgmlType k_type, const void* v, GgmlType v_type,
                    const float* mask, float* out, int64_t H, int64_t Hkv, int64_t hd, int64_t C,
                    int64_t rot, float scale, int64_t r0, int64_t r1, float* work, const float* sinks);
  // As cpu::attention_part and cpu::attention_merge.
  void (*attention_part)(const AttentionQuery& a, int64_t run0, int64_t run1, int64_t b0, int64_t b1, float* work,
                         float* partials);
  void (*attention_merge)(const AttentionQuery& a, int64_t nb, int64_t run0, int64_t run1, float* partials, float* out,
                          const float* sinks);
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t i0, int64_t i1);
  // dst[i] = fp32_to_fp16(src[i]) for i < n: the K/V scatter's conversion (F16C where the ISA has
  // it: round to nearest even, NaNs kept quiet with their top payload bits, the same bits).
  void (*to_f16)(const float* src, uint8_t* dst, int64_t n);
};

const IsaKernels& scalar_kernels();  // kernels.cpp
const IsaKernels& avx2_kernels();    // kernels_avx2.cpp
const IsaKernels& avx512_kernels();  // kernels_avx512.cpp
const IsaKernels& avx512_vbmi2_kernels();  // kernels_avx512vbmi2.cpp: the same with VBMI2, BITALG (same bits)
const IsaKernels& avx512_vbmi2_nta_kernels();  // kernels_avx512vbmi2_nta.cpp: that, fetching non-temporally
// The AVX-512 build this CPU runs best (kernels.cpp): the VBMI2 one where the CPU has VBMI2 and
// BITALG, its non-temporal-fetch twin on AMD CPUs.
bool cpu_has_vbmi2();
const IsaKernels& avx512_best_kernels();
// kernels_amx.cpp: the AVX-512 kernels with an AMX prefill matmul; null when the compiler could not
// build it. Call only on CPUs that run the AVX-512 path.
const IsaKernels* amx_kernels();

namespace {

// Fully unrolls a loop with a compile-time trip count (tile rows / columns, chunks of a block).
// GCC at -O2 keeps such loops rolled, and then the tile's accumulator arrays live on the stack
// instead of in registers, which costs several times the speed.
#define NPULLM_UNROLL _Pragma("GCC unroll 16")

// Rows of W per decode (M = 1) tile: four independent accumulation chains hide FMA latency.
constexpr int kGemvRows = 4;
// Prefill (M > 1) blocking. kBlockRows rows of W are dequantised into `work` at a time and reused
// for all M rows of x. Within a block the product runs in K slices of kSliceK elements, for
// kChunkM rows of x at a time, so the x rows and weight rows a tile touches stay in L1/L2; each
// output's accumulator vector is parked in `work` between slices (stored and reloaded exactly, so
// the chain, and the result, is the same as one pass over K). Tiles are Ops::TM rows of x by
// Ops::TN rows of W, TM * TN chains in registers.
constexpr int64_t kBlockRows = 16;
constexpr int64_t kSliceK = 256;  // a multiple of every W
constexpr int64_t kChunkM = 32;
constexpr int64_t kMaxLanes = 16;  // the widest W; sizes the accumulator area of `work`
constexpr int64_t kAccFloats = kChunkM * kBlockRows * kMaxLanes;

// The types with vectorised F32 loaders (fused decode path and fast conversion). The block-
// quantised types with int8 kernels (kernels_int8.h) never reach matmul_impl.
constexpr bool has_loader(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// Ops interface (V is the vector type, W its lane count):
//   zero(), set1(f), load(p), load_tail(p, n), store(p, v), store_tail(p, v, n), fma(a, b, c) = a*b+c,
//   add(a, b), sub(a, b), mul(a, b), div(a, b), max(a, b), hsum(v), hmax(v), exp(v)
//   load_w<T>(row, k): W elements of a row of per-element type T (F32, F16, BF16) from element k
//   load_w_tail<T>(row, k, n): n < W of them, the rest zero
//   q8_scale(block): the d (fp16) at the start of a Q8_0 block (d, 32 int8 q), in every lane;
//   load_q8(qs, d): W int8 from qs (within one block: W divides 32) times d. For the Q8_0 K/V
//   cache (attention). The values are float(q) * d, exactly what dequantize_row gives (the
//   product of an 8-bit and an 11-bit significand is exact in float)

// ---- matmul ----------------------------------------------------------------------------------

// dots[r] = x . row_r for R rows of W starting at w0 (stride row_bytes), weights of type T.
template <class Ops, GgmlType T, int R>
inline void gemv_tile(const float* x, int64_t K, const uint8_t* w0, size_t row_bytes, float* dots) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  V acc[R];
  NPULLM_UNROLL
  for (int r = 0; r < R; ++r) acc[r] = Ops::zero();
  int64_t k = 0;
  for (; k + W <= K; k += W) {
    const V xv = Ops::load(x + k);
    NPULLM_UNROLL
    for (int r = 0; r < R; ++r)
      acc[r] = Ops::fma(Ops::template load_w<T>(w0 + r * row_bytes, k), xv, acc[r]);
  }
  if (k < K) {
    const int n = static_cast<int>(K - k);
    const V xv = Ops::load_tail(x + k, n);
    NPULLM_UNROLL
    for (int r = 0; r < R; ++r)
      acc[r] = Ops::fma(Ops::template load_w_tail<T>(w0 + r * row_bytes, k, n), xv, acc[r]);
  }
  NPULLM_UNROLL
  for (int r = 0; r < R; ++r) dots[r] = Ops::hsum(acc[r]);
}

inline float epilogue(float dot, const float* bias, const float* res, int64_t idx, int64_t n) {
  // (dot + bias) + res: res is read before out is written, so res may alias out.
  float v = dot;
  if (bias) v += bias[n];
  if (res) v += res[idx];
  return v;
}

// Decode: one pass over each weight row, kGemvRows rows at a time.
template <class Ops, GgmlType T>
void gemv_range(const float* x, int64_t K, const uint8_t* W, size_t row_bytes, const float* bias,
                const float* res, float* out, int64_t n0, int64_t n1) {
  int64_t n = n0;
  float dots[kGemvRows];
  for (; n + kGemvRows <= n1; n += kGemvRows) {
    gemv_tile<Ops, T, kGemvRows>(x, K, W + n * row_bytes, row_bytes, dots);
    for (int r = 0; r < kGemvRows; ++r) out[n + r] = epilogue(dots[r], bias, res, n + r, n + r);
  }
  for (; n < n1; ++n) {
    gemv_tile<Ops, T, 1>(x, K, W + n * row_bytes, row_bytes, dots);
    out[n] = epilogue(dots[0], bias, res, n, n);
  }
}

// One K slice [k0, k1) of an MT x NT tile: x rows (stride ldx) against float rows of W (stride
// ldw). acc holds the tile's accumulator vectors in memory (W floats each, row stride acc_ld
// vectors); first = start the chains at zero. The slice that reaches K adds the masked tail.
template <class Ops, int MT, int NT>
inline void gemm_tile_slice(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k0, int64_t k1,
                            bool first, float* acc, int64_t acc_ld) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  V a[MT][NT];
  NPULLM_UNROLL
  for (int m = 0; m < MT; ++m)
    NPULLM_UNROLL
    for (int j = 0; j < NT; ++j) a[m][j] = first ? Ops::zero() : Ops::load(acc + (m * acc_ld + j) * W);
  int64_t k = k0;
  for (; k + W <= k1; k += W) {
    V xv[MT];
    NPULLM_UNROLL
    for (int m = 0; m < MT; ++m) xv[m] = Ops::load(x + m * ldx + k);
    NPULLM_UNROLL
    for (int j = 0; j < NT; ++j) {
      const V wv = Ops::load(w + j * ldw + k);
      NPULLM_UNROLL
      for (int m = 0; m < MT; ++m) a[m][j] = Ops::fma(wv, xv[m], a[m][j]);
    }
  }
  if (k < k1) {
    const int n = static_cast<int>(k1 - k);
    V xv[MT];
    NPULLM_UNROLL
    for (int m = 0; m < MT; ++m) xv[m] = Ops::load_tail(x + m * ldx + k, n);
    NPULLM_UNROLL
    for (int j = 0; j < NT; ++j) {
      const V wv = Ops::load_tail(w + j * ldw + k, n);
      NPULLM_UNROLL
      for (int m = 0; m < MT; ++m) a[m][j] = Ops::fma(wv, xv[m], a[m][j]);
    }
  }
  NPULLM_UNROLL
  for (int m = 0; m < MT; ++m)
    NPULLM_UNROLL
    for (int j = 0; j < NT; ++j) Ops::store(acc + (m * acc_ld + j) * W, a[m][j]);
}

// out[m, nb + j] for all m < M and j < nr (nr <= kBlockRows), from nr float rows w (stride ldw).
// acc: kAccFloats floats of scratch.
template <class Ops>
void gemm_block(const float* x, int64_t M, int64_t K, const float* w, int64_t ldw, int64_t nr, int64_t nb,
                const float* bias, const float* res, float* out, int64_t N, float* acc) {
  constexpr int W = Ops::W, TM = Ops::TM, TN = Ops::TN;
  constexpr int64_t acc_ld = kBlockRows;  // accumulator (m, j) is at acc + (m * acc_ld + j) * W
  for (int64_t m0 = 0; m0 < M; m0 += kChunkM) {
    const int64_t mc = (M - m0 < kChunkM) ? M - m0 : kChunkM;
    const float* xc = x + m0 * K;
    for (int64_t k0 = 0; k0 < K; k0 += kSliceK) {
      const int64_t k1 = (K - k0 < kSliceK) ? K : k0 + kSliceK;
      const bool first = k0 == 0;
      int64_t j = 0;
      for (; j + TN <= nr; j += TN) {
        int64_t m = 0;
        for (; m + TM <= mc; m += TM)
          gemm_tile_slice<Ops, TM, TN>(xc + m * K, K, w + j * ldw, ldw, k0, k1, first, acc + (m * acc_ld + j) * W, acc_ld);
        for (; m < mc; ++m)
          gemm_tile_slice<Ops, 1, TN>(xc + m * K, K, w + j * ldw, ldw, k0, k1, first, acc + (m * acc_ld + j) * W, acc_ld);
      }
      for (; j < nr; ++j)
        for (int64_t m = 0; m < mc; ++m)
          gemm_tile_slice<Ops, 1, 1>(xc + m * K, K, w + j * ldw, ldw, k0, k1, first, acc + (m * acc_ld + j) * W, acc_ld);
    }
    if (K == 0) {  // no slice ran: every dot product is an empty sum
      for (int64_t i = 0; i < mc * acc_ld * W; ++i) acc[i] = 0.0f;
    }
    for (int64_t m = 0; m < mc; ++m)
      for (int64_t j = 0; j < nr; ++j) {
        const int64_t idx = (m0 + m) * N + nb + j;
        out[idx] = epilogue(Ops::hsum(Ops::load(acc + (m * acc_ld + j) * W)), bias, res, idx, nb + j);
      }
  }
}

// dst[0, K) = the exact dequantisation of one row (same values as dequantize_row).
template <class Ops, GgmlType T>
void dequant_row(const uint8_t* row, int64_t K, float* dst) {
  constexpr int W = Ops::W;
  int64_t k = 0;
  for (; k + W <= K; k += W) Ops::store(dst + k, Ops::template load_w<T>(row, k));
  if (k < K) {
    const int n = static_cast<int>(K - k);
    Ops::store_tail(dst + k, Ops::template load_w_tail<T>(row, k, n), n);
  }
}

template <class Ops>
void matmul_impl(const float* x, int64_t M, int64_t K, const void* Wv, GgmlType wt, size_t row_bytes,
                 const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1,
                 float* work) {
  const auto* W = static_cast<const uint8_t*>(Wv);
  if (M == 1 && has_loader(wt)) {
    switch (wt) {
      case GgmlType::F32: gemv_range<Ops, GgmlType::F32>(x, K, W, row_bytes, bias, res, out, n0, n1); return;
      case GgmlType::F16: gemv_range<Ops, GgmlType::F16>(x, K, W, row_bytes, bias, res, out, n0, n1); return;
      case GgmlType::BF16: gemv_range<Ops, GgmlType::BF16>(x, K, W, row_bytes, bias, res, out, n0, n1); return;
      default: break;
    }
  }
  // Prefill (or a type without a fused loader): dequantise a block of rows into work once, then
  // run every row of x against it. F32 rows are used in place. work = [accumulators | rows].
  float* acc = work;
  float* rows = work + kAccFloats;
  for (int64_t nb = n0; nb < n1; nb += kBlockRows) {
    const int64_t nr = (n1 - nb < kBlockRows) ? n1 - nb : kBlockRows;
    const uint8_t* src = W + nb * row_bytes;
    if (wt == GgmlType::F32) {
      gemm_block<Ops>(x, M, K, reinterpret_cast<const float*>(src), K, nr, nb, bias, res, out, N, acc);
      continue;
    }
    for (int64_t j = 0; j < nr; ++j) {
      const uint8_t* row = src + j * row_bytes;
      float* dst = rows + j * K;
      switch (wt) {
        case GgmlType::F16: dequant_row<Ops, GgmlType::F16>(row, K, dst); break;
        case GgmlType::BF16: dequant_row<Ops, GgmlType::BF16>(row, K, dst); break;
        default: dequantize_row(wt, row, dst, K); break;  // out-of-line, baseline code
      }
    }
    gemm_block<Ops>(x, M, K, rows, K, nr, nb, bias, res, out, N, acc);
  }
}

// ---- swiglu ----------------------------------------------------------------------------------

template <class Ops>
inline typename Ops::V silu_mul(typename Ops::V g, typename Ops::V u) {
  const auto one = Ops::set1(1.0f);
  // g / (1 + e^-g): for g -> -inf e^-g -> inf and the quotient -> -0; no NaN.
  return Ops::mul(Ops::div(g, Ops::add(one, Ops::exp(Ops::sub(Ops::zero(), g)))), u);
}

template <class Ops>
void swiglu_impl(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
  constexpr int W = Ops::W;
  int64_t i = i0;
  for (; i + W <= i1; i += W)
    Ops::store(out + i, silu_mul<Ops>(Ops::load(gate + i), Ops::load(up + i)));
  if (i < i1) {
    const int n = static_cast<int>(i1 - i);
    Ops::store_tail(out + i, silu_mul<Ops>(Ops::load_tail(gate + i, n), Ops::load_tail(up + i, n)), n);
  }
}

// ---- attention -------------------------------------------------------------------------------

// Bytes of one head (hd elements) of a K/V cache row of type T (F32, F16 or Q8_0).
template <GgmlType T>
constexpr int64_t head_bytes(int64_t hd) {
  if constexpr (T == GgmlType::F32) return hd * 4;
  else if constexpr (T == GgmlType::F16) return hd * 2;
  else return hd / 32 * 34;  // Q8_0: hd is a multiple of 32 (kernels.cpp checks)
}

// x . row for a row of n (a multiple of 32) Q8_0 values, in the order of gemv_tile (element k
// into lane k % W, then hsum), with d widened once per block.
template <class Ops>
inline float dot_q8_0(const float* x, const uint8_t* row, int64_t n) {
  constexpr int W = Ops::W;
  static_assert(32 % W == 0, "a Q8_0 block must hold whole vectors");
  auto acc = Ops::zero();
  for (int64_t b = 0; b < n / 32; ++b, row += 34, x += 32) {
    const auto d = Ops::q8_scale(row);
    NPULLM_UNROLL
    for (int j = 0; j < 32; j += W) acc = Ops::fma(Ops::load_q8(row + 2 + j, d), Ops::load(x + j), acc);
  }
  return Ops::hsum(acc);
}

// y[0, n) += a * v[0, n) with v of type T (F32, F16 or Q8_0).
template <class Ops, GgmlType T>
inline void axpy(float a, const uint8_t* v, float* y, int64_t n) {
  constexpr int W = Ops::W;
  const auto av = Ops::set1(a);
  if constexpr (T == GgmlType::Q8_0) {  // n is whole blocks: d widened once per block
    static_assert(32 % W == 0, "a Q8_0 block must hold whole vectors");
    for (int64_t b = 0; b < n / 32; ++b, v += 34, y += 32) {
      const auto d = Ops::q8_scale(v);
      NPULLM_UNROLL
      for (int j = 0; j < 32; j += W) Ops::store(y + j, Ops::fma(Ops::load_q8(v + 2 + j, d), av, Ops::load(y + j)));
    }
  } else {
    int64_t k = 0;
    for (; k + W <= n; k += W)
      Ops::store(y + k, Ops::fma(Ops::template load_w<T>(v, k), av, Ops::load(y + k)));
    if (k < n) {
      const int t = static_cast<int>(n - k);
      Ops::store_tail(y + k, Ops::fma(Ops::template load_w_tail<T>(v, k, t), av, Ops::load_tail(y + k, t)), t);
    }
  }
}

// Softmax numerators in place: scores[t] = e^(scores[t] - mx) (masked keys give exactly 0);
// returns their sum.
template <class Ops>
inline float softmax_numerators(float* scores, int64_t C, float mx) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  const V mxv = Ops::set1(mx);
  V sum = Ops::zero();
  int64_t t = 0;
  for (; t + W <= C; t += W) {
    const V e = Ops::exp(Ops::sub(Ops::load(scores + t), mxv));
    Ops::store(scores + t, e);
    sum = Ops::add(sum, e);
  }
  if (t < C) {
    const int n = static_cast<int>(C - t);
    // Lanes past C hold exp(0 - max) garbage after the exp; store_tail drops them, and the sum
    // must too, so they are zeroed by loading the result back.
    Ops::store_tail(scores + t, Ops::exp(Ops::sub(Ops::load_tail(scores + t, n), mxv)), n);
    sum = Ops::add(sum, Ops::load_tail(scores + t, n));
  }
  return Ops::hsum(sum);
}

// The cache row of the key visited t-th, keys visited from ring row rot (0 <= t, rot < C).
inline int64_t attn_row(int64_t t, int64_t rot, int64_t C) { return t + rot < C ? t + rot : t + rot - C; }

// ---- streamed attention: keys in blocks, partial softmax states merged in a fixed order ----------
//
// Keys are taken in blocks of kAttnBlock in key order, from the row's first visible key rounded
// down to 16 (attn_first_block_key: block b holds keys [first + b KB, first + (b + 1) KB)). For each
// head and block: m_b, the block's largest score (-inf when it has no visible key); numerators
// e_t = e^(s_t - m_b) and their sum l_b (softmax_numerators' order); o_b = sum_t fma(v_t, e_t * (1 /
// l_b), o_b) over the block's keys in order, a key of weight 0 skipped. attn_merge then gives
// m = the largest m_b (and the sink's logit, if larger), s_b = l_b e^(m_b - m), L = sum_b s_b (+
// e^(sink - m)), out = sum_b o_b (s_b / L), blocks in increasing order. Every path (one head, a
// group of heads, an ISA's own layout) computes each block's (m_b, l_b, o_b) with the same
// operations and merges with attn_merge, so a head's bits do not depend on the path, the chunk, the
// generate variant or the thread that took a block. One block without a sink gives what the
// softmax over the whole row gave before blocks (s_0 = l_0, so its factor l_0 / l_0 is exactly 1).
// Why blocks: a block's scores stay in L1 (8 heads x 256 floats, 8 KiB), where the scores of a whole
// row of a long context (8 heads x 30,000 floats) went to memory and back three times; and blocks
// are the pieces a long context's keys can be split into across threads.
inline constexpr int64_t kAttnBlock = 256;
inline constexpr int kGroupHeads = 8;  // heads taken together at most
inline int64_t attn_blocks(int64_t C) { return (C + kAttnBlock - 1) / kAttnBlock; }

// Where a row's blocks start: its first key the mask lets through (key order), rounded down to a
// multiple of 16 (so a key's vector lane in its block is its key order mod 16, as without blocks);
// C when it sees none. Anchored there rather than at key 0, a window and a ring holding the same
// keys cut them into the same blocks: a sliding-window layer's ring visited from its oldest row (16
// rows before its first visible key at most) and a longer window whose first rows are masked.
inline int64_t attn_first_block_key(const float* mrow, int64_t C, int64_t rot) {
  if (!mrow) return 0;
  for (int64_t t = 0; t < C; ++t)
    if (mrow[attn_row(t, rot, C)] != -__builtin_inff()) return t / 16 * 16;
  return C;
}

// An attention's work buffer: one block's scores for up to kGroupHeads heads, then each (block,
// head)'s partial state. Split over its keys (cpu::attention_part), a run of heads keeps its
// partial states in a region of its own (attn_partials) that every thread writes its blocks to,
// and the scores in the thread's own work buffer.
struct AttnWork {
  float* scores;  // [kGroupHeads][kAttnBlock]
  float* m;       // [blocks][kGroupHeads]: m_b
  float* l;       // [blocks][kGroupHeads]: l_b (attn_merge overwrites it with s_b / L)
  float* o;       // [blocks][kGroupHeads][hd]: o_b
};
inline int64_t attn_partial_floats(int64_t C, int64_t hd) { return attn_blocks(C) * kGroupHeads * (hd + 2); }
inline int64_t attn_work_floats_for(int64_t C, int64_t hd) {
  return C > 0 ? kGroupHeads * kAttnBlock + attn_partial_floats(C, hd) : 0;
}
// scores: the thread's kGroupHeads * kAttnBlock floats; partials: attn_partial_floats(C, hd).
inline AttnWork attn_partials(float* scores, float* partials, int64_t C) {
  const int64_t nb = attn_blocks(C);
  AttnWork w;
  w.scores = scores;
  w.m = partials;
  w.l = w.m + nb * kGroupHeads;
  w.o = w.l + nb * kGroupHeads;
  return w;
}
inline AttnWork attn_work(float* work, int64_t C) { return attn_partials(work, work + kGroupHeads * kAttnBlock, C); }

// What a run of heads fetches ahead of its K/V reads (an ISA's own layout may use it): its own
// head's piece of each row (threads split by heads, each reading its K/V head), the whole row (the
// first run of a query's attention split over keys, whose other runs read the rest of the same
// rows: one run of lines in address order instead of a strided piece per run), or nothing (those
// other runs).
enum class AttnFetch { OwnHead, WholeRow, None };

// The keys one query row visits: blocks of kAttnBlock from `first` (attn_first_block_key), keys
// before `end` only. Without a ring (rot 0), end is past the last key the mask lets through: a
// generate variant larger than the context (a short chat in a large capacity) otherwise walked
// every masked tile, stored its scores, took their e^x and tested each key's weights (TinyLlama at
// depth 32 with C = 1,152: 0.6 ms a token). Their weights are exactly 0 (a masked key's score is
// -inf, never computed), so the sums and the bits are the same, and a block with no key before
// end has no visible key (merged as nothing). With a ring, key order is not row order: end is C.
struct AttnSpan {
  int64_t first;
  int64_t end;
  int64_t blocks;
};
inline AttnSpan attn_span(const float* mrow, int64_t C, int64_t rot) {
  constexpr float kNegInf = -__builtin_inff();
  int64_t end = C;
  if (mrow && rot == 0) {
    while (end >= 16) {  // 16 at a time (a vector compare), then one by one
      int masked = 0;
      for (int i = 1; i <= 16; ++i) masked += mrow[end - i] == kNegInf;
      if (masked < 16) break;
      end -= 16;
    }
    while (end > 0 && mrow[end - 1] == kNegInf) --end;
  }
  const int64_t first = attn_first_block_key(mrow, end, rot);  // (end is C with a ring)
  return {first, end, attn_blocks(end - first)};
}

// Head j's output (hd floats) from its blocks' partial states; sink: its logit, or null. A head
// with no visible key gives zeros.
template <class Ops>
void attn_merge(const AttnWork& w, int64_t nb, int64_t j, int64_t hd, const float* sink, float* out) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  constexpr int64_t G = kGroupHeads;
  constexpr float kNegInf = -__builtin_inff();
  float m = kNegInf;
  for (int64_t b = 0; b < nb; ++b) m = w.m[b * G + j] > m ? w.m[b * G + j] : m;
  if (m == kNegInf) {
    for (int64_t i = 0; i < hd; ++i) out[i] = 0.0f;
    return;
  }
  if (sink && *sink > m) m = *sink;
  float L = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    if (w.m[b * G + j] == kNegInf) continue;
    w.l[b * G + j] = w.l[b * G + j] * std::exp(w.m[b * G + j] - m);  // s_b
    L += w.l[b * G + j];
  }
  if (sink) L += std::exp(*sink - m);
  for (int64_t b = 0; b < nb; ++b)  // each block's factor
    if (w.m[b * G + j] != kNegInf) w.l[b * G + j] /= L;
  for (int64_t i = 0; i < hd; i += W) {
    const int n = static_cast<int>(hd - i < W ? hd - i : W);
    V acc = Ops::zero();
    for (int64_t b = 0; b < nb; ++b) {
      if (w.m[b * G + j] == kNegInf) continue;
      const V f = Ops::set1(w.l[b * G + j]);
      const float* o = w.o + (b * G + j) * hd + i;
      acc = Ops::fma(n == W ? Ops::load(o) : Ops::load_tail(o, n), f, acc);
    }
    if (n == W) Ops::store(out + i, acc);
    else Ops::store_tail(out + i, acc, n);
  }
}

// One query head (qr: hd floats) of K/V head g: the partial states of blocks [b0, b1) of sp into
// w (head slot 0), keys visited from ring row `rot`.
template <class Ops, GgmlType KT, GgmlType VT>
void attn_head_blocks(const float* qr, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t Hkv, int64_t g,
                      int64_t hd, int64_t C, int64_t rot, float scale, const AttnSpan& sp, int64_t b0, int64_t b1,
                      const AttnWork& w) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  constexpr int64_t G = kGroupHeads;
  constexpr float kNegInf = -__builtin_inff();
  const int64_t k_head = head_bytes<KT>(hd), v_head = head_bytes<VT>(hd);
  float* scores = w.scores;  // the block's, key t at t - t0
  const size_t key_stride = static_cast<size_t>(Hkv * k_head);

  for (int64_t b = b0; b < b1; ++b) {
    const int64_t t0 = sp.first + b * kAttnBlock, t1 = t0 + kAttnBlock < sp.end ? t0 + kAttnBlock : sp.end;
    // Scores; keys masked with -inf are not even read (causal masks skip half the cache). Key t
    // (in the order the sums below visit keys) is row (rot + t) mod C of the window, and the mask
    // is indexed by row: a ring of K/V rows is visited from its oldest needed row on.
    float mx = kNegInf;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t row = attn_row(t, rot, C);
      if constexpr (KT != GgmlType::Q8_0) {
        // Four visible keys in a row: one gemv_tile of 4 rows interleaves their dot products (each
        // row's arithmetic is that of a tile of 1, so the same bits) instead of waiting for each
        // key's horizontal sum in turn, which is what made long contexts slow.
        constexpr int kKeys = 4;
        if (t + kKeys <= t1 && row + kKeys <= C) {
          float mv[kKeys];
          bool all = true;
          NPULLM_UNROLL
          for (int j = 0; j < kKeys; ++j) {
            mv[j] = mrow ? mrow[row + j] : 0.0f;
            all = all && mv[j] != kNegInf;
          }
          if (all) {
            float dots[kKeys];
            gemv_tile<Ops, KT, kKeys>(qr, hd, k + (row * Hkv + g) * k_head, key_stride, dots);
            NPULLM_UNROLL
            for (int j = 0; j < kKeys; ++j) {
              const float sc = scale * dots[j] + mv[j];
              scores[t - t0 + j] = sc;
              mx = sc > mx ? sc : mx;
            }
            t += kKeys - 1;
            continue;
          }
        }
      }
      const float mval = mrow ? mrow[row] : 0.0f;
      if (mval == kNegInf) {
        scores[t - t0] = kNegInf;
        continue;
      }
      float dot;
      if constexpr (KT == GgmlType::Q8_0) dot = dot_q8_0<Ops>(qr, k + (row * Hkv + g) * k_head, hd);
      else gemv_tile<Ops, KT, 1>(qr, hd, k + (row * Hkv + g) * k_head, 0, &dot);
      const float sc = scale * dot + mval;
      scores[t - t0] = sc;
      mx = sc > mx ? sc : mx;
    }
    w.m[b * G] = mx;
    if (mx == kNegInf) continue;  // no visible key in the block
    const float total = softmax_numerators<Ops>(scores, t1 - t0, mx);
    w.l[b * G] = total;

    // o_b = sum_t p_t v_t with p_t = e_t / l_b (normalised per key so the magnitude of the
    // accumulator stays that of v), o[i] = fma(v_t[i], p_t, o[i]) for t ascending. The head's
    // output is kept in registers across keys, up to 8 vectors at a time: through memory (an axpy
    // per key) every key waited for the previous key's store to be loaded back. Same operations in
    // the same order as that axpy, so the same bits.
    float* o = w.o + b * G * hd;
    const float inv = 1.0f / total;
    constexpr int kVecs = 8;
    for (int64_t k0 = 0; k0 < hd; k0 += kVecs * W) {
      const int64_t kn = hd - k0 < kVecs * W ? hd - k0 : kVecs * W;  // elements in this slice
      const int full = static_cast<int>(kn / W), tail = static_cast<int>(kn % W);
      // Vector i of the slice: whole (i < full) or the masked tail (i == full); never indexed by a
      // run-time value, so the accumulators stay in registers.
      V acc[kVecs];
      NPULLM_UNROLL
      for (int i = 0; i < kVecs; ++i) acc[i] = Ops::zero();
      for (int64_t t = t0; t < t1; ++t) {
        const float p = scores[t - t0];
        if (p == 0.0f) continue;
        const V av = Ops::set1(p * inv);
        const int64_t row = attn_row(t, rot, C);
        const uint8_t* vr = v + (row * Hkv + g) * v_head;
        NPULLM_UNROLL
        for (int i = 0; i < kVecs; ++i) {
          const int64_t e = k0 + i * W;
          if constexpr (VT == GgmlType::Q8_0) {  // e stays inside whole blocks of 32 (no tails)
            if (i < full) acc[i] = Ops::fma(Ops::load_q8(vr + e / 32 * 34 + 2 + e % 32, Ops::q8_scale(vr + e / 32 * 34)), av, acc[i]);
          } else {
            if (i < full) acc[i] = Ops::fma(Ops::template load_w<VT>(vr, e), av, acc[i]);
            else if (i == full && tail) acc[i] = Ops::fma(Ops::template load_w_tail<VT>(vr, e, tail), av, acc[i]);
          }
        }
      }
      NPULLM_UNROLL
      for (int i = 0; i < kVecs; ++i) {
        if (i < full) Ops::store(o + k0 + i * W, acc[i]);
        else if (i == full && tail) Ops::store_tail(o + k0 + i * W, acc[i], tail);
      }
    }
  }
}

// Heads that share a K/V head and one query, taken together (grouped-query attention): each key
// and value row is read and widened once for all of them instead of once per head, and the
// heads' dot products and value sums are independent chains that overlap, where one head alone
// waits on each fma's latency. Every head's arithmetic is attention_one_row's, operation for
// operation (the same blocks, the same dot product order, the same max, exp and sum, the same fma
// per key in key order, a key whose weight is 0 skipped, the same merge), so the same bits.
inline constexpr int64_t kPrefetchKeys = 8;  // how far ahead of the key in use its K and V rows are fetched

// The n heads of q ([n, hd]) of K/V head g: blocks [b0, b1) of sp into w (head slots 0 .. n - 1).
template <class Ops, GgmlType KT, GgmlType VT>
void attn_heads_blocks(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t n, int64_t Hkv,
                       int64_t g, int64_t hd, int64_t C, int64_t rot, float scale, const AttnSpan& sp, int64_t b0,
                       int64_t b1, const AttnWork& w, AttnFetch fetch) {
  using V = typename Ops::V;
  constexpr int W = Ops::W;
  constexpr int G = kGroupHeads;
  constexpr int64_t KB = kAttnBlock;
  constexpr float kNegInf = -__builtin_inff();
  // An ISA may lay the common cases (K and V of one type) out its own way, with the same bits:
  // kernels_avx512_attention.h.
  if constexpr (KT == VT && requires { &Ops::template attention_group<KT>; })
    if (Ops::template attention_group<KT>(q, k, v, mrow, n, Hkv, g, hd, C, rot, scale, sp, b0, b1, w, fetch)) return;
  const int64_t k_head = head_bytes<KT>(hd), v_head = head_bytes<VT>(hd);
  float* scores = w.scores;  // head j's score of key t at j * KB + t - t0

  for (int64_t b = b0; b < b1; ++b) {
    const int64_t t0 = sp.first + b * KB, t1 = t0 + KB < sp.end ? t0 + KB : sp.end;
    float mx[G];
    for (int j = 0; j < G; ++j) mx[j] = kNegInf;

    // Scores: per key, the dot product with each head's query (gemv_tile's / dot_q8_0's order).
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t row = attn_row(t, rot, C);
      const float mval = mrow ? mrow[row] : 0.0f;
      if (mval == kNegInf) {
        for (int64_t j = 0; j < n; ++j) scores[j * KB + t - t0] = kNegInf;
        continue;
      }
      const uint8_t* kr = k + (row * Hkv + g) * k_head;
      // The K/V rows are [rows, Hkv, hd]: this group's head is a short piece of each row, a stride
      // the hardware prefetchers follow poorly from memory; fetch it a few keys ahead.
      if (row + kPrefetchKeys < C)
        for (int64_t l = 0; l < k_head; l += 64) __builtin_prefetch(kr + kPrefetchKeys * Hkv * k_head + l, 0, 3);
      V acc[G];
      NPULLM_UNROLL
      for (int j = 0; j < G; ++j) acc[j] = Ops::zero();
      if constexpr (KT == GgmlType::Q8_0) {
        for (int64_t bb = 0; bb < hd / 32; ++bb) {
          const auto d = Ops::q8_scale(kr + bb * 34);
          NPULLM_UNROLL
          for (int e = 0; e < 32; e += W) {
            const V kv = Ops::load_q8(kr + bb * 34 + 2 + e, d);
            NPULLM_UNROLL
            for (int j = 0; j < G; ++j)
              if (j < n) acc[j] = Ops::fma(kv, Ops::load(q + j * hd + bb * 32 + e), acc[j]);
          }
        }
      } else {
        int64_t e = 0;
        for (; e + W <= hd; e += W) {
          const V kv = Ops::template load_w<KT>(kr, e);
          NPULLM_UNROLL
          for (int j = 0; j < G; ++j)
            if (j < n) acc[j] = Ops::fma(kv, Ops::load(q + j * hd + e), acc[j]);
        }
        if (e < hd) {
          const int tail = static_cast<int>(hd - e);
          const V kv = Ops::template load_w_tail<KT>(kr, e, tail);
          NPULLM_UNROLL
          for (int j = 0; j < G; ++j)
            if (j < n) acc[j] = Ops::fma(kv, Ops::load_tail(q + j * hd + e, tail), acc[j]);
        }
      }
      NPULLM_UNROLL
      for (int j = 0; j < G; ++j)
        if (j < n) {
          const float sc = scale * Ops::hsum(acc[j]) + mval;
          scores[j * KB + t - t0] = sc;
          mx[j] = sc > mx[j] ? sc : mx[j];
        }
    }

    // Softmax numerators and their sums, head by head.
    float inv[G];
    bool live[G];  // heads with a visible key in the block
    bool any_live = false;
    for (int j = 0; j < G; ++j) {
      live[j] = j < n && mx[j] != kNegInf;
      any_live = any_live || live[j];
      inv[j] = 0.0f;
      if (j >= n) continue;
      w.m[b * G + j] = mx[j];
      if (!live[j]) continue;
      const float total = softmax_numerators<Ops>(scores + j * KB, t1 - t0, mx[j]);
      w.l[b * G + j] = total;
      inv[j] = 1.0f / total;
    }
    if (!any_live) continue;

    // o_b of each head = sum_t p_jt v_t, in slices of kVecs vectors, kHeads heads at a time, each
    // head's accumulators in registers across the block's keys.
    constexpr int kVecs = W >= 8 ? 4 : 8;
    constexpr int kHeads = W >= 16 ? 4 : 2;
    for (int64_t j0 = 0; j0 < n; j0 += kHeads) {
      const int nh = static_cast<int>(n - j0 < kHeads ? n - j0 : kHeads);
      for (int64_t k0 = 0; k0 < hd; k0 += kVecs * W) {
        const int64_t kn = hd - k0 < kVecs * W ? hd - k0 : kVecs * W;
        const int full = static_cast<int>(kn / W), tail = static_cast<int>(kn % W);
        V acc[kHeads][kVecs];
        NPULLM_UNROLL
        for (int j = 0; j < kHeads; ++j)
          NPULLM_UNROLL
          for (int i = 0; i < kVecs; ++i) acc[j][i] = Ops::zero();
        for (int64_t t = t0; t < t1; ++t) {
          float p[kHeads];
          bool any = false;
          NPULLM_UNROLL
          for (int j = 0; j < kHeads; ++j) {
            p[j] = j < nh && live[j0 + j] ? scores[(j0 + j) * KB + t - t0] : 0.0f;
            any = any || p[j] != 0.0f;
          }
          if (!any) continue;
          const int64_t row = attn_row(t, rot, C);
          const uint8_t* vr = v + (row * Hkv + g) * v_head;
          if (k0 == 0 && row + kPrefetchKeys < C)
            for (int64_t l = 0; l < v_head; l += 64) __builtin_prefetch(vr + kPrefetchKeys * Hkv * v_head + l, 0, 3);
          V vv[kVecs]{};  // (the vectors past the head are never read; zeroed so the compiler can tell)
          NPULLM_UNROLL
          for (int i = 0; i < kVecs; ++i) {
            const int64_t e = k0 + i * W;
            if constexpr (VT == GgmlType::Q8_0) {  // e stays inside whole blocks of 32 (no tails)
              if (i < full) vv[i] = Ops::load_q8(vr + e / 32 * 34 + 2 + e % 32, Ops::q8_scale(vr + e / 32 * 34));
            } else {
              if (i < full) vv[i] = Ops::template load_w<VT>(vr, e);
              else if (i == full && tail) vv[i] = Ops::template load_w_tail<VT>(vr, e, tail);
            }
          }
          NPULLM_UNROLL
          for (int j = 0; j < kHeads; ++j) {
            if (p[j] == 0.0f) continue;  // as attention_one_row: a key of weight 0 adds nothing
            const V av = Ops::set1(p[j] * inv[j0 + j]);
            NPULLM_UNROLL
            for (int i = 0; i < kVecs; ++i)
              if (i < full || (i == full && tail)) acc[j][i] = Ops::fma(vv[i], av, acc[j][i]);
          }
        }
        NPULLM_UNROLL
        for (int j = 0; j < kHeads; ++j) {
          if (j >= nh || !live[j0 + j]) continue;
          float* o = w.o + (b * G + j0 + j) * hd;
          NPULLM_UNROLL
          for (int i = 0; i < kVecs; ++i) {
            if (i < full) Ops::store(o + k0 + i * W, acc[j][i]);
            else if (i == full && tail) Ops::store_tail(o + k0 + i * W, acc[j][i], tail);
          }
        }
      }
    }
  }
}

// A run of n heads of one query that share K/V head g (q: [n, hd]): blocks [b0, b1) into w.
// Two or more heads go through attn_heads_blocks, a lone head through attn_head_blocks.
template <class Ops, GgmlType KT, GgmlType VT>
void attn_run_blocks(const float* q, const uint8_t* k, const uint8_t* v, const float* mrow, int64_t n, int64_t Hkv,
                     int64_t g, int64_t hd, int64_t C, int64_t rot, float scale, const AttnSpan& sp, int64_t b0, int64_t b1,
                     const AttnWork& w, AttnFetch fetch = AttnFetch::OwnHead) {
  if (n >= 2) attn_heads_blocks<Ops, KT, VT>(q, k, v, mrow, n, Hkv, g, hd, C, rot, scale, sp, b0, b1, w, fetch);
  else attn_head_blocks<Ops, KT, VT>(q, k, v, mrow, Hkv, g, hd, C, rot, scale, sp, b0, b1, w);
}

// The run's heads' outputs (out: [n, hd]) from its nb blocks' partial states; sinks: the run's
// first head's logit, or null. A sink joins the max and the sum, as a key whose value is zero.
template <class Ops>
void attn_merge_run(const AttnWork& w, int64_t nb, int64_t n, int64_t hd, const float* sinks, float* out) {
  for (int64_t j = 0; j < n; ++j) attn_merge<Ops>(w, nb, j, hd, sinks ? sinks + j : nullptr, out + j * hd);
}

// Rows [r0, r1) of (query, head) pairs, run by run: up to kGroupHeads heads of one query that
// share a K/V head, all their blocks on this thread.
template <class Ops, GgmlType KT, GgmlType VT>
void attention_rows(const float* q, const uint8_t* k, const uint8_t* v, const float* mask, float* out,
                    int64_t H, int64_t Hkv, int64_t hd, int64_t C, int64_t rot, float scale, int64_t r0, int64_t r1,
                    float* work, const float* sinks) {
  const int64_t group = H / Hkv;
  const AttnWork w = attn_work(work, C);
  for (int64_t r = r0; r < r1;) {
    const int64_t s = r / H, h = r % H, g = h / group;
    const int64_t run_end = std::min(r1, s * H + (g + 1) * group);
    const int64_t n = std::min<int64_t>(run_end - r, kGroupHeads);
    const float* mrow = mask ? mask + s * C : nullptr;
    const AttnSpan sp = attn_span(mrow, C, rot);
    attn_run_blocks<Ops, KT, VT>(q + r * hd, k, v, mrow, n, Hkv, g, hd, C, rot, scale, sp, 0, sp.blocks, w);
    attn_merge_run<Ops>(w, sp.blocks, n, hd, sinks ? sinks + h : nullptr, out + r * hd);
    r += n;
  }
}

// Runs of heads as one query's split attention numbers them (cpu::attention_part): K/V head g's
// heads in runs of up to kGroupHeads, in head order.
struct AttnRun {
  int64_t h0;  // first head
  int64_t n;   // heads
  int64_t g;   // their K/V head
};
inline int64_t attn_runs_per_group(int64_t group) { return (group + kGroupHeads - 1) / kGroupHeads; }
inline AttnRun attn_run(int64_t i, int64_t H, int64_t Hkv) {
  const int64_t group = H / Hkv, per = attn_runs_per_group(group);
  const int64_t g = i / per, j = i % per;
  return {g * group + j * kGroupHeads, std::min<int64_t>(kGroupHeads, group - j * kGroupHeads), g};
}

// f.template operator()<KT, VT>() for the K/V types (F32, F16 or Q8_0; others read as F32).
template <GgmlType KT, class F>
void attn_with_v_type(GgmlType v_type, F&& f) {
  switch (v_type) {
    case GgmlType::F16: f.template operator()<KT, GgmlType::F16>(); return;
    case GgmlType::Q8_0: f.template operator()<KT, GgmlType::Q8_0>(); return;
    default: f.template operator()<KT, GgmlType::F32>(); return;
  }
}
template <class F>
void attn_with_kv_types(GgmlType k_type, GgmlType v_type, F&& f) {
  switch (k_type) {
    case GgmlType::F16: attn_with_v_type<GgmlType::F16>(v_type, f); return;
    case GgmlType::Q8_0: attn_with_v_type<GgmlType::Q8_0>(v_type, f); return;
    default: attn_with_v_type<GgmlType::F32>(v_type, f); return;
  }
}

template <class Ops>
void attention_impl(const float* q, const void* k, GgmlType k_type, const void* v, GgmlType v_type,
                    const float* mask, float* out, int64_t H, int64_t Hkv, int64_t hd, int64_t C,
                    int64_t rot, float scale, int64_t r0, int64_t r1, float* work, const float* sinks) {
  const auto* kb = static_cast<const uint8_t*>(k);
  const auto* vb = static_cast<const uint8_t*>(v);
  attn_with_kv_types(k_type, v_type, [&]<GgmlType KT, GgmlType VT>() {
    attention_rows<Ops, KT, VT>(q, kb, vb, mask, out, H, Hkv, hd, C, rot, scale, r0, r1, work, sinks);
  });
}

// As cpu::attention_part: block by block, each block for runs [run0, run1) in turn (the runs of
// a block read the same K/V rows, each its own K/V head's piece of them).
template <class Ops>
void attention_part_impl(const AttentionQuery& a, int64_t run0, int64_t run1, int64_t b0, int64_t b1, float* work,
                         float* partials) {
  const AttnSpan sp = attn_span(a.mrow, a.C, a.rot);
  const int64_t stride = attn_partial_floats(a.C, a.hd);
  const auto* kb = static_cast<const uint8_t*>(a.k);
  const auto* vb = static_cast<const uint8_t*>(a.v);
  if (b1 > sp.blocks) b1 = sp.blocks;
  // A part of every run reads whole K/V rows: its first run fetches them, the others nothing.
  const bool whole_rows = run0 == 0 && run1 == a.Hkv * attn_runs_per_group(a.H / a.Hkv);
  attn_with_kv_types(a.k_type, a.v_type, [&]<GgmlType KT, GgmlType VT>() {
    // An ISA may take every group of the part together, tile by tile, with the same bits
    // (kernels_avx512_attention.h: attention_groups).
    if constexpr (KT == VT && requires { &Ops::template attention_groups<KT>; })
      if (whole_rows && Ops::template attention_groups<KT>(a.q, kb, vb, a.mrow, a.H, a.Hkv, a.hd, a.C, a.rot, a.scale, sp,
                                                           b0, b1, partials, stride))
        return;
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t i = run0; i < run1; ++i) {
        const AttnRun r = attn_run(i, a.H, a.Hkv);
        const AttnFetch fetch = !whole_rows ? AttnFetch::OwnHead : i == run0 ? AttnFetch::WholeRow : AttnFetch::None;
        attn_run_blocks<Ops, KT, VT>(a.q + r.h0 * a.hd, kb, vb, a.mrow, r.n, a.Hkv, r.g, a.hd, a.C, a.rot, a.scale, sp, b, b + 1,
                                     attn_partials(work, partials + i * stride, a.C), fetch);
      }
  });
}

// As cpu::attention_merge.
template <class Ops>
void attention_merge_impl(const AttentionQuery& a, int64_t nb, int64_t run0, int64_t run1, float* partials, float* out,
                          const float* sinks) {
  const int64_t stride = attn_partial_floats(a.C, a.hd);
  for (int64_t i = run0; i < run1; ++i) {
    const AttnRun r = attn_run(i, a.H, a.Hkv);
    attn_merge_run<Ops>(attn_partials(nullptr, partials + i * stride, a.C), nb, r.n, a.hd, sinks ? sinks + r.h0 : nullptr,
                        out + r.h0 * a.hd);
  }
}

#undef NPULLM_UNROLL

}  // namespace
}  // namespace npullm::cpu::detail
