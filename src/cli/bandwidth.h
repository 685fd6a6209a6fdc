// Memory read bandwidth, measured on the spot (the roofline that decode speed is judged against).
#pragma once
#include <cstddef>

#include "common/page_buffer.h"

namespace npullm::cli {

// Bytes per second that `threads` threads reach reading a working set of `working_set_bytes` (the
// bytes one decode step reads) over and over with the widest vector loads this CPU has, each thread
// its own slice, as decode splits its matrices: the roofline for that step. A set that fits in the
// caches is read at cache speed, a large one at DRAM speed, so a model held in L2/L3 is judged
// against cache bandwidth, not DRAM's. The set is at least 64 KiB and at most 1 GiB (beyond any
// cache); each pass reads it until 1 GiB has been read, and measure() returns the best of 5 passes of
// each loop shape (with AVX-512: one load per line, and one load plus a fetch 16 KiB ahead), since a
// roofline is what the memory can do at best. The set is on huge pages when `huge_pages` (as the
// runtime holds weights by default) and on 4 KiB pages otherwise (as with --no-huge-pages).
// It is allocated and touched once, so measure() can be repeated: on a shared machine the memory's
// speed moves with the neighbours' traffic (41-84 GB/s within minutes on one box), and `npullm bench`
// measures between its tg runs to judge each run against the bandwidth right around it.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(int threads, size_t working_set_bytes, bool huge_pages);
  double measure();  // bytes per second; 0 when the working set could not be allocated

 private:
  int threads_;
  size_t bytes_ = 0, repeats_ = 1;
  PageBuffer mem_;
};
}  // namespace npullm::cli
