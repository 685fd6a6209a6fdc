// ggml type table, half/bfloat16 conversions and the scalar reference (de)quantisers.
//
// Block layouts follow the GGUF / ggml specification (all fields little-endian, tightly packed):
//   Q4_0  32 el, 18 B: d f16 | qs[16]          element j: low nibble of qs[j], j+16: high nibble
//   Q4_1  32 el, 20 B: d f16 | m f16 | qs[16]
//   Q5_0  32 el, 22 B: d f16 | qh u32 | qs[16]  bit j of qh is bit 4 of element j
//   Q5_1  32 el, 24 B: d f16 | m f16 | qh u32 | qs[16]
//   Q8_0  32 el, 34 B: d f16 | qs[32] int8
//   MXFP4 32 el, 17 B: e u8 | qs[16]         packed as Q4_0; see mxfp4_scale and kMxfp4Values
//   Q2_K .. Q6_K, IQ4_NL, IQ4_XS: see the dequantiser of each below.
// The dequantisers evaluate exactly the float expressions of ggml's reference ones, in the same
// order, so their results are bit-identical to llama.cpp's (tests check this against golden data).
#include "formats/ggml_types.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "common/error.h"

namespace npullm {

namespace {

// ---------------------------------------------------------------------------------------------
// Type table, indexed by type id. Entries with an empty name are ids that are not enum values
// (retired or never assigned in ggml).

constexpr uint32_t kMaxTypeId = 39;

constexpr std::array<GgmlTypeTraits, kMaxTypeId + 1> make_table() {
  std::array<GgmlTypeTraits, kMaxTypeId + 1> t{};
  auto set = [&](GgmlType id, std::string_view name, int64_t bs, int64_t ts, bool deq) {
    t[static_cast<uint32_t>(id)] = GgmlTypeTraits{name, bs, ts, deq};
  };
  set(GgmlType::F32, "F32", 1, 4, true);
  set(GgmlType::F16, "F16", 1, 2, true);
  set(GgmlType::Q4_0, "Q4_0", 32, 18, true);
  set(GgmlType::Q4_1, "Q4_1", 32, 20, true);
  set(GgmlType::Q5_0, "Q5_0", 32, 22, true);
  set(GgmlType::Q5_1, "Q5_1", 32, 24, true);
  set(GgmlType::Q8_0, "Q8_0", 32, 34, true);
  set(GgmlType::Q8_1, "Q8_1", 32, 36, false);  // d f16, s f16, qs[32]: an activation type
  set(GgmlType::Q2_K, "Q2_K", 256, 84, true);
  set(GgmlType::Q3_K, "Q3_K", 256, 110, true);
  set(GgmlType::Q4_K, "Q4_K", 256, 144, true);
  set(GgmlType::Q5_K, "Q5_K", 256, 176, true);
  set(GgmlType::Q6_K, "Q6_K", 256, 210, true);
  set(GgmlType::Q8_K, "Q8_K", 256, 292, false);  // d f32, qs[256], bsums[16] i16
  // The other i-quants and the ternary types: sizes from their block structs, so files holding
  // them can at least be parsed and their tensors located; there is no dequantiser for them.
  set(GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false);
  set(GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false);
  set(GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false);
  set(GgmlType::IQ1_S, "IQ1_S", 256, 50, false);
  set(GgmlType::IQ4_NL, "IQ4_NL", 32, 18, true);
  set(GgmlType::IQ3_S, "IQ3_S", 256, 110, false);
  set(GgmlType::IQ2_S, "IQ2_S", 256, 82, false);
  set(GgmlType::IQ4_XS, "IQ4_XS", 256, 136, true);
  set(GgmlType::I8, "I8", 1, 1, false);
  set(GgmlType::I16, "I16", 1, 2, false);
  set(GgmlType::I32, "I32", 1, 4, false);
  set(GgmlType::I64, "I64", 1, 8, false);
  set(GgmlType::F64, "F64", 1, 8, false);
  set(GgmlType::IQ1_M, "IQ1_M", 256, 56, false);
  set(GgmlType::BF16, "BF16", 1, 2, true);
  set(GgmlType::TQ1_0, "TQ1_0", 256, 54, false);
  set(GgmlType::TQ2_0, "TQ2_0", 256, 66, false);
  // (36..38 are retired: the IQ4_NL_4_4 / _4_8 / _8_8 repacks, never in files.)
  set(GgmlType::MXFP4, "MXFP4", 32, 17, true);  // gpt-oss's expert weights
  return t;
}

constexpr auto kTable = make_table();

// ---------------------------------------------------------------------------------------------
// Little helpers for reading packed fields (memcpy: blocks are not aligned in a file).

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void check_whole_blocks(const GgmlTypeTraits& tr, int64_t n, const char* what) {
  if (n < 0 || n % tr.block_size != 0)
    fail("{}: {} elements of type {} is not a whole number of {}-element blocks", what, n, tr.name,
         tr.block_size);
}

// ---------------------------------------------------------------------------------------------
// Dequantisers, one block type each. `n` is a whole number of blocks.

void dequant_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const float d = fp16_to_fp32(load_u16(src));
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
    const float d = fp16_to_fp32(load_u16(src));
    const float m = fp16_to_fp32(load_u16(src + 2));
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0 / Q5_1 share the unpacking: 4 low bits from the nibbles, the 5th bit from qh.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  const int hi = static_cast<int>((qh >> j) & 1u) << 4;
  return lo | hi;
}

void dequant_q5_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 22, dst += 32) {
    const float d = fp16_to_fp32(load_u16(src));
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(q5_value(qs, qh, j) - 16) * d;
  }
}

void dequant_q5_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 24, dst += 32) {
    const float d = fp16_to_fp32(load_u16(src));
    const float m = fp16_to_fp32(load_u16(src + 2));
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(q5_value(qs, qh, j)) * d + m;
  }
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
    const float d = fp16_to_fp32(load_u16(src));
    const auto* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

// ---------------------------------------------------------------------------------------------
// K-quants: 256-element super-blocks of 16 or 8 sub-blocks, each with a small integer scale (and
// for Q2_K/Q4_K/Q5_K a min) that the super-block's f16 d (dmin) multiplies. Every expression is
// evaluated in ggml's order: sub-scale first (d * sc), then times the quant, then minus the min.

// Q4_K / Q5_K: 8 six-bit scales and 8 six-bit mins packed in 12 bytes. Sub-blocks 0..3 keep
// theirs in the low 6 bits of bytes 0..3 (scale) and 4..7 (min); sub-blocks 4..7 take 4 low bits
// from the nibbles of bytes 8..11 and their top 2 bits from the spare high bits of bytes 0..7.
inline void k4_scale_min(const uint8_t* sc, int j, int& scale, int& min) {
  if (j < 4) {
    scale = sc[j] & 63;
    min = sc[j + 4] & 63;
  } else {
    scale = (sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4);
    min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

// Q2_K, 84 B: scales[16] (low nibble scale, high nibble min) | qs[64] | d f16 | dmin f16.
// Each 128-element half uses 32 bytes of qs; bit pair `shift` of byte l (and l + 16) holds
// element 32 * (shift / 2) + l (and + 16).
void dequant_q2_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 84) {
    const uint8_t* scales = src;
    const uint8_t* q = src + 16;
    const float d = fp16_to_fp32(load_u16(src + 80));
    const float dmin = fp16_to_fp32(load_u16(src + 82));
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0F);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l)
            *dst++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K, 110 B: hmask[32] | qs[64] | scales[12] | d f16. Quants are 2 low bits (as Q2_K) plus a high
// bit from hmask; a clear high bit means -4. 16 six-bit scales with bias 32: scale j takes 4 low
// bits from the nibbles of bytes 0..7 and 2 high bits from bytes 8..11.
void dequant_q3_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 110) {
    const uint8_t* hm = src;
    const uint8_t* q = src + 32;
    const uint8_t* sc = src + 96;
    const float d = fp16_to_fp32(load_u16(src + 108));
    int scales[16];
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? (sc[j] & 0x0F) : (sc[j - 8] >> 4);
      const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
      scales[j] = (low | (high << 4)) - 32;
    }
    int is = 0;
    uint8_t m = 1;  // the hmask bit of the current 32-element run
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * static_cast<float>(scales[is++]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *dst++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

// Q4_K, 144 B: d f16 | dmin f16 | scales[12] | qs[128]. Each 64 elements use 32 bytes of qs: the
// low nibbles are the first 32 (sub-block 2g), the high nibbles the next 32 (sub-block 2g + 1).
void dequant_q4_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 144) {
    const float d = fp16_to_fp32(load_u16(src));
    const float dmin = fp16_to_fp32(load_u16(src + 2));
    const uint8_t* sc = src + 4;
    const uint8_t* q = src + 16;
    for (int g = 0; g < 4; ++g, q += 32) {
      int s0, m0, s1, m1;
      k4_scale_min(sc, 2 * g, s0, m0);
      k4_scale_min(sc, 2 * g + 1, s1, m1);
      const float d0 = d * static_cast<float>(s0), mn0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(s1), mn1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) *dst++ = d0 * static_cast<float>(q[l] & 0x0F) - mn0;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] >> 4) - mn1;
    }
  }
}

// Q5_K, 176 B: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]. As Q4_K, plus a 5th bit (value 16)
// for element l of sub-block j in bit j of qh[l].
void dequant_q5_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 176) {
    const float d = fp16_to_fp32(load_u16(src));
    const float dmin = fp16_to_fp32(load_u16(src + 2));
    const uint8_t* sc = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* q = src + 48;
    for (int g = 0; g < 4; ++g, q += 32) {
      int s0, m0, s1, m1;
      k4_scale_min(sc, 2 * g, s0, m0);
      k4_scale_min(sc, 2 * g + 1, s1, m1);
      const float d0 = d * static_cast<float>(s0), mn0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(s1), mn1 = dmin * static_cast<float>(m1);
      const uint8_t u0 = static_cast<uint8_t>(1u << (2 * g)), u1 = static_cast<uint8_t>(2u << (2 * g));
      for (int l = 0; l < 32; ++l)
        *dst++ = d0 * static_cast<float>((q[l] & 0x0F) + ((qh[l] & u0) ? 16 : 0)) - mn0;
      for (int l = 0; l < 32; ++l)
        *dst++ = d1 * static_cast<float>((q[l] >> 4) + ((qh[l] & u1) ? 16 : 0)) - mn1;
    }
  }
}

// Q6_K, 210 B: ql[128] | qh[64] | scales[16] int8 | d f16. Six-bit quants with bias 32: 4 low bits
// from ql, 2 high bits from qh. Each 128-element half uses 64 bytes of ql and 32 of qh: element l
// (l < 32) of the four 32-element runs takes ql[l] low, ql[l+32] low, ql[l] high, ql[l+32] high and
// the bit pairs 0, 2, 4, 6 of qh[l]. Sub-blocks are 16 elements.
void dequant_q6_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = fp16_to_fp32(load_u16(src + 208));
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// IQ4_NL / IQ4_XS: 4-bit indices into a fixed non-uniform table (denser near zero).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// IQ4_NL, 32 el, 18 B: d f16 | qs[16], nibbles packed as Q4_0.
void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    const float d = fp16_to_fp32(load_u16(src));
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(kIq4Values[qs[j] & 0x0F]);
      dst[j + 16] = d * static_cast<float>(kIq4Values[qs[j] >> 4]);
    }
  }
}

// IQ4_XS, 256 el, 136 B: d f16 | scales_h u16 | scales_l[4] | qs[128]. Eight 32-element sub-blocks,
// each with a 6-bit scale (bias 32): low 4 bits from the nibbles of scales_l, high 2 bits from bit
// pair j of scales_h; the quants of each sub-block are packed as in IQ4_NL.
void dequant_iq4_xs(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += 136) {
    const float d = fp16_to_fp32(load_u16(src));
    const uint16_t scales_h = load_u16(src + 2);
    const uint8_t* scales_l = src + 4;
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 8; ++j, qs += 16, dst += 32) {
      const int ls = ((scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) | (((scales_h >> (2 * j)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int l = 0; l < 16; ++l) {
        dst[l] = dl * static_cast<float>(kIq4Values[qs[l] & 0x0F]);
        dst[l + 16] = dl * static_cast<float>(kIq4Values[qs[l] >> 4]);
      }
    }
  }
}

// MXFP4, 32 el, 17 B: e | qs[16], nibbles packed as Q4_0. Each value is a small integer times a
// power of two, so the product is exact (ggml's x0 * d, with x0 the int8 table entry).
void dequant_mxfp4(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 17, dst += 32) {
    const float d = mxfp4_scale(src[0]);
    const uint8_t* qs = src + 1;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(kMxfp4Values[qs[j] & 0x0F]) * d;
      dst[j + 16] = static_cast<float>(kMxfp4Values[qs[j] >> 4]) * d;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reference quantisers: round-to-nearest with one scale per block, as ggml's *_ref functions
// (same float expressions, so the bytes match llama-quantize's output without an imatrix).

void quant_q8_0(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(dst, fp32_to_fp16(d));
    auto* qs = reinterpret_cast<int8_t*>(dst + 2);
    for (int j = 0; j < 32; ++j) qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quant_q4_0(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, dst += 18) {
    // The scale maps the element of largest magnitude, with its sign, to -8: that uses the one
    // extra negative level of the 4-bit range [-8, 7].
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(dst, fp32_to_fp16(d));
    uint8_t* qs = dst + 2;
    for (int j = 0; j < 16; ++j) {
      // x*id lies in [-8, 8]; +8.5 then truncation rounds to nearest, 16 is clamped to 15.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Type table API

bool ggml_type_known(uint32_t id) { return id <= kMaxTypeId && !kTable[id].name.empty(); }

const GgmlTypeTraits& ggml_type_traits(GgmlType t) {
  const auto id = static_cast<uint32_t>(t);
  if (!ggml_type_known(id)) fail("unknown ggml type id {}", id);
  return kTable[id];
}

std::string_view ggml_type_name(GgmlType t) {
  const auto id = static_cast<uint32_t>(t);
  return ggml_type_known(id) ? kTable[id].name : std::string_view{};
}

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const GgmlTypeTraits& tr = ggml_type_traits(t);
  check_whole_blocks(tr, n, "ggml_row_bytes");
  return static_cast<size_t>(n / tr.block_size) * static_cast<size_t>(tr.type_size);
}

// ---------------------------------------------------------------------------------------------
// Half and bfloat16

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (mant << 13));  // inf / NaN (payload kept)
  if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));  // rebias 15 -> 127
  if (mant == 0) return bits_f32(sign);                                        // +-0
  // Subnormal half (mant * 2^-24): normalise it, every float32 can hold it as a normal number.
  uint32_t e = 113;  // exponent field of 2^-14
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_f32(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t u = f32_bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) {  // inf, or NaN kept quiet with the top payload bits
    return a == 0x7F800000u ? static_cast<uint16_t>(sign | 0x7C00u)
                            : static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  }
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (a >= 0x38800000u) {  // normal half range (>= 2^-14)
    uint32_t h = (a - 0x38000000u) >> 13;  // rebias 127 -> 15, drop 13 mantissa bits
    const uint32_t rem = a & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // to nearest, ties to even
    return static_cast<uint16_t>(sign | h);
  }
  const uint32_t e = a >> 23;
  if (e < 102) return sign;  // below half of the smallest subnormal (2^-25): rounds to 0
  // Subnormal half: the result is mant * 2^(e-150) / 2^-24 = mant >> (126 - e), rounded.
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal: fine
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_fp32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// The bits of 2^(e - 128): exponent field e - 1 for e >= 2; below that the subnormals 2^-128
// (0x00200000) and 2^-127 (0x00400000), i.e. 0x00200000 << e (ggml_e8m0_to_fp32_half).
float mxfp4_scale(uint8_t e) {
  return bits_f32(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

uint16_t fp32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  // Round to nearest even on the 16 dropped bits (a carry into the exponent is correct rounding).
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---------------------------------------------------------------------------------------------
// Row conversion

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const GgmlTypeTraits& tr = ggml_type_traits(t);
  check_whole_blocks(tr, n, "dequantize_row");
  const auto* s = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, s, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load_u16(s + 2 * i));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(s + 2 * i));
      return;
    case GgmlType::Q4_0: dequant_q4_0(s, dst, n); return;
    case GgmlType::Q4_1: dequant_q4_1(s, dst, n); return;
    case GgmlType::Q5_0: dequant_q5_0(s, dst, n); return;
    case GgmlType::Q5_1: dequant_q5_1(s, dst, n); return;
    case GgmlType::Q8_0: dequant_q8_0(s, dst, n); return;
    case GgmlType::Q2_K: dequant_q2_k(s, dst, n); return;
    case GgmlType::Q3_K: dequant_q3_k(s, dst, n); return;
    case GgmlType::Q4_K: dequant_q4_k(s, dst, n); return;
    case GgmlType::Q5_K: dequant_q5_k(s, dst, n); return;
    case GgmlType::Q6_K: dequant_q6_k(s, dst, n); return;
    case GgmlType::IQ4_NL: dequant_iq4_nl(s, dst, n); return;
    case GgmlType::IQ4_XS: dequant_iq4_xs(s, dst, n); return;
    case GgmlType::MXFP4: dequant_mxfp4(s, dst, n); return;
    default: break;
  }
  fail("dequantize_row: no dequantiser for type {}", tr.name);
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  const GgmlTypeTraits& tr = ggml_type_traits(t);
  check_whole_blocks(tr, n, "quantize_row");
  auto* d = static_cast<uint8_t*>(dst);
  switch (t) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(d, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, fp32_to_fp16(src[i]));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(d + 2 * i, fp32_to_bf16(src[i]));
      return;
    case GgmlType::Q8_0: quant_q8_0(src, d, n); return;
    case GgmlType::Q4_0: quant_q4_0(src, d, n); return;
    default:
      if (detail::quantize_row_extended(t, src, d, n)) return;  // the other types: quantize.cpp
      break;
  }
  fail("quantize_row: no quantiser for type {}", tr.name);
}

}  // namespace npullm
