// Driver: loading a compiled blob, binding and re-binding user I/O without re-recording, the queue
// and its fences (polling and blocking), and refusing what cannot run.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"
#include "compiler/compiler.h"
#include "device/cpu/cpu_device.h"
#include "driver/driver.h"

namespace npullm {
namespace {

using ir::Op;

class NoWeights : public driver::WeightsBank {
 public:
  const void* resolve(const blob::WeightRef& w) const override { fail("no weight '{}'", w.name); }
};

// out = silu(a + b) * b over 1000 floats: two stages, one scratch buffer.
std::vector<uint8_t> small_blob() {
  ir::Graph g;
  int a = g.add({.op = Op::Parameter, .name = "a", .shape = {1000}, .type = 0, .io_role = ir::IoRole::Input});
  int b = g.add({.op = Op::Parameter, .name = "b", .shape = {1000}, .type = 0, .io_role = ir::IoRole::Input});
  int s = g.add({.op = Op::Add, .name = "sum", .inputs = {a, b}, .shape = {1000}, .type = 0});
  int o = g.add({.op = Op::SwiGlu, .name = "act", .inputs = {s, b}, .shape = {1000}, .type = 0});
  g.add({.op = Op::Result, .name = "out", .inputs = {o}, .shape = {1000}, .type = 0});
  return blob::write_blob(compiler::compile(g, {"small", {}}));
}

float expected(float a, float b) {
  const float s = a + b;
  return s / (1.0f + std::exp(-s)) * b;
}

TEST(Driver, RunRebindAndWaitBothWays) {
  auto dev = cpu::create_cpu_device(2);
  NoWeights bank;
  const auto bytes = small_blob();
  driver::Executable exe(bytes, "small", bank, *dev);
  EXPECT_EQ(exe.image().barriers.size(), 2u);
  driver::CommandList cl(exe);
  driver::Queue q(*dev);
  std::vector<float> a(1000), b(1000), out1(1000), out2(1000), a2(1000);
  for (int i = 0; i < 1000; ++i) {
    a[i] = 0.01f * i - 3;
    b[i] = 0.5f - 0.001f * i;
    a2[i] = -a[i];
  }
  driver::Fence f;
  EXPECT_THROW(q.submit(cl, f), Error);  // nothing bound yet
  cl.bind("a", a.data(), 4000);
  cl.bind("b", b.data(), 4000);
  cl.bind("out", out1.data(), 4000);
  q.submit(cl, f);
  f.wait_blocking();
  f.check();
  for (int i = 0; i < 1000; ++i) ASSERT_NEAR(out1[i], expected(a[i], b[i]), 1e-5f);
  // Re-bind two tensors (no re-recording) and wait by polling.
  cl.bind("a", a2.data(), 4000);
  cl.bind("out", out2.data(), 4000);
  q.submit(cl, f);
  f.wait_polling();
  EXPECT_TRUE(f.signaled());
  for (int i = 0; i < 1000; ++i) ASSERT_NEAR(out2[i], expected(a2[i], b[i]), 1e-5f);
  for (int i = 0; i < 1000; ++i) ASSERT_NEAR(out1[i], expected(a[i], b[i]), 1e-5f);  // untouched
}

// out = silu(silu(a + b) * a + (a + b)) * b over n floats: three intermediates in scratch.
std::vector<uint8_t> bigger_blob(int64_t n) {
  ir::Graph g;
  int a = g.add({.op = Op::Parameter, .name = "a", .shape = {n}, .type = 0, .io_role = ir::IoRole::Input});
  int b = g.add({.op = Op::Parameter, .name = "b", .shape = {n}, .type = 0, .io_role = ir::IoRole::Input});
  int s1 = g.add({.op = Op::Add, .name = "s1", .inputs = {a, b}, .shape = {n}, .type = 0});
  int s2 = g.add({.op = Op::SwiGlu, .name = "s2", .inputs = {s1, a}, .shape = {n}, .type = 0});
  int s3 = g.add({.op = Op::Add, .name = "s3", .inputs = {s2, s1}, .shape = {n}, .type = 0});
  int o = g.add({.op = Op::SwiGlu, .name = "act", .inputs = {s3, b}, .shape = {n}, .type = 0});
  g.add({.op = Op::Result, .name = "out", .inputs = {o}, .shape = {n}, .type = 0});
  return blob::write_blob(compiler::compile(g, {"bigger", {}}));
}

// Runs `exe` once on (a, b) with a command list of its own; returns out.
std::vector<float> run_once(const driver::Executable& exe, driver::Queue& q, const std::vector<float>& a,
                            const std::vector<float>& b) {
  driver::CommandList cl(exe);
  std::vector<float> out(a.size(), -1.0f);
  cl.bind("a", const_cast<float*>(a.data()), a.size() * 4);
  cl.bind("b", const_cast<float*>(b.data()), b.size() * 4);
  cl.bind("out", out.data(), out.size() * 4);
  q.run(cl);
  return out;
}

std::vector<float> ramp(size_t n, float start, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

// Two executables on one arena (sized by the larger), run in turns on one queue, give exactly what
// each gives with an arena of its own; each overwrites the other's intermediates in between.
TEST(Driver, ExecutablesSharingOneScratchArenaMatchSeparateArenas) {
  auto dev = cpu::create_cpu_device(2);
  NoWeights bank;
  const auto small_bytes = bigger_blob(1000);
  const auto big_bytes = bigger_blob(3000);
  driver::Queue q(*dev);
  const auto a1 = ramp(1000, -3, 0.01f), b1 = ramp(1000, 0.5f, -0.001f);
  const auto a2 = ramp(3000, 1, -0.002f), b2 = ramp(3000, -0.7f, 0.0005f);

  driver::Executable small_alone(small_bytes, "small", bank, *dev);
  driver::Executable big_alone(big_bytes, "bigger", bank, *dev);
  const uint64_t small_need = small_alone.image().scratch_bytes, big_need = big_alone.image().scratch_bytes;
  ASSERT_GT(small_need, 0u);
  ASSERT_GT(big_need, small_need);
  EXPECT_EQ(small_alone.scratch().size(), small_need);
  const auto want_small = run_once(small_alone, q, a1, b1);
  const auto want_big = run_once(big_alone, q, a2, b2);

  auto arena = std::make_shared<driver::ScratchArena>();
  driver::Executable small(small_bytes, "small", bank, *dev, arena);
  driver::Executable big(big_bytes, "bigger", bank, *dev, arena);
  EXPECT_EQ(arena->size(), big_need);  // the largest reservation, not the sum
  EXPECT_FALSE(arena->committed());
  driver::CommandList cs(small), cb(big);
  EXPECT_TRUE(arena->committed());
  std::vector<float> out_small(1000), out_big(3000);
  cs.bind("a", const_cast<float*>(a1.data()), 4000);
  cs.bind("b", const_cast<float*>(b1.data()), 4000);
  cs.bind("out", out_small.data(), 4000);
  cb.bind("a", const_cast<float*>(a2.data()), 12000);
  cb.bind("b", const_cast<float*>(b2.data()), 12000);
  cb.bind("out", out_big.data(), 12000);
  for (int round = 0; round < 2; ++round) {
    std::fill(out_small.begin(), out_small.end(), -1.0f);
    std::fill(out_big.begin(), out_big.end(), -1.0f);
    q.run(cs);
    q.run(cb);
    for (size_t i = 0; i < out_small.size(); ++i) ASSERT_EQ(out_small[i], want_small[i]) << "round " << round << " i " << i;
    for (size_t i = 0; i < out_big.size(); ++i) ASSERT_EQ(out_big[i], want_big[i]) << "round " << round << " i " << i;
  }
  // Once in use, the arena cannot grow under the command lists already recorded on it; a blob that
  // fits is still welcome.
  EXPECT_THROW(driver::Executable(bigger_blob(4000), "biggest", bank, *dev, arena), Error);
  driver::Executable fits(small_bytes, "small again", bank, *dev, arena);
  EXPECT_EQ(run_once(fits, q, a1, b1), want_small);
  EXPECT_EQ(arena->size(), big_need);
}

// A compiled GatherRows task: out[i] = (x + x)[idx[i]] over rows of 5, through blob, driver and device.
TEST(Driver, GatherRowsTaskPicksTheIndexedRows) {
  ir::Graph g;
  constexpr uint32_t kI32 = 26;
  int x = g.add({.op = Op::Parameter, .name = "x", .shape = {"seq", 5}, .type = 0, .io_role = ir::IoRole::Input});
  int idx = g.add({.op = Op::Parameter, .name = "idx", .shape = {"out"}, .type = kI32, .io_role = ir::IoRole::Input});
  int twice = g.add({.op = Op::Add, .name = "twice", .inputs = {x, x}, .shape = {"seq", 5}, .type = 0});
  int picked = g.add({.op = Op::GatherRows, .name = "picked", .inputs = {twice, idx}, .shape = {"out", 5}, .type = 0});
  g.add({.op = Op::Result, .name = "y", .inputs = {picked}, .shape = {"out", 5}, .type = 0});
  const auto bytes = blob::write_blob(compiler::compile(g, {"gather", {{"seq", 7}, {"out", 3}}}));
  auto dev = cpu::create_cpu_device(2);
  NoWeights bank;
  driver::Executable exe(bytes, "gather", bank, *dev);
  ASSERT_EQ(exe.io(exe.io_index("y")).shape, (std::vector<int64_t>{3, 5}));
  const auto xs = ramp(35, -1.0f, 0.25f);
  std::vector<int32_t> rows = {6, 0, 3};
  std::vector<float> y(15, -1.0f);
  driver::CommandList cl(exe);
  cl.bind("x", const_cast<float*>(xs.data()), 35 * 4);
  cl.bind("idx", rows.data(), 3 * 4);
  cl.bind("y", y.data(), 15 * 4);
  driver::Queue q(*dev);
  q.run(cl);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) ASSERT_EQ(y[i * 5 + j], 2 * xs[rows[i] * 5 + j]) << i << "," << j;
  // A gather whose output rows do not match its indices is refused by the compiler.
  ir::Graph bad = g;
  bad.node(picked).shape = {"seq", 5};
  bad.nodes().back().shape = {"seq", 5};
  EXPECT_THROW(compiler::compile(bad, {"bad", {{"seq", 7}, {"out", 3}}}), Error);
}

// y = silu(a + a) * (b + b) + b. The SwiGlu overwrites its gate (a + a) in place, which saves a
// buffer, unless something else still needs the gate: here, with `gate_is_output`, a graph output.
std::vector<uint8_t> swiglu_blob(bool gate_is_output) {
  ir::Graph g;
  int a = g.add({.op = Op::Parameter, .name = "a", .shape = {300}, .type = 0, .io_role = ir::IoRole::Input});
  int b = g.add({.op = Op::Parameter, .name = "b", .shape = {300}, .type = 0, .io_role = ir::IoRole::Input});
  int gate = g.add({.op = Op::Add, .name = "gate", .inputs = {a, a}, .shape = {300}, .type = 0});
  int up = g.add({.op = Op::Add, .name = "up", .inputs = {b, b}, .shape = {300}, .type = 0});
  int act = g.add({.op = Op::SwiGlu, .name = "act", .inputs = {gate, up}, .shape = {300}, .type = 0});
  int y = g.add({.op = Op::Add, .name = "y", .inputs = {act, b}, .shape = {300}, .type = 0});
  g.add({.op = Op::Result, .name = "y", .inputs = {y}, .shape = {300}, .type = 0});
  if (gate_is_output) g.add({.op = Op::Result, .name = "gate_out", .inputs = {gate}, .shape = {300}, .type = 0});
  return blob::write_blob(compiler::compile(g, {"swiglu", {}}));
}

TEST(Driver, SwiGluOverwritesItsGateOnlyWhenNothingElseNeedsIt) {
  auto dev = cpu::create_cpu_device(2);
  NoWeights bank;
  driver::Queue q(*dev);
  const auto a = ramp(300, -2, 0.013f), b = ramp(300, 0.9f, -0.004f);
  for (bool gate_is_output : {false, true}) {
    driver::Executable exe(swiglu_blob(gate_is_output), "swiglu", bank, *dev);
    std::vector<std::string> planned;
    for (const blob::PlanEntry& e : exe.image().plan) planned.push_back(e.name);
    // In place: act lives in gate's buffer (one plan entry for both); otherwise act has its own.
    const std::vector<std::string> want = gate_is_output ? std::vector<std::string>{"up", "act"} : std::vector<std::string>{"gate", "up"};
    EXPECT_EQ(planned, want);
    std::vector<float> y(300, -1.0f), gate_out(300, -1.0f);
    driver::CommandList cl(exe);
    cl.bind("a", const_cast<float*>(a.data()), 1200);
    cl.bind("b", const_cast<float*>(b.data()), 1200);
    cl.bind("y", y.data(), 1200);
    if (gate_is_output) cl.bind("gate_out", gate_out.data(), 1200);
    q.run(cl);
    for (int i = 0; i < 300; ++i) {
      const float g = a[i] + a[i], u = b[i] + b[i];
      ASSERT_NEAR(y[i], g / (1.0f + std::exp(-g)) * u + b[i], 1e-5f) << i;
      if (gate_is_output) {
        ASSERT_EQ(gate_out[i], g) << i;
      }
    }
  }
}

TEST(Driver, RefusesSmallBuffersUnknownNamesAndCorruptBlobs) {
  auto dev = cpu::create_cpu_device(1);
  NoWeights bank;
  auto bytes = small_blob();
  driver::Executable exe(bytes, "small", bank, *dev);
  driver::CommandList cl(exe);
  std::vector<float> small(10);
  EXPECT_THROW(cl.bind("a", small.data(), 40), Error);
  EXPECT_THROW(cl.bind("nope", small.data(), 40), Error);
  bytes[bytes.size() / 2] ^= 1;
  EXPECT_THROW(driver::Executable(bytes, "corrupt", bank, *dev), Error);
}

// A device refuses a MatMul whose weight layout it cannot read (here Panels16 for F32 weights,
// which only a compiler told to pack F32 would emit), naming the task, when the blob is loaded.
TEST(Driver, DeviceRefusesAWeightLayoutItCannotRead) {
  ir::Graph g;
  int x = g.add({.op = Op::Parameter, .name = "x", .shape = {4, 64}, .type = 0, .io_role = ir::IoRole::Input});
  int w = g.add({.op = Op::Weight, .name = "w", .shape = {16, 64}, .type = 0, .weight_dims = {64, 16}});
  int y = g.add({.op = Op::MatMul, .name = "y", .inputs = {x, w, ir::kNoInput, ir::kNoInput}, .shape = {4, 16}, .type = 0});
  g.add({.op = Op::Result, .name = "y", .inputs = {y}, .shape = {4, 16}, .type = 0});
  compiler::CompileOptions opt{"packed-f32", {}};
  opt.panels16_types = {GgmlType::F32};
  const std::vector<uint8_t> bytes = blob::write_blob(compiler::compile(g, opt));
  struct OneWeight : driver::WeightsBank {
    std::vector<float> data = std::vector<float>(2048);
    const void* resolve(const blob::WeightRef&) const override { return data.data(); }
  } bank;
  auto dev = cpu::create_cpu_device(1);
  try {
    driver::Executable exe(bytes, "packed-f32", bank, *dev);
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in layout 16, which this device cannot read"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace npullm
