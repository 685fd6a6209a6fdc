// The compiler: IR graph -> passes -> blob.
//
//   static_reshape  fix every symbolic dimension (e.g. seq = 64, ctx = 1152)
//   lift_state      ReadValue/Assign variables become I/O (see passes.h)
//   fuse_stages     norms, gate functions and RoPE fold into the op that reads them (passes.h)
//   schedule        each op becomes one task; stage = 1 + the latest stage among its producers,
//                   so tasks in one stage are independent and may run concurrently
//   assign buffers  in-place ops share their input's buffer (see lower.cpp); graph inputs and
//                   outputs live in user-bound I/O; the rest goes to the scratch arena
//   plan memory     scratch offsets by liveness over stages (memory_plan.h)
//   emit            task descriptors, barrier counts and relocations into a BlobImage
//
// The compiler knows tensors, ops and state variables; it knows nothing of language models.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include <vector>

#include "blob/blob_image.h"
#include "formats/ggml_types.h"
#include "ir/graph.h"

namespace npullm::compiler {

// Part of every blob cache key: change it whenever the same graph compiles to different tasks
// (2: SwiGlu writes over its gate in place; 3: Panels16 weights, rows padded to whole dwords;
// 4: each Attention query's window starts at a row given by an operand, the window base;
// 5: ring windows; 6: fuse_stages; 7: a tied embedding table in Panels16, Embed reading it;
// 8: per-head norms folded into Rope, residual Adds into RmsNorm; 9: sliced MatMuls split over
// views of their weight).
inline constexpr const char* kCompilerVersion = "npullm-compiler-10";

struct CompileOptions {
  std::string name;                          // blob name (stored in .npu.meta)
  std::map<std::string, int64_t> symbols;    // values of the graph's dynamic dimensions
  // Weights read only as MatMul weights, of these types, are stored as panels of 16 rows (formats/weight_layout.h) for a device that reads them faster so; the
  // blob's weight records and MatMul tasks say so, and the weights bank provides them packed.
  std::vector<GgmlType> panels16_types;
  // Run fuse_stages (fewer stages per layer, the same results); off for tests that compare.
  bool fuse_stages = true;
};

blob::BlobImage compile(const ir::Graph& g, const CompileOptions& opt);

}  // namespace npullm::compiler
