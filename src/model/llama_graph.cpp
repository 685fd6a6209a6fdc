#include "model/llama_graph.h"

#include <cmath>
#include <set>
#include <fmt/ranges.h>

#include "common/error.h"
#include "formats/gguf.h"

namespace npullm::model {

namespace {

constexpr uint32_t kF32 = static_cast<uint32_t>(GgmlType::F32);
constexpr uint32_t kI32 = static_cast<uint32_t>(GgmlType::I32);

class Builder {
 public:
  Builder(const HParams& hp, const GgufFile& f, GgmlType kv_type)
      : hp_(hp), f_(f), kv_type_(static_cast<uint32_t>(kv_type)) {
    check_kv_type(hp, kv_type);
  }

  // A weights-bank tensor with the expected GGUF dims (ne0 first).
  int weight(const std::string& name, std::vector<int64_t> dims) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) fail("{}: tensor '{}' is missing", f_.path(), name);
    if (t->dims != dims)
      fail("{}: tensor '{}' has shape [{}], expected [{}]", f_.path(), name, fmt::join(t->dims, ","),
           fmt::join(dims, ","));
    const uint32_t type = static_cast<uint32_t>(t->type);
    if (dims.size() == 1 && t->type != GgmlType::F32)
      fail("{}: tensor '{}' is {} but norms, biases and rope factors must be F32", f_.path(), name, ggml_type_name(t->type));
    if (!ggml_type_traits(t->type).can_dequantize)
      fail("{}: tensor '{}' has type {}, which npullm cannot compute with yet", f_.path(), name, ggml_type_name(t->type));
    used_.insert(name);
    ir::Node n{.op = ir::Op::Weight, .name = name, .type = type};
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) n.shape.push_back(*it);
    n.weight_dims = std::move(dims);
    return g_.add(std::move(n));
  }

  int param(const std::string& name, ir::Shape shape, uint32_t type) {
    return g_.add(ir::Node{.op = ir::Op::Parameter, .name = name, .shape = std::move(shape), .type = type,
                           .io_role = ir::IoRole::Input});
  }

  int op(ir::Op op, const std::string& name, std::vector<int> inputs, ir::Shape shape) {
    return g_.add(ir::Node{.op = op, .name = name, .inputs = std::move(inputs), .shape = std::move(shape), .type = kF32});
  }

  // `rows` is the first dimension of x and of the result.
  int matmul(const std::string& name, int x, int w, int64_t n_out, int residual = ir::kNoInput, int bias = ir::kNoInput,
             const char* rows = "seq") {
    return op(ir::Op::MatMul, name, {x, w, bias, residual}, {rows, n_out});
  }

  // An optional tensor (biases, rope factors): the weight node when the file has it.
  int optional_weight(const std::string& name, std::vector<int64_t> dims) {
    return f_.find_tensor(name) ? weight(name, std::move(dims)) : ir::kNoInput;
  }

  int rmsnorm(const std::string& name, int x, int w, const char* rows = "seq", int64_t width = 0) {
    int id = op(ir::Op::RmsNorm, name, {x, w}, {rows, width ? width : hp_.n_embd});
    g_.node(id).eps = hp_.rms_eps;
    return id;
  }

  // Each head of x ([seq, heads * head_dim]) normalised on its own with the [head_dim] weight w
  // (Qwen3's and Gemma 3's Q/K norms, before RoPE).
  int rmsnorm_heads(const std::string& name, int x, int w, int64_t heads) {
    int id = rmsnorm(name, x, w, "seq", heads * hp_.head_dim);
    g_.node(id).heads = heads;
    return id;
  }

  int slice(const std::string& name, int x, int64_t offset, int64_t width) {
    int id = op(ir::Op::SliceCols, name, {x}, {"seq", width});
    g_.node(id).offset = offset;
    return id;
  }

  int scaled(ir::Op kind, const std::string& name, int x, float c, ir::Shape shape) {
    int id = op(kind, name, {x}, std::move(shape));
    g_.node(id).scale = c;
    return id;
  }

  float rope_base(int64_t layer) const { return hp_.is_swa(layer) ? hp_.rope_freq_base_swa : hp_.rope_freq_base; }

  int rope(const std::string& name, int x, int positions, int64_t heads, float base) {
    int id = op(ir::Op::Rope, name, {x, positions, rope_factors_}, {"seq", heads * hp_.head_dim});
    ir::Node& n = g_.node(id);
    n.n_rot = hp_.n_rot;
    n.heads = heads;
    n.freq_base = base;
    n.freq_scale = hp_.rope_freq_scale;
    n.rope_mode = hp_.rope_mode;
    n.yarn_ext = hp_.yarn_ext;
    n.yarn_low = hp_.yarn_low;
    n.yarn_high = hp_.yarn_high;
    return id;
  }

  // ReadValue -> ScatterRows(new rows) -> Assign: the state grows in place by the new rows, which
  // the scatter converts from F32 to the state's type.
  int update_state(const std::string& var, int rows, int src, const char* state_rows = "rows") {
    const ir::Shape shape{state_rows, hp_.n_head_kv, hp_.head_dim};
    g_.variables.push_back(ir::Variable{var, shape, kv_type_});
    int past = g_.add(ir::Node{.op = ir::Op::ReadValue, .name = var + ".read", .shape = shape, .type = kv_type_, .variable = var});
    int present = op(ir::Op::ScatterRows, var + ".update", {past, rows, src}, shape);
    g_.node(present).type = kv_type_;
    g_.add(ir::Node{.op = ir::Op::Assign, .name = var + ".assign", .inputs = {present}, .variable = var});
    return present;
  }

  // A mixture-of-experts FFN (DESIGN.md "Experts"): the router's logits pick k experts per token
  // inside the blob; the token rows are grouped by expert, each expert's gate, up and down slabs
  // multiply its rows, and the k outputs are summed with their weights onto the residual stream.
  // Shapes are static: seq tokens always make seq * k routed rows.
  int moe_ffn(const std::string& b, int h, int residual) {
    const int64_t D = hp_.n_embd, E = hp_.n_expert, k = hp_.n_expert_used, F = hp_.n_ff_exp;
    const int logits = matmul(b + "ffn_router", h, weight(b + "ffn_gate_inp.weight", {D, E}), E, ir::kNoInput,
                              optional_weight(b + "ffn_gate_inp.bias", {E}));
    const int route = op(ir::Op::MoeRoute, b + "ffn_route", {logits}, {"seq", 4 * k + E + 1});
    ir::Node& r = g_.node(route);
    r.type = kI32;
    r.heads = k;
    r.kv_heads = E;
    r.rope_mode = hp_.moe_gating;
    const int rows = op(ir::Op::MoeGather, b + "ffn_moe_rows", {h, route}, {"seq", k, D});
    auto experts = [&](const std::string& name, int x, int64_t in, int64_t out) {
      return op(ir::Op::MoeMatMul, b + name, {x, weight(b + name + ".weight", {in, out, E}), route,
                                              optional_weight(b + name + ".bias", {out, E})}, {"seq", k, out});
    };
    const int gate = experts("ffn_gate_exps", rows, D, F);
    const int up = experts("ffn_up_exps", rows, D, F);
    int act;
    if (hp_.arch == "gpt-oss") {  // swiglu_oai: alpha 1.702 and limit 7 are llama.cpp's constants
      act = op(ir::Op::SwiGluOai, b + "ffn_moe_act", {gate, up}, {"seq", k, F});
      g_.node(act).scale = 1.702f;
      g_.node(act).eps = 7.0f;
    } else {
      act = op(ir::Op::SwiGlu, b + "ffn_moe_act", {gate, up}, {"seq", k, F});
    }
    const int down = experts("ffn_down_exps", act, F, D);
    return op(ir::Op::MoeSum, b + "ffn_moe_out", {down, route, residual}, {"seq", D});
  }

  // Turns the keys of every layer's state by the angle of `positions[row]` (a position delta per
  // row), in place: after rows move down by n during a context shift, rotating their keys by -n
  // makes them exactly what they would have been at their new positions (RoPE is a rotation).
  ir::Graph build_rerotate(bool swa_ring) {
    const int deltas = param("positions", {"rows"}, kI32);
    const bool ring = swa_ring && hp_.n_swa > 0;
    const int deltas_swa = ring ? param("positions_swa", {"ring_rows"}, kI32) : ir::kNoInput;
    rope_factors_ = optional_weight("rope_freqs.weight", {hp_.n_rot / 2});
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      const bool in_ring = ring && hp_.is_swa(l);
      const std::string var = fmt::format("blk.{}.key", l);
      const ir::Shape shape{in_ring ? "ring_rows" : "rows", hp_.n_head_kv, hp_.head_dim};
      g_.variables.push_back(ir::Variable{var, shape, kv_type_});
      int past = g_.add(ir::Node{.op = ir::Op::ReadValue, .name = var + ".read", .shape = shape, .type = kv_type_, .variable = var});
      int turned = rope(var + ".rerotate", past, in_ring ? deltas_swa : deltas, hp_.n_head_kv, rope_base(l));
      g_.node(turned).shape = shape;
      g_.node(turned).type = kv_type_;  // rotated in place in the state's own type
      g_.add(ir::Node{.op = ir::Op::Assign, .name = var + ".assign", .inputs = {turned}, .variable = var});
    }
    return std::move(g_);
  }

  ir::Graph build(const GraphOptions& opt) {
    const int64_t D = hp_.n_embd, H = hp_.n_head, Hkv = hp_.n_head_kv, QD = hp_.q_dim(), KD = hp_.kv_dim();
    const bool gemma = hp_.arch == "gemma3";
    const bool qk_norm = gemma || hp_.arch == "qwen3" || hp_.arch == "qwen3moe";  // per-head Q/K RMSNorm before RoPE
    const int ids = param("input_ids", {"seq"}, kI32);
    const int positions = param("positions", {"seq"}, kI32);
    const int rows = param("cache_rows", {"seq"}, kI32);
    const int mask = param("attention_mask", {"seq", "ctx"}, kF32);
    const int kv_base = param("kv_base", {"seq"}, kI32);
    // Local (sliding-window) layers attend through their own mask: the last n_swa positions only;
    // with a ring, over their ring's rows, written at their own rows.
    const bool ring = opt.swa_ring && hp_.n_swa > 0;
    const int mask_swa = hp_.n_swa > 0 ? param("attention_mask_swa", {"seq", ring ? "ring" : "ctx"}, kF32) : ir::kNoInput;
    const int rows_swa = ring ? param("cache_rows_swa", {"seq"}, kI32) : rows;
    const int window_swa = ring ? param("kv_window_swa", {"seq", 2}, kI32) : kv_base;
    const int logit_rows = opt.logit_rows ? param("logit_rows", {"out"}, kI32) : ir::kNoInput;

    for (const char* longrope : {"rope_factors_long.weight", "rope_factors_short.weight"})
      if (f_.find_tensor(longrope))
        fail("{}: tensor '{}' (LongRoPE frequency factors) is not supported yet", f_.path(), longrope);
    const int embd = weight("token_embd.weight", {D, hp_.n_vocab});
    rope_factors_ = optional_weight("rope_freqs.weight", {hp_.n_rot / 2});
    int x = op(ir::Op::Embed, "embed", {embd, ids}, {"seq", D});
    if (hp_.embd_scale != 1.0f) x = scaled(ir::Op::Scale, "embed.scale", x, hp_.embd_scale, {"seq", D});

    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      const std::string b = fmt::format("blk.{}.", l);
      int h = rmsnorm(b + "attn_norm", x, weight(b + "attn_norm.weight", {D}));
      int q, k, v;
      if (hp_.arch == "phi3" && f_.find_tensor(b + "attn_qkv.weight")) {
        // Phi-3: one fused projection, Q then K then V along its output rows.
        int qkv = matmul(b + "qkv", h, weight(b + "attn_qkv.weight", {D, QD + 2 * KD}), QD + 2 * KD);
        q = slice(b + "q", qkv, 0, QD);
        k = slice(b + "k", qkv, QD, KD);
        v = slice(b + "v", qkv, QD + KD, KD);
      } else {
        // Q/K/V biases (Qwen2) are added before RoPE, inside the projection.
        q = matmul(b + "q", h, weight(b + "attn_q.weight", {D, QD}), QD, ir::kNoInput, optional_weight(b + "attn_q.bias", {QD}));
        k = matmul(b + "k", h, weight(b + "attn_k.weight", {D, KD}), KD, ir::kNoInput, optional_weight(b + "attn_k.bias", {KD}));
        v = matmul(b + "v", h, weight(b + "attn_v.weight", {D, KD}), KD, ir::kNoInput, optional_weight(b + "attn_v.bias", {KD}));
      }
      if (qk_norm) {
        q = rmsnorm_heads(b + "q_norm", q, weight(b + "attn_q_norm.weight", {hp_.head_dim}), H);
        k = rmsnorm_heads(b + "k_norm", k, weight(b + "attn_k_norm.weight", {hp_.head_dim}), Hkv);
      }
      q = rope(b + "q_rope", q, positions, H, rope_base(l));
      k = rope(b + "k_rope", k, positions, Hkv, rope_base(l));
      const bool local = hp_.is_swa(l);
      const char* state_rows = local && ring ? "ring_rows" : "rows";
      int kc = update_state(b + "key", local ? rows_swa : rows, k, state_rows);
      int vc = update_state(b + "value", local ? rows_swa : rows, v, state_rows);
      // gpt-oss: one learned logit per head joins each softmax's denominator (a key with no value).
      const int sinks = hp_.attn_sinks ? weight(b + "attn_sinks.weight", {H}) : ir::kNoInput;
      int att = op(ir::Op::Attention, b + "attention", {q, kc, vc, local ? mask_swa : mask, local ? window_swa : kv_base, sinks},
                   {"seq", QD});
      g_.node(att).scale = hp_.attn_scale;
      g_.node(att).heads = H;
      g_.node(att).kv_heads = Hkv;
      const int wo = weight(b + "attn_output.weight", {QD, D});
      if (gemma) {
        // Gemma normalises each sublayer's output before adding it to the residual stream.
        int a = matmul(b + "attn_out", att, wo, D);
        a = rmsnorm(b + "post_attention_norm", a, weight(b + "post_attention_norm.weight", {D}));
        x = op(ir::Op::Add, b + "attn_residual", {x, a}, {"seq", D});
      } else {
        x = matmul(b + "attn_out", att, wo, D, x, optional_weight(b + "attn_output.bias", {D}));
      }

      // (gpt-oss names its FFN's pre-norm post_attention_norm.)
      const std::string ffn_norm = hp_.arch == "gpt-oss" ? "post_attention_norm" : "ffn_norm";
      h = rmsnorm(b + ffn_norm, x, weight(b + ffn_norm + ".weight", {D}));
      if (hp_.is_moe()) {
        x = moe_ffn(b, h, x);
        continue;
      }
      int gate, up;
      if (!f_.find_tensor(b + "ffn_gate.weight") && hp_.arch == "phi3") {
        // Phi-3: gate and up stacked in one matrix, the gate first.
        int both = matmul(b + "ffn_gate_up", h, weight(b + "ffn_up.weight", {D, 2 * hp_.n_ff}), 2 * hp_.n_ff);
        gate = slice(b + "ffn_gate", both, 0, hp_.n_ff);
        up = slice(b + "ffn_up", both, hp_.n_ff, hp_.n_ff);
      } else {
        gate = matmul(b + "ffn_gate", h, weight(b + "ffn_gate.weight", {D, hp_.n_ff}), hp_.n_ff);
        up = matmul(b + "ffn_up", h, weight(b + "ffn_up.weight", {D, hp_.n_ff}), hp_.n_ff);
      }
      int act = op(gemma ? ir::Op::GeGlu : ir::Op::SwiGlu, b + "ffn_act", {gate, up}, {"seq", hp_.n_ff});
      const int wd = weight(b + "ffn_down.weight", {hp_.n_ff, D});
      if (gemma) {
        int f = matmul(b + "ffn_out", act, wd, D);
        f = rmsnorm(b + "post_ffw_norm", f, weight(b + "post_ffw_norm.weight", {D}));
        x = op(ir::Op::Add, b + "ffn_residual", {x, f}, {"seq", D});
      } else {
        x = matmul(b + "ffn_out", act, wd, D, x);
      }
    }
    // Rows whose logits nobody reads are dropped before the output norm (per row) and matmul.
    const char* out_rows = opt.logit_rows ? "out" : "seq";
    if (opt.logit_rows) x = op(ir::Op::GatherRows, "logit_rows.gather", {x, logit_rows}, {out_rows, D});
    x = rmsnorm("output_norm", x, weight("output_norm.weight", {D}), out_rows);
    const int out_w = hp_.tied_output ? embd : weight("output.weight", {D, hp_.n_vocab});
    int logits = matmul("logits", x, out_w, hp_.n_vocab, ir::kNoInput, ir::kNoInput, out_rows);
    if (hp_.final_softcap > 0) logits = scaled(ir::Op::SoftCap, "logits.softcap", logits, hp_.final_softcap, {out_rows, hp_.n_vocab});
    g_.add(ir::Node{.op = ir::Op::Result, .name = "logits", .inputs = {logits}, .shape = {out_rows, hp_.n_vocab}, .type = kF32});
    // A tensor the graph does not use means a model variant we do not understand: refuse it rather
    // than compute something else.
    for (const GgufTensorInfo& t : f_.tensors())
      if (!used_.count(t.name))
        fail("{}: tensor '{}' is not part of the {} graph npullm builds (unsupported model variant)", f_.path(), t.name, hp_.arch);
    return std::move(g_);
  }

 private:
  const HParams& hp_;
  const GgufFile& f_;
  ir::Graph g_;
  std::set<std::string> used_;
  const uint32_t kv_type_;
  int rope_factors_ = ir::kNoInput;
};

}  // namespace

void check_kv_type(const HParams& hp, GgmlType kv_type) {
  if (kv_type != GgmlType::F32 && kv_type != GgmlType::F16 && kv_type != GgmlType::Q8_0) {
    const uint32_t id = static_cast<uint32_t>(kv_type);
    fail("K/V cache type {} is not supported (use F16, F32 or Q8_0)",
         ggml_type_known(id) ? std::string(ggml_type_name(kv_type)) : "with id " + std::to_string(id));
  }
  if (kv_type == GgmlType::Q8_0 && hp.head_dim % 32 != 0)
    fail("K/V cache type Q8_0 needs a head size that is a multiple of 32 (its block size), but this model's is {}; "
         "use F16 or F32", hp.head_dim);
}

ir::Graph build_llama_graph(const HParams& hp, const GgufFile& weights, GgmlType kv_type, const GraphOptions& opt) {
  return Builder(hp, weights, kv_type).build(opt);
}

ir::Graph build_rerotate_graph(const HParams& hp, const GgufFile& weights, GgmlType kv_type, bool swa_ring) {
  return Builder(hp, weights, kv_type).build_rerotate(swa_ring);
}

}  // namespace npullm::model
