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
  // 4 out (f32 [S,H,hd]), 5 window (i32 [S] base, or [S,2] base and ring start) or 0.
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
};

// What a MatMul, Rope or ScatterRows task applies to its input as it reads it (iparam 1): an op
// folded into it by the compiler (compiler::fuse_stages), so it costs no stage of its own.
enum class Prologue : int32_t { None = 0, RmsNorm = 1, SwiGlu = 2, GeGlu = 3, Rope = 4, RmsNormRope = 5 };

inline constexpr int kMaxOperands = 6;
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
static_assert(sizeof(TaskDesc) == 4 + 4 + 24 + 48 + 48 + 16 + 16, "TaskDesc must stay packed");

// Barrier b closes stage b: the device starts no task of stage b+1 until `count` tasks of stage b
// have signalled completion.
struct BarrierDesc {
  uint32_t count;
  uint32_t reserved;
};

const char* op_name(uint32_t op);  // "MatMul", ... or "?" for an unknown code

}  // namespace npullm::blob
