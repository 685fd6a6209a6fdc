// The CPU device's checks of a program before it runs one (CpuDevice::prepare): every task against
// what the device can read and the bounds below, and the scratch each thread needs. Kept apart from
// the device so that the blob fuzzer (tests/fuzz/fuzz_blob.cc) runs these very checks on every blob
// it loads without building the kernels; they use only the kernels' sizing functions
// (kernel_sizes.cpp).
#include "device/cpu/program_checks.h"
#include "device/cpu/task_operands.h"

#include <algorithm>

#include "common/error.h"
#include "device/cpu/kernels.h"
#include "formats/weight_layout.h"

namespace npullm::cpu {
namespace {

using blob::OpCode;
using blob::TaskDesc;


// Bounds on what a task may ask of the device's own memory. A blob is checked against its
// checksums, not against sense, and prepare() sizes each thread's scratch from its tasks'
// dimensions (execute() sizes the stage's activation copies from them too), so a damaged or
// hostile blob with a dimension of 2^40 would have the device allocate without end (or overflow
// the sizes it computes). No model comes near these: the largest per-thread scratch (attention
// over 128k rows of 128-wide heads, 8 at once: a block's scores and each block's partial state)
// is 0.5M floats, and a prefill MatMul's activations (512 rows of a 28,672-wide FFN) are 15M
// floats. Element counts of whole tensors (an Add, the logits of every row of a chunk) may be large,
// so a single dimension is only kept where its products stay exact.
constexpr int64_t kMaxDim = int64_t{1} << 31;               // any one dimension of a task
constexpr int64_t kMaxWorkFloats = int64_t{1} << 24;        // one thread's scratch (64 MiB)
constexpr int64_t kMaxActivationFloats = int64_t{1} << 28;  // rows x K of one MatMul's x (1 GiB)

// Refuses a task whose dimensions are negative or beyond kMaxDim, or a MatMul whose activations
// (copied per stage or per thread when a prologue applies) are beyond kMaxActivationFloats.
void check_dims(const TaskDesc& t, size_t i) {
  for (int d = 0; d < blob::kMaxDims; ++d)
    if (t.dim[d] < 0 || t.dim[d] > kMaxDim)
      fail("cpu device: task {} ({}) has dimension {} = {}, outside 0..{}", i, blob::op_name(t.op), d, t.dim[d], kMaxDim);
  if ((t.op == static_cast<uint32_t>(OpCode::MatMul) || t.op == static_cast<uint32_t>(OpCode::MoeMatMul)) &&
      t.dim[0] * t.dim[1] > kMaxActivationFloats)
    fail("cpu device: task {} ({}) reads {} x {} activations, more than the {} floats this device copies", i,
         blob::op_name(t.op), t.dim[0], t.dim[1], kMaxActivationFloats);
}

void check_prologue(const TaskDesc& t, size_t i) {
  const blob::Prologue pro = prologue_of(t);
  const bool matmul = t.op == static_cast<uint32_t>(OpCode::MatMul);
  const bool rope = t.op == static_cast<uint32_t>(OpCode::Rope);
  const bool ok = matmul ? pro == blob::Prologue::RmsNorm || pro == blob::Prologue::SwiGlu || pro == blob::Prologue::GeGlu
                  : rope ? pro == blob::Prologue::RmsNorm && operand_type(t, 0) == GgmlType::F32 && t.ptr[3] != 0
                         : (pro == blob::Prologue::Rope || (pro == blob::Prologue::RmsNormRope && t.ptr[5] != 0)) &&
                               t.dim[3] > 0 && t.dim[3] * t.dim[4] == t.dim[1];
  if (!ok)
    fail("cpu device: task {} ({}) has a prologue ({}) it cannot apply", i, blob::op_name(t.op), t.iparam[1]);
}

}  // namespace

blob::Prologue prologue_of(const TaskDesc& t) { return static_cast<blob::Prologue>(t.iparam[1]); }

bool has_prologue(const TaskDesc& t) {
  return (t.op == static_cast<uint32_t>(OpCode::MatMul) || t.op == static_cast<uint32_t>(OpCode::ScatterRows) ||
          t.op == static_cast<uint32_t>(OpCode::Rope)) &&
         prologue_of(t) != blob::Prologue::None;
}

Split split_of(const TaskDesc& t, int threads) {
  switch (static_cast<OpCode>(t.op)) {
    case OpCode::Embed: return {t.dim[0], 1};
    case OpCode::RmsNorm: return {t.dim[0], 4};
    case OpCode::MatMul: return {t.dim[2], 16};
    case OpCode::Add:
    case OpCode::SwiGlu: return {t.dim[0], 4096};
    case OpCode::Rope: return {t.dim[0] * t.dim[1], 8};
    case OpCode::ScatterRows: return {t.dim[0], 8};
    case OpCode::Attention: {
      // Whole groups of query heads that share a K/V head, so each K/V row is read by one chunk
      // (cpu::attention takes a group together), unless that leaves a thread without one. Halving
      // until 4 chunks (as before) cut Qwen2.5's two groups of 7 into 7 chunks of 2 heads: each
      // group's K/V was read 4 times and heads 6 and 7 went one by one; at depth 1,024 the stage
      // took 39-40 us a layer, 26-30 with a group per thread.
      int64_t grain = t.dim[2] > 0 ? std::max<int64_t>(1, t.dim[1] / t.dim[2]) : 1;
      while (grain > 1 && t.dim[0] * t.dim[1] / grain < threads) grain = (grain + 1) / 2;
      return {t.dim[0] * t.dim[1], grain};
    }
    case OpCode::GatherRows: return {t.dim[0], 1};
    case OpCode::SliceCols: return {t.dim[0], 4};
    case OpCode::Scale:
    case OpCode::SoftCap:
    case OpCode::GeGlu: return {t.dim[0], 4096};
    case OpCode::MoeRoute: return {1, 1};  // one table, written whole
    case OpCode::MoeGather: return {t.dim[0] * t.dim[2], 4};
    case OpCode::MoeMatMul: return {t.dim[2], 16};  // output columns of every expert's slab
    case OpCode::MoeSum: return {t.dim[0], 1};
    case OpCode::SwiGluOai: return {t.dim[0], 4096};
  }
  return {0, 1};
}

int64_t checked_scratch_floats(const device::Program& prog) {
  int64_t need = 0;
  for (size_t i = 0; i < prog.n_tasks; ++i) {
    const TaskDesc& t = prog.tasks[i];
    check_dims(t, i);
    if (t.op == static_cast<uint32_t>(OpCode::MatMul)) {
      need = std::max(need, matmul_work_floats(t.dim[1]));
      const auto layout = static_cast<WeightLayout>(t.iparam[0]);
      if (layout != WeightLayout::Rows && (layout != WeightLayout::Panels16 || !matmul_reads_panels16(operand_type(t, 1), t.dim[1])))
        fail("cpu device: task {} (MatMul) has a {} weight of {} columns in layout {}, which this device cannot read", i,
             ggml_type_name(operand_type(t, 1)), t.dim[1], t.iparam[0]);
    }
    if (t.op == static_cast<uint32_t>(OpCode::Embed)) {
      const auto layout = static_cast<WeightLayout>(t.iparam[0]);
      if (layout != WeightLayout::Rows && (layout != WeightLayout::Panels16 || !panels16_possible(operand_type(t, 0), t.dim[1])))
        fail("cpu device: task {} (Embed) has a {} table of {} columns in layout {}, which this device cannot read", i,
             ggml_type_name(operand_type(t, 0)), t.dim[1], t.iparam[0]);
    }
    if (t.op == static_cast<uint32_t>(OpCode::Attention)) {
      need = std::max(need, attention_work_floats(t.dim[4], t.dim[3]));
      if (t.dim[4] < 0 || t.dim[5] < t.dim[4])
        fail("cpu device: task {} (Attention) attends {} rows of K/V tensors of {}", i, t.dim[4], t.dim[5]);
    }
    if (t.op == static_cast<uint32_t>(OpCode::MoeMatMul)) {
      need = std::max(need, matmul_work_floats(t.dim[1]));
      const auto layout = static_cast<WeightLayout>(t.iparam[0]);
      if (layout != WeightLayout::Rows &&
          (layout != WeightLayout::Panels16 || !matmul_reads_panels16(operand_type(t, 1), t.dim[1]) || t.dim[2] % 16 != 0))
        fail("cpu device: task {} (MoeMatMul) has {} expert slabs of {} x {} in layout {}, which this device cannot read", i,
             ggml_type_name(operand_type(t, 1)), t.dim[2], t.dim[1], t.iparam[0]);
      if (t.dim[3] < 1 || t.dim[3] > t.dim[4]) fail("cpu device: task {} (MoeMatMul) routes to {} of {} experts", i, t.dim[3], t.dim[4]);
    }
    if (t.op == static_cast<uint32_t>(OpCode::MoeRoute)) {
      need = std::max(need, t.dim[1]);
      if (t.dim[2] < 1 || t.dim[2] > t.dim[1] || (t.iparam[0] != 0 && t.iparam[0] != 1))
        fail("cpu device: task {} (MoeRoute) chooses {} of {} experts with gating {}", i, t.dim[2], t.dim[1], t.iparam[0]);
    }
    if (has_prologue(t)) check_prologue(t, i);
    if (t.op == static_cast<uint32_t>(OpCode::ScatterRows) && has_prologue(t)) need = std::max(need, t.dim[1] + t.dim[5] / 2);
    if (t.op == static_cast<uint32_t>(OpCode::Rope)) need = std::max(need, t.dim[3] / 2);  // YaRN's factors
    if (split_of(t).length <= 0 && t.op != static_cast<uint32_t>(OpCode::Embed))
      fail("cpu device: task {} ({}) has an empty range", i, blob::op_name(t.op));
  }
  if (need > kMaxWorkFloats)
    fail("cpu device: the program's tasks need {} floats of scratch per thread, more than the {} this device gives", need,
         kMaxWorkFloats);
  return need;
}

}  // namespace npullm::cpu
