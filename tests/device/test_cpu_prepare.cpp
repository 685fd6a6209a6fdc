// The CPU device's prepare() against tasks a damaged or hostile blob could carry: it sizes each
// thread's scratch from the tasks' dimensions, so absurd ones are refused with an npullm::Error
// naming the task, before anything is allocated (the blob-loader fuzz target runs the same
// prepare on every blob it loads).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "blob/task.h"
#include "common/error.h"
#include "device/cpu/cpu_device.h"

namespace npullm {
namespace {

using blob::OpCode;

blob::TaskDesc task(OpCode op, std::vector<int64_t> dims) {
  blob::TaskDesc t{};
  t.op = static_cast<uint32_t>(op);
  for (size_t d = 0; d < dims.size(); ++d) t.dim[d] = dims[d];
  return t;
}

std::string prepare_error(const blob::TaskDesc& t) {
  auto dev = cpu::create_cpu_device(2);
  const blob::BarrierDesc barrier{1, 0};
  try {
    dev->prepare(device::Program{&t, 1, &barrier, 1});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CpuPrepare, RefusesAbsurdDimensions) {
  // Attention over 2^40 K/V rows: its scratch would be 8 x 2^40 floats per thread.
  std::string err = prepare_error(task(OpCode::Attention, {1, 8, 8, 64, int64_t{1} << 40, int64_t{1} << 40}));
  EXPECT_NE(err.find("task 0 (Attention) has dimension 4 = 1099511627776, outside 0..2147483648"), std::string::npos) << err;
  // Dimensions that fit, but a scratch per thread that does not: a 2^21-wide MatMul (16 rows of
  // it), attention over 8M rows of 256-wide heads (each block of 256 keys keeps a partial output
  // per head: 8 x 258 floats).
  err = prepare_error(task(OpCode::MatMul, {1, int64_t{1} << 21, 16}));
  EXPECT_NE(err.find("floats of scratch per thread, more than the 16777216"), std::string::npos) << err;
  err = prepare_error(task(OpCode::Attention, {1, 8, 8, 256, int64_t{1} << 23, int64_t{1} << 23}));
  EXPECT_NE(err.find("floats of scratch per thread"), std::string::npos) << err;
  // Activations of 2^20 x 2^20 floats, which a MatMul with a prologue copies per stage.
  err = prepare_error(task(OpCode::MatMul, {int64_t{1} << 20, int64_t{1} << 20, 16}));
  EXPECT_NE(err.find("reads 1048576 x 1048576 activations"), std::string::npos) << err;
  EXPECT_NE(prepare_error(task(OpCode::Add, {-4})).find("dimension 0 = -4"), std::string::npos);
  EXPECT_NE(prepare_error(task(OpCode::MoeRoute, {1, int64_t{1} << 30, 2})).find("scratch per thread"), std::string::npos);
}

TEST(CpuPrepare, AcceptsRealSizes) {
  // Attention over 128k rows with 8 query heads per K/V head, a 28,672-wide FFN matmul of 512 rows,
  // Gemma 3's vocabulary as an Add's element count over a chunk of logits.
  EXPECT_EQ(prepare_error(task(OpCode::Attention, {1, 32, 4, 128, 131072, 131072})), "");
  EXPECT_EQ(prepare_error(task(OpCode::MatMul, {512, 28672, 4096})), "");
  EXPECT_EQ(prepare_error(task(OpCode::Add, {int64_t{262144} * 512})), "");
}

}  // namespace
}  // namespace npullm
