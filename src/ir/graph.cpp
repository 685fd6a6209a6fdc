#include "ir/graph.h"

#include <fmt/format.h>

#include "common/error.h"

namespace npullm::ir {

const char* op_name(Op op) {
  switch (op) {
    case Op::Parameter: return "Parameter";
    case Op::Weight: return "Weight";
    case Op::ReadValue: return "ReadValue";
    case Op::Assign: return "Assign";
    case Op::Result: return "Result";
    case Op::Embed: return "Embed";
    case Op::RmsNorm: return "RmsNorm";
    case Op::MatMul: return "MatMul";
    case Op::Add: return "Add";
    case Op::Rope: return "Rope";
    case Op::ScatterRows: return "ScatterRows";
    case Op::Attention: return "Attention";
    case Op::SwiGlu: return "SwiGlu";
    case Op::GatherRows: return "GatherRows";
    case Op::SliceCols: return "SliceCols";
    case Op::Scale: return "Scale";
    case Op::SoftCap: return "SoftCap";
    case Op::GeGlu: return "GeGlu";
    case Op::MoeRoute: return "MoeRoute";
    case Op::MoeGather: return "MoeGather";
    case Op::MoeMatMul: return "MoeMatMul";
    case Op::MoeSum: return "MoeSum";
    case Op::SwiGluOai: return "SwiGluOai";
  }
  return "?";
}

int Graph::add(Node n) {
  const int id = size();
  for (int in : n.inputs) {
    if (in != kNoInput && (in < 0 || in >= id))
      fail("ir: node '{}' ({}) uses input {} which does not precede it", n.name, op_name(n.op), in);
  }
  nodes_.push_back(std::move(n));
  return id;
}

std::vector<int> Graph::consumers(int id) const {
  std::vector<int> out;
  for (int i = id + 1; i < size(); ++i)
    for (int in : nodes_[static_cast<size_t>(i)].inputs)
      if (in == id) {
        out.push_back(i);
        break;
      }
  return out;
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (const Dim& d : s) {
    if (d.is_dynamic()) fail("ir: shape {} is not static", shape_to_string(s));
    n *= d.value;
  }
  return n;
}

std::string shape_to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += s[i].is_dynamic() ? s[i].symbol : std::to_string(s[i].value);
  }
  return out + "]";
}

std::string Graph::to_string() const {
  std::string out;
  for (int i = 0; i < size(); ++i) {
    const Node& n = nodes_[static_cast<size_t>(i)];
    out += fmt::format("%{} = {} '{}' {}", i, op_name(n.op), n.name, shape_to_string(n.shape));
    if (!n.inputs.empty()) {
      out += " (";
      for (size_t k = 0; k < n.inputs.size(); ++k)
        out += (k ? ", " : "") + (n.inputs[k] == kNoInput ? std::string("-") : "%" + std::to_string(n.inputs[k]));
      out += ")";
    }
    if (!n.variable.empty()) out += " var=" + n.variable;
    if (n.has_prologue()) out += fmt::format(" prologue={}", op_name(n.prologue));
    out += "\n";
  }
  return out;
}

}  // namespace npullm::ir
