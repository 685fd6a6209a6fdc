// Memory read bandwidth, measured on the spot (the roofline that decode speed is judged against).
#pragma once

namespace npullm::cli {

// Bytes per second that `threads` threads reach reading a buffer much larger than the caches with
// the widest vector loads this CPU has (median of a few passes).
double measure_read_bandwidth(int threads);

}  // namespace npullm::cli
