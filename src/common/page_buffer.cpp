#include "common/page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "common/error.h"

namespace npullm {

namespace {
constexpr size_t kPage = 4096;
constexpr size_t kHuge = size_t{2} << 20;
}  // namespace

PageBuffer::PageBuffer(size_t bytes, bool huge) : size_(bytes) {
  if (bytes == 0) return;
  mapped_ = (bytes + kPage - 1) / kPage * kPage;
  // Below one huge page there is nothing to gain; above, map one huge page more than needed and
  // hand back the head and tail around the first 2 MiB boundary. The last partial huge page stays
  // on small pages (THP only backs whole aligned 2 MiB ranges), so nothing is wasted.
  const bool align = huge && mapped_ >= kHuge;
  const size_t ask = align ? mapped_ + kHuge : mapped_;
  void* m = ::mmap(nullptr, ask, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) fail("cannot allocate {} bytes: {}", bytes, std::strerror(errno));
  auto* p = static_cast<uint8_t*>(m);
  if (align) {
    const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge;
    auto* start = reinterpret_cast<uint8_t*>(a);
    if (start > p) ::munmap(p, static_cast<size_t>(start - p));
    const size_t tail = ask - static_cast<size_t>(start - p) - mapped_;
    if (tail) ::munmap(start + mapped_, tail);
    p = start;
    // Advice only: a kernel without THP refuses it and the memory works all the same.
    ::madvise(p, mapped_, MADV_HUGEPAGE);
  }
  data_ = p;
}

PageBuffer::~PageBuffer() {
  if (data_) ::munmap(data_, mapped_);
}

PageBuffer::PageBuffer(PageBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), mapped_(std::exchange(o.mapped_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(mapped_, o.mapped_);
  return *this;
}

void PageBuffer::protect_read_only() {
  if (data_) ::mprotect(data_, mapped_, PROT_READ);
}

bool transparent_huge_pages_available() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

}  // namespace npullm
