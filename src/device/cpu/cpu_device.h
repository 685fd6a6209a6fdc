// The CPU device: runs task descriptors on a worker pool, one stage at a time.
//
// Within a stage every task is cut into chunks along its parallel dimension (output columns for
// MatMul, rows or (row, head) pairs elsewhere); all threads take chunks of all tasks of the stage,
// then meet at the stage's barrier. Chunking never changes results: each output element is always
// computed by the same sequence of operations.
#pragma once
#include <memory>

#include "device/device.h"

namespace npullm::cpu {

// threads <= 0 means "all hardware threads".
std::unique_ptr<device::Device> create_cpu_device(int threads);

}  // namespace npullm::cpu
