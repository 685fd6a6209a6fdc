// What a program asks of the CPU device, checked before it runs: each task's dimensions and layouts
// against what the device can read, and the scratch per thread it needs (bounded, so a damaged or
// hostile blob is refused instead of sizing buffers without end). CpuDevice::prepare calls it; so
// does the blob fuzzer, on every blob it loads.
#pragma once

#include <cstdint>

#include "blob/task.h"
#include "device/device.h"

namespace npullm::cpu {

// Length of a task's parallel dimension and the smallest chunk worth handing to a thread.
struct Split {
  int64_t length;
  int64_t grain;
};
Split split_of(const blob::TaskDesc& t, int threads = 1);

// The op a MatMul, ScatterRows or Rope applies to its input first (blob/task.h), if any.
blob::Prologue prologue_of(const blob::TaskDesc& t);
bool has_prologue(const blob::TaskDesc& t);

// Checks every task of prog; throws npullm::Error naming the first task it refuses. Returns the
// floats of scratch each thread needs to run the program.
int64_t checked_scratch_floats(const device::Program& prog);

}  // namespace npullm::cpu
