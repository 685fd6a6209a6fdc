// PageBuffer: zeroed anonymous memory whose large part Linux may back with 2 MiB pages.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "common/page_buffer.h"
#include "test_util.h"

namespace npullm {
namespace {

// AnonHugePages (kB) of the mapping that contains `p`, from /proc/self/smaps; -1 if not found.
int64_t anon_huge_kb(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14));
  }
  return -1;
}

TEST(PageBuffer, ZeroedAlignedAndMovable) {
  PageBuffer none;
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(PageBuffer(0).data(), nullptr);

  PageBuffer small(1000);
  ASSERT_NE(small.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 4096, 0u);
  for (size_t i = 0; i < small.size(); ++i) ASSERT_EQ(small.data()[i], 0) << i;

  const size_t big = (size_t{5} << 20) + 12345;
  PageBuffer a(big);
  EXPECT_EQ(a.size(), big);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % (size_t{2} << 20), 0u) << "starts on a 2 MiB boundary";
  a.data()[0] = 1;
  a.data()[big - 1] = 2;  // the last byte is inside the mapping
  PageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data()[0], 1);
  EXPECT_EQ(b.data()[big - 1], 2);
  EXPECT_EQ(b.data()[big / 2], 0);
  a = std::move(b);
  EXPECT_EQ(a.data()[big - 1], 2);
}

TEST(PageBuffer, BackedByHugePagesWhereTheKernelGivesThem) {
  if (!transparent_huge_pages_available())
    NPULLM_SKIP_UNSUPPORTED("transparent huge pages are off on this kernel (never): nothing to check");
  const size_t bytes = size_t{8} << 20;
  PageBuffer on(bytes), off(bytes, false);
  for (size_t i = 0; i < bytes; i += 4096) on.data()[i] = off.data()[i] = 1;
  // Huge pages are advice the kernel may not follow when memory is fragmented; four aligned 2 MiB
  // ranges, with direct compaction allowed for MADV_HUGEPAGE memory, get at least one.
  EXPECT_GE(anon_huge_kb(on.data()), 2048);
  // Without the advice, THP "madvise" gives none ("always" would: then this says nothing).
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string m;
  std::getline(mode, m);
  if (m.find("[madvise]") != std::string::npos) {
    EXPECT_EQ(anon_huge_kb(off.data()), 0);
  }
}

}  // namespace
}  // namespace npullm
