#include "genai/grammar/mask_pool.h"

#include <mutex>

namespace npullm::genai::grammar::mask_pool {

namespace {

// At most this many buffers held (256 of 19 KB: 4.8 MiB), enough for several requests' mask caches.
constexpr size_t kMaxHeld = 256;

std::mutex g_mu;
std::vector<std::vector<uint64_t>> g_held;  // most recently given last

}  // namespace

std::vector<uint64_t> take(size_t words) {
  std::vector<uint64_t> v;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (size_t i = g_held.size(); i-- > 0;)
      if (g_held[i].capacity() >= words) {
        v = std::move(g_held[i]);
        g_held.erase(g_held.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }
  v.assign(words, 0);  // within the capacity of a recycled buffer: no new pages
  return v;
}

void give(std::vector<uint64_t>&& v) {
  if (v.capacity() == 0) return;
  std::vector<uint64_t> drop;  // freed outside the lock
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_held.size() < kMaxHeld) g_held.push_back(std::move(v));
  else drop = std::move(v);
}

void fill(size_t words, size_t n) {
  size_t have = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (const auto& v : g_held) have += v.capacity() >= words;
  }
  for (; have < n; ++have) give(std::vector<uint64_t>(words, 0));
}

}  // namespace npullm::genai::grammar::mask_pool
