#include "formats/weight_layout.h"

#include <cstring>

#include "common/error.h"

namespace npullm {

const char* weight_layout_name(WeightLayout l) {
  switch (l) {
    case WeightLayout::Rows: return "rows";
    case WeightLayout::Panels16: return "panels16";
  }
  return "?";
}

bool panels16_possible(GgmlType t, int64_t K) {
  if (!ggml_type_known(static_cast<uint32_t>(t))) return false;
  const GgmlTypeTraits& tr = ggml_type_traits(t);
  return tr.block_size > 0 && K > 0 && K % tr.block_size == 0;
}

size_t panels16_stride(GgmlType t, int64_t K) { return (ggml_row_bytes(t, K) + 3) / 4 * 4; }

size_t weight_bytes(GgmlType t, int64_t N, int64_t K, WeightLayout l) {
  const size_t row = ggml_row_bytes(t, K);
  if (l == WeightLayout::Rows) return row * static_cast<size_t>(N);
  if (!panels16_possible(t, K)) fail("a {} weight of {} columns cannot be stored as panels of 16 rows", ggml_type_name(t), K);
  return panels16_stride(t, K) * 16 * static_cast<size_t>((N + 15) / 16) + 64;
}

void pack_panels16(GgmlType t, const void* src, int64_t N, int64_t K, void* dst, int64_t p0, int64_t p1) {
  const size_t row = ggml_row_bytes(t, K), stride = panels16_stride(t, K);
  const size_t dwords = row / 4, tail = row % 4;  // whole dwords, then 0 or 2 bytes padded to one
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t panels = (N + 15) / 16;
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* out = d + static_cast<size_t>(p) * 16 * stride;
    const uint8_t* in[16];
    for (int r = 0; r < 16; ++r) in[r] = s + static_cast<size_t>(16 * p + r < N ? 16 * p + r : N - 1) * row;
    // Written in order (16 rows read side by side): the output streams, the inputs stay in cache.
    for (size_t w = 0; w < dwords; ++w, out += 64)
      for (int r = 0; r < 16; ++r) std::memcpy(out + 4 * r, in[r] + 4 * w, 4);
    if (tail) {
      std::memset(out, 0, 64);
      for (int r = 0; r < 16; ++r) std::memcpy(out + 4 * r, in[r] + 4 * dwords, tail);
    }
    if (p == panels - 1) std::memset(d + static_cast<size_t>(panels) * 16 * stride, 0, 64);
  }
}

void unpack_panels16_row(GgmlType t, const void* packed, int64_t K, int64_t n, void* dst) {
  const size_t row = ggml_row_bytes(t, K), stride = panels16_stride(t, K);
  const auto* in = static_cast<const uint8_t*>(packed) + static_cast<size_t>(n / 16) * 16 * stride + 4 * static_cast<size_t>(n % 16);
  auto* out = static_cast<uint8_t*>(dst);
  for (size_t w = 0; w < row / 4; ++w) std::memcpy(out + 4 * w, in + 64 * w, 4);
  std::memcpy(out + row / 4 * 4, in + 64 * (row / 4), row % 4);
}

}  // namespace npullm
