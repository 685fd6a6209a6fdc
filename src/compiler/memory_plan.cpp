#include "compiler/memory_plan.h"

#include <algorithm>
#include <fmt/format.h>
#include <numeric>

namespace npullm::compiler {

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
bool live_together(const BufferUse& a, const BufferUse& b) { return a.first <= b.last && b.first <= a.last; }
}  // namespace

uint64_t plan_memory(std::vector<BufferUse>& buffers, uint64_t align) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  uint64_t arena = 0;
  for (size_t i : order) {
    BufferUse& b = buffers[i];
    // Intervals of the arena taken by buffers live at the same time as b, sorted by offset.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t j : placed)
      if (live_together(b, buffers[j])) busy.emplace_back(buffers[j].offset, buffers[j].offset + buffers[j].bytes);
    std::sort(busy.begin(), busy.end());
    uint64_t candidate = 0;
    for (const auto& [lo, hi] : busy) {
      if (candidate + b.bytes <= lo) break;  // fits in the gap before this interval
      candidate = std::max(candidate, align_up(hi, align));
    }
    b.offset = candidate;
    arena = std::max(arena, align_up(candidate + b.bytes, align));
    placed.push_back(i);
  }
  return arena;
}

std::string draw_memory_plan(const std::vector<BufferUse>& buffers, uint64_t arena_bytes, int width) {
  std::string out = fmt::format("scratch arena: {} bytes; each bar spans the arena, '#' marks the buffer\n", arena_bytes);
  const double scale = arena_bytes ? static_cast<double>(width) / static_cast<double>(arena_bytes) : 0.0;
  for (const BufferUse& b : buffers) {
    std::string bar(static_cast<size_t>(width), '.');
    size_t lo = static_cast<size_t>(static_cast<double>(b.offset) * scale);
    size_t hi = std::max(lo + 1, static_cast<size_t>(static_cast<double>(b.offset + b.bytes) * scale));
    for (size_t k = lo; k < std::min(hi, bar.size()); ++k) bar[k] = '#';
    out += fmt::format("  |{}| {:>10} +{:<9} stages {:>3}..{:<3} {}\n", bar, b.offset, b.bytes, b.first, b.last, b.name);
  }
  return out;
}

}  // namespace npullm::compiler
