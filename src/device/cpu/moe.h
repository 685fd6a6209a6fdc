// Mixture-of-experts kernels: routing, grouping rows by expert, the indexed-weight matmul and the
// weighted sum (blob/task.h, MoeRoute .. SwiGluOai, for the routing table's layout).
//
// Numerics. Routing is computed in float from the router's logits exactly once per token, with
// ties between equal scores going to the lower expert id, so the choice never depends on how a
// chunk or a batch was cut. The expert matmuls are MatMul's kernel on each expert's rows (the rows
// of a token are the same bits whether they are 1 of 1 or 1 of 500 in their group: cpu::matmul
// gives M = 1 and M > 1 the same bits), and the weighted sum adds the k products in selection
// order. So greedy output does not depend on the prefill chunk, the batch or the thread count.
#pragma once
#include <cstdint>

#include "formats/ggml_types.h"
#include "formats/weight_layout.h"

namespace npullm::cpu {

// The five parts of a routing table for S tokens choosing k of E experts (T = S k pairs).
struct MoeTable {
  const int32_t* id;     // [T] expert of pair p = s k + j
  const float* w;        // [T] its weight
  const int32_t* pair;   // [T] pair of routed row r (rows grouped by expert)
  const int32_t* row;    // [T] routed row of pair p
  const int32_t* first;  // [E + 1] first routed row of each expert
};
MoeTable moe_table(const int32_t* table, int64_t S, int64_t k, int64_t E);

enum class MoeGating : int32_t {
  SoftmaxTopK = 0,   // p = softmax(logits); the k largest p; w = p / max(sum of those k, 2^-14)
  TopKSoftmax = 1,   // the k largest logits; w = softmax over those k
};

// Writes the whole routing table (blob::moe_table_ints(S, k, E) int32) from the router logits
// [S, E]. Runs on one thread: S k E comparisons, small next to one expert matmul. work: E floats.
void moe_route(const float* logits, int64_t S, int64_t E, int64_t k, MoeGating gating, int32_t* table, float* work);

// out[r, :] = x[pair[r] / k, :] for routed rows r in [r0, r1).
void moe_gather(const float* x, int64_t K, int64_t k, const MoeTable& t, float* out, int64_t r0, int64_t r1);

// out[r, n] = x[r, :] . W[e(r), n, :] (+ bias[e(r), n]) for every routed row r and n in [n0, n1):
// one cpu::matmul per expert that has rows, over that expert's slab. W holds E slabs of N rows of
// K elements of type wt in `layout` (a Panels16 slab is N / 16 whole panels). Returns how many
// slabs it read (experts with rows). work: matmul_work_floats(K) floats.
int64_t moe_matmul(const float* x, int64_t K, const void* W, GgmlType wt, WeightLayout layout, const float* bias,
                   const MoeTable& t, int64_t E, float* out, int64_t N, int64_t n0, int64_t n1, float* work);
// Bytes of one expert's slab of N rows of K elements.
size_t moe_slab_bytes(GgmlType wt, WeightLayout layout, int64_t N, int64_t K);

// out[s, :] = sum_j w[s k + j] y[row[s k + j], :] (j ascending, each product rounded first)
// (+ res[s, :]) for tokens s in [s0, s1). out may alias res.
void moe_sum(const float* y, const MoeTable& t, int64_t D, int64_t k, const float* res, float* out, int64_t s0, int64_t s1);

// gpt-oss's clamped gate (blob OpCode::SwiGluOai) over elements [i0, i1); out may alias gate or up.
void swiglu_oai(const float* gate, const float* up, float* out, float alpha, float limit, int64_t i0, int64_t i1);

}  // namespace npullm::cpu
