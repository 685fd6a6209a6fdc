// Compiler passes: static reshape, lift-state, memory planning by liveness, stage scheduling.
#include <algorithm>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "common/error.h"
#include "blob/blob_image.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "compiler/passes.h"
#include "formats/gguf.h"
#include "model/llama_graph.h"
#include "test_util.h"

namespace npullm {
namespace {

using ir::Op;
constexpr uint32_t kF32 = 0, kI32 = 26;

// x -> state var "s" [ctx, 4] updated in place at rows, plus y = x + x.
ir::Graph state_graph(bool in_place) {
  ir::Graph g;
  int x = g.add({.op = Op::Parameter, .name = "x", .shape = {"seq", 4}, .type = kF32, .io_role = ir::IoRole::Input});
  int rows = g.add({.op = Op::Parameter, .name = "rows", .shape = {"seq"}, .type = kI32, .io_role = ir::IoRole::Input});
  g.variables.push_back({"s", {"ctx", 4}, kF32});
  int r = g.add({.op = Op::ReadValue, .name = "s.read", .shape = {"ctx", 4}, .type = kF32, .variable = "s"});
  int upd = in_place ? g.add({.op = Op::ScatterRows, .name = "s.upd", .inputs = {r, rows, x}, .shape = {"ctx", 4}, .type = kF32})
                     : g.add({.op = Op::Add, .name = "s.add", .inputs = {r, r}, .shape = {"ctx", 4}, .type = kF32});
  g.add({.op = Op::Assign, .name = "s.assign", .inputs = {upd}, .variable = "s"});
  int y = g.add({.op = Op::Add, .name = "y", .inputs = {x, x}, .shape = {"seq", 4}, .type = kF32});
  g.add({.op = Op::Result, .name = "y", .inputs = {y}, .shape = {"seq", 4}, .type = kF32});
  return g;
}

// x -> per-head norm -> Rope, and a -> norm -> Add(x, .): fuse_stages folds both norms, unless
// another node reads what the folded op would update in place (`x_read_twice`: x also feeds y;
// `norm_read_twice`: the post-norm also feeds z).
ir::Graph norm_graph(bool x_read_twice, bool norm_read_twice) {
  ir::Graph g;
  int x = g.add({.op = Op::Parameter, .name = "x", .shape = {2, 8}, .type = kF32, .io_role = ir::IoRole::Input});
  int pos = g.add({.op = Op::Parameter, .name = "pos", .shape = {2}, .type = kI32, .io_role = ir::IoRole::Input});
  int hw = g.add({.op = Op::Parameter, .name = "hw", .shape = {4}, .type = kF32, .io_role = ir::IoRole::Input});
  int w = g.add({.op = Op::Parameter, .name = "w", .shape = {8}, .type = kF32, .io_role = ir::IoRole::Input});
  int q = g.add({.op = Op::Add, .name = "q", .inputs = {x, x}, .shape = {2, 8}, .type = kF32});
  int qn = g.add({.op = Op::RmsNorm, .name = "q_norm", .inputs = {q, hw}, .shape = {2, 8}, .type = kF32, .eps = 1e-6f, .heads = 2});
  int qr = g.add({.op = Op::Rope, .name = "q_rope", .inputs = {qn, pos}, .shape = {2, 8}, .type = kF32, .n_rot = 4, .heads = 2});
  int a = g.add({.op = Op::Add, .name = "a", .inputs = {qr, x}, .shape = {2, 8}, .type = kF32});
  int an = g.add({.op = Op::RmsNorm, .name = "post_norm", .inputs = {a, w}, .shape = {2, 8}, .type = kF32, .eps = 1e-6f});
  int out = g.add({.op = Op::Add, .name = "residual", .inputs = {x, an}, .shape = {2, 8}, .type = kF32});
  g.add({.op = Op::Result, .name = "out", .inputs = {out}, .shape = {2, 8}, .type = kF32});
  if (x_read_twice) {
    int y = g.add({.op = Op::Add, .name = "y", .inputs = {q, q}, .shape = {2, 8}, .type = kF32});
    g.add({.op = Op::Result, .name = "y", .inputs = {y}, .shape = {2, 8}, .type = kF32});
  }
  if (norm_read_twice) g.add({.op = Op::Result, .name = "z", .inputs = {an}, .shape = {2, 8}, .type = kF32});
  return g;
}

int count_op(const ir::Graph& g, Op op) {
  return static_cast<int>(std::count_if(g.nodes().begin(), g.nodes().end(), [&](const ir::Node& n) { return n.op == op; }));
}

TEST(Compiler, FuseStagesFoldsPerHeadNormsAndResidualAddsOnlyWhereNothingElseReads) {
  {
    const ir::Graph f = compiler::fuse_stages(norm_graph(false, false));
    EXPECT_EQ(count_op(f, Op::RmsNorm), 1);  // the post-norm, now adding the residual
    EXPECT_EQ(count_op(f, Op::Add), 2);      // q and a
    for (const ir::Node& n : f.nodes()) {
      if (n.op == Op::Rope) {
        EXPECT_EQ(n.prologue, Op::RmsNorm);
        EXPECT_EQ(f.node(n.inputs.at(0)).name, "q");
        EXPECT_EQ(f.node(n.inputs.at(3)).name, "hw");
      }
      if (n.op == Op::RmsNorm) {
        EXPECT_EQ(n.name, "residual");
        EXPECT_EQ(f.node(n.inputs.at(0)).name, "a");
        EXPECT_EQ(f.node(n.inputs.at(2)).name, "x");
      }
    }
  }
  {
    // q is read by y too: a Rope normalising in place would change what y reads.
    const ir::Graph f = compiler::fuse_stages(norm_graph(true, false));
    EXPECT_EQ(count_op(f, Op::RmsNorm), 2);
    for (const ir::Node& n : f.nodes())
      if (n.op == Op::Rope) EXPECT_FALSE(n.has_prologue());
  }
  {
    // The post-norm is an output too: it must stay.
    const ir::Graph f = compiler::fuse_stages(norm_graph(false, true));
    EXPECT_EQ(count_op(f, Op::RmsNorm), 1);  // the per-head norm folded, the post-norm kept
    EXPECT_EQ(count_op(f, Op::Add), 3);
  }
  // Either way the graph compiles.
  for (bool twice : {false, true})
    EXPECT_NO_THROW(compiler::compile(norm_graph(twice, !twice), {"t", {}}));
}

TEST(Compiler, StaticReshapeFixesEverySymbolOrFails) {
  ir::Graph g = compiler::static_reshape(state_graph(true), {{"seq", 3}, {"ctx", 16}});
  for (const ir::Node& n : g.nodes())
    for (const ir::Dim& d : n.shape) EXPECT_FALSE(d.is_dynamic()) << n.name;
  EXPECT_EQ(g.node(0).shape[0].value, 3);
  EXPECT_THROW(compiler::static_reshape(state_graph(true), {{"seq", 3}}), Error);
  EXPECT_THROW(compiler::static_reshape(state_graph(true), {{"seq", 0}, {"ctx", 4}}), Error);
}

TEST(Compiler, LiftStateInPlaceUpdateBecomesOneStateIo) {
  ir::Graph g = compiler::lift_state(compiler::static_reshape(state_graph(true), {{"seq", 2}, {"ctx", 8}}));
  int states = 0;
  for (const ir::Node& n : g.nodes()) {
    EXPECT_NE(n.op, Op::ReadValue);
    EXPECT_NE(n.op, Op::Assign);
    if (n.op == Op::Parameter && n.io_role == ir::IoRole::State) {
      ++states;
      EXPECT_EQ(n.name, "s");
    }
  }
  EXPECT_EQ(states, 1);
  blob::BlobImage img = compiler::compile(state_graph(true), {"t", {{"seq", 2}, {"ctx", 8}}});
  int state_ios = 0;
  for (const auto& io : img.ios) state_ios += io.role == blob::IoRole::State;
  EXPECT_EQ(state_ios, 1);
}

// x [seq, width] scattered into state "s" [ctx, width] of type `state` (the scatter node has type
// `scatter`), then read by y = x + x so the graph has an output.
ir::Graph typed_state_graph(int64_t width, uint32_t state, uint32_t scatter) {
  ir::Graph g;
  int x = g.add({.op = Op::Parameter, .name = "x", .shape = {"seq", width}, .type = kF32, .io_role = ir::IoRole::Input});
  int rows = g.add({.op = Op::Parameter, .name = "rows", .shape = {"seq"}, .type = kI32, .io_role = ir::IoRole::Input});
  g.variables.push_back({"s", {"ctx", width}, state});
  int r = g.add({.op = Op::ReadValue, .name = "s.read", .shape = {"ctx", width}, .type = state, .variable = "s"});
  int upd = g.add({.op = Op::ScatterRows, .name = "s.upd", .inputs = {r, rows, x}, .shape = {"ctx", width}, .type = scatter});
  g.add({.op = Op::Assign, .name = "s.assign", .inputs = {upd}, .variable = "s"});
  int y = g.add({.op = Op::Add, .name = "y", .inputs = {x, x}, .shape = {"seq", width}, .type = kF32});
  g.add({.op = Op::Result, .name = "y", .inputs = {y}, .shape = {"seq", width}, .type = kF32});
  return g;
}

TEST(Compiler, StateBytesFollowTheStateTypeAndRowsMustBeWholeBlocks) {
  constexpr uint32_t kF16 = 1, kQ8_0 = 8;
  const std::map<std::string, int64_t> sym{{"seq", 2}, {"ctx", 8}};
  for (auto [type, bytes] : {std::pair{kF32, 8u * 64 * 4}, {kF16, 8u * 64 * 2}, {kQ8_0, 8u * 2 * 34}}) {
    blob::BlobImage img = compiler::compile(typed_state_graph(64, type, type), {"t", sym});
    for (const auto& io : img.ios)
      if (io.role == blob::IoRole::State) {
        EXPECT_EQ(io.type, type);
        EXPECT_EQ(io.bytes, bytes) << type;
      }
    ASSERT_EQ(img.tasks.at(0).op, uint32_t(blob::OpCode::ScatterRows));
    EXPECT_EQ(img.tasks.at(0).type[2], type);
  }
  // Rows of 48 are not whole Q8_0 blocks (although the whole 8 x 48 state is).
  try {
    compiler::compile(typed_state_graph(48, kQ8_0, kQ8_0), {"t", sym});
    ADD_FAILURE() << "Q8_0 rows of 48 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not whole Q8_0 blocks"), std::string::npos) << e.what();
  }
  // A scatter that would write another type than the state holds.
  EXPECT_THROW(compiler::compile(typed_state_graph(64, kQ8_0, kF16), {"t", sym}), Error);
}

TEST(Compiler, LiftStateOtherwiseMakesPastInputAndPresentOutput) {
  ir::Graph g = compiler::lift_state(compiler::static_reshape(state_graph(false), {{"seq", 2}, {"ctx", 8}}));
  bool past = false, present = false;
  for (const ir::Node& n : g.nodes()) {
    past |= n.op == Op::Parameter && n.name == "past.s";
    present |= n.op == Op::Result && n.name == "present.s";
  }
  EXPECT_TRUE(past);
  EXPECT_TRUE(present);
}

TEST(Compiler, LiftStateRejectsUnpairedVariables) {
  ir::Graph g;
  g.add({.op = Op::ReadValue, .name = "r", .shape = {4}, .type = kF32, .variable = "v"});
  EXPECT_THROW(compiler::lift_state(g), Error);
}

TEST(Compiler, MemoryPlanNeverOverlapsBuffersLiveTogetherAndReusesTheRest) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<compiler::BufferUse> b;
    uint64_t total = 0;
    for (int i = 0; i < 40; ++i) {
      uint32_t first = rng() % 30, len = rng() % 5;
      b.push_back({fmt::format("b{}", i), 1 + rng() % 5000, first, first + len, 0});
      total += (b.back().bytes + 63) / 64 * 64;
    }
    const uint64_t arena = compiler::plan_memory(b);
    EXPECT_LE(arena, total);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b[i].offset % 64, 0u);
      EXPECT_LE(b[i].offset + b[i].bytes, arena);
      for (size_t j = i + 1; j < b.size(); ++j) {
        const bool live = b[i].first <= b[j].last && b[j].first <= b[i].last;
        const bool overlap = b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes;
        EXPECT_FALSE(live && overlap) << b[i].name << " and " << b[j].name;
      }
    }
  }
  // A chain where each buffer dies as the next is born needs only two slots.
  std::vector<compiler::BufferUse> chain;
  for (uint32_t s = 0; s < 10; ++s) chain.push_back({"c", 1000, s, s + 1, 0});
  EXPECT_EQ(compiler::plan_memory(chain), 2 * 1024u);
}

TEST(Compiler, LlamaBlobHasStagesBarriersAndStateIo) {
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.gguf");
  auto f = GgufFile::open(test::shared_path("models/llama2c/stories260K.gguf"));
  const auto hp = model::HParams::from_gguf(*f);
  const ir::Graph g = model::build_llama_graph(hp, *f, GgmlType::F16);
  const blob::BlobImage img = compiler::compile(g, {"generate", {{"seq", 1}, {"ctx", 64}, {"rows", 64}}});
  // Tasks are sorted by stage and the barrier counts add up to the tasks of each stage.
  std::vector<uint32_t> count(img.barriers.size(), 0);
  for (size_t i = 0; i < img.tasks.size(); ++i) {
    if (i) {
      EXPECT_LE(img.tasks[i - 1].stage, img.tasks[i].stage);
    }
    count.at(img.tasks[i].stage)++;
  }
  for (size_t s = 0; s < count.size(); ++s) EXPECT_EQ(count[s], img.barriers[s].count);
  // Q, K and V projections of a layer are independent: fewer stages than tasks.
  EXPECT_LT(img.barriers.size(), img.tasks.size());
  int states = 0;
  for (const auto& io : img.ios)
    if (io.role == blob::IoRole::State) {
      ++states;
      EXPECT_EQ(io.shape, (std::vector<int64_t>{64, 4, 8}));
    }
  EXPECT_EQ(states, 2 * hp.n_layer);
  // Weights are referenced, never embedded: the blob names each tensor once.
  EXPECT_EQ(img.weights.size(), f->tensors().size());
}

// The K/V type reaches every place that touches the state: the State I/O's type and byte size,
// the ScatterRows destination, Attention's K/V operands, and the in-place Rope of the rerotate graph.
TEST(Compiler, StateBuffersAndOperandTypesFollowTheKvType) {
  NPULLM_REQUIRE_SHARED("golden/llama-spm.Q8_0.gguf");  // head size 32, so Q8_0 is possible
  auto f = GgufFile::open(test::shared_path("golden/llama-spm.Q8_0.gguf"));
  const auto hp = model::HParams::from_gguf(*f);
  ASSERT_EQ(hp.head_dim, 32);
  for (GgmlType kv : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    SCOPED_TRACE(ggml_type_name(kv));
    const uint32_t t = static_cast<uint32_t>(kv);
    const int64_t ctx = 48;
    const uint64_t want_bytes = ggml_row_bytes(kv, ctx * hp.n_head_kv * hp.head_dim);  // Q8_0: 34 bytes / 32 values
    const blob::BlobImage img = compiler::compile(model::build_llama_graph(hp, *f, kv), {"p", {{"seq", 5}, {"ctx", ctx}, {"rows", ctx}}});
    int states = 0;
    for (const auto& io : img.ios)
      if (io.role == blob::IoRole::State) {
        ++states;
        EXPECT_EQ(io.type, t) << io.name;
        EXPECT_EQ(io.bytes, want_bytes) << io.name;
      }
    EXPECT_EQ(states, 2 * hp.n_layer);
    int scatters = 0, attentions = 0;
    for (const auto& task : img.tasks) {
      if (task.op == uint32_t(blob::OpCode::ScatterRows)) {
        ++scatters;
        EXPECT_EQ(task.type[0], 0u);  // F32 source rows
        EXPECT_EQ(task.type[2], t);
      } else if (task.op == uint32_t(blob::OpCode::Attention)) {
        ++attentions;
        EXPECT_EQ(task.type[0], 0u);
        EXPECT_EQ(task.type[1], t);
        EXPECT_EQ(task.type[2], t);
      } else if (task.op == uint32_t(blob::OpCode::Rope)) {
        EXPECT_EQ(task.type[0], 0u);  // q / k of the new tokens stay F32
      }
    }
    EXPECT_EQ(scatters, 2 * hp.n_layer);
    EXPECT_EQ(attentions, hp.n_layer);

    const blob::BlobImage rot = compiler::compile(model::build_rerotate_graph(hp, *f, kv), {"r", {{"rows", ctx}}});
    int ropes = 0;
    for (const auto& task : rot.tasks) {
      ASSERT_EQ(task.op, uint32_t(blob::OpCode::Rope));
      EXPECT_EQ(task.type[0], t);
      ++ropes;
    }
    EXPECT_EQ(ropes, hp.n_layer);
    for (const auto& io : rot.ios) {
      if (io.role == blob::IoRole::State) {
        EXPECT_EQ(io.bytes, want_bytes) << io.name;
      }
    }
  }
  // Q8_0 blocks cannot straddle heads: a head size that is not a multiple of 32 is refused.
  NPULLM_REQUIRE_SHARED("models/llama2c/stories260K.gguf");
  auto s = GgufFile::open(test::shared_path("models/llama2c/stories260K.gguf"));
  const auto shp = model::HParams::from_gguf(*s);
  EXPECT_THROW(model::build_llama_graph(shp, *s, GgmlType::Q8_0), Error);
  EXPECT_THROW(model::build_rerotate_graph(shp, *s, GgmlType::Q8_0), Error);
  EXPECT_THROW(model::build_llama_graph(shp, *s, GgmlType::Q4_0), Error);
}

}  // namespace
}  // namespace npullm

namespace npullm {
namespace {

// A MatMul read only by SliceCols (Phi-3's fused q/k/v) becomes one MatMul per slice over the
// weight's rows: one weight record, each task pointed `offset` rows in (a row's bytes, or the
// padded stride of Panels16); views that do not start and end on panel boundaries keep the rows.
TEST(Compiler, SlicesOfAFusedProjectionBecomeMatMulsOverRowsOfOneWeight) {
  constexpr uint32_t kQ8_0 = 8;
  for (int64_t cut : {16, 24}) {
    ir::Graph g;
    int x = g.add({.op = Op::Parameter, .name = "x", .shape = {"seq", 64}, .type = kF32, .io_role = ir::IoRole::Input});
    int w = g.add({.op = Op::Weight, .name = "qkv", .shape = {48, 64}, .type = kQ8_0, .weight_dims = {64, 48}});
    int y = g.add({.op = Op::MatMul, .name = "y", .inputs = {x, w, ir::kNoInput, ir::kNoInput}, .shape = {"seq", 48}, .type = kF32});
    int a = g.add({.op = Op::SliceCols, .name = "a", .inputs = {y}, .shape = {"seq", cut}, .type = kF32, .offset = 0});
    int b = g.add({.op = Op::SliceCols, .name = "b", .inputs = {y}, .shape = {"seq", 48 - cut}, .type = kF32, .offset = cut});
    g.add({.op = Op::Result, .name = "a", .inputs = {a}, .shape = {"seq", cut}, .type = kF32});
    g.add({.op = Op::Result, .name = "b", .inputs = {b}, .shape = {"seq", 48 - cut}, .type = kF32});
    compiler::CompileOptions opt{"s", {{"seq", 1}}};
    opt.panels16_types = {GgmlType::Q8_0};
    const std::vector<uint8_t> bytes = blob::write_blob(compiler::compile(g, opt));
    const blob::BlobImage img = blob::read_blob(bytes.data(), bytes.size(), "s");
    ASSERT_EQ(img.weights.size(), 1u);
    const bool packed = cut % 16 == 0;
    EXPECT_EQ(img.weights[0].layout, packed ? 16u : 0u);
    EXPECT_EQ(img.weights[0].bytes, packed ? 3u * 16 * 68 + 64 : 48u * 68);
    std::vector<int64_t> rows, addends;
    for (size_t i = 0; i < img.tasks.size(); ++i) {
      EXPECT_NE(img.tasks[i].op, static_cast<uint32_t>(blob::OpCode::SliceCols));
      if (img.tasks[i].op == static_cast<uint32_t>(blob::OpCode::MatMul)) rows.push_back(img.tasks[i].dim[2]);
    }
    for (const blob::Reloc& r : img.relocs)
      if (r.kind == blob::RelocKind::Weight) addends.push_back(r.addend);
    std::sort(rows.begin(), rows.end());
    std::sort(addends.begin(), addends.end());
    EXPECT_EQ(rows, (std::vector<int64_t>{std::min(cut, 48 - cut), std::max(cut, 48 - cut)}));
    EXPECT_EQ(addends, (std::vector<int64_t>{0, cut * 68}));  // 64 Q8_0 values: 68 bytes, a whole stride
    EXPECT_EQ(img.barriers.size(), 1u);  // both matmuls in one stage, no slice stage
    // Unfused, the slices stay.
    opt.fuse_stages = false;
    const blob::BlobImage plain = compiler::compile(g, opt);
    EXPECT_EQ(plain.barriers.size(), 2u);
  }
}

// Weights read as MatMul weights, of a listed type, are stored as Panels16 (rows padded to whole
// dwords), and so is a tied embedding (an Embed's table and a MatMul's weight), its Embed told so;
// a table only an Embed reads stays as rows.
TEST(Compiler, Panels16OnlyForMatMulOnlyWeightsOfListedTypes) {
  constexpr uint32_t kQ4_0 = 2, kQ8_0 = 8;
  ir::Graph g;
  auto weight = [&](const char* name, uint32_t type, int64_t K, int64_t N) {
    return g.add({.op = Op::Weight, .name = name, .shape = {N, K}, .type = type, .weight_dims = {K, N}});
  };
  int ids = g.add({.op = Op::Parameter, .name = "ids", .shape = {"seq"}, .type = kI32, .io_role = ir::IoRole::Input});
  int embd = weight("embd", kQ8_0, 64, 32);
  int w1 = weight("w1", kQ4_0, 64, 40);
  int w2 = weight("w2", kQ4_0, 32, 16);
  int lone = weight("lone", kQ8_0, 64, 32);
  int x = g.add({.op = Op::Embed, .name = "x", .inputs = {embd, ids}, .shape = {"seq", 64}, .type = kF32});
  int x2 = g.add({.op = Op::Embed, .name = "x2", .inputs = {lone, ids}, .shape = {"seq", 64}, .type = kF32});
  int y = g.add({.op = Op::MatMul, .name = "y", .inputs = {x, w1, ir::kNoInput, ir::kNoInput}, .shape = {"seq", 40}, .type = kF32});
  int z = g.add({.op = Op::MatMul, .name = "z", .inputs = {x, embd, ir::kNoInput, ir::kNoInput}, .shape = {"seq", 32}, .type = kF32});
  int r = g.add({.op = Op::MatMul, .name = "r", .inputs = {z, w2, ir::kNoInput, ir::kNoInput}, .shape = {"seq", 16}, .type = kF32});
  g.add({.op = Op::Result, .name = "y", .inputs = {y}, .shape = {"seq", 40}, .type = kF32});
  g.add({.op = Op::Result, .name = "r", .inputs = {r}, .shape = {"seq", 16}, .type = kF32});
  g.add({.op = Op::Result, .name = "x2", .inputs = {x2}, .shape = {"seq", 64}, .type = kF32});

  for (bool packed : {false, true}) {
    compiler::CompileOptions opt{"p", {{"seq", 4}}};
    if (packed) opt.panels16_types = {GgmlType::Q4_0, GgmlType::Q8_0};
    const std::vector<uint8_t> bytes = blob::write_blob(compiler::compile(g, opt));
    const blob::BlobImage img = blob::read_blob(bytes.data(), bytes.size(), "p");
    std::map<std::string, blob::WeightRef> refs;
    for (const auto& w : img.weights) refs[w.name] = w;
    ASSERT_EQ(refs.size(), 4u);
    EXPECT_EQ(refs["embd"].layout, packed ? 16u : 0u);
    EXPECT_EQ(refs["embd"].bytes, packed ? 2u * 16 * 68 + 64 : 32u * 68);
    EXPECT_EQ(refs["lone"].layout, 0u);
    EXPECT_EQ(refs["lone"].bytes, 32u * 68);
    EXPECT_EQ(refs["w2"].layout, packed ? 16u : 0u);  // 18-byte rows, padded to 20
    EXPECT_EQ(refs["w2"].bytes, packed ? 16u * 20 + 64 : 16u * 18);
    EXPECT_EQ(refs["w1"].layout, packed ? 16u : 0u);
    EXPECT_EQ(refs["w1"].bytes, packed ? 3u * 16 * 36 + 64 : 40u * 36);
    int matmuls = 0;
    for (const blob::TaskDesc& t : img.tasks) {
      if (t.op != static_cast<uint32_t>(blob::OpCode::MatMul)) continue;
      ++matmuls;
      EXPECT_EQ(t.iparam[0], packed ? 16 : 0) << "MatMul with N = " << t.dim[2];
    }
    EXPECT_EQ(matmuls, 3);
    std::vector<int32_t> embeds;  // x reads the tied table, x2 the lone one (tasks in graph order)
    for (const blob::TaskDesc& t : img.tasks)
      if (t.op == static_cast<uint32_t>(blob::OpCode::Embed)) embeds.push_back(t.iparam[0]);
    EXPECT_EQ(embeds, (std::vector<int32_t>{packed ? 16 : 0, 0}));
  }
}

}  // namespace
}  // namespace npullm
