// CPU kernels: run-time ISA dispatch, argument checks, the kernels that are cheap enough to stay
// scalar (embedding lookup, RMSNorm, add, RoPE, KV scatter), and the scalar (W = 1) code path of
// the hot ones. The loop structure of matmul / attention / swiglu is in kernels_impl.h; see there
// for the summation order every path follows.
//
// This file is compiled for baseline x86-64; kernels_avx2.cpp / kernels_avx512.cpp are only
// entered after __builtin_cpu_supports() has confirmed every extension they are compiled with.
#include "device/cpu/kernels.h"

#include <algorithm>
#include <bit>
#include <atomic>
#include <cmath>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "device/cpu/kernels_impl.h"
#include "device/cpu/kernels_int8.h"
#include "device/cpu/kernels_amx.h"

namespace npullm::cpu {

namespace detail {
namespace {

// ---- scalar Ops (W = 1) ------------------------------------------------------------------------
// fma() is a multiply then an add (two roundings): this file is compiled without FMA and, in ISO
// C++ mode, without contraction, so F32 dot products here sum exactly like llama2.c's matmul.

inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

struct ScalarOps {
  using V = float;
  static constexpr int W = 1;
  static constexpr int TM = 2, TN = 4;  // prefill tile
  static V zero() { return 0.0f; }
  static V set1(float f) { return f; }
  static V load(const float* p) { return *p; }
  static V load_tail(const float* p, int n) { return n > 0 ? *p : 0.0f; }
  static void store(float* p, V v) { *p = v; }
  static void store_tail(float* p, V v, int n) {
    if (n > 0) *p = v;
  }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static float hsum(V v) { return v; }
  static V exp(V v) { return std::exp(v); }

  template <GgmlType T>
  static V load_w(const uint8_t* row, int64_t k) {
    if constexpr (T == GgmlType::F32) {
      float f;
      std::memcpy(&f, row + 4 * k, 4);
      return f;
    } else if constexpr (T == GgmlType::F16) {
      return fp16_to_fp32(u16_at(row + 2 * k));
    } else {
      static_assert(T == GgmlType::BF16);
      return bf16_to_fp32(u16_at(row + 2 * k));
    }
  }
  template <GgmlType T>
  static V load_w_tail(const uint8_t* row, int64_t k, int n) {
    return n > 0 ? load_w<T>(row, k) : 0.0f;
  }
  static V q8_scale(const uint8_t* block) { return fp16_to_fp32(u16_at(block)); }
  static V load_q8(const uint8_t* qs, V d) { return static_cast<float>(static_cast<int8_t>(*qs)) * d; }
};


// ---- scalar int8 ops (kernels_int8.h with one lane: a panel is one weight row) -----------------
//
// A lane is 4 bytes held in a uint32_t (so shifts and wrap-around are well defined); integer sums
// are exact and far from overflowing, and cvt reads the bits back as int32. fmaf is std::fma, a
// single rounding like the vector FMA instructions.

inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline int8_t s8_of(uint32_t v, int i) { return static_cast<int8_t>(static_cast<uint8_t>(v >> (8 * i))); }
inline int16_t s16_of(uint32_t v, int i) { return static_cast<int16_t>(static_cast<uint16_t>(v >> (16 * i))); }

// float -> int8 the way the vector paths do it: round to nearest even (as cvtps2dq under the
// default MXCSR), then saturate; values outside int32 (or NaN) give the "integer indefinite"
// INT32_MIN like cvtps2dq, so no conversion here is undefined.
inline int8_t round_to_i8(float v, int lo) {
  const float r = std::nearbyint(v);
  const int32_t i = (r >= -2147483648.0f && r < 2147483648.0f) ? static_cast<int32_t>(r) : INT32_MIN;
  return static_cast<int8_t>(i < lo ? lo : i > 127 ? 127 : i);
}

struct ScalarIO {
  using VI = uint32_t;
  using VF = float;
  static constexpr int R = 1;
  static constexpr bool kVnni = true;  // any byte value works in dot_u8

  NPULLM_HOT static VI zero() { return 0; }
  NPULLM_HOT static VI set1(int32_t v) { return static_cast<uint32_t>(v); }
  NPULLM_HOT static VI bcast32(const void* p) { return u32_at(static_cast<const uint8_t*>(p)); }
  NPULLM_HOT static VI and_(VI v, int32_t imm) { return v & static_cast<uint32_t>(imm); }
  NPULLM_HOT static VI or_(VI a, VI b) { return a | b; }
  NPULLM_HOT static VI xor_(VI v, int32_t imm) { return v ^ static_cast<uint32_t>(imm); }
  NPULLM_HOT static VI add(VI a, VI b) { return a + b; }
  NPULLM_HOT static VI mullo(VI a, VI b) { return a * b; }
  NPULLM_HOT static VI srli(VI v, int n) { return v >> n; }
  NPULLM_HOT static VI slli(VI v, int n) { return v << n; }
  NPULLM_HOT static VI dot_u8(VI acc, VI w, VI x) {
    int32_t s = 0;
    for (int i = 0; i < 4; ++i) s += static_cast<int32_t>(static_cast<uint8_t>(w >> (8 * i))) * s8_of(x, i);
    return acc + static_cast<uint32_t>(s);
  }
  NPULLM_HOT static VI dot2_u8(VI acc, const VI* w, const VI* x) { return dot_u8(dot_u8(acc, w[0], x[0]), w[1], x[1]); }
  NPULLM_HOT static VI dot4_u8(VI acc, const VI* w, const VI* x) { return dot2_u8(dot2_u8(acc, w, x), w + 2, x + 2); }
  NPULLM_HOT static VI dot_s8(VI acc, VI w, VI x) {
    int32_t s = 0;
    for (int i = 0; i < 4; ++i) s += static_cast<int32_t>(s8_of(w, i)) * s8_of(x, i);
    return acc + static_cast<uint32_t>(s);
  }
  NPULLM_HOT static VI madd16(VI acc, VI a, VI b) {
    const int32_t s = int32_t{s16_of(a, 0)} * s16_of(b, 0) + int32_t{s16_of(a, 1)} * s16_of(b, 1);
    return acc + static_cast<uint32_t>(s);
  }
  NPULLM_HOT static VI sext8(VI v, int i) { return static_cast<uint32_t>(static_cast<int32_t>(s8_of(v, i))); }
  NPULLM_HOT static VI hbit4(VI h, int s) {
    VI r = 0;
    for (int i = 0; i < 4; ++i) r |= ((h >> (s + i)) & 1u) << (8 * i + 4);
    return r;
  }
  NPULLM_HOT static void tload4(const uint8_t* const* rows, int64_t off, VI* out) {
    for (int g = 0; g < 4; ++g) out[g] = u32_at(rows[0] + off + 4 * g);
  }
  NPULLM_HOT static void tload8(const uint8_t* const* rows, int64_t off, VI* out) {
    for (int g = 0; g < 8; ++g) out[g] = u32_at(rows[0] + off + 4 * g);
  }
  NPULLM_HOT static VI gather32(const Panel<ScalarIO>& p, int64_t off) { return u32_at(p.rows[0] + off); }
  NPULLM_HOT static VI loadp(const uint8_t* p) { return u32_at(p); }
  NPULLM_HOT static VF f16lo(VI v) { return fp16_to_fp32(static_cast<uint16_t>(v)); }
  NPULLM_HOT static VF f16hi(VI v) { return fp16_to_fp32(static_cast<uint16_t>(v >> 16)); }
  NPULLM_HOT static VI lut16(VI v, const uint8_t (&t)[16]) {
    VI r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>(t[(v >> (8 * i)) & 15u]) << (8 * i);
    return r;
  }
  NPULLM_HOT static VI max_s32(VI a, VI b) { return static_cast<int32_t>(a) > static_cast<int32_t>(b) ? a : b; }
  NPULLM_HOT static VF as_float(VI v) {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
  }

  NPULLM_HOT static VF zerof() { return 0.0f; }
  NPULLM_HOT static VF bcastf(float f) { return f; }
  NPULLM_HOT static VF addf(VF a, VF b) { return a + b; }
  NPULLM_HOT static VF mulf(VF a, VF b) { return a * b; }
  NPULLM_HOT static VF fmaf(VF a, VF b, VF c) { return std::fma(a, b, c); }
  NPULLM_HOT static VF cvt(VI v) { return static_cast<float>(static_cast<int32_t>(v)); }
  NPULLM_HOT static VF loadf_n(const float* p, int n) { return n > 0 ? *p : 0.0f; }
  NPULLM_HOT static void storef_n(float* p, VF v, int n) {
    if (n > 0) *p = v;
  }

  static void quant_row32(const float* x, int64_t nb, int8_t* q, float* d, int32_t* sum) {
    for (int64_t b = 0; b < nb; ++b, x += 32, q += 32) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += (q[j] = round_to_i8(x[j] * id, -128));
      d[b] = fp16_to_fp32(fp32_to_fp16(amax / 127.0f));
      sum[b] = s;
    }
  }
  NPULLM_HOT static void quant_block256(const float* x, int8_t* q, float* d, int32_t* s16) {
    float amax = 0.0f;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[j]));
    for (int i = 0; i < 16; ++i) s16[i] = 0;
    if (amax == 0.0f) {
      std::memset(q, 0, 256);
      *d = 0.0f;
      return;
    }
    const float id = 127.0f / amax;
    for (int j = 0; j < 256; ++j) {
      q[j] = round_to_i8(x[j] * id, -127);
      s16[j / 16] += q[j];
    }
    *d = 1.0f / id;
  }
};

void scalar_matmul(const float* x, int64_t M, int64_t K, const void* W, GgmlType wt, size_t row_bytes, bool packed,
                   const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1,
                   float* work, const void* xq) {
  if (int8_supported(wt)) {
    int8_matmul<ScalarIO>(x, M, K, W, wt, row_bytes, packed, bias, res, out, N, n0, n1, work, xq);
    return;
  }
  matmul_impl<ScalarOps>(x, M, K, W, wt, row_bytes, bias, res, out, N, n0, n1, work);
}
void scalar_quantize_x(GgmlType wt, const float* x, int64_t M, int64_t K, void* dst, int64_t m0, int64_t m1) {
  int8_quantize_x<ScalarIO>(wt, x, M, K, dst, m0, m1);
}
void scalar_attention(const float* q, const void* k, GgmlType k_type, const void* v, GgmlType v_type,
                      const float* mask, float* out, int64_t H, int64_t Hkv, int64_t hd, int64_t C,
                      int64_t rot, float scale, int64_t r0, int64_t r1, float* work, const float* sinks) {
  attention_impl<ScalarOps>(q, k, k_type, v, v_type, mask, out, H, Hkv, hd, C, rot, scale, r0, r1, work, sinks);
}
void scalar_attention_part(const AttentionQuery& a, int64_t run0, int64_t run1, int64_t b0, int64_t b1, float* work,
                    float* partials) {
  attention_part_impl<ScalarOps>(a, run0, run1, b0, b1, work, partials);
}
void scalar_attention_merge(const AttentionQuery& a, int64_t nb, int64_t run0, int64_t run1, float* partials, float* out,
                     const float* sinks) {
  attention_merge_impl<ScalarOps>(a, nb, run0, run1, partials, out, sinks);
}
void scalar_swiglu(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
  swiglu_impl<ScalarOps>(gate, up, out, i0, i1);
}

void scalar_to_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

constexpr IsaKernels kScalar{"scalar", scalar_matmul, scalar_quantize_x, scalar_attention, scalar_attention_part, scalar_attention_merge, scalar_swiglu, scalar_to_f16};

}  // namespace

const IsaKernels& scalar_kernels() { return kScalar; }

#if defined(__x86_64__) || defined(__i386__)
bool cpu_has_vbmi2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512bitalg");
  }();
  return has;
}
// (asked by the AMX matmul on every decode call: the choice is made once). Where the decode's
// weight fetches go is the one choice by vendor: non-temporally on AMD, into L2 elsewhere
// (kernels_int8.h, PackedPanel). CPUs with AVX-512 VNNI but no VBMI2 are Intel's (Cascade and
// Cooper Lake), so the build without VBMI2 needs no such twin.
const IsaKernels& avx512_best_kernels() {
  static const IsaKernels& best = []() -> const IsaKernels& {
    if (!cpu_has_vbmi2()) return avx512_kernels();
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") ? avx512_vbmi2_nta_kernels() : avx512_vbmi2_kernels();
  }();
  return best;
}
#endif

}  // namespace detail

// ---- dispatch ------------------------------------------------------------------------------------

namespace {

using detail::IsaKernels;

#if defined(__x86_64__) || defined(__i386__)
// F16C straight from CPUID (leaf 1, ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
// Its OS-state needs (YMM) are those of AVX, which the avx2 check below already covers.
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

#if defined(__linux__) && defined(__x86_64__)
// AMX-TILE + AMX-INT8 usable by this process: CPUID leaf 7 (EDX bits 24, 25), the OS has enabled
// the tile state (XCR0 bits 17, 18), and Linux grants the tile data permission, which it gives
// per process (every thread, present and future) and only on request (arch_prctl). Checked and
// requested once; a refusal (e.g. a too small sigaltstack somewhere) means no AMX.
bool cpu_has_amx() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return false;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || (d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}
#else
[[maybe_unused]] bool cpu_has_amx() { return false; }
#endif

// 0 = scalar, 1 = avx2, 2 = avx512 without VBMI2 ("avx512-base"), 3 = avx512 with VBMI2, 4 = amx:
// paths are ordered, a CPU that runs one runs the lower ones (every CPU with AMX has VBMI2).
int best_level() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  // The AVX-512 file is compiled with F/BW/VL/DQ/VNNI (+FMA/F16C) and uses VNNI intrinsics for
  // the int8 matmul; AVX-512 CPUs without VNNI (Skylake-SP) take the AVX2 path. It is also given
  // the BF16 flag but uses no BF16 instruction.
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  // AMX: the AVX-512 path with an AMX prefill matmul (kernels_amx.cpp), when it was built.
  const bool amx = avx512 && cpu_has_amx() && detail::amx_kernels() != nullptr;
  return amx ? 4 : avx512 ? (detail::cpu_has_vbmi2() ? 3 : 2) : avx2 ? 1 : 0;
#else
  return 0;
#endif
}

int level_of(std::string_view name) {
  if (name == "scalar") return 0;
  if (name == "avx2") return 1;
  if (name == "avx512-base") return 2;
#if defined(__x86_64__) || defined(__i386__)
  if (name == "avx512") return detail::cpu_has_vbmi2() ? 3 : 2;
#endif
  if (name == "amx") return 4;
  return -1;
}

const IsaKernels& kernels_for(int level) {
#if defined(__x86_64__) || defined(__i386__)
  if (level == 4) return *detail::amx_kernels();
  if (level == 3) return detail::avx512_best_kernels();
  if (level == 2) return detail::avx512_kernels();
  if (level == 1) return detail::avx2_kernels();
#endif
  return detail::scalar_kernels();
}

std::atomic<const IsaKernels*> g_active{nullptr};

const IsaKernels& active() {
  const IsaKernels* k = g_active.load(std::memory_order_acquire);
  if (k) return *k;
  int level = best_level();
  if (const char* env = std::getenv("NPULLM_ISA")) {
    // Only a lower (or equal) path may be forced: a higher one would crash on this CPU.
    const int want = level_of(env);
    if (want >= 0 && want <= level) level = want;
  }
  k = &kernels_for(level);
  g_active.store(k, std::memory_order_release);
  return *k;
}

}  // namespace

const char* kernel_isa() { return active().name; }

bool kernel_force_isa(const char* isa) {
  const int want = isa ? level_of(isa) : -1;
  if (want < 0 || want > best_level()) return false;
  g_active.store(&kernels_for(want), std::memory_order_release);
  return true;
}

// ---- checks ------------------------------------------------------------------------------------

namespace {

void check_range(const char* kernel, const char* what, int64_t b, int64_t e, int64_t n) {
  if (b < 0 || b > e || e > n) fail("{}: {} range [{}, {}) is outside [0, {})", kernel, what, b, e, n);
}

}  // namespace

// ---- cheap kernels (baseline code) ---------------------------------------------------------------

void embed_rows(GgmlType table_type, const void* table, int64_t V, int64_t D, const int32_t* ids,
                float* out, int64_t s0, int64_t s1, WeightLayout layout) {
  if (s0 >= s1) return;
  if (!ggml_type_traits(table_type).can_dequantize)
    fail("embed_rows: no dequantiser for table type {}", ggml_type_name(table_type));
  const size_t row_bytes = ggml_row_bytes(table_type, D);  // throws for partial blocks
  const auto* t = static_cast<const uint8_t*>(table);
  const bool panels = layout == WeightLayout::Panels16;
  if (panels && !panels16_possible(table_type, D))
    fail("embed_rows: a {} table of {} columns cannot be in panels of 16 rows", ggml_type_name(table_type), D);
  std::vector<uint8_t> unpacked(panels ? row_bytes : 0);  // a row gathered from its panel
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t id = ids[s];
    float* o = out + s * D;
    if (id < 0 || id >= V) {
      std::memset(o, 0, static_cast<size_t>(D) * sizeof(float));
      continue;
    }
    if (panels) unpack_panels16_row(table_type, t, D, id, unpacked.data());
    dequantize_row(table_type, panels ? unpacked.data() : t + id * row_bytes, o, D);
  }
}

void gather_rows(const float* x, int64_t S, int64_t R, const int32_t* idx, float* out, int64_t i0, int64_t i1) {
  const size_t row = static_cast<size_t>(R) * sizeof(float);
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t s = idx[i];
    if (s < 0 || s >= S) std::memset(out + i * R, 0, row);
    else std::memcpy(out + i * R, x + s * R, row);
  }
}

void rmsnorm_rows(const float* x, const float* w, float* out, int64_t D, float eps, int64_t s0, int64_t s1,
                  const float* res) {
  if (D <= 0) return;
  for (int64_t s = s0; s < s1; ++s) {
    const float* xr = x + s * D;
    float* o = out + s * D;
    // Sum of squares in double, four partial sums in a fixed order: exact enough that the mean is
    // correctly rounded for any practical D, and independent of threads and ISA.
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
    for (; i + 4 <= D; i += 4)
      for (int j = 0; j < 4; ++j) acc[j] += static_cast<double>(xr[i + j]) * xr[i + j];
    for (; i < D; ++i) acc[0] += static_cast<double>(xr[i]) * xr[i];
    const double ss = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(D)) + eps);
    if (!res) {
      for (int64_t j = 0; j < D; ++j) o[j] = (xr[j] * scale) * w[j];  // ggml's order; out may alias x
    } else {
      const float* r = res + s * D;  // (built without FP contraction: the product is rounded, then added)
      for (int64_t j = 0; j < D; ++j) o[j] = r[j] + (xr[j] * scale) * w[j];
    }
  }
}

void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
}

namespace {

// The K/V cache types: F32, F16 and Q8_0 (blocks of 32 along a row).
bool kv_type_ok(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::Q8_0; }

// A type's name for an error message, also for ids this build does not know.
std::string type_name(GgmlType t) {
  const uint32_t id = static_cast<uint32_t>(t);
  return ggml_type_known(id) ? std::string(ggml_type_name(t)) : "unknown type " + std::to_string(id);
}

// Rotates pair i of one head row v (mode 0: (2i, 2i+1); mode 2: (i, i + half)) by the angle
// whose cosine and sine are c and sn.
inline void rotate_pair(float* v, int64_t i, int64_t half, int mode, float c, float sn) {
  const int64_t ia = mode == 0 ? 2 * i : i;
  const int64_t ib = mode == 0 ? 2 * i + 1 : i + half;
  const float a = v[ia], b = v[ib];
  v[ia] = a * c - b * sn;
  v[ib] = a * sn + b * c;
}

// The cosines and sines of one position's rotation angles. Every layer rotates q and k by the same
// angles (same position, base, scale and factors), and each table costs a pow, a cos and a sin in
// double per pair: computed per call, ~3 us for 32 pairs, twice a layer, 0.1-0.15 ms of a decode
// step (TinyLlama, Qwen2.5), all on one thread while the others wait. So the last two tables (two:
// Gemma 3's local and global layers rotate with different bases) stay with each thread; a table is
// reused only when every input of theta matches, the frequency factors by value, so it holds the
// very floats a fresh computation would.
struct RopeAngles {
  static constexpr int64_t kMaxPairs = 128;  // n_rot up to 256 (Gemma 3); wider ones are not kept
  bool valid = false;
  int32_t pos = 0;
  int64_t n_rot = 0;
  float base = 0, scale = 0;
  bool has_factors = false;
  float factors[kMaxPairs];
  float cs[kMaxPairs], sn[kMaxPairs];

  bool holds(int32_t p, int64_t n, float b, float sc, const float* ff) const {
    const int64_t half = n / 2;
    return valid && pos == p && n_rot == n && std::bit_cast<uint32_t>(base) == std::bit_cast<uint32_t>(b) &&
           std::bit_cast<uint32_t>(scale) == std::bit_cast<uint32_t>(sc) && has_factors == (ff != nullptr) &&
           (ff == nullptr || std::memcmp(factors, ff, static_cast<size_t>(half) * sizeof(float)) == 0);
  }
};

// Returns the table for (p, n_rot, ...) from this thread's two, filling the older one on a miss
// with theta(i) for each pair.
template <class Theta>
const RopeAngles& rope_angles(int32_t p, int64_t n_rot, float base, float scale, const float* ff, Theta theta) {
  thread_local RopeAngles kept[2];
  thread_local int next = 0;
  for (const RopeAngles& a : kept)
    if (a.holds(p, n_rot, base, scale, ff)) return a;
  RopeAngles& a = kept[next];
  next ^= 1;
  const int64_t half = n_rot / 2;
  a.valid = false;
  for (int64_t i = 0; i < half; ++i) {
    const double t = theta(i);
    a.cs[i] = static_cast<float>(std::cos(t));
    a.sn[i] = static_cast<float>(std::sin(t));
  }
  a.pos = p;
  a.n_rot = n_rot;
  a.base = base;
  a.scale = scale;
  a.has_factors = ff != nullptr;
  if (ff) std::memcpy(a.factors, ff, static_cast<size_t>(half) * sizeof(float));
  a.valid = true;
  return a;
}

}  // namespace

void rope(void* x, GgmlType x_type, const int32_t* pos, int64_t H, int64_t hd, int64_t n_rot, float freq_base,
          float freq_scale, const float* freq_factors, int mode, int64_t r0, int64_t r1) {
  if (r0 >= r1) return;
  if (mode != 0 && mode != 2) fail("rope: mode {} is not supported (0 = normal, 2 = NeoX)", mode);
  if (n_rot < 0 || n_rot > hd || n_rot % 2 != 0)
    fail("rope: n_rot {} must be even and at most the head size {}", n_rot, hd);
  if (H <= 0) fail("rope: H must be positive, got {}", H);
  if (!kv_type_ok(x_type))
    fail("rope: element type {} is not supported (F32, or F16 / Q8_0 K/V state)", type_name(x_type));
  if (x_type == GgmlType::Q8_0 && hd % 32 != 0)
    fail("rope: Q8_0 rows need a head size that is a multiple of 32, got {}", hd);
  // F16 / Q8_0 rows are converted to F32 in this buffer, rotated, and converted back.
  constexpr int64_t kMaxConvert = 1024;
  if (x_type != GgmlType::F32 && hd > kMaxConvert)
    fail("rope: head size {} is too large for an in-place {} rotation (at most {})", hd, type_name(x_type), kMaxConvert);
  const size_t row_bytes = ggml_row_bytes(x_type, hd);
  const int64_t half = n_rot / 2;
  auto theta = [&](int64_t s, int64_t i) {
    const double inv_freq = std::pow(static_cast<double>(freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    const double factor = freq_factors ? static_cast<double>(freq_factors[i]) : 1.0;
    return static_cast<double>(pos[s]) * freq_scale * inv_freq / factor;
  };
  // cos/sin of the current position, computed in double once per position (not per head) and
  // kept per thread across calls (rope_angles); wider rotations than it keeps are computed per row.
  float tmp[kMaxConvert];
  const RopeAngles* angles = nullptr;
  int64_t cached_s = -1;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t s = r / H;
    if (pos[s] == 0) continue;  // a rotation by 0 leaves the row as it is (no F16 / Q8_0 round trip)
    uint8_t* row = static_cast<uint8_t*>(x) + static_cast<size_t>(r) * row_bytes;
    float* v = x_type == GgmlType::F32 ? reinterpret_cast<float*>(row) : tmp;
    if (x_type != GgmlType::F32) dequantize_row(x_type, row, tmp, hd);
    if (half <= RopeAngles::kMaxPairs) {
      if (s != cached_s) {
        angles = &rope_angles(pos[s], n_rot, freq_base, freq_scale, freq_factors, [&](int64_t i) { return theta(s, i); });
        cached_s = s;
      }
      for (int64_t i = 0; i < half; ++i) rotate_pair(v, i, half, mode, angles->cs[i], angles->sn[i]);
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const double t = theta(s, i);
        rotate_pair(v, i, half, mode, static_cast<float>(std::cos(t)), static_cast<float>(std::sin(t)));
      }
    }
    if (x_type != GgmlType::F32) quantize_row(x_type, tmp, row, hd);
  }
}

void scatter_rows(const float* src, const int32_t* idx, void* dst, GgmlType dst_type, int64_t R,
                  int64_t C, int64_t s0, int64_t s1) {
  if (!kv_type_ok(dst_type))
    fail("scatter_rows: destination type {} is not supported (F32, F16 or Q8_0)", type_name(dst_type));
  if (dst_type == GgmlType::Q8_0 && R % 32 != 0)
    fail("scatter_rows: Q8_0 rows must be whole blocks of 32, got a row of {}", R);
  const size_t row_bytes = ggml_row_bytes(dst_type, R);
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t i = idx[s];
    if (i < 0 || i >= C) continue;
    const float* row = src + s * R;
    uint8_t* d = static_cast<uint8_t*>(dst) + static_cast<size_t>(i) * row_bytes;
    if (dst_type == GgmlType::F32) {
      std::memcpy(d, row, static_cast<size_t>(R) * sizeof(float));
    } else if (dst_type == GgmlType::F16) {
      // The portable conversion's rounding branches cost ~9 ns a value (a decode step's K/V
      // scatter took 2-5 us a layer, on one thread); F16C gives the same bits.
      active().to_f16(row, d, R);
    } else {
      quantize_row(GgmlType::Q8_0, row, d, R);  // ggml's reference: d = amax / 127 (fp16), q = round(x / d)
    }
  }
}

// ---- hot kernels: check, then the chosen ISA -----------------------------------------------------

MatmulActivations matmul_activations(GgmlType wt) {
  switch (detail::act_format(wt)) {
    case detail::ActFormat::Q8_0: return MatmulActivations::Q8_0;
    case detail::ActFormat::Q8_K: return MatmulActivations::Q8_K;
    default: return MatmulActivations::F32;
  }
}

int64_t prequantized_x_bytes(GgmlType wt, int64_t M, int64_t K) {
  if (!detail::int8_supported(wt) || M <= 0 || K <= 0 || K % detail::unit_elems(wt) != 0) return 0;
  return detail::xq_all_bytes(M, K);
}

void prequantize_x(GgmlType wt, const float* x, int64_t M, int64_t K, void* dst, int64_t m0, int64_t m1) {
  if (prequantized_x_bytes(wt, M, K) == 0) fail("prequantize_x: {} weights with M={} K={} take no pre-quantised x", ggml_type_name(wt), M, K);
  check_range("prequantize_x", "row", m0, m1, M);
  if (m0 < m1) active().quantize_x(wt, x, M, K, dst, m0, m1);
}

void matmul(const float* x, int64_t M, int64_t K, const void* W, GgmlType wt, const float* bias,
            const float* res, float* out, int64_t N, int64_t n0, int64_t n1, float* work, const void* xq,
            WeightLayout layout) {
  check_range("matmul", "output", n0, n1, N);
  if (M < 0 || K < 0) fail("matmul: bad shape M={} K={}", M, K);
  if (!ggml_type_known(static_cast<uint32_t>(wt)) || !ggml_type_traits(wt).can_dequantize)
    fail("matmul: weight type {} is not supported", static_cast<uint32_t>(wt));
  const size_t row_bytes = ggml_row_bytes(wt, K);  // throws when K is not whole blocks
  if (M == 0 || n0 == n1) return;
  const bool needs_work = M > 1 || !detail::has_loader(wt) || detail::int8_supported(wt);
  if (needs_work && work == nullptr) fail("matmul: {} weights with M={} need a work buffer", ggml_type_name(wt), M);
  if (xq && prequantized_x_bytes(wt, M, K) == 0) fail("matmul: {} weights with M={} take no pre-quantised x", ggml_type_name(wt), M);
  const bool packed = layout == WeightLayout::Panels16;
  if (packed && !matmul_reads_panels16(wt, K))
    fail("matmul: a {} weight of {} columns cannot be read as panels of 16 rows", ggml_type_name(wt), K);
  if (layout != WeightLayout::Rows && !packed) fail("matmul: unknown weight layout {}", static_cast<uint32_t>(layout));
  if (packed && n0 % 16 != 0) fail("matmul: a range of a panels16 weight must start at a panel (row {})", n0);
  // A packed weight's rows are padded to whole dwords: the kernels step from panel to panel by it.
  active().matmul(x, M, K, W, wt, packed ? panels16_stride(wt, K) : row_bytes, packed, bias, res, out, N, n0, n1, work, xq);
}

void slice_cols(const float* x, int64_t R, float* out, int64_t W, int64_t off, int64_t s0, int64_t s1) {
  for (int64_t s = s0; s < s1; ++s) std::memcpy(out + s * W, x + s * R + off, static_cast<size_t>(W) * 4);
}

void scale(const float* x, float c, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = x[i] * c;
}

void softcap(const float* x, float c, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = c * std::tanh(x[i] / c);
}

void geglu(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
  // The exact tanh form in F32 (llama.cpp's CPU backend looks it up in an f16 table instead; the
  // difference is ~3e-6 in KL on the gemma3 golden model, ../shared/golden/arch/README.md).
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = i0; i < i1; ++i) {
    const float z = gate[i];
    out[i] = 0.5f * z * (1.0f + std::tanh(kSqrt2OverPi * (z + 0.044715f * z * z * z))) * up[i];
  }
}

void attention_part(const AttentionQuery& a, int64_t run0, int64_t run1, int64_t b0, int64_t b1, float* work,
                    float* partials) {
  if (run0 >= run1 || b0 >= b1) return;
  active().attention_part(a, run0, run1, b0, b1, work, partials);
}
void attention_merge(const AttentionQuery& a, int64_t nb, int64_t run0, int64_t run1, float* partials, float* out,
                     const float* sinks) {
  if (run0 >= run1) return;
  active().attention_merge(a, nb, run0, run1, partials, out, sinks);
}

void swiglu(const float* gate, const float* up, float* out, int64_t i0, int64_t i1) {
  if (i0 >= i1) return;
  active().swiglu(gate, up, out, i0, i1);
}

void attention(const float* q, const void* k, GgmlType k_type, const void* v, GgmlType v_type,
               const float* mask, float* out, int64_t H, int64_t Hkv, int64_t hd, int64_t C,
               int64_t rot, float scale, int64_t r0, int64_t r1, float* work, const float* sinks) {
  if (r0 >= r1) return;
  if (!kv_type_ok(k_type) || !kv_type_ok(v_type))
    fail("attention: K/V cache types must be F32, F16 or Q8_0, got {} / {}", type_name(k_type), type_name(v_type));
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0) fail("attention: {} heads cannot share {} KV heads", H, Hkv);
  if (hd <= 0 || C < 0) fail("attention: bad head size {} or cache length {}", hd, C);
  if ((k_type == GgmlType::Q8_0 || v_type == GgmlType::Q8_0) && hd % 32 != 0)
    fail("attention: a Q8_0 K/V cache needs a head size that is a multiple of 32, got {}", hd);
  if (C > 0 && work == nullptr) fail("attention: needs a work buffer of {} floats", attention_work_floats(C, hd));
  if (rot < 0 || (rot > 0 && rot >= C)) fail("attention: ring start {} outside a window of {} rows", rot, C);
  active().attention(q, k, k_type, v, v_type, mask, out, H, Hkv, hd, C, rot, scale, r0, r1, work, sinks);
}

}  // namespace npullm::cpu
