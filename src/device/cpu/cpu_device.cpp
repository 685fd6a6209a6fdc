#include "device/cpu/cpu_device.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "common/trace.h"
#include "device/cpu/attention_split.h"
#include "device/cpu/kernels.h"
#include "device/cpu/moe.h"
#include "device/cpu/program_checks.h"
#include "device/cpu/task_operands.h"
#include "device/cpu/worker_pool.h"

namespace npullm::cpu {

namespace {

using blob::OpCode;
using blob::TaskDesc;


// A MatMul's activations with its prologue applied, rows [m0, m1) of x' into out (rows of K, the
// same indexing as x): the kernel and order of the op the compiler folded in, so the same bits.
void matmul_prologue(const TaskDesc& t, float* out, int64_t m0, int64_t m1) {
  const int64_t K = t.dim[1];
  const float* x = operand<const float>(t, 0);
  const float* aux = operand<const float>(t, 5);
  switch (prologue_of(t)) {
    case blob::Prologue::RmsNorm: rmsnorm_rows(x, aux, out, K, t.fparam[0], m0, m1); break;
    case blob::Prologue::SwiGlu: swiglu(x, aux, out, m0 * K, m1 * K); break;
    case blob::Prologue::GeGlu: geglu(x, aux, out, m0 * K, m1 * K); break;
    default: fail("cpu device: MatMul with unknown prologue {}", t.iparam[1]);
  }
}

// MatMuls of up to this many rows (decode) apply their prologue per thread, each thread once per
// stage into its own buffer, so the stage needs no extra synchronisation; larger ones (prefill)
// have it applied once for the stage by all threads, before the matmuls.
constexpr int64_t kThreadPrologueRows = 4;

// The frequency factors a Rope (or a ScatterRows' Rope prologue) rotates with, and the frequency
// scale to pass with them: YaRN's per-pair blend (blob/task.h, Rope) folded into factors written to
// `buf` (n_rot / 2 floats) with a scale of 1, theta_i = pos base^(-2i/n) (fs (1 - r_i) + r_i) / ff_i;
// otherwise the task's own factors (ptr `slot`, or none) and scale.
struct RopeFreqs { const float* factors; float scale; };
RopeFreqs rope_freqs(const TaskDesc& t, int slot, int64_t n_rot, float* buf) {
  const float* ff = operand<const float>(t, slot);
  const float ext = t.fparam[3], fs = t.fparam[1];
  if (ext == 0.0f) return {ff, fs};
  const float lo = static_cast<float>(t.iparam[2]), hi = static_cast<float>(t.iparam[3]);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float y = (static_cast<float>(i) - lo) / std::max(0.001f, hi - lo);
    const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * ext;
    buf[i] = (ff ? ff[i] : 1.0f) / (fs * (1.0f - ramp) + ramp);
  }
  return {buf, 1.0f};
}

// A ScatterRows that rotates each source row before storing it (Prologue::Rope): row by row
// through `tmp` (R floats), rotated by the Rope kernel exactly as an in-place Rope would, each head
// normalised first by the RmsNorm kernel for Prologue::RmsNormRope.
void scatter_rotated_rows(const TaskDesc& t, int64_t b, int64_t e, float* tmp) {
  const int64_t R = t.dim[1], C = t.dim[2], H = t.dim[3], hd = t.dim[4];
  const int32_t* idx = operand<const int32_t>(t, 1);
  const int32_t* pos = operand<const int32_t>(t, 3);
  const bool norm = prologue_of(t) == blob::Prologue::RmsNormRope;
  const RopeFreqs freqs = rope_freqs(t, 4, t.dim[5], tmp + R);  // (after the row: work holds R + n_rot / 2)
  for (int64_t s = b; s < e; ++s) {
    if (idx[s] < 0 || idx[s] >= C) continue;
    std::copy_n(operand<const float>(t, 0) + s * R, R, tmp);
    if (norm) rmsnorm_rows(tmp, operand<const float>(t, 5), tmp, hd, t.fparam[2], 0, H);
    rope(tmp, pos + s, H, hd, t.dim[5], t.fparam[0], freqs.scale, freqs.factors, t.iparam[0], 0, H);
    scatter_rows(tmp, idx + s, operand<void>(t, 2), operand_type(t, 2), R, C, 0, 1);
  }
}

// Roughly the multiply-adds (or element operations) a task does: a stage below kParallelWork runs
// on the calling thread alone, since waking the others costs more than it saves (stories260K's
// whole decode step is such stages) and a worker that only spins slows a busy machine down.
int64_t work_of(const TaskDesc& t) {
  switch (static_cast<OpCode>(t.op)) {
    case OpCode::MatMul: return t.dim[0] * t.dim[1] * t.dim[2];
    case OpCode::Attention: return 2 * t.dim[0] * t.dim[1] * t.dim[3] * t.dim[4];
    case OpCode::RmsNorm:
    case OpCode::Embed:
    case OpCode::ScatterRows:
    case OpCode::GatherRows: return t.dim[0] * t.dim[1];
    case OpCode::Rope: return split_of(t).length * 64;
    case OpCode::MoeRoute: return t.dim[0] * t.dim[1] * t.dim[2];
    case OpCode::MoeGather: return t.dim[0] * t.dim[2] * t.dim[1];
    case OpCode::MoeMatMul: return t.dim[0] * t.dim[3] * t.dim[1] * t.dim[2];
    case OpCode::MoeSum: return t.dim[0] * t.dim[1] * t.dim[2];
    default: return split_of(t).length;
  }
}
constexpr int64_t kParallelWork = 1 << 17;

// Chunks a task is cut into per thread: more let the others take over a held-up thread's share in
// smaller pieces, but each chunk of a decode (a few rows, reading each weight once) starts its
// weight stream afresh, its first fetches waiting a full memory latency. Two per thread there
// (was four): Qwen2.5's small matmuls (its q/k/v stage reads ~0.6 MB) went 19-21 -> 17-18 us, tg
// +3-4 % (Q4_K_M and Q8_0, 6 alternated pairs each, ahead in 5); TinyLlama level (3 of 6); beside
// a busy process no slower (3 pairs each). Prefill keeps four: its causal attention's later rows
// cost more, and with two per thread pp512 lost 2 % (3 of 3).
constexpr int64_t kDecodeRows = 16;

int64_t chunks_per_thread(const TaskDesc& t) { return t.dim[0] <= kDecodeRows ? 2 : 4; }

// A growable 64-byte-aligned byte buffer (contents are not kept when it grows).
class AlignedBytes {
 public:
  AlignedBytes() = default;
  explicit AlignedBytes(size_t n) : store_(n + 63) {}
  uint8_t* data() { return store_.data() + (64 - reinterpret_cast<uintptr_t>(store_.data()) % 64) % 64; }
  size_t size() const { return store_.empty() ? 0 : store_.size() - 63; }

 private:
  std::vector<uint8_t> store_;
};

// Attention rows [b, e) of (query, head) pairs. Without a window operand every query attends rows
// [0, C) of K/V; with one, query s attends [base[s], base[s] + C), so one task serves a batch of
// queries from different sequences, each over its own region of the state (a window that leaves
// the R rows there are gives zeros, like a fully masked row). A window of two columns also names
// the ring row its keys are visited from (a sliding-window layer's ring of K/V rows).
void attention_windows(const TaskDesc& t, int64_t b, int64_t e, float* work) {
  const int64_t H = t.dim[1], Hkv = t.dim[2], hd = t.dim[3], C = t.dim[4];
  float* out = operand<float>(t, 4);
  const float* sinks = operand<const float>(t, 6);
  if (!operand<const int32_t>(t, 5)) {
    attention(operand<const float>(t, 0), operand<const void>(t, 1), operand_type(t, 1), operand<const void>(t, 2),
              operand_type(t, 2), operand<const float>(t, 3), out, H, Hkv, hd, C, 0, t.fparam[0], b, e, work, sinks);
    return;
  }
  for (int64_t s = b / H; s * H < e; ++s) {  // each query through its own window (attention_split.h)
    const int64_t r0 = std::max(b, s * H) - s * H, r1 = std::min(e, (s + 1) * H) - s * H;
    float* o = out + s * H * hd;
    AttentionQuery a;
    if (!attention_query(t, s, a)) {
      std::fill(o + r0 * hd, o + r1 * hd, 0.0f);
      continue;
    }
    attention(a.q, a.k, a.k_type, a.v, a.v_type, a.mrow, o, H, Hkv, hd, C, a.rot, a.scale, r0, r1, work, sinks);
  }
}

// x: a MatMul's activations (its input, or its input with the prologue applied).
void run_chunk(const TaskDesc& t, int64_t b, int64_t e, float* work, const float* x, const void* xq) {
  switch (static_cast<OpCode>(t.op)) {
    case OpCode::Embed:
      embed_rows(operand_type(t, 0), operand<const void>(t, 0), t.dim[2], t.dim[1], operand<const int32_t>(t, 1), operand<float>(t, 2), b, e,
                 static_cast<WeightLayout>(t.iparam[0]));
      break;
    case OpCode::RmsNorm:
      rmsnorm_rows(operand<const float>(t, 0), operand<const float>(t, 1), operand<float>(t, 2), t.dim[1], t.fparam[0], b, e, operand<const float>(t, 3));
      break;
    case OpCode::MatMul:
      matmul(x, t.dim[0], t.dim[1], operand<const void>(t, 1), operand_type(t, 1), operand<const float>(t, 3),
             operand<const float>(t, 4), operand<float>(t, 2), t.dim[2], b, e, work, xq, static_cast<WeightLayout>(t.iparam[0]));
      break;
    case OpCode::Add: add(operand<const float>(t, 0), operand<const float>(t, 1), operand<float>(t, 2), b, e); break;
    case OpCode::SwiGlu: swiglu(operand<const float>(t, 0), operand<const float>(t, 1), operand<float>(t, 2), b, e); break;
    case OpCode::Rope:
      // (b, e: head rows; a folded per-head norm works on the same rows, in place)
      if (prologue_of(t) == blob::Prologue::RmsNorm)
        rmsnorm_rows(operand<const float>(t, 0), operand<const float>(t, 3), operand<float>(t, 0), t.dim[2], t.fparam[2], b, e);
      {
        const RopeFreqs freqs = rope_freqs(t, 2, t.dim[3], work);
        rope(operand<void>(t, 0), operand_type(t, 0), operand<const int32_t>(t, 1), t.dim[1], t.dim[2], t.dim[3], t.fparam[0], freqs.scale, freqs.factors,
             t.iparam[0], b, e);
      }
      break;
    case OpCode::ScatterRows:
      if (has_prologue(t)) scatter_rotated_rows(t, b, e, work);
      else scatter_rows(operand<const float>(t, 0), operand<const int32_t>(t, 1), operand<void>(t, 2), operand_type(t, 2), t.dim[1], t.dim[2], b, e);
      break;
    case OpCode::Attention:
      attention_windows(t, b, e, work);
      break;
    case OpCode::GatherRows:
      gather_rows(operand<const float>(t, 0), t.dim[2], t.dim[1], operand<const int32_t>(t, 1), operand<float>(t, 2), b, e);
      break;
    case OpCode::SliceCols: slice_cols(operand<const float>(t, 0), t.dim[1], operand<float>(t, 1), t.dim[2], t.dim[3], b, e); break;
    case OpCode::Scale: scale(operand<const float>(t, 0), t.fparam[0], operand<float>(t, 1), b, e); break;
    case OpCode::SoftCap: softcap(operand<const float>(t, 0), t.fparam[0], operand<float>(t, 1), b, e); break;
    case OpCode::GeGlu: geglu(operand<const float>(t, 0), operand<const float>(t, 1), operand<float>(t, 2), b, e); break;
    case OpCode::MoeRoute:
      moe_route(operand<const float>(t, 0), t.dim[0], t.dim[1], t.dim[2], static_cast<MoeGating>(t.iparam[0]), operand<int32_t>(t, 1), work);
      break;
    case OpCode::MoeGather:
      moe_gather(operand<const float>(t, 0), t.dim[1], t.dim[2], moe_table(operand<const int32_t>(t, 1), t.dim[0], t.dim[2], t.dim[3]),
                 operand<float>(t, 2), b, e);
      break;
    case OpCode::MoeMatMul:
      moe_matmul(operand<const float>(t, 0), t.dim[1], operand<const void>(t, 1), operand_type(t, 1), static_cast<WeightLayout>(t.iparam[0]),
                 operand<const float>(t, 4), moe_table(operand<const int32_t>(t, 3), t.dim[0], t.dim[3], t.dim[4]), t.dim[4], operand<float>(t, 2),
                 t.dim[2], b, e, work);
      break;
    case OpCode::MoeSum:
      moe_sum(operand<const float>(t, 0), moe_table(operand<const int32_t>(t, 1), t.dim[0], t.dim[2], t.dim[3]), t.dim[1], t.dim[2],
              operand<const float>(t, 3), operand<float>(t, 2), b, e);
      break;
    case OpCode::SwiGluOai:
      swiglu_oai(operand<const float>(t, 0), operand<const float>(t, 1), operand<float>(t, 2), t.fparam[0], t.fparam[1], b, e);
      break;
  }
}

class CpuDevice final : public device::Device {
 public:
  explicit CpuDevice(int threads)
      : pool_(threads), work_(static_cast<size_t>(pool_.threads())), own_x_(static_cast<size_t>(pool_.threads())),
        own_q_(static_cast<size_t>(pool_.threads())) {}

  std::string name() const override { return std::string("cpu (") + kernel_isa() + ")"; }
  // The int8 types, where the vector path reads 16 rows at once (AVX-512, AMX): one load per
  // vector instead of a 16-row transpose. The AVX2 and scalar paths read Panels16 too (same
  // bits) but gain nothing from it, so there weights stay as GGUF stores them.
  std::vector<GgmlType> panels16_types() const override {
    const std::string isa = kernel_isa();
    if (isa != "avx512" && isa != "amx") return {};
    return {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4};
  }
  int threads() const override { return pool_.threads(); }
  Counters counters() const override {
    std::lock_guard lock(kinds_mu_);
    Counters c = counters_;
    c.solo_periods = pool_.solo_periods();
    return c;
  }

  void set_tap(uint32_t op, TaskTap tap) override {
    tap_op_ = op;
    tap_ = std::move(tap);
  }

  void prepare(const device::Program& prog) override {
    const int64_t need = checked_scratch_floats(prog);  // throws, naming the task, before anything is allocated
    for (std::vector<float>& w : work_)
      if (static_cast<int64_t>(w.size()) < need) w.resize(static_cast<size_t>(need));
    int64_t partials = 0;
    for (size_t i = 0; i < prog.n_tasks; ++i) partials = std::max(partials, AttentionSplit::partial_floats(prog.tasks[i]));
    attn_split_.reserve(partials);
  }

  void execute(const device::Program& prog) override {
    traced_.clear();
    if (trace::on()) traced_.reserve(prog.n_barriers);
    size_t first = 0;
    for (size_t stage = 0; stage < prog.n_barriers; ++stage) {
      size_t last = first;
      while (last < prog.n_tasks && prog.tasks[last].stage == stage) ++last;
      run_stage(prog.tasks + first, last - first, stage);
      first = last;
    }
    // The stages' spans, recorded once the program has run, so that between two stages there is
    // only this loop, not the recording (which a preempted thread would stretch into a gap).
    for (TracedStage& t : traced_) {
      trace::span("device", t.name, t.t0, t.end, std::move(t.args));
      if (t.prepared - t.t0 > 1000) trace::span("device", "prepare", t.t0, t.prepared);
      for (size_t w = 0; w < t.first.size(); ++w) {
        if (t.first[w] < 0) continue;
        trace::span_on(t.tid[w], "device", "chunks", t.first[w], t.last[w], fmt::format(R"({{"chunks":{}}})", t.chunks[w]));
        trace::span_on(t.tid[w], "device", "barrier wait", t.last[w], std::max(t.last[w], t.ran));
      }
    }
    traced_.clear();
  }

 private:
  // x_[i]: the activations MatMul task i reads (its input, or the stage's copy with its prologue
  // applied for a MatMul of many rows), or null where each thread applies the prologue itself.
  // MatMuls of a stage whose prologue reads the same input the same way (q, k and v after one
  // norm) share one copy.
  void apply_prologues(const TaskDesc* tasks, size_t n) {
    x_.assign(n, nullptr);
    struct Pro { const TaskDesc* t; size_t off; };
    std::vector<Pro> todo;
    std::vector<std::pair<size_t, size_t>> users;  // (task, its entry of todo)
    size_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      const TaskDesc& t = tasks[i];
      if (t.op != static_cast<uint32_t>(OpCode::MatMul)) continue;
      if (!has_prologue(t)) {
        x_[i] = operand<const float>(t, 0);
        continue;
      }
      if (t.dim[0] <= kThreadPrologueRows) continue;
      const size_t j = static_cast<size_t>(
          std::find_if(todo.begin(), todo.end(), [&](const Pro& o) { return same_prologue(*o.t, t); }) - todo.begin());
      if (j == todo.size()) {
        todo.push_back({&t, bytes});
        bytes += static_cast<size_t>(t.dim[0] * t.dim[1] * 4 + 63) / 64 * 64;
      }
      users.emplace_back(i, j);
    }
    if (todo.empty()) return;
    if (stage_x_.size() < bytes) stage_x_ = AlignedBytes(bytes);
    constexpr int64_t kRows = 16;  // rows per item
    std::vector<int64_t> first(todo.size() + 1, 0);
    for (size_t j = 0; j < todo.size(); ++j) first[j + 1] = first[j] + (todo[j].t->dim[0] + kRows - 1) / kRows;
    pool_.run(first.back(), [&](int64_t item, int) {
      const size_t j = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1);
      const int64_t m0 = (item - first[j]) * kRows;
      float* out = reinterpret_cast<float*>(stage_x_.data() + todo[j].off);
      matmul_prologue(*todo[j].t, out, m0, std::min(todo[j].t->dim[0], m0 + kRows));
    });
    for (const auto& [i, j] : users) x_[i] = reinterpret_cast<const float*>(stage_x_.data() + todo[j].off);
  }

  static bool same_prologue(const TaskDesc& a, const TaskDesc& b) {
    return a.iparam[1] == b.iparam[1] && a.ptr[0] == b.ptr[0] && a.ptr[5] == b.ptr[5] && a.dim[0] == b.dim[0] &&
           a.dim[1] == b.dim[1] && (prologue_of(a) != blob::Prologue::RmsNorm || a.fparam[0] == b.fparam[0]);
  }

  // A small MatMul's activations with its prologue applied, computed by this thread the first time
  // it runs a chunk of such a task in this stage (a few thousand elements: cheaper than a barrier).
  const float* own_prologue(const TaskDesc& t, size_t worker) {
    OwnX& own = own_x_[worker];
    if (own.epoch != epoch_ || !own.t || !same_prologue(*own.t, t)) {
      const size_t bytes = static_cast<size_t>(t.dim[0] * t.dim[1]) * 4;
      if (own.buf.size() < bytes) own.buf = AlignedBytes(bytes);
      matmul_prologue(t, reinterpret_cast<float*>(own.buf.data()), 0, t.dim[0]);
      own.t = &t;
      // Its quantisation, if this thread made one of the buffer's old contents, is stale now.
      for (OwnQ& q : own_q_[worker])
        if (q.x == reinterpret_cast<const float*>(own.buf.data())) q.epoch = 0;
      own.epoch = epoch_;
    }
    return reinterpret_cast<const float*>(own.buf.data());
  }

  // A decode-sized MatMul's activations x quantised for its weight type by this thread, once per
  // stage for all its chunks and every task of the stage that reads the same x for the same weight
  // type (q, k and v; gate and up), instead of once per chunk: the same bytes the kernel would
  // make itself, so the same bits. Null for weight types that take x as floats.
  const void* own_quantized(const TaskDesc& t, const float* x, size_t worker) {
    const GgmlType wt = operand_type(t, 1);
    const int64_t M = t.dim[0], K = t.dim[1];
    const int64_t bytes = prequantized_x_bytes(wt, M, K);
    if (bytes == 0) return nullptr;
    std::vector<OwnQ>& mine = own_q_[worker];
    for (OwnQ& q : mine)
      if (q.epoch == epoch_ && q.x == x && q.wt == wt && q.M == M && q.K == K) return q.buf.data();
    // A stale entry, or a new one (a stage reads at most a few activations per thread).
    auto slot = std::find_if(mine.begin(), mine.end(), [&](const OwnQ& q) { return q.epoch != epoch_; });
    if (slot == mine.end()) slot = mine.emplace(mine.end());
    if (slot->buf.size() < static_cast<size_t>(bytes)) slot->buf = AlignedBytes(static_cast<size_t>(bytes));
    prequantize_x(wt, x, M, K, slot->buf.data(), 0, M);
    slot->epoch = epoch_;
    slot->x = x;
    slot->wt = wt;
    slot->M = M;
    slot->K = K;
    return slot->buf.data();
  }

  // Prefill matmuls with int8 activations: x is quantised once per stage, all threads helping,
  // instead of once per output chunk; matmuls of the stage that read the same x for the same
  // weight type (q/k/v, gate/up) share it. Fills xq_[i] for each task of the stage (null = none).
  void prequantize(const TaskDesc* tasks, size_t n) {
    xq_.assign(n, nullptr);
    pre_.clear();
    size_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      const TaskDesc& t = tasks[i];
      // (a decode-sized MatMul's x is quantised by each thread for itself: own_quantized)
      if (t.op != static_cast<uint32_t>(OpCode::MatMul) || !x_[i] || t.dim[0] <= kThreadPrologueRows) continue;
      const int64_t need = prequantized_x_bytes(operand_type(t, 1), t.dim[0], t.dim[1]);
      if (need == 0) continue;
      auto same = std::find_if(pre_.begin(), pre_.end(), [&](const PreQ& q) {
        return q.x == x_[i] && q.wt == operand_type(t, 1) && q.M == t.dim[0] && q.K == t.dim[1];
      });
      if (same == pre_.end()) {
        pre_.emplace_back(x_[i], operand_type(t, 1), t.dim[0], t.dim[1], bytes, i);
        bytes += static_cast<size_t>(need + 63) / 64 * 64;
      } else {
        same->tasks.push_back(i);
      }
    }
    if (pre_.empty()) return;
    if (xq_buf_.size() < bytes) xq_buf_ = AlignedBytes(bytes);
    constexpr int64_t kRows = 16;  // rows of x per item
    std::vector<int64_t> first(pre_.size() + 1, 0);
    for (size_t j = 0; j < pre_.size(); ++j) first[j + 1] = first[j] + (pre_[j].M + kRows - 1) / kRows;
    pool_.run(first.back(), [&](int64_t item, int) {
      const size_t j = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1);
      const PreQ& q = pre_[j];
      const int64_t m0 = (item - first[j]) * kRows;
      prequantize_x(q.wt, q.x, q.M, q.K, xq_buf_.data() + q.off, m0, std::min(q.M, m0 + kRows));
    });
    for (const PreQ& q : pre_)
      for (size_t i : q.tasks) xq_[i] = xq_buf_.data() + q.off;
  }

  // Cuts each task of the stage into chunks, numbers all chunks 0..n-1, and lets the pool take them.
  void run_stage(const TaskDesc* tasks, size_t n, size_t stage) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool tracing = trace::on();
    const int64_t trace_t0 = tracing ? trace::now_ns() : 0;
    ++epoch_;
    apply_prologues(tasks, n);
    prequantize(tasks, n);
    const int64_t trace_prepared = tracing ? trace::now_ns() : 0;
    if (tracing) {
      trace_first_.assign(static_cast<size_t>(pool_.threads()), -1);
      trace_last_.assign(trace_first_.size(), 0);
      trace_chunks_.assign(trace_first_.size(), 0);
      trace_tid_.assign(trace_first_.size(), 0);
    }
    int64_t work = 0;
    for (size_t i = 0; i < n; ++i) work += work_of(tasks[i]);
    // A stage the caller runs alone takes each task in one piece: cutting it would only repeat
    // each kernel's set-up (the activations' quantisation, ...) for nothing.
    const bool parallel = work >= kParallelWork && pool_.threads() > 1;
    if (parallel && n == 1 && attn_split_.plan(tasks[0], pool_.threads())) {
      run_split_attention(tasks[0], tracing);
      counters_.split_attention_stages++;
    } else {
      run_chunks(tasks, n, parallel, tracing);
    }
    const int64_t trace_ran = tracing ? trace::now_ns() : 0;
    count_experts(tasks, n);
    if (tap_)
      for (size_t i = 0; i < n; ++i)
        if (tasks[i].op == tap_op_) tap_(tasks[i]);
    counters_.stages++;
    counters_.parallel_stages += parallel;
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    if (n > 0 && tasks[0].op < Counters::kOps) counters_.stage_ns[tasks[0].op] += ns;
    std::string kind;
    if (n > 0 && tasks[0].op == static_cast<uint32_t>(OpCode::MatMul)) count_matmul_kind(tasks, n, ns, tracing ? &kind : nullptr);
    if (tracing && n > 0) trace_stage(tasks, n, stage, parallel, kind, trace_t0, trace_prepared, trace_ran);
  }

  // The tasks of a stage cut into chunks (split_of), all chunks numbered 0..n-1 for the pool.
  void run_chunks(const TaskDesc* tasks, size_t n, bool parallel, bool tracing) {
    chunk_start_.assign(n + 1, 0);
    chunk_count_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const Split s = split_of(tasks[i], pool_.threads());
      const int64_t max_chunks = std::max<int64_t>(1, (s.length + s.grain - 1) / s.grain);
      chunk_count_[i] = parallel ? std::min<int64_t>(max_chunks, pool_.threads() * chunks_per_thread(tasks[i])) : 1;
      chunk_start_[i + 1] = chunk_start_[i] + chunk_count_[i];
    }
    pool_.run(chunk_start_[n], [&](int64_t item, int worker) {
      const size_t i = static_cast<size_t>(std::upper_bound(chunk_start_.begin(), chunk_start_.end(), item) - chunk_start_.begin() - 1);
      const int64_t c = pool_.in_step_range(item - chunk_start_[i], chunk_count_[i]);  // (see there)
      const Split s = split_of(tasks[i], pool_.threads());
      // Chunk boundaries are multiples of the grain so vector kernels see aligned ranges.
      const int64_t per = (s.length + chunk_count_[i] - 1) / chunk_count_[i];
      const int64_t step = (per + s.grain - 1) / s.grain * s.grain;
      const int64_t b = std::min(s.length, c * step), e = std::min(s.length, b + step);
      if (b >= e) return;
      const float* x = x_[i];
      const void* xq = xq_[i];
      if (tasks[i].op == static_cast<uint32_t>(OpCode::MatMul) && tasks[i].dim[0] <= kThreadPrologueRows) {
        if (!x && has_prologue(tasks[i])) x = own_prologue(tasks[i], static_cast<size_t>(worker));
        xq = own_quantized(tasks[i], x, static_cast<size_t>(worker));
      }
      const int64_t c0 = tracing ? trace::now_ns() : 0;
      run_chunk(tasks[i], b, e, work_[static_cast<size_t>(worker)].data(), x, xq);
      if (tracing) trace_chunk(worker, c0);
    }, parallel);
  }

  // An Attention split over its keys (attention_split.h): its parts, then its merges.
  void run_split_attention(const TaskDesc& t, bool tracing) {
    const int64_t parts = attn_split_.parts();
    pool_.run(parts, [&](int64_t item, int worker) {
      const int64_t c0 = tracing ? trace::now_ns() : 0;
      attn_split_.run_part(t, pool_.in_step_range(item, parts), work_[static_cast<size_t>(worker)].data());
      if (tracing) trace_chunk(worker, c0);
    });
    pool_.run(attn_split_.merges(), [&](int64_t item, int) { attn_split_.run_merge(t, item); });
  }

  void trace_chunk(int worker, int64_t c0) {  // (each worker writes its own entries only)
    const size_t w = static_cast<size_t>(worker);
    if (trace_first_[w] < 0) {
      trace_first_[w] = c0;
      trace_tid_[w] = trace::thread_id();
    }
    trace_last_[w] = trace::now_ns();
    trace_chunks_[w]++;
  }

  // A traced stage (common/trace.h), kept until the program has run (execute): the stage on this
  // thread, from its start to its end; inside it the preparation of its activations (prologues,
  // quantisation) where there was any; and on each thread that ran chunks, the chunks (first start
  // to last end) and the wait from its last chunk to the stage's end (the barrier).
  void trace_stage(const TaskDesc* tasks, size_t n, size_t stage, bool parallel, const std::string& kind, int64_t t0,
                   int64_t prepared, int64_t ran) {
    TracedStage t;
    t.name = blob::op_name(tasks[0].op);
    t.args = fmt::format(R"({{"stage":{},"tasks":{},"parallel":{})", stage, n, parallel);
    if (tasks[0].op == static_cast<uint32_t>(OpCode::MoeMatMul))
      t.args += fmt::format(R"(,"rows":{},"experts":{})", tasks[0].dim[0], tasks[0].dim[4]);
    else if (!kind.empty())
      t.args += fmt::format(R"(,"rows":{},"reads":"{}")", tasks[0].dim[0], kind);
    t.args += "}";
    t.t0 = t0;
    t.prepared = prepared;
    t.ran = ran;
    t.first = trace_first_;
    t.last = trace_last_;
    t.chunks = trace_chunks_;
    t.tid = trace_tid_;
    t.end = trace::now_ns();
    traced_.push_back(std::move(t));
  }

  // The expert slabs the stage's MoeMatMul tasks read: one per expert that has rows in the table.
  void count_experts(const TaskDesc* tasks, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const TaskDesc& t = tasks[i];
      if (t.op != static_cast<uint32_t>(OpCode::MoeMatMul)) continue;
      const MoeTable table = moe_table(operand<const int32_t>(t, 3), t.dim[0], t.dim[3], t.dim[4]);
      int64_t slabs = 0;
      for (int64_t e = 0; e < t.dim[4]; ++e) slabs += table.first[e + 1] > table.first[e];
      counters_.expert_slabs += slabs;
      counters_.expert_bytes += slabs * static_cast<int64_t>(moe_slab_bytes(operand_type(t, 1), static_cast<WeightLayout>(t.iparam[0]), t.dim[2], t.dim[1]));
    }
  }

  // Adds a MatMul stage's run to its kind in counters_.matmul_kinds. The kind is found once per
  // stage of a program, by the stage's first task (a program's tasks stay put while it is loaded;
  // the task's type and shape are compared too, so a later program at the same address is told
  // apart): a lookup a stage, not a label.
  void count_matmul_kind(const TaskDesc* tasks, size_t n, int64_t ns, std::string* label_out) {
    const TaskDesc& t = tasks[0];
    std::lock_guard lock(kinds_mu_);
    auto it = kind_of_.find(tasks);
    const auto same = [&](const KindOf& k) {
      return k.type == t.type[1] && k.dim[0] == t.dim[0] && k.dim[1] == t.dim[1] && k.dim[2] == t.dim[2] && k.tasks == n;
    };
    if (it == kind_of_.end() || !same(it->second)) {
      std::string label;
      int64_t bytes = 0;
      for (size_t i = 0; i < n; ++i) {
        label += i ? " + " : "";
        if (tasks[i].op != static_cast<uint32_t>(OpCode::MatMul)) {  // (a stage of MatMuls only, as compiled today)
          label += blob::op_name(tasks[i].op);
          continue;
        }
        const GgmlType wt = operand_type(tasks[i], 1);
        label += fmt::format("{} {}x{}", ggml_type_name(wt), tasks[i].dim[1], tasks[i].dim[2]);
        bytes += static_cast<int64_t>(ggml_row_bytes(wt, tasks[i].dim[1])) * tasks[i].dim[2];
      }
      std::vector<Counters::MatMulKind>& kinds = counters_.matmul_kinds;
      auto k = std::find_if(kinds.begin(), kinds.end(), [&](const Counters::MatMulKind& m) { return m.rows == t.dim[0] && m.label == label; });
      if (k == kinds.end()) k = kinds.insert(kinds.end(), {label, t.dim[0], bytes, 0, 0});
      if (kind_of_.size() >= 4096) kind_of_.clear();  // (programs come and go: a bound, not a leak)
      it = kind_of_.insert_or_assign(tasks, KindOf{static_cast<int>(k - kinds.begin()), t.type[1], {t.dim[0], t.dim[1], t.dim[2]}, n}).first;
    }
    Counters::MatMulKind& kind = counters_.matmul_kinds[static_cast<size_t>(it->second.kind)];
    kind.runs += 1;
    kind.ns += ns;
    if (label_out) *label_out = kind.label;
  }

  // One activation quantisation of a stage and the tasks that use it.
  struct PreQ {
    const float* x;
    GgmlType wt;
    int64_t M, K;
    size_t off;                  // in xq_buf_
    std::vector<size_t> tasks;
    PreQ(const float* x_, GgmlType wt_, int64_t M_, int64_t K_, size_t off_, size_t task)
        : x(x_), wt(wt_), M(M_), K(K_), off(off_), tasks{task} {}
  };

  // One thread's quantised activations of a small MatMul (own_quantized).
  struct OwnQ {
    uint64_t epoch = 0;
    const float* x = nullptr;
    GgmlType wt = GgmlType::F32;
    int64_t M = 0, K = 0;
    AlignedBytes buf;
  };

  // One thread's copy of a small MatMul's activations with its prologue applied (own_prologue).
  struct OwnX {
    const TaskDesc* t = nullptr;
    uint64_t epoch = 0;
    AlignedBytes buf;
  };

  // A MatMul stage's kind (count_matmul_kind), by the stage's first task.
  struct KindOf {
    int kind;
    uint32_t type;
    int64_t dim[3];
    size_t tasks;
  };

  WorkerPool pool_;
  Counters counters_;
  uint32_t tap_op_ = 0;
  TaskTap tap_;
  mutable std::mutex kinds_mu_;  // counters_.matmul_kinds grows while a stage runs; counters() copies it
  std::unordered_map<const TaskDesc*, KindOf> kind_of_;
  std::vector<const float*> x_;
  AlignedBytes stage_x_;
  std::vector<std::vector<float>> work_;
  std::vector<OwnX> own_x_;
  std::vector<std::vector<OwnQ>> own_q_;
  uint64_t epoch_ = 0;  // stages run so far: an OwnX of an earlier stage is stale
  std::vector<PreQ> pre_;
  std::vector<const void*> xq_;
  AlignedBytes xq_buf_;
  std::vector<int64_t> chunk_start_, chunk_count_;
  AttentionSplit attn_split_;
  // A traced stage's chunks per worker: first start, last end (now_ns), count, and trace thread id.
  std::vector<int64_t> trace_first_, trace_last_, trace_chunks_;
  std::vector<uint32_t> trace_tid_;
  struct TracedStage {
    std::string name, args;
    int64_t t0 = 0, prepared = 0, ran = 0, end = 0;
    std::vector<int64_t> first, last, chunks;
    std::vector<uint32_t> tid;
  };
  std::vector<TracedStage> traced_;  // this program's stages so far (execute)
};

}  // namespace

std::unique_ptr<device::Device> create_cpu_device(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuDevice>(threads);
}

}  // namespace npullm::cpu
