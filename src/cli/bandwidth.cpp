#include "cli/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/page_buffer.h"

namespace npullm::cli {

namespace {

// Each reader folds its range into a vector register so the loads cannot be optimised away. The
// loop's shape changes what a core streams (this Xeon, 1 GiB on huge pages, one thread): one
// 64-byte load per iteration 17.6-18.2 GB/s, the same with a fetch 16 KiB ahead 20.2, two to four
// independent loads per iteration 15.6-15.9 (bench/RESULTS.md, session 9). The roofline is the
// best the memory does, so the AVX-512 path runs the fast shapes (and the decode's, below) and keeps
// the best.
__attribute__((target("avx512f"))) uint64_t fold(__m512i v) {
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, v);
  return lanes[0] ^ lanes[7];
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i acc = _mm512_setzero_si512();
  for (size_t i = 0; i + 64 <= n; i += 64) acc = _mm512_add_epi64(acc, _mm512_load_si512(p + i));
  return fold(acc);
}

__attribute__((target("avx512f"))) uint64_t read_avx512_fetching(const uint8_t* p, size_t n) {
  constexpr size_t kAhead = 16 << 10;
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + kAhead + 64 <= n; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kAhead), _MM_HINT_T1);
    acc = _mm512_add_epi64(acc, _mm512_load_si512(p + i));
  }
  for (; i + 64 <= n; i += 64) acc = _mm512_add_epi64(acc, _mm512_load_si512(p + i));
  return fold(acc);
}

// The decode kernels' own way (kernels_int8.h, PackedPanel): each line's load fetches the line
// 8 KiB on, non-temporally (on Zen 5 into L1 without a place in L2). With only the two loops above,
// decode measured above the roofline (TinyLlama Q4_0 at 105-113 % on the Zen 5 of session 18): the
// probe then under-reported what the memory does, so it runs this one too and keeps the best.
__attribute__((target("avx512f"))) uint64_t read_avx512_fetching_nta(const uint8_t* p, size_t n) {
  constexpr size_t kAhead = 8 << 10;
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + kAhead + 64 <= n; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kAhead), _MM_HINT_NTA);
    acc = _mm512_add_epi64(acc, _mm512_load_si512(p + i));
  }
  for (; i + 64 <= n; i += 64) acc = _mm512_add_epi64(acc, _mm512_load_si512(p + i));
  return fold(acc);
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  for (size_t i = 0; i + 64 <= n; i += 64) {
    acc0 = _mm256_xor_si256(acc0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    acc1 = _mm256_xor_si256(acc1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  const __m256i x = _mm256_xor_si256(acc0, acc1);
  return static_cast<uint64_t>(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}

uint64_t read_scalar(const uint8_t* p, size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  return acc;
}

}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(int threads, size_t working_set_bytes, bool huge_pages)
    : threads_(std::max(1, threads)) {
  const size_t unit = 128 * static_cast<size_t>(threads_);  // each slice a whole number of 128-byte steps
  const size_t want = std::clamp<size_t>(working_set_bytes, size_t{64} << 10, size_t{1} << 30);
  const size_t bytes = (want + unit - 1) / unit * unit;
  // On huge pages as the runtime's weights are (common/page_buffer.h), or the read loop would pay
  // TLB misses the decode does not.
  try {
    mem_ = PageBuffer(bytes, huge_pages);
  } catch (const Error&) {
    return;  // bytes_ stays 0: measure() says 0
  }
  bytes_ = bytes;
  repeats_ = std::max<size_t>(1, (size_t{1} << 30) / bytes_);
  std::memset(mem_.data(), 1, bytes_);  // touch every page before timing
}

double ReadBandwidthProbe::measure() {
  if (bytes_ == 0) return 0.0;
  const uint8_t* buf = mem_.data();
  using Reader = uint64_t (*)(const uint8_t*, size_t);
  std::vector<Reader> readers;
  if (__builtin_cpu_supports("avx512f")) readers = {read_avx512, read_avx512_fetching, read_avx512_fetching_nta};
  else readers = {__builtin_cpu_supports("avx2") ? read_avx2 : read_scalar};
  const size_t per = bytes_ / static_cast<size_t>(threads_);
  double best = 0.0;
  volatile uint64_t sink = 0;
  for (size_t pass = 0; pass < 5 * readers.size(); ++pass) {
    const Reader reader = readers[pass % readers.size()];
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads_; ++t)
      pool.emplace_back([&, t] {
        uint64_t acc = 0;
        for (size_t r = 0; r < repeats_; ++r) acc ^= reader(buf + per * static_cast<size_t>(t), per);
        sink = sink ^ acc;
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes_) * static_cast<double>(repeats_) / s);
  }
  return best;
}

}  // namespace npullm::cli
