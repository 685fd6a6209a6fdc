// The model IR: a small SSA graph of tensor operations with symbolic dimensions and state variables.
//
// A model is built once with dynamic dimensions (symbols such as "seq" for the number of new tokens
// and "ctx" for the state capacity) and ReadValue/Assign pairs for its state variables, the way a
// stateful OpenVINO model looks. The compiler then specialises copies of it: static_reshape() fixes
// every symbol, lift_state() turns the variables into plain I/O, and lowering makes tasks.
// Nodes are kept in topological order: a node's inputs always have smaller ids.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace npullm::ir {

enum class Op {
  Parameter,    // graph input (role in `io_role`)
  Weight,       // a tensor of the weights bank, by name (never copied into the graph)
  ReadValue,    // reads state variable `variable`
  Assign,       // writes input 0 to state variable `variable`; produces no value
  Result,       // graph output named `name`: input 0
  Embed,        // (table, ids) -> rows of the table
  RmsNorm,      // (x, w, residual?) ; eps. norm(x) * w (+ residual: a folded Add, see compiler::fuse_stages)
  MatMul,       // (x, W, bias?, residual?) -> x W^T + bias + residual
  Add,          // (a, b)
  Rope,         // (x, positions, factors?, norm weight?) ; n_rot, freq_base, freq_scale, rope_mode, heads
  ScatterRows,  // (target, rows, src) -> target with target[rows[s]] = src[s]; updates target in place
  Attention,    // (q, k, v, mask, window?, sinks?) ; scale, heads, kv_heads. Query s attends the mask's width of
                //   k/v rows from window[s] on (from row 0 without a window); a window [seq, 2] also gives
                //   the row of that ring its keys are visited from. sinks [heads]: a logit per head added
                //   to each softmax's denominator (gpt-oss)
  SwiGlu,       // (gate, up)
  GatherRows,   // (x, idx) -> out with out[i] = x[idx[i]] (rows along dim 0; out has idx's length)
  SliceCols,    // (x) -> out[s, :] = x[s, offset : offset + width] (width = out's row length)
  Scale,        // (x) -> x * scale
  SoftCap,      // (x) -> scale * tanh(x / scale)
  GeGlu,        // (gate, up) -> gelu_tanh(gate) * up
  // Mixture of experts, the static way (DESIGN.md "Experts"): the router's logits pick k of E
  // experts per token inside the blob; every shape stays fixed (T = seq * k routed rows).
  MoeRoute,     // (router logits [seq, E]) -> routing table (I32 [4T + E + 1], blob/task.h); heads = k,
                //   kv_heads = E, rope_mode = gating (0 softmax-all then top-k renormalised, 1 top-k then softmax)
  MoeGather,    // (x [seq, K], route) -> [T, K]: each routed row's token row, grouped by expert
  MoeMatMul,    // (x [T, K], W [E, N, K], route, bias [E, N]?) -> [T, N]: each row times its expert's slab
  MoeSum,       // (y [T, D], route, residual?) -> [seq, D]: sum_j w_j y_j in selection order (+ residual)
  SwiGluOai,    // (gate, up) -> gpt-oss's clamped swiglu: g = min(g, L); u = clamp(u, -L, L); g sigmoid(a g) (u + 1)
                //   (scale = a = 1.702, eps = L = 7)
};

const char* op_name(Op op);

// A dimension is either a number or a symbol that static_reshape() replaces by a number.
struct Dim {
  int64_t value = 0;
  std::string symbol;  // non-empty: dynamic
  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: numbers convert implicitly, it reads well in shapes
  Dim(const char* s) : symbol(s) {}  // NOLINT
  bool is_dynamic() const { return !symbol.empty(); }
};
using Shape = std::vector<Dim>;

inline constexpr int kNoInput = -1;

enum class IoRole { None, Input, Output, State };

struct Node {
  Op op = Op::Parameter;
  std::string name;
  std::vector<int> inputs;          // node ids; kNoInput for an absent optional input
  Shape shape;                      // of the value this node produces (empty for Assign)
  uint32_t type = 0;                // element type (GgmlType id) of the value
  // Attributes (meaning per op; unused ones stay at their defaults).
  std::string variable;             // ReadValue / Assign
  IoRole io_role = IoRole::None;    // Parameter: Input or State (after lift_state)
  std::vector<int64_t> weight_dims; // Weight: GGUF dims (ne0 first)
  float eps = 0.0f, scale = 0.0f, freq_base = 10000.0f, freq_scale = 1.0f;
  int64_t n_rot = 0, heads = 0, kv_heads = 0;
  int64_t offset = 0;               // SliceCols: first column taken; Weight: first row of a view (rows = shape[0])
  // RmsNorm: > 0 normalises each of the `heads` equal parts of a row on its own (per-head norms),
  // with one weight of the part's length shared by all of them.
  int rope_mode = 0;
  // Rope: YaRN (model::HParams): on when yarn_ext != 0, blending each pair's frequency between
  // pairs yarn_low and yarn_high.
  float yarn_ext = 0.0f;
  int32_t yarn_low = 0, yarn_high = 0;
  // An op that compiler::fuse_stages folded into this one and that is applied to input 0 as it is
  // read (Parameter: none). MatMul: RmsNorm (eps; the norm weight is input 4), SwiGlu or GeGlu
  // (input 0 is the gate, input 4 the up rows). ScatterRows: Rope of each source row before it is
  // stored (positions input 3, frequency factors input 4; heads, n_rot, freq_*, rope_mode), after a
  // per-head RmsNorm where input 5 (its weight) is present (eps). Rope: RmsNorm of each head (eps;
  // the weight is input 3) before it is rotated.
  Op prologue = Op::Parameter;
  bool has_prologue() const { return prologue != Op::Parameter; }
};

struct Variable {
  std::string name;
  Shape shape;
  uint32_t type = 0;
};

class Graph {
 public:
  int add(Node n);  // checks that inputs exist and precede it; returns the new id
  const Node& node(int id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& node(int id) { return nodes_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  int size() const { return static_cast<int>(nodes_.size()); }

  std::vector<Variable> variables;

  // Ids of nodes that use `id` as an input.
  std::vector<int> consumers(int id) const;
  // Human-readable listing, one node per line (for inspect and debugging).
  std::string to_string() const;

 private:
  std::vector<Node> nodes_;
};

// Element count of a static shape; throws if a dimension is still dynamic.
int64_t num_elements(const Shape& s);
std::string shape_to_string(const Shape& s);

}  // namespace npullm::ir
