// Graph-to-graph passes of the compiler. Each takes a graph and returns the transformed copy.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "ir/graph.h"

namespace npullm::compiler {

// Replaces every symbolic dimension by its value in `symbols`; a symbol without a value, or a
// value < 1, is an npullm::Error. After this pass every shape is static.
ir::Graph static_reshape(const ir::Graph& g, const std::map<std::string, int64_t>& symbols);

// Lambda-lifts state: each ReadValue/Assign pair of a variable becomes plain I/O.
//  - When the Assign stores an in-place update of the value its ReadValue read (ScatterRows or Rope on it),
//    the variable becomes one I/O of role State named after the variable: the blob reads the past
//    rows from it and writes the new rows into it, so nothing is ever copied back.
//  - Otherwise ReadValue becomes the input "past.<var>" and Assign the output "present.<var>".
// A ReadValue without Assign, or two Assigns to one variable, is an npullm::Error.
ir::Graph lift_state(const ir::Graph& g);

// Folds ops that only prepare another op's input into that op, so they cost no stage of their own
// (each stage ends at a barrier every thread waits at):
//  - an RmsNorm (whole rows) read only as the activations of MatMuls: each MatMul normalises its
//    input itself (prologue RmsNorm, the norm weight as input 4);
//  - a SwiGlu / GeGlu read only as MatMul activations: the MatMul reads gate (input 0) and up
//    (input 4) and applies the gate function as it reads them;
//  - an F32 Rope read only as the source rows of a ScatterRows: the scatter rotates each row before
//    storing it (positions input 3, frequency factors input 4);
//  - a per-head RmsNorm (Qwen3's and Gemma 3's Q/K norms) read only by an F32 Rope of as many heads,
//    whose own input nothing else reads: the Rope normalises each head in place before rotating it
//    (the norm weight as input 3), and a scatter that takes that Rope takes the norm too (input 5);
//  - an RmsNorm (whole rows) read only by an Add (Gemma's post-norms): the Add becomes the norm,
//    with the Add's other operand as its residual (input 2), added as each row is written;
//  - a MatMul (no bias, residual or prologue) read only by SliceCols, whose weight nothing else
//    reads (Phi-3's fused q/k/v and gate/up): one MatMul per slice, over a view of the weight's
//    rows (a Weight node `offset` rows in; Lowering points the task into the one tensor).
// The folded nodes disappear. A device computes a prologue with the same kernel and the same
// operation order as the op it replaces, so fused and unfused graphs give the same bits.
ir::Graph fuse_stages(const ir::Graph& g);

}  // namespace npullm::compiler
