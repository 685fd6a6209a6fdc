// The CPU device's decode attention split over its keys across threads (issue 48,
// device/cpu/attention_split.h): an Attention task of a few queries over a long context runs as
// parts of its blocks on every thread and a merge per run of heads, and must give the bits of the
// kernel on one thread (cpu::attention), for a plain task, a batch of queries each in its own
// window of the state (one of them outside it: zeros), and a ring visited from a later row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "blob/task.h"
#include "device/cpu/cpu_device.h"
#include "device/cpu/kernels.h"
#include "formats/ggml_types.h"
#include "test_util.h"

namespace npullm {
namespace {

using blob::OpCode;
using test::same_bits;

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

struct Case {
  int64_t S, H, Hkv, hd, C, R;
  GgmlType kv;
  std::vector<int32_t> windows;  // per query: first row (and ring start with two columns); empty: none
  int cols = 1;
};

struct Data {
  std::vector<float> q, mask, sinks;
  std::vector<uint8_t> k, v;
};

Data make_data(const Case& c, uint32_t seed) {
  Data d;
  d.q = randn(static_cast<size_t>(c.S * c.H * c.hd), seed);
  const std::vector<float> kf = randn(static_cast<size_t>(c.R * c.Hkv * c.hd), seed + 1);
  const std::vector<float> vf = randn(kf.size(), seed + 2);
  d.k.resize(ggml_row_bytes(c.kv, static_cast<int64_t>(kf.size())));
  d.v.resize(d.k.size());
  quantize_row(c.kv, kf.data(), d.k.data(), static_cast<int64_t>(kf.size()));
  quantize_row(c.kv, vf.data(), d.v.data(), static_cast<int64_t>(vf.size()));
  // Query s sees its window's keys but a few holes and its last 40 + 100 s rows.
  d.mask.assign(static_cast<size_t>(c.S * c.C), 0.0f);
  for (int64_t s = 0; s < c.S; ++s)
    for (int64_t t = 0; t < c.C; ++t)
      if (t % 17 == 3 || t >= c.C - 40 - 100 * s) d.mask[static_cast<size_t>(s * c.C + t)] = -std::numeric_limits<float>::infinity();
  d.sinks = randn(static_cast<size_t>(c.H), seed + 3);
  return d;
}

// The task on a device of `threads`; split: how many of its stages the device split over keys.
std::vector<float> run_device(const Case& c, Data& d, int threads, int64_t* split) {
  std::vector<float> out(static_cast<size_t>(c.S * c.H * c.hd), -7.0f);
  std::vector<int32_t> windows = c.windows;
  blob::TaskDesc t{};
  t.op = static_cast<uint32_t>(OpCode::Attention);
  const int64_t dims[] = {c.S, c.H, c.Hkv, c.hd, c.C, c.R};
  for (int i = 0; i < 6; ++i) t.dim[i] = dims[i];
  const void* ptrs[] = {d.q.data(), d.k.data(), d.v.data(), d.mask.data(), out.data(), windows.empty() ? nullptr : windows.data(),
                        d.sinks.data()};
  for (int i = 0; i < 7; ++i) t.ptr[i] = reinterpret_cast<uint64_t>(ptrs[i]);
  t.type[1] = t.type[2] = static_cast<uint32_t>(c.kv);
  t.fparam[0] = 0.125f;
  t.iparam[0] = c.cols;
  auto dev = cpu::create_cpu_device(threads);
  const blob::BarrierDesc barrier{1, 0};
  const device::Program prog{&t, 1, &barrier, 1};
  dev->prepare(prog);
  dev->execute(prog);
  *split = dev->counters().split_attention_stages;
  return out;
}

// The kernel on this thread, query by query, as the unsplit device path reads each window.
std::vector<float> run_kernel(const Case& c, const Data& d) {
  std::vector<float> out(static_cast<size_t>(c.S * c.H * c.hd), -7.0f), work(static_cast<size_t>(cpu::attention_work_floats(c.C, c.hd)));
  const size_t row = ggml_row_bytes(c.kv, c.Hkv * c.hd);
  for (int64_t s = 0; s < c.S; ++s) {
    float* o = out.data() + s * c.H * c.hd;
    int64_t first = 0, rot = 0;
    if (!c.windows.empty()) {
      first = c.windows[static_cast<size_t>(s * c.cols)];
      rot = c.cols == 2 ? c.windows[static_cast<size_t>(s * c.cols + 1)] : 0;
      if (first < 0 || first + c.C > c.R) {
        std::fill(o, o + c.H * c.hd, 0.0f);
        continue;
      }
    }
    cpu::attention(d.q.data() + s * c.H * c.hd, d.k.data() + first * row, c.kv, d.v.data() + first * row, c.kv,
                   d.mask.data() + s * c.C, o, c.H, c.Hkv, c.hd, c.C, rot, 0.125f, 0, c.H, work.data(), d.sinks.data());
  }
  return out;
}

// The first element where a and b differ in their bits, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (i >= b.size() || !same_bits(a[i], b[i])) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(a.size());
}

TEST(AttentionSplit, DeviceGivesTheBitsOfOneThread) {
  const Case cases[] = {
      {1, 14, 2, 64, 3000, 3000, GgmlType::F16, {}},                       // Qwen2.5's heads, one decode query
      {1, 8, 1, 256, 2600, 2600, GgmlType::Q8_0, {}},                      // Gemma 3's one K/V head
      {3, 8, 2, 64, 2100, 6400, GgmlType::F16, {0, 4000, 6000}},          // a batch, the last window outside
      {2, 4, 4, 64, 2304, 2304, GgmlType::F32, {0, 0, 0, 512}, 2},         // a ring visited from row 512
      {1, 32, 4, 64, 2600, 2600, GgmlType::Q8_0, {}},                      // TinyLlama's four groups of 8
      {2, 16, 2, 128, 2304, 2304, GgmlType::F16, {0, 0, 0, 700}, 2},       // groups of 8 over a ring
  };
  uint32_t seed = 4100;
  for (const Case& c : cases) {
    SCOPED_TRACE("S=" + std::to_string(c.S) + " H=" + std::to_string(c.H) + " C=" + std::to_string(c.C));
    Data d = make_data(c, seed += 10);
    const std::vector<float> want = run_kernel(c, d);
    for (int threads : {1, 2, 3}) {
      int64_t split = -1;
      const std::vector<float> got = run_device(c, d, threads, &split);
      EXPECT_EQ(split, threads > 1 ? 1 : 0) << threads << " threads";
      ASSERT_EQ(first_difference(want, got), -1) << threads << " threads";
    }
  }
}

// A decode query whose keys fall in few blocks that two threads cannot share evenly stays split by
// heads when its heads share out evenly, two runs a thread or more (attention_split.cpp): 1,100 keys
// are 5 blocks (parts of 2 and 3), TinyLlama's four groups two a thread. 1,024 keys (4 blocks), and
// Qwen2.5's two groups at 1,100 keys (one a thread), split over keys. Either way the same bits.
TEST(AttentionSplit, FewBlocksThatShareUnevenlyStaySplitByHeads) {
  const Case cases[] = {
      {1, 32, 4, 64, 1100, 1100, GgmlType::F16, {}},
      {1, 32, 4, 64, 1024, 1024, GgmlType::F16, {}},
      {1, 14, 2, 64, 1100, 1100, GgmlType::F16, {}},
  };
  uint32_t seed = 5200;
  for (const Case& c : cases) {
    SCOPED_TRACE("H=" + std::to_string(c.H) + " C=" + std::to_string(c.C));
    Data d = make_data(c, seed += 10);
    const std::vector<float> want = run_kernel(c, d);
    int64_t split = -1;
    const std::vector<float> got = run_device(c, d, 2, &split);
    EXPECT_EQ(split, c.C == 1024 || c.Hkv == 2 ? 1 : 0);
    ASSERT_EQ(first_difference(want, got), -1);
  }
}

}  // namespace
}  // namespace npullm
