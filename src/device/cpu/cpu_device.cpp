#include "device/cpu/cpu_device.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "common/error.h"
#include "device/cpu/kernels.h"
#include "device/cpu/worker_pool.h"

namespace npullm::cpu {

namespace {

using blob::OpCode;
using blob::TaskDesc;

template <typename T>
T* p(const TaskDesc& t, int slot) { return reinterpret_cast<T*>(t.ptr[slot]); }
GgmlType ty(const TaskDesc& t, int slot) { return static_cast<GgmlType>(t.type[slot]); }

// Length of a task's parallel dimension and the smallest chunk worth handing to a thread.
struct Split { int64_t length; int64_t grain; };

Split split_of(const TaskDesc& t) {
  switch (static_cast<OpCode>(t.op)) {
    case OpCode::Embed: return {t.dim[0], 1};
    case OpCode::RmsNorm: return {t.dim[0], 4};
    case OpCode::MatMul: return {t.dim[2], 16};
    case OpCode::Add:
    case OpCode::SwiGlu: return {t.dim[0], 4096};
    case OpCode::Rope: return {t.dim[0] * t.dim[1], 8};
    case OpCode::ScatterRows: return {t.dim[0], 8};
    case OpCode::Attention: return {t.dim[0] * t.dim[1], 1};
  }
  return {0, 1};
}

void run_chunk(const TaskDesc& t, int64_t b, int64_t e, float* work) {
  switch (static_cast<OpCode>(t.op)) {
    case OpCode::Embed:
      embed_rows(ty(t, 0), p<const void>(t, 0), t.dim[2], t.dim[1], p<const int32_t>(t, 1), p<float>(t, 2), b, e);
      break;
    case OpCode::RmsNorm:
      rmsnorm_rows(p<const float>(t, 0), p<const float>(t, 1), p<float>(t, 2), t.dim[1], t.fparam[0], b, e);
      break;
    case OpCode::MatMul:
      matmul(p<const float>(t, 0), t.dim[0], t.dim[1], p<const void>(t, 1), ty(t, 1), p<const float>(t, 3),
             p<const float>(t, 4), p<float>(t, 2), t.dim[2], b, e, work);
      break;
    case OpCode::Add: add(p<const float>(t, 0), p<const float>(t, 1), p<float>(t, 2), b, e); break;
    case OpCode::SwiGlu: swiglu(p<const float>(t, 0), p<const float>(t, 1), p<float>(t, 2), b, e); break;
    case OpCode::Rope:
      rope(p<void>(t, 0), ty(t, 0), p<const int32_t>(t, 1), t.dim[1], t.dim[2], t.dim[3], t.fparam[0], t.fparam[1], p<const float>(t, 2),
           t.iparam[0], b, e);
      break;
    case OpCode::ScatterRows:
      scatter_rows(p<const float>(t, 0), p<const int32_t>(t, 1), p<void>(t, 2), ty(t, 2), t.dim[1], t.dim[2], b, e);
      break;
    case OpCode::Attention:
      attention(p<const float>(t, 0), p<const void>(t, 1), ty(t, 1), p<const void>(t, 2), ty(t, 2), p<const float>(t, 3),
                p<float>(t, 4), t.dim[1], t.dim[2], t.dim[3], t.dim[4], t.fparam[0], b, e, work);
      break;
  }
}

class CpuDevice final : public device::Device {
 public:
  explicit CpuDevice(int threads) : pool_(threads), work_(static_cast<size_t>(pool_.threads())) {}

  std::string name() const override { return std::string("cpu (") + kernel_isa() + ")"; }
  int threads() const override { return pool_.threads(); }

  void prepare(const device::Program& prog) override {
    int64_t need = 0;
    for (size_t i = 0; i < prog.n_tasks; ++i) {
      const TaskDesc& t = prog.tasks[i];
      if (t.op == static_cast<uint32_t>(OpCode::MatMul)) need = std::max(need, matmul_work_floats(t.dim[1]));
      if (t.op == static_cast<uint32_t>(OpCode::Attention)) need = std::max(need, attention_work_floats(t.dim[4]));
      if (split_of(t).length <= 0 && t.op != static_cast<uint32_t>(OpCode::Embed))
        fail("cpu device: task {} ({}) has an empty range", i, blob::op_name(t.op));
    }
    for (std::vector<float>& w : work_)
      if (static_cast<int64_t>(w.size()) < need) w.resize(static_cast<size_t>(need));
  }

  void execute(const device::Program& prog) override {
    size_t first = 0;
    for (size_t stage = 0; stage < prog.n_barriers; ++stage) {
      size_t last = first;
      while (last < prog.n_tasks && prog.tasks[last].stage == stage) ++last;
      run_stage(prog.tasks + first, last - first);
      first = last;
    }
  }

 private:
  // Cuts each task of the stage into chunks, numbers all chunks 0..n-1, and lets the pool take them.
  void run_stage(const TaskDesc* tasks, size_t n) {
    const int64_t threads = pool_.threads();
    chunk_start_.assign(n + 1, 0);
    chunk_count_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const Split s = split_of(tasks[i]);
      const int64_t max_chunks = std::max<int64_t>(1, (s.length + s.grain - 1) / s.grain);
      chunk_count_[i] = std::min<int64_t>(max_chunks, threads * 4);
      chunk_start_[i + 1] = chunk_start_[i] + chunk_count_[i];
    }
    pool_.run(chunk_start_[n], [&](int64_t item, int worker) {
      const size_t i = static_cast<size_t>(std::upper_bound(chunk_start_.begin(), chunk_start_.end(), item) - chunk_start_.begin() - 1);
      const int64_t c = item - chunk_start_[i];
      const Split s = split_of(tasks[i]);
      // Chunk boundaries are multiples of the grain so vector kernels see aligned ranges.
      const int64_t per = (s.length + chunk_count_[i] - 1) / chunk_count_[i];
      const int64_t step = (per + s.grain - 1) / s.grain * s.grain;
      const int64_t b = std::min(s.length, c * step), e = std::min(s.length, b + step);
      if (b < e) run_chunk(tasks[i], b, e, work_[static_cast<size_t>(worker)].data());
    });
  }

  WorkerPool pool_;
  std::vector<std::vector<float>> work_;
  std::vector<int64_t> chunk_start_, chunk_count_;
};

}  // namespace

std::unique_ptr<device::Device> create_cpu_device(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuDevice>(threads);
}

}  // namespace npullm::cpu
