// The device interface: what the driver needs from anything that executes task descriptors.
//
// A device is handed a program (a relocated task array and its barriers) and runs it. It decides
// nothing: the order, the barriers and every address come from the blob. Devices live in their
// own folder (device/cpu/ is the reference) and are created through a factory function.
//
// Concurrency: execute() is called by one thread at a time (the driver's queue); prepare() is called
// before the first execute() of a program and may be called again.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "blob/task.h"
#include "formats/ggml_types.h"

namespace npullm::device {

struct Program {
  const blob::TaskDesc* tasks = nullptr;
  size_t n_tasks = 0;
  const blob::BarrierDesc* barriers = nullptr;
  size_t n_barriers = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual int threads() const = 0;
  // Sizes whatever per-program resources the device needs (e.g. per-thread scratch) so that
  // execute() allocates nothing. Throws npullm::Error for a descriptor the device cannot run.
  virtual void prepare(const Program& p) = 0;
  // Runs every task; tasks of stage b+1 start only after barrier b has counted all of stage b.
  virtual void execute(const Program& p) = 0;
  // The MatMul weight types this device reads fastest in the Panels16 layout (formats/
  // weight_layout.h), wherever their rows are whole dwords; blobs compiled for it store them so.
  virtual std::vector<GgmlType> panels16_types() const { return {}; }
  // Counters since the device was made: stages executed, and how many of them ran on several
  // threads (each one a synchronisation point; a small stage runs on the calling thread alone).
  struct Counters {
    int64_t stages = 0, parallel_stages = 0;
    // Times a device with several threads ran alone for a while because one of its threads was
    // held up (another process had the core; cpu::WorkerPool's busy-machine fallback).
    int64_t solo_periods = 0;
    // Attention stages split over their keys across threads (a decode step over a long context).
    int64_t split_attention_stages = 0;
    // Wall time of the stages, by the op code of each stage's first task (blob::OpCode; a fused
    // stage counts as its MatMul or ScatterRows): where a token's time goes.
    static constexpr int kOps = 24;
    int64_t stage_ns[kOps] = {};
    // Mixture-of-experts matmuls: expert slabs read (an expert with rows counts once per task) and
    // their bytes. A decode step of one token reads k slabs per expert matrix, never all E.
    int64_t expert_slabs = 0, expert_bytes = 0;
    // The MatMul stages by what they read: the weight type and K x N of each task, e.g. "Q5_0
    // 896x896 + Q5_0 896x128 + Q8_0 896x128", with the rows of x (1 in a decode step) and the
    // weight bytes one run reads. Their time over their bytes is the read rate stage by stage,
    // so a roofline short of the read loop's shows which matrices fall short, not only that some do.
    struct MatMulKind {
      std::string label;
      int64_t rows = 0, weight_bytes = 0;
      int64_t runs = 0, ns = 0;
    };
    std::vector<MatMulKind> matmul_kinds;
  };
  virtual Counters counters() const { return {}; }
  // A tap on one op code: after each stage, `tap` sees every task of that op the stage ran, as
  // relocated (its operands readable until the next execute). For tests and traces: what a routing
  // table held, what a stage wrote. An empty tap removes it. Optional for a device.
  using TaskTap = std::function<void(const blob::TaskDesc&)>;
  virtual void set_tap(uint32_t op, TaskTap tap) {}
};

}  // namespace npullm::device
