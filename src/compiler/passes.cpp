#include "compiler/passes.h"

#include <algorithm>
#include <set>

#include "common/error.h"

namespace npullm::compiler {

ir::Graph static_reshape(const ir::Graph& g, const std::map<std::string, int64_t>& symbols) {
  auto fix = [&](ir::Shape& shape, const std::string& where) {
    for (ir::Dim& d : shape) {
      if (!d.is_dynamic()) continue;
      auto it = symbols.find(d.symbol);
      if (it == symbols.end()) fail("compiler: static_reshape: no value for dimension '{}' of {}", d.symbol, where);
      if (it->second < 1) fail("compiler: static_reshape: dimension '{}' = {} must be >= 1", d.symbol, it->second);
      d = ir::Dim(it->second);
    }
  };
  ir::Graph out = g;
  for (ir::Node& n : out.nodes()) fix(n.shape, "node '" + n.name + "'");
  for (ir::Variable& v : out.variables) fix(v.shape, "variable '" + v.name + "'");
  return out;
}

namespace {
// Ops that write their result into the buffer of input 0 (the compiler aliases them).
bool updates_input_in_place(const ir::Node& n) { return n.op == ir::Op::ScatterRows || n.op == ir::Op::Rope; }
}  // namespace

ir::Graph lift_state(const ir::Graph& g) {
  // Find, for every variable, its ReadValue and Assign.
  std::map<std::string, int> reads, assigns;
  for (int i = 0; i < g.size(); ++i) {
    const ir::Node& n = g.node(i);
    if (n.op == ir::Op::ReadValue) {
      if (!reads.emplace(n.variable, i).second) fail("compiler: lift_state: variable '{}' is read twice", n.variable);
    } else if (n.op == ir::Op::Assign) {
      if (!assigns.emplace(n.variable, i).second) fail("compiler: lift_state: variable '{}' is assigned twice", n.variable);
    }
  }
  for (const auto& [var, id] : reads)
    if (!assigns.count(var)) fail("compiler: lift_state: variable '{}' is read but never assigned", var);
  for (const auto& [var, id] : assigns)
    if (!reads.count(var)) fail("compiler: lift_state: variable '{}' is assigned but never read", var);

  ir::Graph out;
  out.variables = g.variables;
  std::vector<int> remap(static_cast<size_t>(g.size()), ir::kNoInput);
  for (int i = 0; i < g.size(); ++i) {
    ir::Node n = g.node(i);
    for (int& in : n.inputs)
      if (in != ir::kNoInput) in = remap[static_cast<size_t>(in)];
    if (n.op == ir::Op::ReadValue) {
      const ir::Node& stored = g.node(g.node(assigns.at(n.variable)).inputs.at(0));
      const bool in_place = updates_input_in_place(stored) && stored.inputs.at(0) == i;
      n.op = ir::Op::Parameter;
      n.io_role = in_place ? ir::IoRole::State : ir::IoRole::Input;
      n.name = in_place ? n.variable : "past." + n.variable;
    } else if (n.op == ir::Op::Assign) {
      const ir::Node& stored = g.node(g.node(i).inputs.at(0));
      const bool in_place = updates_input_in_place(stored) && stored.inputs.at(0) == reads.at(n.variable);
      if (in_place) continue;  // the update already lands in the State buffer
      n.op = ir::Op::Result;
      n.name = "present." + n.variable;
      n.shape = stored.shape;
      n.type = stored.type;
    }
    n.variable.clear();
    remap[static_cast<size_t>(i)] = out.add(std::move(n));
  }
  return out;
}

namespace {

// Whether `id` is read at all, and only as input `slot` of ops `op`.
bool read_only_as(const ir::Graph& g, int id, ir::Op op, size_t slot) {
  const std::vector<int> users = g.consumers(id);
  for (int c : users) {
    const ir::Node& u = g.node(c);
    for (size_t k = 0; k < u.inputs.size(); ++k)
      if (u.inputs[k] == id && (u.op != op || k != slot)) return false;
  }
  return !users.empty();
}

void set_input(ir::Node& n, size_t k, int id) {
  if (n.inputs.size() <= k) n.inputs.resize(k + 1, ir::kNoInput);
  n.inputs[k] = id;
}

int input_or_none(const ir::Node& n, size_t k) { return k < n.inputs.size() ? n.inputs[k] : ir::kNoInput; }

// Whether `id` is an intermediate that exactly one node reads, once (an op may then update it in place).
bool sole_reader(const ir::Graph& g, int id, int reader) {
  const ir::Op op = g.node(id).op;
  if (op == ir::Op::Parameter || op == ir::Op::Weight || op == ir::Op::ReadValue) return false;
  const std::vector<int> users = g.consumers(id);
  if (users.size() != 1 || users[0] != reader) return false;
  const ir::Node& r = g.node(reader);
  return std::count(r.inputs.begin(), r.inputs.end(), id) == 1;
}

}  // namespace

namespace {

// A MatMul that only computes columns for SliceCols to take apart (Phi-3's fused q/k/v and gate/up
// projections): no bias, residual or prologue, a weight nothing else reads, and read by SliceCols
// alone.
bool sliced_matmul(const ir::Graph& g, int id) {
  const ir::Node& n = g.node(id);
  if (n.op != ir::Op::MatMul || n.has_prologue() || input_or_none(n, 2) != ir::kNoInput || input_or_none(n, 3) != ir::kNoInput)
    return false;
  const int w = n.inputs.at(1);
  if (g.node(w).op != ir::Op::Weight || g.consumers(w) != std::vector<int>{id}) return false;
  const std::vector<int> users = g.consumers(id);
  return !users.empty() && std::all_of(users.begin(), users.end(), [&](int u) { return g.node(u).op == ir::Op::SliceCols; });
}

// Each SliceCols of a sliced_matmul becomes a MatMul of its own over the rows of the weight that
// make its columns (a Weight node with `offset` rows skipped and the slice's rows), so the slices
// cost no stage and no copy; every output is computed as before, row by row, so the same bits.
ir::Graph split_sliced_matmuls(const ir::Graph& g) {
  std::vector<bool> split(static_cast<size_t>(g.size()), false), weight_of_split(static_cast<size_t>(g.size()), false);
  for (int i = 0; i < g.size(); ++i)
    if (sliced_matmul(g, i)) {
      split[static_cast<size_t>(i)] = true;
      weight_of_split[static_cast<size_t>(g.node(i).inputs[1])] = true;
    }
  ir::Graph out;
  out.variables = g.variables;
  std::vector<int> remap(static_cast<size_t>(g.size()), ir::kNoInput);
  for (int i = 0; i < g.size(); ++i) {
    if (split[static_cast<size_t>(i)] || weight_of_split[static_cast<size_t>(i)]) continue;  // made per slice below
    ir::Node n = g.node(i);
    if (n.op == ir::Op::SliceCols && split[static_cast<size_t>(n.inputs.at(0))]) {
      const ir::Node& mm = g.node(n.inputs[0]);
      ir::Node view = g.node(mm.inputs[1]);
      const int64_t K = view.shape.at(1).value;
      view.offset = n.offset;
      view.shape = {n.shape.at(1), K};
      const int v = out.add(std::move(view));
      ir::Node part = mm;
      part.name = n.name;
      part.shape = n.shape;
      part.inputs = {remap[static_cast<size_t>(mm.inputs[0])], v, ir::kNoInput, ir::kNoInput};
      remap[static_cast<size_t>(i)] = out.add(std::move(part));
      continue;
    }
    for (int& in : n.inputs)
      if (in != ir::kNoInput) in = remap[static_cast<size_t>(in)];
    remap[static_cast<size_t>(i)] = out.add(std::move(n));
  }
  return out;
}

}  // namespace

ir::Graph fuse_stages(const ir::Graph& g) {
  ir::Graph work = split_sliced_matmuls(g);
  std::vector<bool> folded(static_cast<size_t>(work.size()), false);
  for (int i = 0; i < work.size(); ++i) {
    ir::Node& n = work.node(i);
    if (n.has_prologue() || n.inputs.empty()) continue;
    if (n.op == ir::Op::MatMul) {
      const int x = n.inputs[0];
      const ir::Node& src = work.node(x);
      const bool norm = src.op == ir::Op::RmsNorm && src.heads == 0 && input_or_none(src, 2) == ir::kNoInput;
      const bool glu = src.op == ir::Op::SwiGlu || src.op == ir::Op::GeGlu;
      if ((!norm && !glu) || src.type != n.type || !read_only_as(work, x, ir::Op::MatMul, 0)) continue;
      n.prologue = src.op;
      n.eps = src.eps;
      const int first = src.inputs.at(0), second = src.inputs.at(1);
      n.inputs[0] = first;
      set_input(n, 4, second);  // the norm weight, or the up rows
      folded[static_cast<size_t>(x)] = work.consumers(x).empty();
    } else if (n.op == ir::Op::Rope && n.type == 0) {
      // A per-head norm read only by this Rope (Qwen3's and Gemma 3's Q/K norms): the Rope
      // normalises each head in place, then rotates it; the norm's input becomes its buffer, so
      // nothing else may read that.
      const int x = n.inputs[0];
      const ir::Node& src = work.node(x);
      if (src.op != ir::Op::RmsNorm || src.heads != n.heads || src.type != n.type ||
          input_or_none(src, 2) != ir::kNoInput || !sole_reader(work, x, i) || !sole_reader(work, src.inputs.at(0), x))
        continue;
      n.prologue = ir::Op::RmsNorm;
      n.eps = src.eps;
      const int first = src.inputs.at(0), w = src.inputs.at(1);
      n.inputs[0] = first;
      if (n.inputs.size() < 3) n.inputs.resize(3, ir::kNoInput);
      set_input(n, 3, w);
      folded[static_cast<size_t>(x)] = true;
    } else if (n.op == ir::Op::ScatterRows && n.inputs.size() == 3) {
      const int r = n.inputs[2];
      const ir::Node& rope = work.node(r);
      if (rope.op != ir::Op::Rope || rope.type != 0 || !read_only_as(work, r, ir::Op::ScatterRows, 2)) continue;
      n.prologue = ir::Op::Rope;
      n.heads = rope.heads;
      n.n_rot = rope.n_rot;
      n.freq_base = rope.freq_base;
      n.freq_scale = rope.freq_scale;
      n.rope_mode = rope.rope_mode;
      n.yarn_ext = rope.yarn_ext;
      n.yarn_low = rope.yarn_low;
      n.yarn_high = rope.yarn_high;
      const int rows = rope.inputs.at(0), positions = rope.inputs.at(1);
      n.inputs[2] = rows;
      set_input(n, 3, positions);
      set_input(n, 4, input_or_none(rope, 2));
      if (rope.prologue == ir::Op::RmsNorm) {  // the Rope's own folded norm comes along
        set_input(n, 5, rope.inputs.at(3));
        n.eps = rope.eps;
      }
      folded[static_cast<size_t>(r)] = true;
    } else if (n.op == ir::Op::Add && n.inputs.size() == 2) {
      // Add(residual, RmsNorm(a)) with the norm read by nothing else (Gemma's post-norms): the
      // norm adds the residual as it writes each row.
      for (int side = 0; side < 2; ++side) {
        const int x = n.inputs[static_cast<size_t>(side)], res = n.inputs[static_cast<size_t>(1 - side)];
        const ir::Node& src = work.node(x);
        if (src.op != ir::Op::RmsNorm || src.heads != 0 || src.type != n.type || input_or_none(src, 2) != ir::kNoInput ||
            x == res || !sole_reader(work, x, i) || ir::num_elements(src.shape) != ir::num_elements(n.shape))
          continue;
        const int first = src.inputs.at(0), w = src.inputs.at(1);
        n.op = ir::Op::RmsNorm;
        n.eps = src.eps;
        n.inputs = {first, w, res};
        folded[static_cast<size_t>(x)] = true;
        break;
      }
    }
  }
  // Copy what is left, renumbering the inputs.
  ir::Graph out;
  out.variables = work.variables;
  std::vector<int> remap(static_cast<size_t>(work.size()), ir::kNoInput);
  for (int i = 0; i < work.size(); ++i) {
    if (folded[static_cast<size_t>(i)]) continue;
    ir::Node n = work.node(i);
    for (int& in : n.inputs)
      if (in != ir::kNoInput) {
        in = remap[static_cast<size_t>(in)];
        if (in == ir::kNoInput) fail("compiler: fuse_stages: '{}' reads a folded node", n.name);
      }
    remap[static_cast<size_t>(i)] = out.add(std::move(n));
  }
  return out;
}

}  // namespace npullm::compiler
