// Task descriptors: the instructions a device executes. The compiler writes them into the blob's
// .npu.tasks section; the driver patches their operand pointers through relocations; the device
// reads them and decides nothing.
//
// Every descriptor has the same fixed size so the section is a plain array. Operand slots hold
// absolute addresses once relocated (0 = operand absent). The meaning of dims/params per op is
// listed below; all float tensors are row-major float32 unless an operand type says otherwise.
#pragma once
#include <cstdint>

namespace npullm::blob {

enum class OpCode : uint32_t {
  // out[s, :] = dequant(table[ids[s], :]).  ptr: 0 table (type[0]), 1 ids (i32), 2 out.
  // dim: 0 S, 1 D (row length), 2 V (rows in table). Ids outside [0, V) give a zero row.
  // iparam 0: the table's layout (WeightLayout, as MatMul's W: a tied embedding is also the output
  // projection's weight, and then takes the layout that one reads fastest).
  Embed = 1,
  // out[s, :] = x[s, :] / sqrt(mean(x[s, :]^2) + eps) * w (+ res[s, :]).  ptr: 0 x, 1 w (f32 [D]),
  // 2 out, 3 res (f32 [S,D]) or 0. dim: 0 S, 1 D. fparam 0 eps. (Per-head norms are S = tokens x
  // heads rows of D = head size, without res.)
  RmsNorm = 2,
  // out[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]) (+ res[m, n]).
  // ptr: 0 x (f32 [M,K]), 1 W (type[1], N rows of K), 2 out (f32 [M,N]), 3 bias (f32 [N]) or 0,
  // 4 res (f32 [M,N]) or 0 (may alias out). dim: 0 M, 1 K, 2 N. iparam 0: W's layout (a
  // WeightLayout: 0 rows as GGUF stores them, 16 panels of 16 rows; formats/weight_layout.h).
  // iparam 1: a Prologue applied to x as it is read, exactly as the op of that name would compute
  // it: RmsNorm (ptr 5 its weight, f32 [K]; fparam 0 eps), SwiGlu / GeGlu (x is the gate, ptr 5
  // the up rows, f32 [M,K]).
  MatMul = 3,
  // out = a + b elementwise.  ptr: 0 a, 1 b, 2 out. dim: 0 count.
  Add = 4,
  // Rotary embedding, in place on x[s, h, :] for s < S, h < H, at position pos[s] (rows at
  // position 0 are left as they are).
  // ptr: 0 x (type[0] [S,H,hd]: F32, or F16 / Q8_0 for a K/V state rotated in place, each head row
  // converted to f32, rotated and converted back; Q8_0 needs hd % 32 == 0), 1 pos (i32 [S]),
  // 2 freq factors (f32 [n_rot/2]) or 0.
  // dim: 0 S, 1 H, 2 hd, 3 n_rot (<= hd, even). theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i.
  // fparam: 0 freq_base, 1 freq_scale. iparam 0: 0 = adjacent pairs (GPT-J / llama "normal"),
  // 2 = halves (GPT-NeoX). iparam 1 = Prologue::RmsNorm (F32 x): each head row is first normalised
  // in place as RmsNorm would (ptr 3 its weight, f32 [hd]; fparam 2 eps).
  // YaRN where fparam 3 (ext) != 0: pair i's frequency is multiplied by freq_scale (1 - r_i) + r_i
  // instead of freq_scale, r_i = ext (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)), lo = iparam 2,
  // hi = iparam 3 (ggml's rope_yarn ramp; its cos/sin factor m is the attention's scale). The same
  // for a ScatterRows' Rope prologue.
  Rope = 5,
  // dst[idx[s], :] = src[s, :] for s < S where 0 <= idx[s] < C; other rows are skipped.
  // ptr: 0 src (f32 [S,R]), 1 idx (i32 [S]), 2 dst (type[2] in {F32, F16, Q8_0}, [C,R]; Q8_0 rows
  // are R/32 blocks of 34 bytes quantised as ggml's reference does). dim: 0 S, 1 R, 2 C.
  // iparam 1 = Prologue::Rope: each source row is first rotated as Rope would rotate it (not in
  // place): ptr 3 pos, 4 freq factors or 0; dim 3 H, 4 hd (H * hd = R), 5 n_rot; fparam 0
  // freq_base, 1 freq_scale; iparam 0 mode. iparam 1 = Prologue::RmsNormRope: each head of the row
  // is normalised as RmsNorm would first (ptr 5 its weight, f32 [hd]; fparam 2 eps), then rotated.
  ScatterRows = 6,
  // Scaled dot-product attention with grouped heads and an additive mask, each query over its own
  // window of C rows of the K/V tensors, starting at row b_s = base[s] (0 without base):
  // out[s, h, :] = softmax_t(scale * q[s,h,:].k[b_s+t,g,:] + mask[s,t]) . v[b_s+t,g,:],  g = h / (H / Hkv).
  // ptr: 0 q (f32 [S,H,hd]), 1 k (type[1] [R,Hkv,hd]), 2 v (type[2] [R,Hkv,hd]), 3 mask (f32 [S,C]),
  // k / v types: F32, F16 or Q8_0 (hd % 32 == 0: each head is hd/32 whole blocks).
  // 4 out (f32 [S,H,hd]), 5 window (i32 [S] base, or [S,2] base and ring start) or 0, 6 sinks (f32
  // [H]: a logit per head that joins each softmax's denominator with no value, gpt-oss) or 0.
  // dim: 0 S, 1 H, 2 Hkv, 3 hd, 4 C, 5 R (>= C). fparam 0 scale. iparam 0: columns of the window (1
  // or 2). With a ring start r_s the window's keys are visited (summed) from row r_s on, wrapping at
  // C, and mask[s, t] is by window row. A row whose mask is -inf everywhere, or whose window leaves
  // [0, R), gives zeros.
  Attention = 7,
  // out = silu(gate) * up elementwise.  ptr: 0 gate, 1 up, 2 out (may alias gate or up). dim: 0 count.
  SwiGlu = 8,
  // out[i, :] = x[idx[i], :] for i < N; an index outside [0, S) gives a zero row.
  // ptr: 0 x (f32 [S,R]), 1 idx (i32 [N]), 2 out (f32 [N,R]). dim: 0 N, 1 R, 2 S.
  GatherRows = 9,
  // out[s, :] = x[s, off : off + W].  ptr: 0 x (f32 [S,R]), 1 out (f32 [S,W]). dim: 0 S, 1 R, 2 W, 3 off.
  SliceCols = 10,
  // out = x * c.  ptr: 0 x, 1 out (may alias x). dim: 0 count. fparam 0 c.
  Scale = 11,
  // out = c * tanh(x / c) (soft-capping).  ptr: 0 x, 1 out (may alias x). dim: 0 count. fparam 0 c.
  SoftCap = 12,
  // out = gelu_tanh(gate) * up, gelu_tanh(z) = z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
  // ptr: 0 gate, 1 up, 2 out (may alias gate or up). dim: 0 count.
  GeGlu = 13,

  // Mixture of experts (DESIGN.md "Experts"). S tokens each choose k of E experts; the T = S k
  // (token, choice) pairs are the routed rows. The routing table, written by MoeRoute and read by the
  // three others, is T*4 + E + 1 int32 in five parts (pair p = s k + j, j-th choice of token s):
  //   [0, T)         id[p]     expert of pair p, choices of a token in descending router score
  //   [T, 2T)        w[p]      its weight (float bits)
  //   [2T, 3T)       pair[r]   the pair of routed row r: rows grouped by expert, ascending pair in a group
  //   [3T, 4T)       row[p]    the routed row of pair p (the inverse of pair[])
  //   [4T, 4T+E+1)   first[e]  first routed row of expert e; first[E] = T
  // Grouping by expert lets each expert's slab be read once for all its rows (prefill, batches);
  // a decode step reads only the k slabs its token chose.

  // ptr: 0 logits (f32 [S,E]), 1 table (i32, as above). dim: 0 S, 1 E, 2 k.
  // iparam 0 gating: 0 = p = softmax over all E logits, the k largest p, w = p / max(sum of the k,
  // 2^-14) (qwen3moe); 1 = the k largest logits, w = softmax over those k (gpt-oss). Ties between
  // equal scores go to the lower expert id.
  MoeRoute = 14,
  // out[r, :] = x[pair[r] / k, :].  ptr: 0 x (f32 [S,K]), 1 table, 2 out (f32 [T,K]). dim: 0 S, 1 K, 2 k, 3 E.
  MoeGather = 15,
  // out[r, n] = sum_c x[r, c] W[e, n, c] (+ bias[e, n]), e = the expert of routed row r: for each expert
  // with rows, one MatMul of its rows over its slab (base + e * N rows), with MatMul's kernel and
  // numerics. ptr: 0 x (f32 [T,K]), 1 W (type[1], E slabs of N rows of K), 2 out (f32 [T,N]), 3 table,
  // 4 bias (f32 [E,N]) or 0. dim: 0 S, 1 K, 2 N, 3 k, 4 E. iparam 0: W's layout (as MatMul's; a
  // Panels16 slab is whole panels, N % 16 == 0).
  MoeMatMul = 16,
  // out[s, :] = (res[s, :]) + sum_j w[p] y[row[p], :], p = s k + j, summed j = 0, 1, ... in that order,
  // each product rounded to float first (w y_0 + w y_1 + ...), then the residual added.
  // ptr: 0 y (f32 [T,D]), 1 table, 2 out (f32 [S,D]), 3 res (f32 [S,D]) or 0 (may alias out). dim: 0 S, 1 D, 2 k, 3 E.
  MoeSum = 17,
  // gpt-oss's gate: g = min(gate, L), u = clamp(up, -L, L), out = g / (1 + exp(-a g)) * (u + 1).
  // ptr: 0 gate, 1 up, 2 out (may alias gate or up). dim: 0 count. fparam 0 a (1.702), 1 L (7).
  SwiGluOai = 18,
};

// Int32 elements of a MoE routing table for S tokens choosing k of E experts.
inline constexpr int64_t moe_table_ints(int64_t S, int64_t k, int64_t E) { return 4 * S * k + E + 1; }

// What a MatMul, Rope or ScatterRows task applies to its input as it reads it (iparam 1): an op
// folded into it by the compiler (compiler::fuse_stages), so it costs no stage of its own.
enum class Prologue : int32_t { None = 0, RmsNorm = 1, SwiGlu = 2, GeGlu = 3, Rope = 4, RmsNormRope = 5 };

inline constexpr int kMaxOperands = 8;
inline constexpr int kMaxDims = 6;

struct TaskDesc {
  uint32_t op;                    // OpCode
  uint32_t stage;                 // index of the barrier that closes this task's stage
  uint32_t type[kMaxOperands];    // GgmlType id of each operand (F32 = 0, I32 = 26, ...)
  uint64_t ptr[kMaxOperands];     // operand addresses, written by relocations
  int64_t dim[kMaxDims];
  float fparam[4];
  int32_t iparam[4];
};
static_assert(sizeof(TaskDesc) == 4 + 4 + 32 + 64 + 48 + 16 + 16, "TaskDesc must stay packed");

// Barrier b closes stage b: the device starts no task of stage b+1 until `count` tasks of stage b
// have signalled completion.
struct BarrierDesc {
  uint32_t count;
  uint32_t reserved;
};

const char* op_name(uint32_t op);  // "MatMul", ... or "?" for an unknown code

}  // namespace npullm::blob
