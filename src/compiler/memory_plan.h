// Memory planning: places intermediate buffers in one scratch arena, reusing memory between
// buffers whose lifetimes do not overlap.
//
// Each buffer is described by its size and the first and last stage in which it is live (written
// or read). Two buffers may share bytes only if their stage ranges are disjoint: tasks of one stage
// run concurrently, so a buffer is live for the whole of every stage that touches it.
//
// Algorithm (greedy by size, as in TFLite Micro's planner): sort buffers by size, largest first;
// place each at the lowest aligned offset where it overlaps no already-placed buffer that is live
// at the same time. Large buffers get the low, contiguous space; small ones fill the gaps.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace npullm::compiler {

struct BufferUse {
  std::string name;
  uint64_t bytes = 0;
  uint32_t first = 0, last = 0;  // stages, inclusive
  uint64_t offset = 0;           // result of plan_memory
};

// Assigns `offset` to every buffer; returns the arena size. Offsets are multiples of `align`.
uint64_t plan_memory(std::vector<BufferUse>& buffers, uint64_t align = 64);

// Draws the plan: one line per buffer, a bar over the arena at its offset, stages on the right.
std::string draw_memory_plan(const std::vector<BufferUse>& buffers, uint64_t arena_bytes, int width = 48);

}  // namespace npullm::compiler
