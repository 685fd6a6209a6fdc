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

}  // namespace
}  // namespace npullm
