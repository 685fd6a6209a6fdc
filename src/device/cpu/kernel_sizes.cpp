// The kernels' sizing answers (kernels.h): the scratch a matmul or an attention needs and whether a
// matmul reads a weight as panels. Apart from kernels.cpp so that the device's program checks
// (program_checks.cpp) link without the kernels themselves, as the blob fuzzer does; the constants
// come from the kernels' own headers, so the sizes cannot drift from what the kernels use.
#include "device/cpu/kernels.h"

#include <cstdint>

#include "device/cpu/kernels_impl.h"
#include "device/cpu/kernels_int8.h"
#include "device/cpu/kernels_amx.h"
#include "formats/weight_layout.h"

namespace npullm::cpu {

int64_t matmul_work_floats(int64_t K) {
  if (K <= 0) return detail::kAccFloats;
  // F32 tiles: accumulators + dequantised rows. int8 path: quantised activations + decoded panels,
  // plus 64 bytes to align the start.
  const int64_t f32 = detail::kAccFloats + detail::kBlockRows * K;
  const int64_t i8 = (detail::int8_work_bytes(K) + 64 + 3) / 4;
  const int64_t amx = (detail::amx_work_bytes(K) + 64 + 3) / 4;  // the AMX prefill matmul's blocking
  const int64_t most = f32 > i8 ? f32 : i8;
  return most > amx ? most : amx;
}

int64_t attention_work_floats(int64_t C, int64_t hd) { return detail::attn_work_floats_for(C, hd); }
int64_t attention_runs(int64_t H, int64_t Hkv) { return Hkv * detail::attn_runs_per_group(H / Hkv); }
int64_t attention_partial_floats(int64_t C, int64_t hd) { return detail::attn_partial_floats(C, hd); }
int64_t attention_key_blocks(const float* mrow, int64_t C, int64_t rot) { return detail::attn_span(mrow, C, rot).blocks; }

bool matmul_reads_panels16(GgmlType wt, int64_t K) {
  return detail::int8_supported(wt) && panels16_possible(wt, K);
}

}  // namespace npullm::cpu
