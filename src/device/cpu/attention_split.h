// Decode attention over a long context, split over its keys across the threads (issue 48).
//
// Split by heads (each chunk a run of query heads sharing a K/V head), a decode step of a model
// with few K/V heads gives each thread one group's keys to walk, each key of it a short piece of
// a K/V row (Qwen2.5: 128 of each row's 256 bytes), and leaves a thread idle where the groups do
// not share out evenly (Gemma 3 1B has one). Split by keys, each thread takes a contiguous range
// of blocks of 256 keys for every head of the query (cpu::attention_part), reading whole K/V rows
// in order, and a second pass merges each run of heads' partial states in block order
// (cpu::attention_merge): the same operations as the unsplit kernel, so the same bits for every
// thread count and split.
#pragma once

#include <cstdint>
#include <vector>

#include "blob/task.h"
#include "device/cpu/kernels.h"

namespace npullm::cpu {

class AttentionSplit {
 public:
  // Floats of shared partial state task t needs if it is ever split (0: never).
  static int64_t partial_floats(const blob::TaskDesc& t);
  // Makes room for the largest of them (before a program runs, so execution allocates nothing).
  void reserve(int64_t floats);

  // Plans task t (an Attention) for `threads` threads; false where it is better split by heads as
  // before (a prompt's many queries, a short context, or no more chunks than threads).
  bool plan(const blob::TaskDesc& t, int threads);
  int64_t parts() const { return part_start_.empty() ? 0 : part_start_.back(); }
  int64_t merges() const { return queries_ * runs_; }
  // Part `item` (of parts()): one query's key chunk, every run of its heads; work: the thread's
  // attention scratch (attention_work_floats).
  void run_part(const blob::TaskDesc& t, int64_t item, float* work);
  // Merge `item` (of merges()): one run of one query's heads into the task's output.
  void run_merge(const blob::TaskDesc& t, int64_t item);

 private:
  int64_t queries_ = 0, runs_ = 0, chunks_ = 0;
  std::vector<int64_t> blocks_;      // per query: blocks of keys it visits (-1: its window is outside the state)
  std::vector<int64_t> part_start_;  // per query: its first part; one past the last at the end
  std::vector<float> partials_;      // per query, per run: attention_partial_floats(C, hd)
};

// Query s of Attention task t as cpu::attention_part takes it: its rows of q, its window of K/V
// and mask, its ring start. False where its window leaves the K/V state (its output is zeros).
bool attention_query(const blob::TaskDesc& t, int64_t s, AttentionQuery& a);

}  // namespace npullm::cpu
