// The Panels16 weight layout (formats/weight_layout.h), checked byte by byte against its definition:
// rows padded with zeros to S = row bytes rounded up to 4, dword d of row 16p + r at byte 16p S +
// 64d + 4r, the last panel filled with copies of the last row, 64 zero bytes after it; packing in
// pieces gives the same bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "formats/weight_layout.h"

namespace npullm {
namespace {

TEST(WeightLayout, Panels16IsTheDefinedPermutation) {
  for (auto [t, K, N] : std::vector<std::tuple<GgmlType, int64_t, int64_t>>{
           {GgmlType::Q4_0, 64, 1}, {GgmlType::Q8_0, 128, 16}, {GgmlType::Q6_K, 512, 33}, {GgmlType::Q4_K, 256, 40},
           {GgmlType::Q4_0, 96, 17}, {GgmlType::Q6_K, 768, 5}}) {
    SCOPED_TRACE(std::string(ggml_type_name(t)) + " N=" + std::to_string(N));
    const size_t rb = ggml_row_bytes(t, K), S = (rb + 3) / 4 * 4;
    ASSERT_EQ(panels16_stride(t, K), S);
    std::vector<uint8_t> src(rb * N);
    std::mt19937 rng(static_cast<uint32_t>(N));
    for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
    const int64_t panels = (N + 15) / 16;
    const size_t bytes = weight_bytes(t, N, K, WeightLayout::Panels16);
    ASSERT_EQ(bytes, S * 16 * panels + 64);
    std::vector<uint8_t> whole(bytes, 0xEE), pieces(bytes, 0xEE);
    pack_panels16(t, src.data(), N, K, whole.data(), 0, panels);
    for (int64_t p = panels - 1; p >= 0; --p) pack_panels16(t, src.data(), N, K, pieces.data(), p, p + 1);
    EXPECT_EQ(whole, pieces);
    for (int64_t p = 0; p < panels; ++p)
      for (int r = 0; r < 16; ++r)
        for (size_t d = 0; d < S / 4; ++d) {
          const int64_t row = std::min<int64_t>(16 * p + r, N - 1);
          uint8_t want[4] = {0, 0, 0, 0};  // the padding past the row's bytes
          std::memcpy(want, &src[row * rb + 4 * d], std::min<size_t>(4, rb - 4 * d));
          ASSERT_EQ(std::memcmp(&whole[p * 16 * S + 64 * d + 4 * r], want, 4), 0)
              << "panel " << p << " lane " << r << " dword " << d;
        }
    for (size_t i = bytes - 64; i < bytes; ++i) ASSERT_EQ(whole[i], 0) << i;
    // and back: each row as GGUF stores it
    std::vector<uint8_t> row(rb + 1, 0xEE);
    for (int64_t n = 0; n < N; ++n) {
      unpack_panels16_row(t, whole.data(), K, n, row.data());
      ASSERT_EQ(std::memcmp(row.data(), &src[n * rb], rb), 0) << "row " << n;
      ASSERT_EQ(row[rb], 0xEE) << "row " << n << " wrote past its bytes";
    }
  }
}

TEST(WeightLayout, SizesAndLimits) {
  EXPECT_EQ(weight_bytes(GgmlType::Q4_0, 3, 64, WeightLayout::Rows), 3u * 36);
  EXPECT_TRUE(panels16_possible(GgmlType::Q4_0, 64));
  EXPECT_TRUE(panels16_possible(GgmlType::Q4_0, 96));    // 54-byte rows, padded to 56
  EXPECT_EQ(weight_bytes(GgmlType::Q6_K, 4, 256, WeightLayout::Panels16), 16u * 212 + 64);
  EXPECT_FALSE(panels16_possible(GgmlType::Q4_K, 100));  // not whole super-blocks
  EXPECT_THROW(weight_bytes(GgmlType::Q4_K, 4, 100, WeightLayout::Panels16), Error);
  EXPECT_STREQ(weight_layout_name(WeightLayout::Panels16), "panels16");
}

}  // namespace
}  // namespace npullm
