// CPU kernels. Each computes the slice [begin, end) of its parallel dimension so the worker pool
// can split one task across threads; results never depend on how the range is split (every output
// element is computed by the same sequence of operations whatever the thread count).
//
// `work` is per-thread scratch owned by the device, at least kernel_work_floats(...) floats.
// Implementations pick the fastest code path the running CPU supports (checked at run time).
#pragma once
#include <cstdint>

#include "formats/ggml_types.h"
#include "formats/weight_layout.h"

namespace npullm::cpu {

// out[s, :] = dequant(table[ids[s], :]) for s in [s0, s1); ids outside [0, V) give zeros. The
// table is in `layout` (Panels16 where panels16_possible: its rows are gathered first).
void embed_rows(GgmlType table_type, const void* table, int64_t V, int64_t D, const int32_t* ids,
                float* out, int64_t s0, int64_t s1, WeightLayout layout = WeightLayout::Rows);

// out[i, :] = x[idx[i], :] for i in [i0, i1); x has S rows of R floats; an index outside [0, S)
// gives a zero row.
void gather_rows(const float* x, int64_t S, int64_t R, const int32_t* idx, float* out, int64_t i0, int64_t i1);

// out[s, :] = x[s, :] * w / sqrt(mean(x[s, :]^2) + eps) (+ res[s, :]) for rows s in [s0, s1). out
// may alias x (or res). With res, each element is the normalised value rounded to float plus the
// residual: the bits of the norm followed by add().
void rmsnorm_rows(const float* x, const float* w, float* out, int64_t D, float eps, int64_t s0, int64_t s1,
                  const float* res = nullptr);

// out[m, n] = sum_k x[m, k] * W[n, k] + bias[n] + res[m, n], for all m < M and n in [n0, n1).
// W is N rows of K elements of type wt (row stride ggml_row_bytes(wt, K)). bias/res may be null;
// res may alias out. Supported wt: every type dequantize_row() supports; others throw
// npullm::Error. How the dot products are computed depends on wt (matmul_activations):
//  - F32 activations (F32, F16, BF16, Q2_K, Q3_K, IQ4_NL, IQ4_XS): out[m, n] is the float dot
//    product of x[m, :] with the exactly dequantised row n, accumulated in one fixed order per
//    code path.
//  - int8 activations (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4: Q8_0-style blocks of 32; Q4_K, Q5_K, Q6_K:
//    Q8_K-style blocks of 256), as llama.cpp does on the CPU: each row of x is quantised to int8
//    per block, the dot product of each weight block is an exact integer, and the blocks' scaled
//    sums are accumulated in one float chain per output. The exact rules are in kernels_int8.h;
//    every code path (scalar, avx2, avx512, amx) gives the same bits.
// Either way M = 1 (decode) and M > 1 (prefill) agree bit for bit, and so does any [n0, n1) split.
// work: matmul_work_floats(K) floats; may be null only when M == 1 and wt is F32, F16 or BF16
// (decode streams the weights without scratch).
// xq: null, or x already quantised by prequantize_x for this wt (the device quantises a stage's
// activations once, or once per thread for decode, instead of once per output chunk); the results
// are the same bits.
// layout: how W is stored (formats/weight_layout.h); Panels16 only where matmul_reads_panels16,
// and then n0 must be a multiple of 16 (a range starts at a panel). Both layouts give the same bits.
void matmul(const float* x, int64_t M, int64_t K, const void* W, GgmlType wt, const float* bias,
            const float* res, float* out, int64_t N, int64_t n0, int64_t n1, float* work,
            const void* xq = nullptr, WeightLayout layout = WeightLayout::Rows);

// Whether matmul reads a K-column weight of type wt in the Panels16 layout: the types with int8
// activations (their kernels read 16 rows side by side), whole blocks, on every code path.
bool matmul_reads_panels16(GgmlType wt, int64_t K);

// Bytes prequantize_x needs for an [M, K] x and weights of type wt; 0 for weights without int8
// activations (matmul then takes x as floats).
int64_t prequantized_x_bytes(GgmlType wt, int64_t M, int64_t K);
// Quantises rows [m0, m1) of x for weights of type wt into dst (prequantized_x_bytes, 64-byte aligned).
void prequantize_x(GgmlType wt, const float* x, int64_t M, int64_t K, void* dst, int64_t m0, int64_t m1);

// out[i] = a[i] + b[i] for i in [i0, i1).
void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1);

// out[i] = silu(gate[i]) * up[i] for i in [i0, i1); silu(x) = x / (1 + exp(-x)). out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t i0, int64_t i1);

// Rotary embedding in place on x viewed as [S, H, hd]; r in [r0, r1) indexes (s, h) = (r / H, r % H).
// theta_i = pos[s] * freq_scale * base^(-2i / n_rot) / freq_factors[i] for pair i < n_rot / 2
// (freq_factors may be null: all 1; Llama 3.1 stores them as rope_freqs.weight).
// mode 0: pairs (2i, 2i+1) (llama "normal"); mode 2: pairs (i, i + n_rot/2) (NeoX). Dims >= n_rot
// are left as they are, and so are rows whose pos[s] is 0.
// x_type is F32, or F16 / Q8_0 for a K/V state rotated in place (the context-shift re-rotation):
// each head row (hd elements; a multiple of 32 for Q8_0) is converted to F32, rotated, and
// converted back (F16: rounded to nearest even; Q8_0: requantised as scatter_rows does).
void rope(void* x, GgmlType x_type, const int32_t* pos, int64_t H, int64_t hd, int64_t n_rot, float freq_base,
          float freq_scale, const float* freq_factors, int mode, int64_t r0, int64_t r1);
inline void rope(float* x, const int32_t* pos, int64_t H, int64_t hd, int64_t n_rot, float freq_base,
                 float freq_scale, const float* freq_factors, int mode, int64_t r0, int64_t r1) {
  rope(x, GgmlType::F32, pos, H, hd, n_rot, freq_base, freq_scale, freq_factors, mode, r0, r1);
}

// dst[idx[s], :] = src[s, :] (converted to dst_type) for s in [s0, s1) with 0 <= idx[s] < C; other
// rows are skipped. R is the row length in elements (src rows and dst rows alike), C the number of
// dst rows. dst_type: F32 (copied), F16 (rounded to nearest even) or Q8_0 (R a multiple of 32;
// quantised as ggml's reference does: per block of 32, d = amax / 127 stored as fp16,
// q = round(x / d); a dst row is ggml_row_bytes(Q8_0, R) bytes).
void scatter_rows(const float* src, const int32_t* idx, void* dst, GgmlType dst_type, int64_t R,
                  int64_t C, int64_t s0, int64_t s1);

// Small elementwise and copy kernels of the newer model families (qwen3, gemma3, phi3), over
// elements / rows [i0, i1): plain loops, a small share of a token's time next to the matmuls.
void slice_cols(const float* x, int64_t R, float* out, int64_t W, int64_t off, int64_t s0, int64_t s1);
void scale(const float* x, float c, float* out, int64_t i0, int64_t i1);
void softcap(const float* x, float c, float* out, int64_t i0, int64_t i1);  // c * tanh(x / c)
void geglu(const float* gate, const float* up, float* out, int64_t i0, int64_t i1);  // gelu_tanh(gate) * up

// Grouped-query attention over a cache of C rows; r in [r0, r1) indexes (s, h) = (r / H, r % H).
// out[s,h,:] = sum_t p[t] v[t,g,:], p = softmax_t(scale * q[s,h,:].k[t,g,:] + mask[s,t]),
// g = h / (H / Hkv). k, v are [C, Hkv, hd] of type F32, F16 or Q8_0 (hd a multiple of 32; each
// head is hd / 32 blocks), read and widened to F32 in registers (no copy). A fully masked row gives
// zeros. work: attention_work_floats(C, hd) floats. rot: the window is a ring whose keys are visited (summed) in the
// order rows rot, rot + 1, ..., C - 1, 0, ..., rot - 1 (0: in row order); mask[s, row] is by row.
// With rot and C multiples of 16, a key's SIMD lane is its row mod 16 either way, so a ring visited
// from its oldest row gives the same bits as the same keys in row order of a longer window.
// sinks: null, or a logit per head h (gpt-oss's attention sinks) that joins the softmax as a key
// with no value: p_t = e^(s_t - m) / (sum_t e^(s_t - m) + e^(sinks[h] - m)), m the largest of all.
void attention(const float* q, const void* k, GgmlType k_type, const void* v, GgmlType v_type,
               const float* mask, float* out, int64_t H, int64_t Hkv, int64_t hd, int64_t C,
               int64_t rot, float scale, int64_t r0, int64_t r1, float* work, const float* sinks = nullptr);

// ---- one query's attention split over its keys (issue 48) ----------------------------------------
// attention() for one query row s, cut into pieces that threads can share when a long context's
// keys outweigh its heads (decode): the keys are taken in blocks of 256, and each block gives each
// head a partial softmax state (its largest score, the sum of its e^x and its weighted values)
// which attention_merge combines in block order. attention() computes the same blocks and the same
// merge on one thread, so the bits do not depend on how the blocks were shared out.
struct AttentionQuery {
  const float* q;  // the query's heads, [H, hd]
  const void* k;   // its K/V rows, [C, Hkv, hd] (as attention())
  GgmlType k_type;
  const void* v;
  GgmlType v_type;
  const float* mrow;  // its mask row [C], or null
  int64_t H, Hkv, hd, C, rot;
  float scale;
};
// Runs of heads a query's attention is cut into (a K/V head's heads, up to 8 at a time).
int64_t attention_runs(int64_t H, int64_t Hkv);
// Floats of partial state one run needs; a query's runs lie one after another at this stride.
int64_t attention_partial_floats(int64_t C, int64_t hd);
// Blocks of keys the query visits (its visible keys, mrow as attention()'s mask row).
int64_t attention_key_blocks(const float* mrow, int64_t C, int64_t rot);
// Blocks [b0, b1) of runs [run0, run1) into partials (run 0's state first); work: the thread's
// attention_work_floats(C, hd) floats.
void attention_part(const AttentionQuery& a, int64_t run0, int64_t run1, int64_t b0, int64_t b1, float* work,
                    float* partials);
// The heads of runs [run0, run1) into out ([H, hd]) from the nb blocks' partial states (which it
// overwrites); sinks as attention()'s.
void attention_merge(const AttentionQuery& a, int64_t nb, int64_t run0, int64_t run1, float* partials, float* out,
                     const float* sinks = nullptr);

// How matmul treats the activations for weights of type wt (see matmul).
enum class MatmulActivations { F32, Q8_0, Q8_K };
MatmulActivations matmul_activations(GgmlType wt);

// Per-thread scratch a matmul with this K / an attention over C rows of heads of hd needs, in floats.
int64_t matmul_work_floats(int64_t K);
int64_t attention_work_floats(int64_t C, int64_t hd);

// What the dispatcher chose on this CPU ("amx", "avx512", "avx2" or "scalar"), for logs and bench.
// "amx" is the avx512 path whose prefill matmul with Q8_0-style int8 activations (M > 4) runs on
// AMX tiles (same bits). The choice is the best path the CPU supports; the environment variable
// NPULLM_ISA=scalar|avx2|avx512|amx (read once, at the first kernel call) may force a lower one.
const char* kernel_isa();

// Forces the code path `isa` ("scalar", "avx2", "avx512" or "amx") for later kernel calls, for tests and
// benchmarks. "avx512" is the AVX-512 build with VBMI2 and BITALG where the CPU has both
// (kernels_avx512vbmi2.cpp); "avx512-base" forces the build without them (both report "avx512": the
// same bits). Returns false and changes nothing when the CPU cannot run it or the name is unknown.
// Not to be called while kernels are running on other threads.
bool kernel_force_isa(const char* isa);

}  // namespace npullm::cpu
