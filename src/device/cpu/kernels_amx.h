// Internal to the CPU kernels: the blocking of the AMX prefill matmul (kernels_amx.cpp) and the
// scratch it needs, which kernels.cpp includes in matmul_work_floats. Include after kernels_int8.h.
#pragma once
#include <cstdint>

namespace npullm::cpu::detail {
namespace {

// Weight panels (16 rows) decoded at a time, units per K slice, and rows of x whose accumulators
// are parked between slices (see the driver in kernels_amx.cpp): for blocks of 32 (Q4_0 ... Q8_0)
// and for super-blocks of 256 (Q4_K, Q5_K, Q6_K; slices of one super-block).
constexpr int kAmxGroup32 = 4;
constexpr int64_t kAmxSlice32 = 16;
constexpr int kAmxGroup256 = 2;
constexpr int64_t kAmxSuperRows = 256;
// Bytes of a decoded unit of a panel, at most: per block of 32 / per super-block of 256.
constexpr int64_t kAmxUnitBytes32 = 640;
constexpr int64_t kAmxUnitBytes256 = 16 * 1024 + 128;

// work = [XQ of kChunkRows rows (xq_view layout) | a group of decoded panels | parked accumulators:
// kAmxSuperRows / 16 x group x 1 KiB], each part 64-byte aligned (+ 64 to align the start).
constexpr int64_t amx_work_bytes(int64_t K) {
  const int64_t p32 = kAmxGroup32 * kAmxUnitBytes32 * (K / 32), p256 = kAmxGroup256 * kAmxUnitBytes256 * (K / 256);
  const int64_t groups = kAmxGroup32 > kAmxGroup256 ? kAmxGroup32 : kAmxGroup256;
  return align64(xq_all_bytes(kChunkRows, K)) + (p32 > p256 ? p32 : p256) + kAmxSuperRows / 16 * groups * 1024;
}

}  // namespace
}  // namespace npullm::cpu::detail
