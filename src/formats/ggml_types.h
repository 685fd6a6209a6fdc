// Element types of GGUF tensors (the ggml type ids) and their block layouts.
//
// A tensor row of `n` elements of a block-quantised type is stored as n / block_size blocks of
// type_size bytes each. The numeric ids are the ones written in GGUF files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace npullm {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeTraits {
  std::string_view name;  // "Q4_0", ...; empty for ids this build does not know
  int64_t block_size;     // elements per block (1 for plain types)
  int64_t type_size;      // bytes per block
  bool can_dequantize;    // dequantize_row() supports it
};

// Traits of a type id; known() is false for ids outside the table (never throws).
bool ggml_type_known(uint32_t id);
const GgmlTypeTraits& ggml_type_traits(GgmlType t);  // throws npullm::Error for unknown ids
std::string_view ggml_type_name(GgmlType t);           // "unknown(99)"-style text is not returned: use known()
                                                       // (unknown ids give an empty view; never throws)

// Bytes taken by one row of `n` elements; throws if n is not a multiple of the block size.
size_t ggml_row_bytes(GgmlType t, int64_t n);

// Converts one row of `n` elements of type `t` at `src` to float32 (n must be a whole number of
// blocks). Throws npullm::Error for types without a dequantiser. Supported (can_dequantize): F32, F16,
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4; the results
// are bit-identical to ggml's dequantize_row_* (tests/formats/test_dequant.cpp checks golden vectors;
// MXFP4, which has none there, against exact properties and gpt-oss's tensors).
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// IEEE half / bfloat16 conversions (scalar, exact, round-to-nearest-even on the way down).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

// Quantisers used by tests and by `npullm synth` (reference, scalar): one row, n a multiple of the
// block size. Supported (can_quantize): F32, F16, BF16, Q8_0, Q4_0 (ggml_types.cpp) and Q4_1, Q5_0,
// Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q8_K, MXFP4 (quantize.cpp). Each follows ggml's
// reference quantiser (llama-quantize without an importance matrix) and gives the same bytes;
// tests/formats/test_quantize.cpp checks them against llama-quantize's output.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);
bool can_quantize(GgmlType t);

// MXFP4 (OCP Microscaling, FP4 E2M1 elements with a shared E8M0 scale), 32 el, 17 B: e u8 | qs[16],
// element j the low nibble of qs[j], j + 16 the high nibble (the Q4_0 packing). Element value =
// kMxfp4Values[nibble] * mxfp4_scale(e): the table holds the E2M1 values doubled (so they are
// integers, as ggml's kvalues_mxfp4), and the scale is halved to match, 2^(e - 128) instead of the
// spec's 2^(e - 127) (ggml's ggml_e8m0_to_fp32_half). e = 255 (the spec's NaN) is read as 2^127,
// as ggml does.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128) exactly: a normal float for e >= 2, the subnormals 2^-128 / 2^-127 for e = 0 / 1.
float mxfp4_scale(uint8_t e);

namespace detail {
// The quantisers of quantize.cpp, behind quantize_row(); false when `t` is not one of them.
bool quantize_row_extended(GgmlType t, const float* src, uint8_t* dst, int64_t n);
}  // namespace detail

}  // namespace npullm
