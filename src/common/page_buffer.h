// Memory for bytes read again and again, every token: the model's weights, the K/V cache, the
// scratch arena. Decode streams nearly every weight byte per token; on 4 KiB pages that is a TLB
// miss every 4 KiB and the hardware prefetcher stopping at every page boundary. A PageBuffer is
// anonymous memory whose large part starts on a 2 MiB boundary and is marked MADV_HUGEPAGE, so
// Linux backs it with transparent huge pages where THP is "always" or "madvise" (with "never", or
// `huge` false, it is ordinary anonymous memory). Measured on the 2-core AVX-512 machine of
// bench/RESULTS.md: one core decoding a 2048 x 5632 Q4_0 matrix streams 7.8 GB/s on 4 KiB pages,
// 10.0 GB/s on 2 MiB pages.
#pragma once
#include <cstddef>
#include <cstdint>

namespace npullm {

class PageBuffer {
 public:
  PageBuffer() = default;
  // `bytes` of zeroed memory (none for 0); throws npullm::Error when the system has none to give.
  explicit PageBuffer(size_t bytes, bool huge = true);
  ~PageBuffer();
  PageBuffer(PageBuffer&& o) noexcept;
  PageBuffer& operator=(PageBuffer&& o) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Makes the memory read-only (weights, once written): a stray write faults instead of
  // corrupting them.
  void protect_read_only();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0, mapped_ = 0;
};

// Whether this kernel gives huge pages to memory that asks for them (THP "always" or "madvise").
bool transparent_huge_pages_available();

}  // namespace npullm
