#include "compiler/passes.h"

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

}  // namespace npullm::compiler
