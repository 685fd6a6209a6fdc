#include "device/cpu/attention_split.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "device/cpu/task_operands.h"

namespace npullm::cpu {

namespace {

using blob::OpCode;
using blob::TaskDesc;

// Queries of a task that is split (a decode step's, a verify step's or a batch's: few queries,
// each over all of its keys); a prompt's chunk has many queries to share out by heads already.
constexpr int64_t kMaxQueries = 16;
// Blocks of 256 keys a part takes at least: the part's set-up (the first rows' fetches) stays
// small beside its keys.
constexpr int64_t kMinPartBlocks = 2;
// Parts per thread: more let the others take over a held-up thread's share in smaller pieces.
constexpr int64_t kPartsPerThread = 2;

}  // namespace

bool attention_query(const TaskDesc& t, int64_t s, AttentionQuery& a) {
  const int64_t H = t.dim[1], Hkv = t.dim[2], hd = t.dim[3], C = t.dim[4], R = t.dim[5];
  a.q = operand<const float>(t, 0) + s * H * hd;
  a.k_type = operand_type(t, 1);
  a.v_type = operand_type(t, 2);
  a.mrow = operand<const float>(t, 3) ? operand<const float>(t, 3) + s * C : nullptr;
  a.H = H;
  a.Hkv = Hkv;
  a.hd = hd;
  a.C = C;
  a.scale = t.fparam[0];
  a.k = operand<const void>(t, 1);
  a.v = operand<const void>(t, 2);
  a.rot = 0;
  // With a window operand query s attends rows [base, base + C) of the state (and a second column
  // names the ring row its keys are visited from); split or not, the device reads windows here.
  const int32_t* base = operand<const int32_t>(t, 5);
  if (!base) return true;
  const int64_t cols = t.iparam[0] == 2 ? 2 : 1;
  const int64_t first = base[s * cols], start = cols == 2 ? base[s * cols + 1] : 0;
  if (first < 0 || first + C > R || start < 0 || (start > 0 && start >= C)) return false;
  a.k = static_cast<const uint8_t*>(a.k) + static_cast<size_t>(first) * ggml_row_bytes(a.k_type, Hkv * hd);
  a.v = static_cast<const uint8_t*>(a.v) + static_cast<size_t>(first) * ggml_row_bytes(a.v_type, Hkv * hd);
  a.rot = start;
  return true;
}

int64_t AttentionSplit::partial_floats(const TaskDesc& t) {
  if (t.op != static_cast<uint32_t>(OpCode::Attention) || t.dim[0] > kMaxQueries) return 0;
  const int64_t C = t.dim[4];
  if (C < 2 * kMinPartBlocks * 256) return 0;
  return t.dim[0] * attention_runs(t.dim[1], t.dim[2]) * attention_partial_floats(C, t.dim[3]);
}

void AttentionSplit::reserve(int64_t floats) {
  if (static_cast<int64_t>(partials_.size()) < floats) partials_.resize(static_cast<size_t>(floats));
}

bool AttentionSplit::plan(const TaskDesc& t, int threads) {
  // NPULLM_ATTENTION_SPLIT=0 keeps every attention split by heads (to measure the split against it);
  // =2 splits over keys even where the heads share out more evenly (to measure that rule, below).
  static const char* const mode = std::getenv("NPULLM_ATTENTION_SPLIT");
  static const bool by_heads_only = mode && std::strcmp(mode, "0") == 0;
  static const bool keys_anyway = mode && std::strcmp(mode, "2") == 0;
  if (by_heads_only) return false;
  const int64_t need = partial_floats(t);
  if (threads < 2 || need == 0 || need > static_cast<int64_t>(partials_.size())) return false;
  queries_ = t.dim[0];
  runs_ = attention_runs(t.dim[1], t.dim[2]);
  blocks_.assign(static_cast<size_t>(queries_), -1);
  int64_t total = 0;
  for (int64_t s = 0; s < queries_; ++s) {
    AttentionQuery a;
    if (!attention_query(t, s, a)) continue;
    blocks_[static_cast<size_t>(s)] = attention_key_blocks(a.mrow, a.C, a.rot);
    total += blocks_[static_cast<size_t>(s)];
  }
  // Each query's share of threads x kPartsPerThread parts, by its blocks, each part kMinPartBlocks
  // blocks or more.
  const int64_t target = threads * kPartsPerThread;
  part_start_.assign(static_cast<size_t>(queries_) + 1, 0);
  for (int64_t s = 0; s < queries_; ++s) {
    const int64_t nb = std::max<int64_t>(0, blocks_[static_cast<size_t>(s)]);
    const int64_t by_share = total > 0 ? (target * nb + total - 1) / total : 0;
    const int64_t parts = std::min(by_share, nb / kMinPartBlocks);
    part_start_[static_cast<size_t>(s) + 1] = part_start_[static_cast<size_t>(s)] + std::max<int64_t>(nb > 0 ? 1 : 0, parts);
  }
  if (parts() < threads) return false;
  // One query whose heads share out evenly, two runs a thread or more, and whose blocks do not stays
  // split by heads: TinyLlama's four groups at 1,025-1,280 keys are 5 blocks, parts of 2 and 3 on two
  // threads, and the thread with 3 set the stage's time. Attention a step at depth 1,024 (bench
  // --depth 32,1024, interleaved steps): over keys 1.72-1.73 ms against 1.38-1.45 by heads (=0, two
  // groups a thread), two runs each; later, on a noisier minute, this rule against =2, alternated:
  // 1.72 / 1.79 / 1.87 ms against 1.91 / 2.00 / 2.00. With one run a thread (Qwen2.5's two groups)
  // each thread reads a strided half of every row, and the split over keys stays ahead even so: at
  // 1,100 keys 0.70 / 0.73 ms against 0.87 / 0.99 by heads.
  if (queries_ == 1 && runs_ >= 2 * threads && !keys_anyway) {
    const int64_t nb = blocks_[0], n = parts();
    const double even = static_cast<double>(nb) / threads;
    const double by_keys = std::max(static_cast<double>((nb + n - 1) / n), even) / even;
    const double by_heads = static_cast<double>((runs_ + threads - 1) / threads * threads) / static_cast<double>(runs_);
    if (by_keys > 1.1 * by_heads) return false;
  }
  return true;
}

void AttentionSplit::run_part(const TaskDesc& t, int64_t item, float* work) {
  const auto it = std::upper_bound(part_start_.begin(), part_start_.end(), item);
  const int64_t s = it - part_start_.begin() - 1;
  const int64_t j = item - part_start_[static_cast<size_t>(s)];
  const int64_t n = part_start_[static_cast<size_t>(s) + 1] - part_start_[static_cast<size_t>(s)];
  const int64_t nb = blocks_[static_cast<size_t>(s)];
  AttentionQuery a;
  if (nb <= 0 || !attention_query(t, s, a)) return;
  const int64_t pf = attention_partial_floats(a.C, a.hd);
  attention_part(a, 0, runs_, j * nb / n, (j + 1) * nb / n, work, partials_.data() + s * runs_ * pf);
}

void AttentionSplit::run_merge(const TaskDesc& t, int64_t item) {
  const int64_t s = item / runs_, r = item % runs_;
  AttentionQuery a;
  float* out = operand<float>(t, 4) + s * t.dim[1] * t.dim[3];
  const int64_t nb = blocks_[static_cast<size_t>(s)];
  if (nb < 0 || !attention_query(t, s, a)) {  // a window outside the state: zeros, as unsplit
    if (r == 0) std::fill(out, out + t.dim[1] * t.dim[3], 0.0f);
    return;
  }
  const int64_t pf = attention_partial_floats(a.C, a.hd);
  attention_merge(a, nb, r, r + 1, partials_.data() + s * runs_ * pf, out, operand<const float>(t, 6));
}

}  // namespace npullm::cpu
