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
  TQ1_0 = 34, TQ2_0 = 35,
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
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS; the results are
// bit-identical to ggml's dequantize_row_* (tests/formats/test_dequant.cpp checks golden vectors).
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// IEEE half / bfloat16 conversions (scalar, exact, round-to-nearest-even on the way down).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

// Quantisers used by tests and by `npullm synth` (reference, scalar): one row, n a multiple of the
// block size. Supported (can_quantize): F32, F16, BF16, Q8_0, Q4_0 (ggml_types.cpp) and Q4_1, Q5_0,
// Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, Q8_K (quantize.cpp). Each follows ggml's
// reference quantiser (llama-quantize without an importance matrix) and gives the same bytes;
// tests/formats/test_quantize.cpp checks them against llama-quantize's output.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);
bool can_quantize(GgmlType t);

namespace detail {
// The quantisers of quantize.cpp, behind quantize_row(); false when `t` is not one of them.
bool quantize_row_extended(GgmlType t, const float* src, uint8_t* dst, int64_t n);
}  // namespace detail

}  // namespace npullm
