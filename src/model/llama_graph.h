// Builds the Llama-family transformers (llama, qwen2, qwen3, phi3, gemma3) as a stateful IR graph
// with dynamic dimensions. Optional tensors change the graph: attn_{q,k,v}.bias (Qwen2),
// rope_freqs.weight (Llama 3.1), attn_{q,k}_norm (Qwen3, Gemma 3: per-head RMSNorm before RoPE),
// attn_qkv and a gate+up ffn_up (Phi-3: fused projections, sliced after the matmul). Gemma 3 adds
// the embedding scale, post-attention / post-FFN norms, GELU(tanh) gating, the final soft-cap and
// local layers that attend through attention_mask_swa with their own RoPE base.
//
// Inputs (dims: "seq" = tokens in this run, "ctx" = rows each token may attend, "rows" = rows of
// the whole state, which may hold several sequences' regions one after another):
//   input_ids       i32 [seq]        token ids
//   positions       i32 [seq]        RoPE position of each token
//   cache_rows      i32 [seq]        row of the K/V state each token's K/V is written to (-1: none)
//   attention_mask  f32 [seq, ctx]   additive: 0 where token s may attend row kv_base[s] + t, -inf elsewhere
//   attention_mask_swa f32 [seq, ctx] only for models with sliding-window layers: their mask
//   kv_base         i32 [seq]        first state row of token s's attention window [kv_base[s], kv_base[s] + ctx):
//                                    the start of its sequence's region, so a batch of tokens from
//                                    different sequences attends each its own rows
//   logit_rows      i32 [out]        only with GraphOptions::logit_rows: the rows whose logits are computed
// With GraphOptions::swa_ring (models with sliding-window layers), those layers keep a ring of K/V
// rows instead: dims "ring" = rows of one sequence's ring, "ring_rows" = rows of every ring, and
//   cache_rows_swa  i32 [seq]        ring row each token's local-layer K/V is written to (-1: none)
//   kv_window_swa   i32 [seq, 2]     first row of token s's ring, and the ring row its keys are
//                                    visited from (its oldest visible position's, see cpu::attention)
//   attention_mask_swa f32 [seq, ring] additive, by ring row
// State variables: "blk.<l>.key" and "blk.<l>.value", [rows, n_head_kv, head_dim] of the K/V type
// (F32, F16 or Q8_0; Q8_0 needs head_dim to be a multiple of its block of 32); [ring_rows, ...]
// for the sliding-window layers with swa_ring.
// Output: logits f32 [seq, n_vocab], or [out, n_vocab] with GraphOptions::logit_rows.
//
// Per layer (pre-norm):   h = rmsnorm(x) ; q,k,v = h Wq, h Wk, h Wv ; rope(q), rope(k)
//                         K = scatter(ReadValue(K), cache_rows, k) ; Assign(K)   (same for V)
//                         x = x + attention(q, K, V, mask, kv_base) Wo
//                         x = x + (silu(rmsnorm(x) Wg) * (rmsnorm(x) Wu)) Wd
// Then:                   logits = rmsnorm(x) Wout             (x = gather(x, logit_rows) first, if asked)
#pragma once
#include "formats/ggml_types.h"
#include "ir/graph.h"
#include "model/hparams.h"

namespace npullm {
class GgufFile;
}

namespace npullm::model {

struct GraphOptions {
  // Compute the logits of the rows named by the input logit_rows only (dimension "out"): the last
  // layer's output rows are gathered (GatherRows) before the output norm and matmul, which are
  // per-row, so each row's logits are exactly those of the full graph. A prefill that needs the
  // last token's logits then computes [1, n_vocab] instead of [seq, n_vocab].
  bool logit_rows = false;
  // Sliding-window layers keep a ring of K/V rows (the window plus one prefill chunk and an
  // alignment margin) instead of one row per position; see the inputs above.
  bool swa_ring = false;
};

// Checks that `kv_type` can hold this model's K/V state (F32, F16, or Q8_0 when head_dim is a
// multiple of 32); an npullm::Error naming the type otherwise.
void check_kv_type(const HParams& hp, GgmlType kv_type);

// The weights' types and shapes are taken from `weights` (and checked against `hp`); a missing
// or misshapen tensor is an npullm::Error naming it. kv_type: the element type of the K/V state.
ir::Graph build_llama_graph(const HParams& hp, const GgufFile& weights, GgmlType kv_type, const GraphOptions& opt = {});

// The key re-rotation used by a context shift: input positions i32 [rows] (the position delta of
// each row; 0 leaves a row as it is), state "blk.<l>.key" (of kv_type) rotated in place. No outputs.
// With swa_ring, the sliding-window layers' keys take their deltas from positions_swa i32 [ring_rows].
ir::Graph build_rerotate_graph(const HParams& hp, const GgufFile& weights, GgmlType kv_type, bool swa_ring = false);

}  // namespace npullm::model
