// Scheduling, buffer assignment, memory planning and task emission (the back half of compile()).
#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common/error.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "compiler/passes.h"
#include "formats/ggml_types.h"
#include "formats/weight_layout.h"

namespace npullm::compiler {

namespace {

using blob::OpCode;
using ir::Op;

bool is_compute(Op op) {
  return op != Op::Parameter && op != Op::Weight && op != Op::Result && op != Op::Assign && op != Op::ReadValue;
}

uint64_t value_bytes(const ir::Node& n) {
  const auto t = static_cast<GgmlType>(n.type);
  const int64_t elems = ir::num_elements(n.shape);
  return ggml_row_bytes(t, elems);
}

// A block-quantised operand is addressed by rows: each row of `row` elements of `type` must be
// whole blocks (Q8_0: 32 elements in 34 bytes), or the device could not find a row's bytes.
void check_whole_blocks(const ir::Node& n, uint32_t type, int64_t row, const char* what) {
  const auto t = static_cast<GgmlType>(type);
  if (!ggml_type_known(type)) fail("compiler: {} '{}': {} has unknown type {}", ir::op_name(n.op), n.name, what, type);
  const int64_t block = ggml_type_traits(t).block_size;
  if (row % block != 0)
    fail("compiler: {} '{}': {} rows of {} elements are not whole {} blocks of {}", ir::op_name(n.op), n.name, what, row,
         ggml_type_name(t), block);
}

// Union-find over node ids: nodes in one set share one buffer.
struct AliasSets {
  std::vector<int> parent;
  explicit AliasSets(int n) : parent(static_cast<size_t>(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[static_cast<size_t>(x)] == x ? x : parent[static_cast<size_t>(x)] = find(parent[static_cast<size_t>(x)]); }
  void join(int a, int b) { parent[static_cast<size_t>(find(a))] = find(b); }
};

// Where a buffer lives once the blob is loaded.
struct Home {
  enum Kind { None, Scratch, Io, Weight } kind = None;
  uint32_t index = 0;   // io / weight index, or scratch buffer index
};

class Lowering {
 public:
  explicit Lowering(const ir::Graph& g) : g_(g), sets_(g.size()) {}

  blob::BlobImage run(const CompileOptions& opt) {
    opt_ = &opt;
    schedule();
    assign_aliases();
    assign_homes();
    plan();
    emit();
    nlohmann::json meta = {{"name", opt.name}, {"compiler", kCompilerVersion}, {"symbols", opt.symbols},
                           {"tasks", img_.tasks.size()}, {"stages", img_.barriers.size()}};
    if (!opt.panels16_types.empty()) {
      std::vector<std::string> names;
      for (GgmlType t : opt.panels16_types) names.emplace_back(ggml_type_name(t));
      meta["panels16_types"] = names;
    }
    img_.meta_json = meta.dump();
    return std::move(img_);
  }

 private:
  // stage = 1 + max stage of compute producers; inputs, weights and state are ready before stage 0.
  void schedule() {
    stage_.assign(static_cast<size_t>(g_.size()), -1);
    for (int i = 0; i < g_.size(); ++i) {
      const ir::Node& n = g_.node(i);
      if (!is_compute(n.op)) {
        if (n.op == Op::ReadValue || n.op == Op::Assign)
          fail("compiler: state variable '{}' must be lifted before lowering", n.variable);
        continue;
      }
      int s = 0;
      for (int in : n.inputs)
        if (in != ir::kNoInput && stage_[static_cast<size_t>(in)] >= 0) s = std::max(s, stage_[static_cast<size_t>(in)] + 1);
      stage_[static_cast<size_t>(i)] = s;
      n_stages_ = std::max(n_stages_, s + 1);
    }
  }

  // The last stage that reads node `id`'s value, ignoring reader `except`.
  int last_reader_stage(int id, int except) const {
    int last = -1;
    for (int c : g_.consumers(id))
      if (c != except && is_compute(g_.node(c).op)) last = std::max(last, stage_[static_cast<size_t>(c)]);
    return last;
  }

  // True when `id` is an intermediate that nothing reads after stage `s` - 1 besides `except`
  // (no later task, and no graph output: an output must keep its value).
  bool free_after(int id, int except, int s) const {
    if (!is_compute(g_.node(id).op)) return false;
    for (int c : g_.consumers(id))
      if (c != except && (!is_compute(g_.node(c).op) || stage_[static_cast<size_t>(c)] >= s)) return false;
    return true;
  }

  // In-place ops write into their input's buffer:
  //  Rope        always (its input is an intermediate or a State buffer read by nobody else);
  //  ScatterRows always (it updates its target; the target may be read only by it);
  //  MatMul      into its residual input when every other reader of it ran in an earlier stage;
  //  SwiGlu      into its gate when nothing else reads the gate (elementwise: each element is read
  //              before it is written), which saves the largest buffer of a transformer's FFN.
  void assign_aliases() {
    for (int i = 0; i < g_.size(); ++i) {
      const ir::Node& n = g_.node(i);
      const int s = stage_[static_cast<size_t>(i)];
      if (n.op == Op::Rope || n.op == Op::ScatterRows) {
        const int in = n.inputs.at(0);
        if (last_reader_stage(in, i) >= 0 || g_.consumers(in).size() != 1)
          fail("compiler: {} '{}' updates its input in place, but '{}' has other readers", ir::op_name(n.op), n.name, g_.node(in).name);
        const ir::Node& src = g_.node(in);
        if (n.op == Op::Rope && !is_compute(src.op) && !(src.op == Op::Parameter && src.io_role == ir::IoRole::State))
          fail("compiler: Rope '{}' rotates in place, so its input '{}' must be an intermediate or a state", n.name, src.name);
        sets_.join(i, in);
      } else if (n.op == Op::MatMul && n.inputs.size() > 3 && n.inputs[3] != ir::kNoInput) {
        const int res = n.inputs[3];
        if (is_compute(g_.node(res).op) && last_reader_stage(res, i) < s) {
          sets_.join(i, res);
          inplace_residual_.push_back(i);
        }
      } else if (n.op == Op::MoeSum && n.inputs.size() > 2 && n.inputs[2] != ir::kNoInput) {
        const int res = n.inputs[2];  // the residual stream, as MatMul's
        if (is_compute(g_.node(res).op) && last_reader_stage(res, i) < s) sets_.join(i, res);
      } else if ((n.op == Op::SwiGlu || n.op == Op::GeGlu || n.op == Op::SwiGluOai) && free_after(n.inputs.at(0), i, s)) {
        sets_.join(i, n.inputs.at(0));
      }
    }
  }

  uint32_t add_io(const ir::Node& n, blob::IoRole role) {
    blob::IoDesc io{.name = n.name, .role = role, .type = n.type, .shape = {}, .bytes = value_bytes(n)};
    for (const ir::Dim& d : n.shape) io.shape.push_back(d.value);
    for (const blob::IoDesc& other : img_.ios)
      if (other.name == io.name) fail("compiler: two graph I/Os are named '{}'", io.name);
    img_.ios.push_back(std::move(io));
    return static_cast<uint32_t>(img_.ios.size() - 1);
  }

  void set_home(int id, Home h) {
    Home& cur = homes_[sets_.find(id)];
    if (cur.kind != Home::None && cur.kind != Home::Scratch && (cur.kind != h.kind || cur.index != h.index))
      fail("compiler: '{}' would have to live in two places (an output aliasing an input?)", g_.node(id).name);
    cur = h;
  }

  void assign_homes() {
    for (int i = 0; i < g_.size(); ++i) {
      const ir::Node& n = g_.node(i);
      if (n.op == Op::Parameter) {
        set_home(i, {Home::Io, add_io(n, n.io_role == ir::IoRole::State ? blob::IoRole::State : blob::IoRole::Input)});
      } else if (n.op == Op::Weight) {
        // Views of one tensor (Weight nodes of one name, each `offset` rows in) share its record.
        const auto seen = weight_index_.find(n.name);
        if (seen != weight_index_.end()) {
          set_home(i, {Home::Weight, seen->second});
          continue;
        }
        blob::WeightRef w{.name = n.name, .type = n.type, .shape = n.weight_dims, .bytes = 0};
        const int64_t row = n.weight_dims.at(0);
        int64_t elems = 1;
        for (int64_t d : n.weight_dims) elems *= d;
        const auto type = static_cast<GgmlType>(n.type);
        const WeightLayout layout = weight_layout(i);
        w.bytes = weight_bytes(type, elems / row, row, layout);
        w.layout = static_cast<uint32_t>(layout);
        img_.weights.push_back(std::move(w));
        weight_index_[n.name] = static_cast<uint32_t>(img_.weights.size() - 1);
        set_home(i, {Home::Weight, static_cast<uint32_t>(img_.weights.size() - 1)});
      } else if (n.op == Op::Result) {
        const int src = n.inputs.at(0);
        if (!is_compute(g_.node(src).op)) fail("compiler: output '{}' must be computed, not a graph input", n.name);
        set_home(src, {Home::Io, add_io(n, blob::IoRole::Output)});
      }
    }
    // Every remaining compute value gets one scratch buffer per alias set.
    for (int i = 0; i < g_.size(); ++i) {
      if (!is_compute(g_.node(i).op)) continue;
      const int root = sets_.find(i);
      Home& h = homes_[root];
      if (h.kind == Home::None) {
        h = {Home::Scratch, static_cast<uint32_t>(buffers_.size())};
        buffers_.push_back(BufferUse{.name = g_.node(i).name, .bytes = 0, .first = ~0u, .last = 0});
      }
      if (h.kind != Home::Scratch) continue;
      BufferUse& b = buffers_[h.index];
      b.bytes = std::max<uint64_t>(b.bytes, value_bytes(g_.node(i)));
      const uint32_t s = static_cast<uint32_t>(stage_[static_cast<size_t>(i)]);
      b.first = std::min(b.first, s);
      b.last = std::max(b.last, s);
      for (int c : g_.consumers(i))
        if (is_compute(g_.node(c).op)) b.last = std::max(b.last, static_cast<uint32_t>(stage_[static_cast<size_t>(c)]));
    }
  }

  void plan() {
    img_.scratch_bytes = plan_memory(buffers_);
    for (const BufferUse& b : buffers_)
      img_.plan.push_back(blob::PlanEntry{b.name, b.offset, b.bytes, b.first, b.last});
  }

  // Points operand `slot` of task `t` at node `id`'s buffer through a relocation.
  void bind_operand(blob::TaskDesc& task, size_t t, int slot, int id) {
    if (id == ir::kNoInput) return;
    const Home h = homes_.at(sets_.find(id));
    blob::Reloc r;
    r.offset = t * sizeof(blob::TaskDesc) + offsetof(blob::TaskDesc, ptr) + static_cast<uint64_t>(slot) * 8;
    switch (h.kind) {
      case Home::Scratch: r.kind = blob::RelocKind::Scratch; r.addend = static_cast<int64_t>(buffers_[h.index].offset); break;
      case Home::Io: r.kind = blob::RelocKind::Io; r.index = h.index; break;
      case Home::Weight: {
        r.kind = blob::RelocKind::Weight;
        r.index = h.index;
        const ir::Node& w = g_.node(id);  // a view starts `offset` rows in
        const auto type = static_cast<GgmlType>(w.type);
        const int64_t K = w.weight_dims.at(0);
        const bool packed = img_.weights[h.index].layout == static_cast<uint32_t>(WeightLayout::Panels16);
        r.addend = w.offset * static_cast<int64_t>(packed ? panels16_stride(type, K) : ggml_row_bytes(type, K));
        break;
      }
      case Home::None: fail("compiler: '{}' has no buffer", g_.node(id).name);
    }
    task.type[slot] = g_.node(id).type;
    img_.relocs.push_back(r);
  }

  void emit() {
    std::vector<uint32_t> per_stage(static_cast<size_t>(n_stages_), 0);
    // Emit in stage order so a device can walk the array front to back.
    std::vector<int> order;
    for (int i = 0; i < g_.size(); ++i)
      if (is_compute(g_.node(i).op)) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return stage_[static_cast<size_t>(a)] < stage_[static_cast<size_t>(b)]; });

    for (int id : order) {
      const ir::Node& n = g_.node(id);
      const size_t t = img_.tasks.size();
      blob::TaskDesc task{};
      task.stage = static_cast<uint32_t>(stage_[static_cast<size_t>(id)]);
      per_stage[task.stage]++;
      auto in = [&](size_t k) { return k < n.inputs.size() ? n.inputs[k] : ir::kNoInput; };
      auto shape_of = [&](size_t k) -> const ir::Shape& { return g_.node(in(k)).shape; };
      const int64_t S = n.shape.at(0).value;
      switch (n.op) {
        case Op::Embed:
          task.op = static_cast<uint32_t>(OpCode::Embed);
          bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
          task.dim[0] = S; task.dim[1] = n.shape.at(1).value; task.dim[2] = shape_of(0).at(0).value;
          if (g_.node(in(0)).op == Op::Weight) task.iparam[0] = static_cast<int32_t>(layout_of(in(0)));
          break;
        case Op::RmsNorm: {
          task.op = static_cast<uint32_t>(OpCode::RmsNorm);
          bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
          const int64_t parts = n.heads > 0 ? n.heads : 1;  // per-head norms: rows of one head each
          if (n.shape.at(1).value % parts != 0)
            fail("compiler: RmsNorm '{}': rows of {} do not split into {} heads", n.name, n.shape.at(1).value, parts);
          task.dim[0] = S * parts; task.dim[1] = n.shape.at(1).value / parts; task.fparam[0] = n.eps;
          if (ir::num_elements(shape_of(1)) != task.dim[1])
            fail("compiler: RmsNorm '{}': weight {} does not match rows of {}", n.name, ir::shape_to_string(shape_of(1)), task.dim[1]);
          if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoInput) {  // a folded residual Add
            if (n.heads > 0 || ir::num_elements(shape_of(2)) != ir::num_elements(n.shape))
              fail("compiler: RmsNorm '{}': a residual of {} for rows [{},{}]", n.name, ir::shape_to_string(shape_of(2)), S,
                   n.shape.at(1).value);
            bind_operand(task, t, 3, in(2));
          }
          break;
        }
        case Op::SliceCols: {
          task.op = static_cast<uint32_t>(OpCode::SliceCols);
          bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, id);
          task.dim[0] = S; task.dim[1] = shape_of(0).at(1).value; task.dim[2] = n.shape.at(1).value; task.dim[3] = n.offset;
          if (n.offset < 0 || n.offset + task.dim[2] > task.dim[1] || shape_of(0).at(0).value != S)
            fail("compiler: SliceCols '{}' takes columns [{}, {}) of rows of {}", n.name, n.offset, n.offset + task.dim[2], task.dim[1]);
          break;
        }
        case Op::Scale:
        case Op::SoftCap:
          task.op = static_cast<uint32_t>(n.op == Op::Scale ? OpCode::Scale : OpCode::SoftCap);
          bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, id);
          task.dim[0] = ir::num_elements(n.shape); task.fparam[0] = n.scale;
          if (n.op == Op::SoftCap && !(n.scale > 0)) fail("compiler: SoftCap '{}' needs a positive cap", n.name);
          break;
        case Op::MatMul:
          task.op = static_cast<uint32_t>(OpCode::MatMul);
          for (int k = 0; k < 2; ++k) bind_operand(task, t, k, in(static_cast<size_t>(k)));
          bind_operand(task, t, 2, id); bind_operand(task, t, 3, in(2)); bind_operand(task, t, 4, in(3));
          task.dim[0] = S; task.dim[1] = shape_of(0).at(1).value; task.dim[2] = n.shape.at(1).value;
          if (g_.node(in(1)).op == Op::Weight) task.iparam[0] = static_cast<int32_t>(layout_of(in(1)));
          if (n.has_prologue()) emit_matmul_prologue(n, task, t);
          break;
        case Op::Add:
        case Op::SwiGlu:
        case Op::GeGlu:
          task.op = static_cast<uint32_t>(n.op == Op::Add ? OpCode::Add : n.op == Op::SwiGlu ? OpCode::SwiGlu : OpCode::GeGlu);
          bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
          task.dim[0] = ir::num_elements(n.shape);
          break;
        case Op::Rope:
          // Rope keeps its input's element type (F32, or the type of a state it rotates in place).
          if (n.type != g_.node(in(0)).type)
            fail("compiler: Rope '{}' is {} but its input '{}' is {}", n.name, ggml_type_name(static_cast<GgmlType>(n.type)),
                 g_.node(in(0)).name, ggml_type_name(static_cast<GgmlType>(g_.node(in(0)).type)));
          check_whole_blocks(n, n.type, ir::num_elements(n.shape) / S / n.heads, "head");
          task.op = static_cast<uint32_t>(OpCode::Rope);
          bind_operand(task, t, 0, id); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, in(2));
          task.dim[0] = S; task.dim[1] = n.heads; task.dim[2] = ir::num_elements(n.shape) / S / n.heads; task.dim[3] = n.n_rot;
          task.fparam[0] = n.freq_base; task.fparam[1] = n.freq_scale; task.iparam[0] = n.rope_mode;
          task.fparam[3] = n.yarn_ext; task.iparam[2] = n.yarn_low; task.iparam[3] = n.yarn_high;
          if (n.has_prologue()) {  // a folded per-head norm
            if (n.prologue != Op::RmsNorm || n.type != 0 || n.inputs.size() < 4 ||
                ir::num_elements(g_.node(n.inputs[3]).shape) != task.dim[2])
              fail("compiler: Rope '{}' cannot apply a {} to heads of {}", n.name, ir::op_name(n.prologue), task.dim[2]);
            bind_operand(task, t, 3, n.inputs[3]);
            task.iparam[1] = static_cast<int32_t>(blob::Prologue::RmsNorm);
            task.fparam[2] = n.eps;
          }
          break;
        case Op::ScatterRows: {
          task.op = static_cast<uint32_t>(OpCode::ScatterRows);
          bind_operand(task, t, 0, in(2)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
          const ir::Shape& tgt = n.shape;
          task.dim[0] = shape_of(2).at(0).value;
          task.dim[1] = ir::num_elements(tgt) / tgt.at(0).value;
          task.dim[2] = tgt.at(0).value;
          if (ir::num_elements(shape_of(2)) != task.dim[0] * task.dim[1])
            fail("compiler: ScatterRows '{}': source rows do not match target rows", n.name);
          if (n.type != g_.node(in(0)).type)
            fail("compiler: ScatterRows '{}' is {} but its target '{}' is {}", n.name,
                 ggml_type_name(static_cast<GgmlType>(n.type)), g_.node(in(0)).name,
                 ggml_type_name(static_cast<GgmlType>(g_.node(in(0)).type)));
          check_whole_blocks(n, n.type, task.dim[1], "target");
          if (n.has_prologue()) emit_scatter_rope(n, task, t);
          break;
        }
        case Op::Attention: {
          task.op = static_cast<uint32_t>(OpCode::Attention);
          for (int k = 0; k < 4; ++k) bind_operand(task, t, k, in(static_cast<size_t>(k)));
          bind_operand(task, t, 4, id);
          bind_operand(task, t, 5, in(4));
          if (in(5) != ir::kNoInput) {  // attention sinks: a logit per query head
            if (ir::num_elements(shape_of(5)) != n.heads || g_.node(in(5)).type != static_cast<uint32_t>(GgmlType::F32))
              fail("compiler: Attention '{}': sinks {} for {} heads", n.name, ir::shape_to_string(shape_of(5)), n.heads);
            bind_operand(task, t, 6, in(5));
          }
          const ir::Shape& kshape = shape_of(1);
          task.dim[0] = S; task.dim[1] = n.heads; task.dim[2] = n.kv_heads;
          task.dim[3] = n.shape.at(1).value / n.heads;
          // The window is the mask's width; the key/value tensors may hold more rows than it.
          task.dim[5] = kshape.at(0).value;
          task.dim[4] = in(3) != ir::kNoInput ? shape_of(3).at(1).value : task.dim[5];
          if (task.dim[4] > task.dim[5])
            fail("compiler: Attention '{}' attends {} rows of a state of {}", n.name, task.dim[4], task.dim[5]);
          if (in(4) != ir::kNoInput) {
            // One base row per query, or (base, ring start) pairs.
            const int64_t cols = ir::num_elements(shape_of(4)) / std::max<int64_t>(S, 1);
            if ((cols != 1 && cols != 2) || ir::num_elements(shape_of(4)) != S * cols)
              fail("compiler: Attention '{}': the window has {} but there are {} queries", n.name, ir::shape_to_string(shape_of(4)), S);
            task.iparam[0] = static_cast<int32_t>(cols);
          }
          task.fparam[0] = n.scale;
          check_whole_blocks(n, task.type[1], task.dim[3], "k head");
          check_whole_blocks(n, task.type[2], task.dim[3], "v head");
          break;
        }
        case Op::MoeRoute:
        case Op::MoeGather:
        case Op::MoeMatMul:
        case Op::MoeSum:
          emit_moe(n, id, task, t);
          break;
        case Op::SwiGluOai:
          task.op = static_cast<uint32_t>(OpCode::SwiGluOai);
          bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
          task.dim[0] = ir::num_elements(n.shape);
          task.fparam[0] = n.scale; task.fparam[1] = n.eps;
          break;
        case Op::GatherRows: {
          task.op = static_cast<uint32_t>(OpCode::GatherRows);
          bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
          const ir::Shape& src = shape_of(0);
          task.dim[0] = S;
          task.dim[1] = ir::num_elements(src) / src.at(0).value;
          task.dim[2] = src.at(0).value;
          if (ir::num_elements(shape_of(1)) != S || ir::num_elements(n.shape) != S * task.dim[1])
            fail("compiler: GatherRows '{}': {} indices and rows of {} make no {}", n.name,
                 ir::shape_to_string(shape_of(1)), ir::shape_to_string(src), ir::shape_to_string(n.shape));
          break;
        }
        default:
          fail("compiler: no task for op {}", ir::op_name(n.op));
      }
      img_.tasks.push_back(task);
    }
    for (uint32_t c : per_stage) img_.barriers.push_back(blob::BarrierDesc{c, 0});
  }

  // The four MoE ops (blob/task.h). Routed values are [S, k, row]: S tokens times k choices; the
  // routing table is [S, 4k + E + 1] int32, enough for moe_table_ints(S, k, E) whatever S is.
  void emit_moe(const ir::Node& n, int id, blob::TaskDesc& task, size_t t) {
    auto in = [&](size_t k) { return k < n.inputs.size() ? n.inputs[k] : ir::kNoInput; };
    auto dims = [&](int node) { return g_.node(node).shape; };
    const int64_t S = n.shape.at(0).value;
    // The routing table this op reads (MoeRoute: the one it writes) and its k and E.
    const int route = n.op == Op::MoeRoute ? id : n.op == Op::MoeMatMul ? in(2) : in(1);
    const ir::Node& r = g_.node(route);
    if (r.op != Op::MoeRoute) fail("compiler: {} '{}' reads a routing table that '{}' did not make", ir::op_name(n.op), n.name, r.name);
    const int64_t k = r.heads, E = r.kv_heads;
    if (k < 1 || k > E || r.shape.size() != 2 || r.shape[0].value != S || r.shape[1].value != 4 * k + E + 1 ||
        r.type != static_cast<uint32_t>(GgmlType::I32))
      fail("compiler: MoeRoute '{}' of shape {} cannot route {} tokens to {} of {} experts", r.name, ir::shape_to_string(r.shape), S, k, E);
    auto routed = [&](int node, const char* what) -> int64_t {  // [S, k, row]: the row length
      const ir::Shape& sh = dims(node);
      if (sh.size() != 3 || sh[0].value != S || sh[1].value != k)
        fail("compiler: {} '{}': {} '{}' is {}, not [{}, {}, ...]", ir::op_name(n.op), n.name, what, g_.node(node).name,
             ir::shape_to_string(sh), S, k);
      return sh[2].value;
    };
    switch (n.op) {
      case Op::MoeRoute:
        task.op = static_cast<uint32_t>(OpCode::MoeRoute);
        bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, id);
        if (ir::num_elements(dims(in(0))) != S * E)
          fail("compiler: MoeRoute '{}': router logits {} for {} tokens and {} experts", n.name, ir::shape_to_string(dims(in(0))), S, E);
        task.dim[0] = S; task.dim[1] = E; task.dim[2] = k; task.iparam[0] = n.rope_mode;
        break;
      case Op::MoeGather: {
        task.op = static_cast<uint32_t>(OpCode::MoeGather);
        bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
        const int64_t K = routed(id, "its output");
        if (ir::num_elements(dims(in(0))) != S * K) fail("compiler: MoeGather '{}': rows of {} from {}", n.name, K, ir::shape_to_string(dims(in(0))));
        task.dim[0] = S; task.dim[1] = K; task.dim[2] = k; task.dim[3] = E;
        break;
      }
      case Op::MoeMatMul: {
        task.op = static_cast<uint32_t>(OpCode::MoeMatMul);
        bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
        bind_operand(task, t, 3, in(2)); bind_operand(task, t, 4, in(3));
        const int64_t K = routed(in(0), "its input"), N = routed(id, "its output");
        const ir::Node& w = g_.node(in(1));
        if (w.op != Op::Weight || w.weight_dims != std::vector<int64_t>{K, N, E})
          fail("compiler: MoeMatMul '{}' needs a weight of GGUF dims [{},{},{}], not '{}'", n.name, K, N, E, w.name);
        check_whole_blocks(n, w.type, K, "expert weight");
        if (in(3) != ir::kNoInput && ir::num_elements(dims(in(3))) != E * N)
          fail("compiler: MoeMatMul '{}': a bias of {} for {} experts of {} rows", n.name, ir::shape_to_string(dims(in(3))), E, N);
        task.dim[0] = S; task.dim[1] = K; task.dim[2] = N; task.dim[3] = k; task.dim[4] = E;
        task.iparam[0] = static_cast<int32_t>(layout_of(in(1)));
        break;
      }
      case Op::MoeSum: {
        task.op = static_cast<uint32_t>(OpCode::MoeSum);
        bind_operand(task, t, 0, in(0)); bind_operand(task, t, 1, in(1)); bind_operand(task, t, 2, id);
        bind_operand(task, t, 3, in(2));
        const int64_t D = routed(in(0), "its input");
        if (ir::num_elements(n.shape) != S * D || (in(2) != ir::kNoInput && ir::num_elements(dims(in(2))) != S * D))
          fail("compiler: MoeSum '{}': rows of {} into {}", n.name, D, ir::shape_to_string(n.shape));
        task.dim[0] = S; task.dim[1] = D; task.dim[2] = k; task.dim[3] = E;
        break;
      }
      default: break;
    }
  }

  // A MatMul's folded RmsNorm (slot 5: the weight) or gate function (slot 5: the up rows).
  void emit_matmul_prologue(const ir::Node& n, blob::TaskDesc& task, size_t t) {
    const int64_t M = task.dim[0], K = task.dim[1];
    const int aux = n.inputs.at(4);
    const int64_t aux_elems = ir::num_elements(g_.node(aux).shape);
    if (n.prologue == Op::RmsNorm) {
      if (aux_elems != K) fail("compiler: MatMul '{}': a norm weight of {} for rows of {}", n.name, aux_elems, K);
      task.iparam[1] = static_cast<int32_t>(blob::Prologue::RmsNorm);
      task.fparam[0] = n.eps;
    } else if (n.prologue == Op::SwiGlu || n.prologue == Op::GeGlu) {
      if (aux_elems != M * K) fail("compiler: MatMul '{}': up rows of {} elements for a gate of [{},{}]", n.name, aux_elems, M, K);
      task.iparam[1] = static_cast<int32_t>(n.prologue == Op::SwiGlu ? blob::Prologue::SwiGlu : blob::Prologue::GeGlu);
    } else {
      fail("compiler: MatMul '{}' cannot apply a {} to its input", n.name, ir::op_name(n.prologue));
    }
    bind_operand(task, t, 5, aux);
  }

  // A ScatterRows that rotates its source rows first (a folded Rope).
  void emit_scatter_rope(const ir::Node& n, blob::TaskDesc& task, size_t t) {
    const int64_t S = task.dim[0], R = task.dim[1];
    if (n.prologue != Op::Rope || n.heads <= 0 || R % n.heads != 0 || n.n_rot > R / n.heads)
      fail("compiler: ScatterRows '{}' cannot apply a {} of {} heads to rows of {}", n.name, ir::op_name(n.prologue), n.heads, R);
    if (ir::num_elements(g_.node(n.inputs.at(3)).shape) != S)
      fail("compiler: ScatterRows '{}': positions for {} rows expected", n.name, S);
    bind_operand(task, t, 3, n.inputs.at(3));
    bind_operand(task, t, 4, n.inputs.size() > 4 ? n.inputs[4] : ir::kNoInput);
    task.dim[3] = n.heads; task.dim[4] = R / n.heads; task.dim[5] = n.n_rot;
    task.fparam[0] = n.freq_base; task.fparam[1] = n.freq_scale;
    task.iparam[0] = n.rope_mode; task.iparam[1] = static_cast<int32_t>(blob::Prologue::Rope);
    task.fparam[3] = n.yarn_ext; task.iparam[2] = n.yarn_low; task.iparam[3] = n.yarn_high;
    if (n.inputs.size() > 5 && n.inputs[5] != ir::kNoInput) {  // the Rope's folded per-head norm
      if (ir::num_elements(g_.node(n.inputs[5]).shape) != R / n.heads)
        fail("compiler: ScatterRows '{}': a head norm weight of {} for heads of {}", n.name,
             ir::num_elements(g_.node(n.inputs[5]).shape), R / n.heads);
      bind_operand(task, t, 5, n.inputs[5]);
      task.iparam[1] = static_cast<int32_t>(blob::Prologue::RmsNormRope);
      task.fparam[2] = n.eps;
    }
  }

  const ir::Graph& g_;
  AliasSets sets_;
  std::vector<int> stage_;
  int n_stages_ = 0;
  // Panels16 for a weight that some MatMul takes as its weight (input 1) and that nothing else reads
  // but an Embed as its table (a tied embedding: the output projection streams the whole table each
  // token, the lookup gathers a row or two from the panels), of a type the options list; rows (as
  // in GGUF) otherwise.
  // Views of one tensor (split_sliced_matmuls) take Panels16 only if each starts and ends on a
  // panel boundary (or at the tensor's end), so each is whole panels of its own rows.
  WeightLayout weight_layout(int w) const {
    const ir::Node& n = g_.node(w);
    const auto type = static_cast<GgmlType>(n.type);
    const auto& types = opt_->panels16_types;
    if (std::find(types.begin(), types.end(), type) == types.end() || !panels16_possible(type, n.weight_dims.at(0)))
      return WeightLayout::Rows;
    const int64_t rows = n.weight_dims.size() > 1 ? n.weight_dims[1] : 1;
    bool read = false;
    for (int v = 0; v < g_.size(); ++v) {
      const ir::Node& view = g_.node(v);
      if (view.op != Op::Weight || view.name != n.name) continue;
      const int64_t first = view.offset, end = view.offset + view.shape.at(0).value;
      if (n.weight_dims.size() < 3 && (first % 16 != 0 || (end % 16 != 0 && end != rows))) return WeightLayout::Rows;
      for (int i = 0; i < g_.size(); ++i) {
        const ir::Node& u = g_.node(i);
        for (size_t k = 0; k < u.inputs.size(); ++k) {
          if (u.inputs[k] != v) continue;
          if (u.op == Op::Embed && k == 0) continue;
          // An expert tensor: each slab must be whole panels of its own rows.
          if (u.op == Op::MoeMatMul && k == 1 && n.weight_dims.size() == 3 && n.weight_dims[1] % 16 == 0) {
            read = true;
            continue;
          }
          if (u.op != Op::MatMul || k != 1) return WeightLayout::Rows;
          read = true;
        }
      }
    }
    return read ? WeightLayout::Panels16 : WeightLayout::Rows;
  }

  // The layout assign_homes chose for weight w (recorded in its WeightRef), for the tasks that read it.
  uint32_t layout_of(int w) { return img_.weights.at(homes_.at(sets_.find(w)).index).layout; }

  const CompileOptions* opt_ = nullptr;
  std::map<int, Home> homes_;
  std::map<std::string, uint32_t> weight_index_;  // img_.weights entry of each tensor name
  std::vector<BufferUse> buffers_;
  std::vector<int> inplace_residual_;
  blob::BlobImage img_;
};

}  // namespace

blob::BlobImage compile(const ir::Graph& g, const CompileOptions& opt) {
  ir::Graph staticg = static_reshape(g, opt.symbols);
  ir::Graph lifted = lift_state(staticg);
  if (opt.fuse_stages) lifted = fuse_stages(lifted);
  return Lowering(lifted).run(opt);
}

}  // namespace npullm::compiler
