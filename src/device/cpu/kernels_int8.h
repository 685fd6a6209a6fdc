// Internal to the CPU kernels: matmul with int8 activations for the block-quantised weight types
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 (activations quantised like Q8_0: 32 values per scale) and Q4_K,
// Q5_K, Q6_K (activations quantised like Q8_K: 256 values per scale). This is the arithmetic
// llama.cpp uses on the CPU (golden/README.md, section 4), done with integer dot products:
// AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddubsw + vpmaddwd) or plain C++ (kernels.cpp). On CPUs with
// AMX, prefill (M above a per-type row count) runs on AMX tiles instead: kernels_amx.cpp computes
// the same integers with tile multiplies and the same float chains, so the same bits.
//
// Included by kernels.cpp and the ISA files only, after kernels_impl.h; everything is in an
// anonymous namespace (see the linkage rule in kernels_impl.h). Each file instantiates the
// templates below with its own integer-ops class `IO` (interface described before Panel).
//
// ---- Numerics (the same bits on every ISA path, for every M and every [n0, n1) split) ---------
//
// Activations. Each row of x is quantised at the start of every matmul call (kChunkRows rows at a
// time, into `work`) unless the call brings x quantised already (the CPU device quantises a stage's
// x once, or once per thread for decode, and hands it to every [n0, n1) chunk); every quantisation
// of the same rows gives the same bytes:
//   Q8_0-style, per 32 values x[0..31]:  amax = max |x|, d = amax / 127, id = amax ? 127 / amax : 0,
//     q = round_half_even(x * id) (int8), dx = fp16(d) widened back to float (d is stored as a half,
//     as in ggml's block_q8_0).
//   Q8_K-style, per 256 values:          amax = max |x|; amax == 0 gives d = 0, q = 0; otherwise
//     id = 127 / amax, q = round_half_even(x * id) clamped to [-127, 127], dx = 1 / id (a float).
//   ggml's Q8_K takes iscale = -127 / max with the sign of the largest element; that flips the sign
//   of q and of d together, so every product d * q, and every dot below, is the same.
// Weights. Each weight block gives integer quants w and its fp16 scales, exactly as stored.
// Output. out[m, n] = (acc + bias[n]) + res[m, n] with acc a float chain over the weight blocks b
// of row n in increasing order, starting at +0:
//   Q4_0, Q5_0, Q8_0:  I = sum_k w_k q_k (exact int),       acc = fma(float(I), dx * dw, acc)
//   MXFP4:             as Q4_0 with w_k = kMxfp4Values[nibble] (in [-12, 12]) and dw = 2^(e - 128)
//                      (mxfp4_scale: the power of two as a float, so dx * dw rounds only below
//                      the normal range, the same way on every path)
//   Q4_1, Q5_1:        as above with unsigned w, then        acc = fma(mw, dx * float(sum_k q_k), acc)
//   Q4_K, Q5_K:        Isc = sum_j sc_j I_j, Imn = sum_j mn_j (sum of q over sub-block j),
//                      acc = fma(float(Isc), dx * d, acc); acc = fma(float(-Imn), dx * dmin, acc)
//   Q6_K:              Isc = sum_j sc_j I_j over the 16 sub-blocks of 16 (w in [-32, 31]),
//                      acc = fma(float(Isc), dx * d, acc)
// Every integer above is exact (no intermediate leaves int32: the largest, Q6_K's Isc, is below
// 16 * 16 * 32 * 127 * 127 < 2^31), float(I) rounds to nearest even, and mul / fma / add are IEEE
// single precision, so the vector paths, the scalar path and any [n0, n1) split produce the same
// bits. The integer sums are computed with different tricks per ISA (below); the results agree.
//
// ---- Vector layout ---------------------------------------------------------------------------
//
// A panel is IO::R consecutive weight rows (16 for AVX-512, 8 for AVX2, 1 for scalar); lane r of
// every vector belongs to row r. A block of the panel is decoded ("transposed") into 8 int vectors
// G_0..G_7 per 32 elements: byte i of lane r of G_g is the quant of element 4g + i of row r, as an
// unsigned byte w + off (off = 8 for Q4_0, 16 for Q5_0, 128 for Q8_0 on VNNI, 32 for Q6_K, 12 for
// MXFP4, 0 for the rest). A dot product step is then IO::dot(acc, G_g, broadcast of x's 4 bytes 4g..4g+3):
// lane r adds sum_i G_g[r][i] * q[4g+i]. The offset's contribution, -off * sum(q), is the value
// the int accumulator starts from (precomputed per x block by the quantiser), so after the 8 steps
// lane r holds exactly I for row r. One float step per block then updates R outputs at once: the
// per-block float work is shared by the R rows, which is what makes int8 beat F32 here.
//
// Decode (M <= kGemvMaxM): each block (or pair of blocks) of a panel is decoded and consumed at
// once by the 1..4 rows of x; the weights are read once, R rows side by side, while the next
// panel is prefetched (gemv_panels).
// Prefill (M > kGemvMaxM): all blocks of kPanels panels are decoded into `work` once per chunk of
// x rows and then reused by every row of the chunk, in register tiles of TM rows of x by kPanels
// panels (gemm_panels): each decoded weight vector feeds TM dot steps, each broadcast of x feeds
// kPanels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "formats/ggml_types.h"

namespace npullm::cpu::detail {
namespace {

#define NPULLM_UNROLL_I8 _Pragma("GCC unroll 16")
// The decoders, tiles and IO primitives must inline into the block loop: out of line, the
// transposed loads pass their vectors through memory and the row pointers spill (measured 25 %
// slower), and GCC's size heuristics do not always inline them on their own.
#define NPULLM_HOT inline __attribute__((always_inline))
#define NPULLM_HOT_LAMBDA __attribute__((always_inline))

// ---- which types, which activation format --------------------------------------------------------

enum class ActFormat { None, Q8_0, Q8_K };

constexpr ActFormat act_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::MXFP4:
      return ActFormat::Q8_0;
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return ActFormat::Q8_K;
    default:
      return ActFormat::None;
  }
}

constexpr bool int8_supported(GgmlType t) { return act_format(t) != ActFormat::None; }

// Rows of x quantised at a time; their quants, scales and sums live in `work`.
constexpr int64_t kChunkRows = 64;
// M up to this runs the decode (GEMV) loop; larger M the blocked prefill loop.
constexpr int64_t kGemvMaxM = 4;
// With 16-row panels (AVX-512: 32 vector registers) chunks of up to 8 rows take the decode path
// too: a batched decode step of up to 8 sequences then reads each panel once for all of them,
// the decoded block in registers with 8 float accumulators beside it, instead of decoding panels
// through memory for the prefill tiles (measured on the TinyLlama-shape Q4_0 file, 8 sequences:
// 4.2x -> 4.6x the batch-1 decode rate). Same bits either way; x may come pre-quantised.
constexpr int64_t kGemvMaxMWide = 8;
// Panels decoded side by side for prefill.
constexpr int kPanels = 2;
constexpr int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// Elements per weight block ("unit") and vectors per decoded unit.
constexpr int64_t unit_elems(GgmlType t) { return act_format(t) == ActFormat::Q8_K ? 256 : 32; }
constexpr int unit_vecs(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1: case GgmlType::Q5_1: return 10;  // G[8], dw, mw
    case GgmlType::Q4_K: case GgmlType::Q5_K: return 78;  // G[64], sc[8], mn pairs[4], d, dmin
    case GgmlType::Q6_K: return 81;                       // G[64], sc[16], d
    default: return 9;                                    // G[8], dw
  }
}
// Bytes of one unit (block or super-block) of T.
constexpr int64_t unit_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return 18;
    case GgmlType::Q4_1: return 20;
    case GgmlType::Q5_0: return 22;
    case GgmlType::Q5_1: return 24;
    case GgmlType::Q8_0: return 34;
    case GgmlType::MXFP4: return 17;
    case GgmlType::Q4_K: return 144;
    case GgmlType::Q5_K: return 176;
    default: return 210;  // Q6_K
  }
}

// Quantised activations of a chunk of rows, in `work`.
struct XQ {
  int8_t* q = nullptr;   // q[m * ldq + k]
  float* d = nullptr;    // d[m * ldd + b]: one per 32 (Q8_0-style) or 256 (Q8_K-style) values
  int32_t* c = nullptr;  // per-type integer terms, c[m * ldc + i]: see quantize_chunk
  float* s = nullptr;    // Q4_1 / Q5_1: s[m * ldd + b] = dx * float(sum of the block's q)
  int64_t ldq = 0, ldd = 0, ldc = 0;
};

// Activations of all M rows quantised once, up front (every chunk of the output and every matmul
// of a stage that reads the same x share them): [q M x ldq | d M x ldd | s M x ldd | c M x ldc],
// each part 64-byte aligned. xq_view gives the XQ of rows m0.. of such a buffer.
constexpr int64_t xq_all_bytes(int64_t M, int64_t K) {
  return M * align64(K) + 2 * align64(M * 4 * (K / 32)) + align64(M * 4 * (K / 16));
}
inline XQ xq_view(const void* base, int64_t M, int64_t K, int64_t m0) {
  auto* b = static_cast<uint8_t*>(const_cast<void*>(base));
  XQ xq;
  xq.ldq = align64(K);
  xq.ldd = K / 32;
  xq.ldc = K / 16;
  xq.q = reinterpret_cast<int8_t*>(b) + m0 * xq.ldq;
  b += M * xq.ldq;
  xq.d = reinterpret_cast<float*>(b) + m0 * xq.ldd;
  b += align64(M * 4 * xq.ldd);
  xq.s = reinterpret_cast<float*>(b) + m0 * xq.ldd;
  b += align64(M * 4 * xq.ldd);
  xq.c = reinterpret_cast<int32_t*>(b) + m0 * xq.ldc;
  return xq;
}

// Bytes of `work` the int8 path needs for K (for any IO with at most 16 lanes of 4 bytes).
constexpr int64_t int8_work_bytes(int64_t K) {
  const int64_t ldq = align64(K), nb = K / 32 + 1;
  const int64_t xq = kChunkRows * (ldq + align64(4 * nb) * 2 + align64(4 * (K / 16 + 1)));
  const int64_t panel = align64(nb * 11 * 64);  // >= every type's vectors per 32 elements, 64 B each
  return xq + kPanels * panel + 4 * 64;
}

// ---- the integer-ops interface ------------------------------------------------------------------
//
// IO provides (VI: R lanes of int32 / 4 bytes; VF: R lanes of float):
//   R, kVnni (true: dot_u8 is exact for any weight byte; false: only up to 63, as vpmaddubsw
//     saturates its pair sums: then Q8_0 keeps signed bytes and uses dot_s8)
//   zero(), set1(int32), bcast32(p) (the 4 bytes at p in every lane)
//   and_(v, imm), or_(a, b), xor_(v, imm), add(a, b), mullo(a, b), srli(v, n), slli(v, n)
//   dot_u8(acc, w, x):  acc + sum_i u8(w.byte i) * s8(x.byte i) per lane
//   dot_s8(acc, w, x):  acc + sum_i s8(w.byte i) * s8(x.byte i) per lane (x in [-127, 127])
//   dot4_u8(acc, w, x) / dot2_u8(acc, w, x): acc + the dot_u8 of 4 / 2 (w[i], x[i]) pairs; weight
//                       bytes at most 31 / 63 (AVX2 sums the pairs in int16 before widening)
//   madd16(acc, a, b):  acc + s16(a.lo) * s16(b.lo) + s16(a.hi) * s16(b.hi) per lane
//   hbit4(h, s):        byte i of each lane = 0x10 if bit s + i of h's lane is set, else 0
//   sext8(v, i):        byte i of each lane, sign-extended
//   tload4 / tload8(rows, off, out): the 16 / 32 bytes at rows[r] + off of each row r, as 4 / 8
//                       vectors with dword g of row r in lane r of out[g]
//   gather32(p, off):   lane r = the 4 bytes at p.rows[r] + off
//   loadp(p):           lane r = the 4 bytes at p + 4 r (R dwords as stored: a Panels16 weight)
//   f16lo(v) / f16hi(v): the low / high half of each lane as an fp16, widened
//   zerof(), bcastf(f), addf, mulf, fmaf (fused: one rounding), cvt(v) (int32 -> float, nearest)
//   loadf_n(p, n) / storef_n(p, v, n): the first n lanes (others 0 / untouched)
//   quant_row32, quant_block256: activation quantisation (see quantize_chunk)
//   lut16(v, t):        byte i of each lane = t[byte i of v] (bytes of v below 16): vpshufb
//   max_s32(a, b):      the larger of each lane as signed int32; as_float(v): the lane's bits as a float
// Optional: shr_bytes<L>(lo, hi) = lo >> 8L | hi << (32 - 8L) per lane (AVX-512 VBMI2's vpshrdd).
// Optional (kRowQ8 = true): the row-wise Q8_0 decode primitives q8_act, q8_rows, row_index,
// gather_at, f16lo_w / f16hi_w (see gemv_q8_rows and kernels_avx512.cpp).

// Lane by lane, the dword that starts 2 bytes into `lo` and runs on into `hi` (lo >> 16 | hi << 16):
// a field of the 2-byte-aligned block types that straddles two dwords. IO::mid16 where the ISA has
// it in one instruction (AVX-512 VBMI2's vpshrdd).
template <class IO>
NPULLM_HOT typename IO::VI mid16(typename IO::VI lo, typename IO::VI hi) {
  if constexpr (requires { IO::mid16(lo, hi); }) return IO::mid16(lo, hi);
  else return IO::or_(IO::srli(lo, 16), IO::slli(hi, 16));
}

// v | hbit4(h, s), v's bytes below 0x10: IO::or_hbit4 where the ISA does it in fewer steps.
template <class IO>
NPULLM_HOT typename IO::VI or_hbit4(typename IO::VI v, typename IO::VI h, int s) {
  if constexpr (requires { IO::or_hbit4(v, h, s); }) return IO::or_hbit4(v, h, s);
  else return IO::or_(v, IO::hbit4(h, s));
}

// ---- MXFP4 --------------------------------------------------------------------------------------
//
// A 17-byte block (e | qs[16], nibbles packed as Q4_0) decodes like Q4_0 with one table lookup per
// vector of nibbles: code c becomes the unsigned byte kMxfp4Values[c] + 12, in [0, 24] (the four-group
// dot steps of the nibble types take it), and the accumulator starts at -12 * sum(q) (x.c). Blocks are
// not 2-byte aligned, so a field can start at any byte of a dword: shift_dword.
inline constexpr uint8_t kMxfp4Bytes[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
constexpr int32_t kMxfp4Off = 12;

// The dword that starts L bytes (0..3) into d[0]: d[0] >> 8L | d[1] << (32 - 8L), lane by lane.
template <class IO, int L>
NPULLM_HOT typename IO::VI shift_dword(const typename IO::VI* d) {
  if constexpr (L == 0) return d[0];
  else if constexpr (L == 2) return mid16<IO>(d[0], d[1]);
  else if constexpr (requires { IO::template shr_bytes<L>(d[0], d[1]); }) return IO::template shr_bytes<L>(d[0], d[1]);
  else return IO::or_(IO::srli(d[0], 8 * L), IO::slli(d[1], 32 - 8 * L));
}

// dw = 2^(e - 128) from the scale byte e of each lane (other bytes zero), the bits of mxfp4_scale:
// (e - 1) << 23 for e >= 2, (e + 1) << 21 (the subnormals 2^-128, 2^-127) for e < 2. As signed
// int32 the right one is always the larger: below 2 the first is 0 or negative, from 2 on it
// exceeds the second by (3e - 5) << 21.
template <class IO>
NPULLM_HOT typename IO::VF mxfp4_dw(typename IO::VI e) {
  const typename IO::VI a = IO::add(IO::slli(e, 23), IO::set1(-(1 << 23)));
  const typename IO::VI b = IO::add(IO::slli(e, 21), IO::set1(1 << 21));
  return IO::as_float(IO::max_s32(a, b));
}

// G vectors and dw (dec[0..8]) of one block from its 4 qs dwords and a vector whose low byte per
// lane is e.
template <class IO>
NPULLM_HOT void mxfp4_to_g(const typename IO::VI* qs, typename IO::VI e, typename IO::VI* dec) {
  NPULLM_UNROLL_I8
  for (int g = 0; g < 4; ++g) {
    dec[g] = IO::lut16(IO::and_(qs[g], 0x0F0F0F0F), kMxfp4Bytes);
    dec[g + 4] = IO::lut16(IO::and_(IO::srli(qs[g], 4), 0x0F0F0F0F), kMxfp4Bytes);
  }
  reinterpret_cast<typename IO::VF*>(dec)[8] = mxfp4_dw<IO>(IO::and_(e, 0xFF));
}

// The block whose first byte is byte L of dword d[0] (d: the dwords that hold it, 5 at most).
template <class IO, int L>
NPULLM_HOT void mxfp4_fields(const typename IO::VI* d, typename IO::VI* dec) {
  typename IO::VI qs[4];
  NPULLM_UNROLL_I8
  for (int g = 0; g < 4; ++g) qs[g] = shift_dword<IO, (L + 1) % 4>(d + (L + 1) / 4 + g);
  mxfp4_to_g<IO>(qs, L == 0 ? d[0] : IO::srli(d[0], 8 * L), dec);
}

// R consecutive rows of W starting at n; rows past the matrix repeat the last one (their lanes
// are computed and never stored), so every load stays inside W.
template <class IO>
struct Panel {
  const uint8_t* rows[IO::R];
  int valid;  // rows that exist (1..R)
};

// Where a packed decode fetches (see PackedPanel): into L2, or non-temporally in the build for AMD
// CPUs (kernels_avx512vbmi2_nta.cpp).
#ifdef NPULLM_DECODE_FETCH_NTA
inline constexpr int kDecodeFetchLocality = 0;  // prefetchnta
#else
inline constexpr int kDecodeFetchLocality = 2;  // prefetcht1
#endif

// How far ahead of its loads a packed decode fetches, by weight type. Every decode loop passes it,
// the same for a type's block groups and its last blocks: where a row's tail (K = 896 ends in 4
// blocks after 3 octets) fetched nearer than the octets, each panel's tail fetched nothing new and
// the stream fell behind. All measured from memory, 2 threads; a fetch changes no value.
//  - Non-temporal (Zen 5, whole model, alternated pairs; session 16): 8 KiB for every type but Q8_0
//    took Qwen2.5 Q4_K_M (mostly Q5_0, rows of 896) from 65 to 71.5 % of the roofline, ahead in 18
//    pairs of 18; Q8_0 at 8 KiB fell 10 % (Qwen2.5 Q8_0, 0 of 6), so it keeps 4; TinyLlama Q4_0
//    ahead in 5 of 8, Q4_K_M level. (Into L2 there, before: 4 KiB best for the types read line
//    after line; Q6_K, which reads three regions of each super-block in turn, 8 KiB: 50-51 GB/s
//    against 40-44 at 4 and 16.)
//  - Into L2 (a Sapphire Rapids-class Xeon, whole model, alternated pairs against 8 KiB; session
//    22): 6 KiB for every type but Q8_0 and Q6_K: TinyLlama Q4_0 +5.0 to +6.0 % (medians of three
//    runs; ahead in 16 pairs of 16), Q4_K_M +1.6 to +3.6 %, Qwen2.5 Q4_K_M level (+0.1 to +1.6 %);
//    at 4 and 5 KiB Q4_0 fell 2 %, at 7 it gained as at 6. Q8_0 at 6 KiB fell 2.6 %; Q6_K streamed
//    best at 8 (DecodePanels 2048 x 5632: 27.8-28.0 GB/s against 26.9-27.9 at 6).
template <GgmlType T>
constexpr int64_t fetch_ahead_bytes() {
  if constexpr (T == GgmlType::Q8_0) return 4 << 10;
  else if constexpr (kDecodeFetchLocality != 0 && T != GgmlType::Q6_K) return 6 << 10;
  else return 8 << 10;
}

template <class IO>
inline void make_panel(const uint8_t* W, size_t row_bytes, int64_t n, int64_t n_end, Panel<IO>& p) {
  const int64_t left = n_end - n;
  p.valid = static_cast<int>(left < IO::R ? left : IO::R);
  for (int r = 0; r < IO::R; ++r) p.rows[r] = W + (n + (r < p.valid ? r : p.valid - 1)) * static_cast<int64_t>(row_bytes);
}

// The same R rows read from a weight in the Panels16 layout (formats/weight_layout.h): dword d of
// lane r at base + 64 d + 4 r. For R < 16 (AVX2, scalar) the panel is lanes (n % 16) .. of a
// 16-row panel. Rows past the matrix are the layout's repeats of the last row.
template <class IO>
struct PackedPanel {
  const uint8_t* base;
  int valid;
  // Decode (gemv_panels): every load also fetches the line fetch_ahead_bytes<T>()
  // bytes further on, while below `stop` (the end of the matrix; null: no fetching). Into L2
  // (prefetcht1), or non-temporally (prefetchnta) in the build for AMD CPUs
  // (NPULLM_DECODE_FETCH_NTA, kernels_avx512vbmi2_nta.cpp). A weight line is read once per token,
  // and on Zen 5 a line fetched non-temporally goes to L1 without a place in L2, so it is not then
  // pushed out to L3 (a victim cache there) for nothing. Against fetches into L2, whole model, 2
  // threads, the two alternated: TinyLlama Q4_0 78.5 -> 87 % of the roofline (medians of 10 pairs,
  // ahead in every pair), Q4_K_M ahead in 8 of 10, Qwen2.5 Q4_K_M (mostly Q5_0) 5 of 10 (77.5
  // against 80.5 %); into L1 and L2 (prefetcht0) no better than into L2 (bench/RESULTS.md, session
  // 15). On a Sapphire Rapids-class Xeon the non-temporal fetch halves the stream instead
  // (DecodePanels 2048 x 5632, 2 threads: Q4_0 12.1 GB/s against 26.4 into L2, Q8_0 13.0 / 27.0,
  // Q4_K 12.5 / 25.8, the plain read loop 31-33; session 19), so Intel CPUs fetch into L2. A
  // packed panel is one linear run, and on this kind of CPU such a run streams at the memory's
  // rate only when it is read one line at a time, each load with its own fetch, interleaved with
  // the work on it (hence also the kernel files' -fno-schedule-insns2, CMakeLists.txt): a synthetic
  // loop of 4 VNNI steps per line, 2 threads, streamed 40.6 GB/s so and 27.6 when it loaded 8
  // lines in a burst before working on them. So the decode loads each line where it is used
  // (gemv_octet's need, gemv_unit_k4, gemv_unit_q6k) rather than 8 at a time; with bursts of
  // fetches per block as well (the scheme before), the same kernels streamed 20 % slower. The
  // AVX-512 build that fetches into L2 goes further and spreads each unit's fetches evenly over
  // its work, apart from the loads (paced_fetch).
  const uint8_t* stop = nullptr;
  // Where ld fetches: the line that far on from the one it loads (fetch = base + the distance),
  // or that line itself where nothing is fetched (fetch = base): ld stays free of
  // branches, as with one per line the compiler split the unrolled loops and spilled their
  // vectors. Set once per unit by unit_at, which tests the bound for the unit's lines together.
  const uint8_t* fetch = nullptr;
};

// A packed panel that fetches ahead for the `bytes` of each row from byte o on (offsets stay the
// panel's own), where all of those fetches stay before `stop`. A row panel fetches by panels
// (gemv_panels): it stays as it is.
template <class IO>
NPULLM_HOT const Panel<IO>& fetching_at(const Panel<IO>& p, int64_t, int64_t, int64_t) {
  return p;
}
template <class IO>
NPULLM_HOT PackedPanel<IO> fetching_at(const PackedPanel<IO>& p, int64_t o, int64_t bytes, int64_t ahead_by) {
  PackedPanel<IO> v = p;
  const int64_t lead = o & 3;
  const uint8_t* first = p.base + ((o - lead) >> 2) * 64;
  const bool ahead = p.stop && p.stop - first >= ahead_by + (lead + bytes + 3) / 4 * 64;
  v.fetch = p.base + (ahead ? ahead_by : 0);
  return v;
}

// The unit at byte o of a panel's rows (`bytes` of each row), for the decode loops: the panel to
// read it from and the offset to read at. A row panel stays as it is, at o. A packed panel's copy
// starts at the unit (offset o % 4: 0, or 2 for an odd block of the 2-byte-aligned types) and
// tests once whether the fetches for all its lines stay before `stop`; loads at constant offsets
// from it then need no address or bound arithmetic each (a line's own shift, add and compare was
// half the instructions of the Q4_0 decode loop).
template <class IO>
NPULLM_HOT std::pair<const Panel<IO>&, int64_t> unit_at(const Panel<IO>& p, int64_t o, int64_t, int64_t) {
  return {p, o};
}
template <class IO>
NPULLM_HOT std::pair<PackedPanel<IO>, int64_t> unit_at(const PackedPanel<IO>& p, int64_t o, int64_t bytes,
                                                      int64_t ahead_by) {
  PackedPanel<IO> v = fetching_at(p, o, bytes, ahead_by);
  const int64_t lead = o & 3, move = ((o - lead) >> 2) * 64;
  v.base += move;
  v.fetch += move;
  return {v, lead};
}

template <class IO>
inline void make_panel(const uint8_t* W, size_t row_bytes, int64_t n, int64_t n_end, PackedPanel<IO>& p) {
  const int64_t left = n_end - n;
  p.valid = static_cast<int>(left < IO::R ? left : IO::R);
  p.base = W + (n / 16) * 16 * static_cast<int64_t>(row_bytes) + (n % 16) * 4;
  p.fetch = p.base;
}

// Panel loads, for either kind of panel: the C bytes at byte `off` of each row as C / 4 vectors,
// dword g of row r in lane r of out[g] (ld<4>, ld<8>: IO::tload4 / tload8; ld<1>: IO::gather32).
// A packed panel gives each vector with one load; a field 2 bytes into a dword (the odd blocks of
// the 2-byte-aligned types) is rebuilt from two, as mid_dword does.
template <int C, class IO, bool = true>  // (a row panel fetches by panels: gemv_panels)
NPULLM_HOT void ld(const Panel<IO>& p, int64_t off, typename IO::VI* out) {
  if constexpr (C == 4) IO::tload4(p.rows, off, out);
  else if constexpr (C == 8) IO::tload8(p.rows, off, out);
  else out[0] = IO::gather32(p, off);
}
// kFetch false: the caller fetches the unit's lines itself (paced_fetch).
template <int C, class IO, bool kFetch = true>
NPULLM_HOT void ld(const PackedPanel<IO>& p, int64_t off, typename IO::VI* out) {
  using VI = typename IO::VI;
  const uint8_t* b = p.base + (off >> 2) * 64;
  const uint8_t* f = p.fetch + (off >> 2) * 64;
  if ((off & 3) == 0) {
    NPULLM_UNROLL_I8
    for (int g = 0; g < C; ++g) {
      if constexpr (kFetch) __builtin_prefetch(f + 64 * g, 0, kDecodeFetchLocality);
      out[g] = IO::loadp(b + 64 * g);
    }
  } else {
    VI prev = IO::loadp(b);  // (fetched as the last line of the piece before)
    NPULLM_UNROLL_I8
    for (int g = 0; g < C; ++g) {
      if constexpr (kFetch) __builtin_prefetch(f + 64 * (g + 1), 0, kDecodeFetchLocality);
      const VI nx = IO::loadp(b + 64 * (g + 1));
      out[g] = mid16<IO>(prev, nx);
      prev = nx;
    }
  }
}
template <class IO, bool kFetch = true, class PN>
NPULLM_HOT typename IO::VI ld1(const PN& p, int64_t off) {
  typename IO::VI v;
  ld<1, IO, kFetch>(p, off, &v);
  return v;
}
template <class PN>
constexpr bool is_packed() { return requires(const PN& p) { p.base; }; }

// ---- per-type decoders: one unit of a panel -> vectors in `dec` ---------------------------------
//
// dec layout (vectors of IO::VI / IO::VF, in this order):
//   simple types: G[0..7], dw (VF) [, mw (VF) for Q4_1 / Q5_1]
//   Q4_K / Q5_K:  G[8j + g] for sub-block j, sc[j] (int32), mn pairs MP[i] = mn_2i | mn_2i+1 << 16,
//                 d (VF), dmin (VF)
//   Q6_K:         G[4j + g] for sub-block j of 16, sc[j] (int32, signed), d (VF)

// Q4_K / Q5_K scales. hdr = the block's first 16 bytes as 4 dwords per lane: d | dmin << 16, then
// the 12 scale bytes. Sub-blocks 0..3 keep scale / min in the low 6 bits of bytes j / j + 4;
// 4..7 take 4 low bits from the nibbles of byte j + 4 and 2 high bits from bits 6..7 of bytes
// j - 4 (scale) and j (min).
template <class IO>
NPULLM_HOT typename IO::VI k4_scale(const typename IO::VI* hdr, int j) {
  if (j < 4) return IO::and_(IO::srli(hdr[1], 8 * j), 63);
  j -= 4;
  return IO::or_(IO::and_(IO::srli(hdr[3], 8 * j), 0x0F), IO::slli(IO::and_(IO::srli(hdr[1], 8 * j + 6), 3), 4));
}
template <class IO>
NPULLM_HOT typename IO::VI k4_min(const typename IO::VI* hdr, int j) {
  if (j < 4) return IO::and_(IO::srli(hdr[2], 8 * j), 63);
  j -= 4;
  return IO::or_(IO::and_(IO::srli(hdr[3], 8 * j + 4), 0x0F), IO::slli(IO::and_(IO::srli(hdr[2], 8 * j + 6), 3), 4));
}
// mn_2i | mn_2i+1 << 16, the pair layout of IO::madd16.
template <class IO>
NPULLM_HOT typename IO::VI k4_min_pair(const typename IO::VI* hdr, int i) {
  return IO::or_(k4_min<IO>(hdr, 2 * i), IO::slli(k4_min<IO>(hdr, 2 * i + 1), 16));
}

// Q6_K: the 6-bit weights (+ 32) of quarter q (0..3) of a half, 4 per lane, from a dword of ql
// (bytes 0..31 for quarters 0 and 2, 32..63 for 1 and 3: low nibbles for 0 and 1, high for 2 and 3)
// and the dword of qh at the same place (bits 2q, 2q + 1 of each byte).
template <class IO>
NPULLM_HOT typename IO::VI q6k_weight(typename IO::VI ql, typename IO::VI qh, int q) {
  const typename IO::VI lo4 = q >= 2 ? IO::and_(IO::srli(ql, 4), 0x0F0F0F0F) : IO::and_(ql, 0x0F0F0F0F);
  const typename IO::VI hb = q == 0 ? IO::slli(qh, 4) : q == 1 ? IO::slli(qh, 2) : q == 2 ? qh : IO::srli(qh, 2);
  return IO::or_(lo4, IO::and_(hb, 0x30303030));
}

template <class IO, GgmlType T, class PN>
NPULLM_HOT void decode_unit(const PN& p, int64_t u, typename IO::VI* dec) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  VF* decf = reinterpret_cast<VF*>(dec);
  constexpr int64_t tsz = T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22
                        : T == GgmlType::Q5_1 ? 24 : T == GgmlType::Q8_0 ? 34 : T == GgmlType::Q4_K ? 144
                        : T == GgmlType::Q5_K ? 176 : T == GgmlType::MXFP4 ? 17 : 210;
  const int64_t o = u * tsz;  // byte offset of the block in its row
  if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1 || T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
    // Nibble types: byte j of qs holds element j (low nibble) and j + 16 (high nibble), so dword g
    // of qs gives G_g (low nibbles) and G_{g+4} (high nibbles).
    constexpr int64_t qs = T == GgmlType::Q4_0 ? 2 : T == GgmlType::Q4_1 ? 4 : T == GgmlType::Q5_0 ? 6 : 8;
    VI t[4];
    ld<4>(p, o + qs, t);
    const VI dm = ld1<IO>(p, o);  // d (low half) and, for Q4_1 / Q5_1, m (high half)
    NPULLM_UNROLL_I8
    for (int g = 0; g < 4; ++g) {
      dec[g] = IO::and_(t[g], 0x0F0F0F0F);
      dec[g + 4] = IO::and_(IO::srli(t[g], 4), 0x0F0F0F0F);
    }
    if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
      // Bit j of qh is bit 4 of element j.
      const VI qh = ld1<IO>(p, o + (T == GgmlType::Q5_0 ? 2 : 4));
      NPULLM_UNROLL_I8
      for (int g = 0; g < 8; ++g) dec[g] = or_hbit4<IO>(dec[g], qh, 4 * g);
    }
    decf[8] = IO::f16lo(dm);
    if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) decf[9] = IO::f16hi(dm);
  } else if constexpr (T == GgmlType::MXFP4) {
    if constexpr (is_packed<PN>()) {
      // A packed row is read in whole dwords: the 5 that hold the block, then its fields shifted
      // by where it starts in the first (17 = 4 * 4 + 1, so every start occurs).
      const int64_t lead = o & 3;
      VI d[5];
      NPULLM_UNROLL_I8
      for (int i = 0; i < 5; ++i) d[i] = ld1<IO>(p, o - lead + 4 * i);
      switch (lead) {
        case 0: mxfp4_fields<IO, 0>(d, dec); break;
        case 1: mxfp4_fields<IO, 1>(d, dec); break;
        case 2: mxfp4_fields<IO, 2>(d, dec); break;
        default: mxfp4_fields<IO, 3>(d, dec); break;
      }
    } else {  // rows: loads at any byte
      VI t[4];
      ld<4>(p, o + 1, t);
      mxfp4_to_g<IO>(t, ld1<IO>(p, o), dec);
    }
  } else if constexpr (T == GgmlType::Q8_0) {
    VI t[8];
    ld<8>(p, o + 2, t);
    NPULLM_UNROLL_I8
    for (int g = 0; g < 8; ++g) dec[g] = IO::kVnni ? IO::xor_(t[g], static_cast<int32_t>(0x80808080u)) : t[g];
    decf[8] = IO::f16lo(ld1<IO>(p, o));
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    VI hdr[4];
    ld<4>(p, o, hdr);  // d | dmin << 16, scale bytes 0..3, 4..7, 8..11
    NPULLM_UNROLL_I8
    for (int j = 0; j < 8; ++j) dec[64 + j] = k4_scale<IO>(hdr, j);
    NPULLM_UNROLL_I8
    for (int i = 0; i < 4; ++i) dec[72 + i] = k4_min_pair<IO>(hdr, i);
    decf[76] = IO::f16lo(hdr[0]);
    decf[77] = IO::f16hi(hdr[0]);
    // qs: 32 bytes per 64 elements, low nibbles = sub-block 2c, high nibbles = sub-block 2c + 1.
    constexpr int64_t qs = T == GgmlType::Q4_K ? 16 : 48;
    VI qh[8];
    if constexpr (T == GgmlType::Q5_K) ld<8>(p, o + 16, qh);  // bit j of qh[l]: element l of sub-block j
    NPULLM_UNROLL_I8
    for (int c = 0; c < 4; ++c) {
      VI t[8];
      ld<8>(p, o + qs + 32 * c, t);
      NPULLM_UNROLL_I8
      for (int g = 0; g < 8; ++g) {
        VI lo = IO::and_(t[g], 0x0F0F0F0F), hi = IO::and_(IO::srli(t[g], 4), 0x0F0F0F0F);
        if constexpr (T == GgmlType::Q5_K) {
          // Move bit (2c) / (2c + 1) of each qh byte to bit 4.
          const int j0 = 2 * c, j1 = 2 * c + 1;
          const VI b0 = j0 <= 4 ? IO::slli(qh[g], 4 - j0) : IO::srli(qh[g], j0 - 4);
          const VI b1 = j1 <= 4 ? IO::slli(qh[g], 4 - j1) : IO::srli(qh[g], j1 - 4);
          lo = IO::or_(lo, IO::and_(b0, 0x10101010));
          hi = IO::or_(hi, IO::and_(b1, 0x10101010));
        }
        dec[8 * (2 * c) + g] = lo;
        dec[8 * (2 * c + 1) + g] = hi;
      }
    }
  } else {
    static_assert(T == GgmlType::Q6_K);
    // Each 128-element half h uses ql[64h .. 64h+63] and qh[32h .. 32h+31]. Its four 32-element
    // quarters take the low nibbles of ql[0..31], of ql[32..63], the high nibbles of ql[0..31], of
    // ql[32..63], and bit pairs 0, 2, 4, 6 of qh[0..31] as bits 4..5. Value + 32 is in [0, 63].
    VI scw[4];
    ld<4>(p, o + 192, scw);
    NPULLM_UNROLL_I8
    for (int j = 0; j < 16; ++j) dec[64 + j] = IO::sext8(scw[j / 4], j % 4);
    decf[80] = IO::f16hi(ld1<IO>(p, o + 206));
    NPULLM_UNROLL_I8
    for (int h = 0; h < 2; ++h) {
      VI a[8], b[8], qh[8];
      ld<8>(p, o + 64 * h, a);
      ld<8>(p, o + 64 * h + 32, b);
      ld<8>(p, o + 128 + 32 * h, qh);
      NPULLM_UNROLL_I8
      for (int g = 0; g < 8; ++g) {
        // Element 128h + 32Q + 4g + i: sub-block 8h + 2Q + g / 4, group g % 4 inside it.
        const int base = 4 * (8 * h) + g;  // G index = 4 * sub-block + g % 4 = 32h + 8Q + g
        NPULLM_UNROLL_I8
        for (int q = 0; q < 4; ++q) dec[base + 8 * q] = q6k_weight<IO>(q % 2 ? b[g] : a[g], qh[g], q);
      }
    }
  }
}

// Two consecutive blocks of the nibble types at once (blocks u and u + 1, into dec0 and dec1):
// one transposed 32-byte load at the first block covers both headers and most quants, where
// single blocks need a 16-byte load plus one or two 4-byte loads per row. The 32 bytes are
//   Q4_0 (18 B blocks): d0 | qs0 (bytes 2..17) | d1 (18..19) | qs1[0..11]   + 16 B at 20: qs1
//   Q4_1 (20 B):        d0 m0 | qs0 (4..19) | d1 m1 (20..23) | qs1[0..7]   + 16 B at 24: qs1
//   Q5_0 (22 B):        d0 | qh0 (2..5) | qs0 (6..21) | d1 (22..23) | qh1 (24..27) | qs1[0..3]
//                                                                          + 16 B at 28: qs1
//   Q5_1 (24 B):        d0 m0 | qh0 | qs0 (8..23) | d1 m1 | qh1            + 16 B at 32: qs1
// Fields that straddle dwords (2-byte offsets) are rebuilt with a shift pair. Every byte read
// lies inside the two blocks.
constexpr bool has_pair_decode(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
}

// dword g of the bytes starting 2 bytes into dword a (t[a] >> 16 | t[a + 1] << 16).
template <class IO>
NPULLM_HOT typename IO::VI mid_dword(const typename IO::VI* t, int a) {
  return mid16<IO>(t[a], t[a + 1]);
}

// G vectors of one block from its 4 qs dwords (and, for Q5, its qh).
template <class IO, bool kFive>
NPULLM_HOT void nibbles_to_g(const typename IO::VI* qs, typename IO::VI qh, typename IO::VI* dec) {
  NPULLM_UNROLL_I8
  for (int g = 0; g < 4; ++g) {
    dec[g] = IO::and_(qs[g], 0x0F0F0F0F);
    dec[g + 4] = IO::and_(IO::srli(qs[g], 4), 0x0F0F0F0F);
  }
  if constexpr (kFive) {
    NPULLM_UNROLL_I8
    for (int g = 0; g < 8; ++g) dec[g] = IO::or_(dec[g], IO::hbit4(qh, 4 * g));
  }
}

template <class IO, GgmlType T, class PN>
NPULLM_HOT void decode_pair(const PN& p, int64_t u, typename IO::VI* dec0, typename IO::VI* dec1) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  constexpr int64_t tsz = T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22 : 24;
  constexpr bool five = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
  const int64_t o = u * tsz;
  VI t[8], q1[4], q0[4];
  ld<8>(p, o, t);
  ld<4>(p, o + tsz + (tsz - 16), q1);  // the second block's qs: its last 16 bytes
  VI dm0, dm1, qh0 = IO::zero(), qh1 = IO::zero();
  if constexpr (T == GgmlType::Q4_0) {
    for (int g = 0; g < 4; ++g) q0[g] = mid_dword<IO>(t, g);
    dm0 = t[0];
    dm1 = IO::srli(t[4], 16);
  } else if constexpr (T == GgmlType::Q4_1) {
    for (int g = 0; g < 4; ++g) q0[g] = t[1 + g];
    dm0 = t[0];
    dm1 = t[5];
  } else if constexpr (T == GgmlType::Q5_0) {
    for (int g = 0; g < 4; ++g) q0[g] = mid_dword<IO>(t, 1 + g);
    dm0 = t[0];
    qh0 = mid_dword<IO>(t, 0);
    dm1 = IO::srli(t[5], 16);
    qh1 = t[6];
  } else {
    static_assert(T == GgmlType::Q5_1);
    for (int g = 0; g < 4; ++g) q0[g] = t[2 + g];
    dm0 = t[0];
    qh0 = t[1];
    dm1 = t[6];
    qh1 = t[7];
  }
  nibbles_to_g<IO, five>(q0, qh0, dec0);
  nibbles_to_g<IO, five>(q1, qh1, dec1);
  VF* f0 = reinterpret_cast<VF*>(dec0);
  VF* f1 = reinterpret_cast<VF*>(dec1);
  f0[8] = IO::f16lo(dm0);
  f1[8] = IO::f16lo(dm1);
  if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) {
    f0[9] = IO::f16hi(dm0);
    f1[9] = IO::f16hi(dm1);
  }
}

// Decodes units [u, u + n) (n = 1 or 2) of a panel into dec (unit stride V vectors).
template <class IO, GgmlType T, class PN>
NPULLM_HOT void decode_units(const PN& p, int64_t u, int n, typename IO::VI* dec) {
  constexpr int V = unit_vecs(T);
  if constexpr (has_pair_decode(T)) {
    if (n == 2) {
      decode_pair<IO, T>(p, u, dec, dec + V);
      return;
    }
  }
  for (int i = 0; i < n; ++i) decode_unit<IO, T>(p, u + i, dec + i * V);
}

// Paced fetches (a packed unit of L lines whose work is S steps, AVX-512 fetching into L2): step k
// fetches lines [k L / S, (k + 1) L / S) of the unit, from `fetch` (its fetch base, unit_at), so the
// fetches are spread evenly over the unit's work instead of each riding with its load, which comes
// in bursts of a block's (or a step's) lines. The finer the better: about a line per step, S >= L
// where the loop has the steps (the 5-bit octets: 2 steps a block, then 8, 23.1 -> 25.6 -> 26.1
// GB/s). Every packed decode unit paces: gemv_octet (Q8_0, Q4_0 / Q4_1 in tile_nibbles, Q5_0 /
// Q5_1 in the decode and tile_unit), gemv_unit_k4, gemv_unit_q6k. On a Sapphire Rapids-class
// Xeon, DecodePanels 2048 x 5632, 2 threads, alternated runs: Q4_0 26.7, 27.3 -> 27.5, 28.7 GB/s,
// Q8_0 26.9, 27.2 -> 28.7, 28.9 (session 20); Q5_0 23.1 -> 26.1, Q5_1 23.1 -> 26.1, Q6_K 26.4 ->
// 27.8, Q4_K level (25.1; session 21). Whole model, 4 alternated pairs each, ahead in all: TinyLlama
// Q4_0 +4.0 to +6.0 %, Q8_0 +3.1 to +7.9 %, Qwen2.5 Q8_0 +2.5 to +5.7 % (session 20); Qwen2.5
// Q4_K_M +7.0 % (median), TinyLlama Q4_K_M +4.9 % (session 21; bench/RESULTS.md). The same bits.
// The non-temporal (AMD) build and AVX2 keep the fetch with each load: not measured paced.
template <class IO>
constexpr bool paces_fetch() {
  return IO::R == 16 && kDecodeFetchLocality != 0;
}
template <int L, int S>
NPULLM_HOT void paced_fetch(const uint8_t* fetch, int k) {
  NPULLM_UNROLL_I8
  for (int l = k * L / S; l < (k + 1) * L / S; ++l) __builtin_prefetch(fetch + 64 * l, 0, kDecodeFetchLocality);
}

// ---- per-type tile: one unit, TM rows of x (from xm) by P decoded panels -----------------------
//
// facc[m][p] is the float chain of x row xm + m against the R rows of panel p (see Numerics).
// Loop shape, the same for every type: for each group g of 4 elements, load the P weight vectors
// G_g once, then for each x row broadcast its 4 quants and issue P dot steps. The TM x P int
// accumulators are independent chains (latency hidden); each weight vector is used TM times and
// each broadcast P times. Once per block (or sub-block) the int sums are scaled into facc.

// kPaceL > 0 (the 5-bit types' octets, P = 1): block `blk` of an octet of kPaceL lines whose fetch
// base is `fetch` takes steps 6 and 7 of the block's 8 (gemv_octet paces the others; paced_fetch).
template <class IO, GgmlType T, int TM, int P, int kPaceL = 0>
NPULLM_HOT void tile_unit(const typename IO::VI* const* dec, const XQ& x, int64_t xm, int64_t u,
                      typename IO::VF (&facc)[TM][P], const uint8_t* fetch = nullptr, int blk = 0) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  // Q8_0 without VNNI keeps the weight bytes signed (no offset): see IO::dot_s8.
  auto dot = [](VI acc, VI w, VI xb) {
    if constexpr (T == GgmlType::Q8_0 && !IO::kVnni) return IO::dot_s8(acc, w, xb);
    else return IO::dot_u8(acc, w, xb);
  };
  if constexpr (act_format(T) == ActFormat::Q8_0) {
    // Blocks of 32: ia starts at -off * sum(q) (x.c), 8 dot steps make it I, one fma per block.
    constexpr bool has_off = T == GgmlType::Q4_0 || T == GgmlType::Q5_0 || T == GgmlType::MXFP4 ||
                             (T == GgmlType::Q8_0 && IO::kVnni);
    VI ia[TM][P];
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) {
      const VI init = has_off ? IO::set1(x.c[(xm + m) * x.ldc + u]) : IO::zero();
      NPULLM_UNROLL_I8
      for (int q = 0; q < P; ++q) ia[m][q] = init;
    }
    if constexpr (T == GgmlType::Q8_0) {
      NPULLM_UNROLL_I8
      for (int g = 0; g < 8; ++g) {
        VI w[P];
        NPULLM_UNROLL_I8
        for (int q = 0; q < P; ++q) w[q] = dec[q][g];
        NPULLM_UNROLL_I8
        for (int m = 0; m < TM; ++m) {
          const VI xb = IO::bcast32(x.q + (xm + m) * x.ldq + 32 * u + 4 * g);
          NPULLM_UNROLL_I8
          for (int q = 0; q < P; ++q) ia[m][q] = dot(ia[m][q], w[q], xb);
        }
      }
    } else {  // weight bytes <= 31: four groups per step
      NPULLM_UNROLL_I8
      for (int g = 0; g < 8; g += 4) {
        if constexpr (kPaceL > 0) paced_fetch<kPaceL, 64>(fetch, 8 * blk + 6 + g / 4);
        NPULLM_UNROLL_I8
        for (int m = 0; m < TM; ++m) {
          const int8_t* xr = x.q + (xm + m) * x.ldq + 32 * u + 4 * g;
          const VI xb[4] = {IO::bcast32(xr), IO::bcast32(xr + 4), IO::bcast32(xr + 8), IO::bcast32(xr + 12)};
          NPULLM_UNROLL_I8
          for (int q = 0; q < P; ++q) ia[m][q] = IO::dot4_u8(ia[m][q], dec[q] + g, xb);
        }
      }
    }
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) {
      const VF dx = IO::bcastf(x.d[(xm + m) * x.ldd + u]);
      NPULLM_UNROLL_I8
      for (int q = 0; q < P; ++q) {
        const VF dw = reinterpret_cast<const VF*>(dec[q])[8];
        facc[m][q] = IO::fmaf(IO::cvt(ia[m][q]), IO::mulf(dx, dw), facc[m][q]);
        if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) {
          const VF mw = reinterpret_cast<const VF*>(dec[q])[9];
          facc[m][q] = IO::fmaf(mw, IO::bcastf(x.s[(xm + m) * x.ldd + u]), facc[m][q]);
        }
      }
    }
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    // Super-block of 256 = 8 sub-blocks of 32 with 6-bit scale sc_j and min mn_j (per row, so
    // vectors): I_j from 8 dot steps, isc += I_j * sc_j (int32 multiply); the mins need only the
    // x sums: imn = sum_j mn_j * (-S_j) by 4 pairwise 16-bit multiply-adds. Two fmas per
    // super-block.
    VI isc[TM][P], imn[TM][P];
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m)
      NPULLM_UNROLL_I8
      for (int q = 0; q < P; ++q) isc[m][q] = IO::zero(), imn[m][q] = IO::zero();
    for (int j = 0; j < 8; ++j) {
      VI ia[TM][P];
      NPULLM_UNROLL_I8
      for (int m = 0; m < TM; ++m)
        NPULLM_UNROLL_I8
        for (int q = 0; q < P; ++q) ia[m][q] = IO::zero();
      NPULLM_UNROLL_I8
      for (int g = 0; g < 8; g += 4) {
        NPULLM_UNROLL_I8
        for (int m = 0; m < TM; ++m) {
          const int8_t* xr = x.q + (xm + m) * x.ldq + 256 * u + 32 * j + 4 * g;
          const VI xb[4] = {IO::bcast32(xr), IO::bcast32(xr + 4), IO::bcast32(xr + 8), IO::bcast32(xr + 12)};
          NPULLM_UNROLL_I8
          for (int q = 0; q < P; ++q) ia[m][q] = IO::dot4_u8(ia[m][q], dec[q] + 8 * j + g, xb);
        }
      }
      NPULLM_UNROLL_I8
      for (int m = 0; m < TM; ++m)
        NPULLM_UNROLL_I8
        for (int q = 0; q < P; ++q) isc[m][q] = IO::add(isc[m][q], IO::mullo(ia[m][q], dec[q][64 + j]));
    }
    NPULLM_UNROLL_I8
    for (int i = 0; i < 4; ++i)
      NPULLM_UNROLL_I8
      for (int m = 0; m < TM; ++m) {
        // c holds (-sum of sub-block 2i) | (-sum of sub-block 2i + 1) << 16: imn = -Imn.
        const VI xs = IO::set1(x.c[(xm + m) * x.ldc + 4 * u + i]);
        NPULLM_UNROLL_I8
        for (int q = 0; q < P; ++q) imn[m][q] = IO::madd16(imn[m][q], dec[q][72 + i], xs);
      }
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) {
      const VF dx = IO::bcastf(x.d[(xm + m) * x.ldd + u]);
      NPULLM_UNROLL_I8
      for (int q = 0; q < P; ++q) {
        const VF* df = reinterpret_cast<const VF*>(dec[q]);
        facc[m][q] = IO::fmaf(IO::cvt(isc[m][q]), IO::mulf(dx, df[76]), facc[m][q]);
        facc[m][q] = IO::fmaf(IO::cvt(imn[m][q]), IO::mulf(dx, df[77]), facc[m][q]);
      }
    }
  } else {
    static_assert(T == GgmlType::Q6_K);
    // Super-block of 256 = 16 sub-blocks of 16 with signed 8-bit scales: each sub-block's ia
    // starts at -32 * (sum of its 16 q) (the weights are stored + 32), 4 dot steps, then
    // isc += I_j * sc_j. One fma per super-block.
    VI isc[TM][P];
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m)
      NPULLM_UNROLL_I8
      for (int q = 0; q < P; ++q) isc[m][q] = IO::zero();
    for (int j = 0; j < 16; ++j) {
      VI ia[TM][P];
      NPULLM_UNROLL_I8
      for (int m = 0; m < TM; ++m) {
        const VI init = IO::set1(x.c[(xm + m) * x.ldc + 16 * u + j]);  // -32 * sum of the 16 q
        NPULLM_UNROLL_I8
        for (int q = 0; q < P; ++q) ia[m][q] = init;
      }
      NPULLM_UNROLL_I8
      for (int g = 0; g < 4; g += 2) {  // weight bytes <= 63: two groups per step
        NPULLM_UNROLL_I8
        for (int m = 0; m < TM; ++m) {
          const int8_t* xr = x.q + (xm + m) * x.ldq + 256 * u + 16 * j + 4 * g;
          const VI xb[2] = {IO::bcast32(xr), IO::bcast32(xr + 4)};
          NPULLM_UNROLL_I8
          for (int q = 0; q < P; ++q) ia[m][q] = IO::dot2_u8(ia[m][q], dec[q] + 4 * j + g, xb);
        }
      }
      NPULLM_UNROLL_I8
      for (int m = 0; m < TM; ++m)
        NPULLM_UNROLL_I8
        for (int q = 0; q < P; ++q) isc[m][q] = IO::add(isc[m][q], IO::mullo(ia[m][q], dec[q][64 + j]));
    }
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) {
      const VF dx = IO::bcastf(x.d[(xm + m) * x.ldd + u]);
      NPULLM_UNROLL_I8
      for (int q = 0; q < P; ++q)
        facc[m][q] = IO::fmaf(IO::cvt(isc[m][q]), IO::mulf(dx, reinterpret_cast<const VF*>(dec[q])[80]), facc[m][q]);
    }
  }
}

// ---- activation quantisation -----------------------------------------------------------------------
//
// IO::quant_row32(x, nb, q, d[nb], sum[nb]) quantises nb Q8_0-style blocks of 32 and
// IO::quant_block256(x, q, &d, sums16[16]) one Q8_K-style block, as described under Numerics
// (d: the float the dot uses; sum: the sum of the block's q; sums16: sums of q per 16).
// quantize_chunk fills XQ for rows [0, mc) of x (row stride K); the integer terms c are
//   Q4_0 / Q5_0 / Q8_0 (VNNI) / MXFP4: c[b] = -off * sum_b (the accumulator start: off = 8 / 16 /
//     128 / 12)
//   Q4_K / Q5_K: c[4u + i] = (-S_2i & 0xFFFF) | (-S_2i+1 << 16), S_j the sum of sub-block j (32)
//   Q6_K:        c[16u + j] = -32 * (sum of sub-block j of 16)
template <class IO>
void quantize_chunk(GgmlType wt, const float* x, int64_t K, int64_t mc, XQ& xq) {
  const ActFormat f = act_format(wt);
  const int32_t off = wt == GgmlType::Q4_0 ? 8 : wt == GgmlType::Q5_0 ? 16 : wt == GgmlType::MXFP4 ? kMxfp4Off
                    : (wt == GgmlType::Q8_0 && IO::kVnni) ? 128 : 0;
  for (int64_t m = 0; m < mc; ++m) {
    const float* xr = x + m * K;
    int8_t* q = xq.q + m * xq.ldq;
    if (f == ActFormat::Q8_0) {
      float* d = xq.d + m * xq.ldd;
      int32_t* c = xq.c + m * xq.ldc;
      float* sd = xq.s + m * xq.ldd;
      IO::quant_row32(xr, K / 32, q, d, c);  // c holds the sums for now
      for (int64_t b = 0; b < K / 32; ++b) {
        sd[b] = d[b] * static_cast<float>(c[b]);
        c[b] *= -off;
      }
    } else {
      for (int64_t u = 0; u < K / 256; ++u) {
        int32_t s16[16];
        float d;
        IO::quant_block256(xr + 256 * u, q + 256 * u, &d, s16);
        xq.d[m * xq.ldd + u] = d;
        if (wt == GgmlType::Q6_K) {
          for (int j = 0; j < 16; ++j) xq.c[m * xq.ldc + 16 * u + j] = -32 * s16[j];
        } else {
          for (int i = 0; i < 4; ++i) {
            const uint32_t lo = static_cast<uint32_t>(-(s16[4 * i] + s16[4 * i + 1])) & 0xFFFFu;
            const uint32_t hi = static_cast<uint32_t>(-(s16[4 * i + 2] + s16[4 * i + 3])) << 16;
            xq.c[m * xq.ldc + 4 * u + i] = static_cast<int32_t>(lo | hi);
          }
        }
      }
    }
  }
}

// Q4_0 / Q4_1 block u against TM rows of x, straight from the block's 4 qs dwords: the low
// nibbles dot as (q & 0x0F), the high ones as (q & 0xF0) = 16 * hi into a second accumulator,
// shifted back once per block. Exact (every term of the second sum is a multiple of 16, and
// VNNI's dot neither saturates nor narrows), so the integers are tile_unit's and so are the bits;
// it saves a shift per vector and splits the block's chain of 8 dependent dot steps in two.
// Only where dot_u8 takes any byte (VNNI) and the IO has an arithmetic shift.
template <class IO>
constexpr bool has_hi_nibble_dot() {
  return IO::kVnni && requires(typename IO::VI v) { IO::srai(v, 4); };
}

// ---- decode of the K-quants, fused ---------------------------------------------------------------
//
// For M <= kGemvMaxM the K-quants are decoded and consumed 64 elements at a time, in registers:
// decoding a whole super-block first (decode_unit) would park its 64 vectors on the stack and
// read them back. Same arithmetic, same order as tile_unit.

// Q4_K / Q5_K: per 32-byte chunk c of qs, the low nibbles are sub-block 2c, the high 2c + 1.
template <class IO, GgmlType T, int TM, class PN>
NPULLM_HOT void gemv_unit_k4(const PN& p, int64_t u, const XQ& x, typename IO::VF (&facc)[TM][1]) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  constexpr bool five = T == GgmlType::Q5_K;
  constexpr bool hi_in_place = !five && has_hi_nibble_dot<IO>();
  const auto uv = unit_at(p, u * (five ? 176 : 144), five ? 176 : 144, fetch_ahead_bytes<T>());
  const auto& pp = uv.first;
  const int64_t o = uv.second;
  // Paced fetches (paced_fetch): the unit's 36 (Q5_K: 44) lines over 48 steps, 6 per 4 dwords of
  // a chunk (their 4 decodes and 2 dots); o is 0.
  constexpr bool paced = is_packed<PN>() && paces_fetch<IO>();
  constexpr int kLines = (five ? 176 : 144) * 16 / 64;
  const uint8_t* pace_from = nullptr;
  if constexpr (paced) pace_from = pp.fetch;
  VI hdr[4], qh[8];
  ld<4, IO, !paced>(pp, o, hdr);
  if constexpr (five) ld<8, IO, !paced>(pp, o + 16, qh);
  VI isc[TM];
  NPULLM_UNROLL_I8
  for (int m = 0; m < TM; ++m) isc[m] = IO::zero();
  NPULLM_UNROLL_I8
  for (int c = 0; c < 4; ++c) {
    // qs of this chunk: 8 dwords per row, loaded here, or for a packed panel one by one where used.
    const int64_t qo = o + (five ? 48 : 16) + 32 * c;
    VI t[8];
    if constexpr (!is_packed<PN>()) ld<8>(pp, qo, t);
    VI ia0[TM], ia1[TM];
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) ia0[m] = IO::zero(), ia1[m] = IO::zero();
    NPULLM_UNROLL_I8
    for (int g = 0; g < 8; g += 4) {
      VI lo[4], hi[4];
      NPULLM_UNROLL_I8
      for (int i = 0; i < 4; ++i) {
        const VI tv = is_packed<PN>() ? ld1<IO, !paced>(pp, qo + 4 * (g + i)) : t[g + i];
        if constexpr (paced) paced_fetch<kLines, 48>(pace_from, 6 * (2 * c + g / 4) + i);
        lo[i] = IO::and_(tv, 0x0F0F0F0F);
        // Q4_K with VNNI: the high nibbles dot in place, (q & 0xF0) = 16 * hi, and the chunk's sum
        // is shifted back once (exact, as tile_nibbles: the same integers, one shift a line fewer).
        if constexpr (hi_in_place) hi[i] = IO::and_(tv, static_cast<int32_t>(0xF0F0F0F0u));
        else hi[i] = IO::and_(IO::srli(tv, 4), 0x0F0F0F0F);
        if constexpr (five) {
          const int j0 = 2 * c, j1 = 2 * c + 1;  // bit j of each qh byte -> bit 4
          const VI h = qh[g + i];
          lo[i] = IO::or_(lo[i], IO::and_(j0 <= 4 ? IO::slli(h, 4 - j0) : IO::srli(h, j0 - 4), 0x10101010));
          hi[i] = IO::or_(hi[i], IO::and_(j1 <= 4 ? IO::slli(h, 4 - j1) : IO::srli(h, j1 - 4), 0x10101010));
        }
      }
      NPULLM_UNROLL_I8
      for (int m = 0; m < TM; ++m) {
        const int8_t* xm = x.q + m * x.ldq + 256 * u + 64 * c + 4 * g;
        const VI x0[4] = {IO::bcast32(xm), IO::bcast32(xm + 4), IO::bcast32(xm + 8), IO::bcast32(xm + 12)};
        const VI x1[4] = {IO::bcast32(xm + 32), IO::bcast32(xm + 36), IO::bcast32(xm + 40), IO::bcast32(xm + 44)};
        if constexpr (paced) if (m == 0) paced_fetch<kLines, 48>(pace_from, 6 * (2 * c + g / 4) + 4);
        ia0[m] = IO::dot4_u8(ia0[m], lo, x0);
        if constexpr (paced) if (m == 0) paced_fetch<kLines, 48>(pace_from, 6 * (2 * c + g / 4) + 5);
        ia1[m] = IO::dot4_u8(ia1[m], hi, x1);
      }
    }
    const VI sc0 = k4_scale<IO>(hdr, 2 * c), sc1 = k4_scale<IO>(hdr, 2 * c + 1);
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) {
      if constexpr (hi_in_place) ia1[m] = IO::srai(ia1[m], 4);
      isc[m] = IO::add(IO::add(isc[m], IO::mullo(ia0[m], sc0)), IO::mullo(ia1[m], sc1));
    }
  }
  const VF d = IO::f16lo(hdr[0]), dmin = IO::f16hi(hdr[0]);
  NPULLM_UNROLL_I8
  for (int m = 0; m < TM; ++m) {
    VI imn = IO::zero();
    NPULLM_UNROLL_I8
    for (int i = 0; i < 4; ++i) imn = IO::madd16(imn, k4_min_pair<IO>(hdr, i), IO::set1(x.c[m * x.ldc + 4 * u + i]));
    const VF dx = IO::bcastf(x.d[m * x.ldd + u]);
    facc[m][0] = IO::fmaf(IO::cvt(isc[m]), IO::mulf(dx, d), facc[m][0]);
    facc[m][0] = IO::fmaf(IO::cvt(imn), IO::mulf(dx, dmin), facc[m][0]);
  }
}

// Q6_K, one super-block. Two loop shapes, the same integers (each sub-block's dot steps in the same
// order; the exact sum over sub-blocks does not depend on theirs):
//  - a packed panel and M <= 2, a line at a time (PackedPanel): dword g of ql[0..31] (a),
//    ql[32..63] (b) and qh[0..31] of half h holds elements 4g..4g+3 of all four quarters, so those
//    three lines are loaded once, where used, and feed the four quarters' sums at once. (The other
//    shape kept 16 lines of qh and ql in registers here and spilled: 112 stack accesses in its loop;
//    DecodePanels 25.7 -> 27.1-27.3 GB/s, 2 threads.)
//  - rows (tload8 transposes 8 dwords at once), and packed for M > 2 (4 x M live sums would spill):
//    each half h loads qh[0..31], then a and b in turn; quarters 0 and 2 (low / high nibbles of a)
//    are consumed before b is loaded, then quarters 1 and 3.
template <class IO, int TM, class PN>
NPULLM_HOT void gemv_unit_q6k(const PN& p, int64_t u, const XQ& x, typename IO::VF (&facc)[TM][1]) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  const auto uv = unit_at(p, u * 210, 210, fetch_ahead_bytes<GgmlType::Q6_K>());
  const auto& pp = uv.first;
  const int64_t o = uv.second;
  // Paced fetches (paced_fetch) in the line-at-a-time shape: the unit's 53 lines (o + 210 bytes,
  // o 0 or 2) over 48 steps, 6 per pair of dwords (its 2 loads of 3 lines and 4 dots).
  constexpr bool paced = is_packed<PN>() && TM <= 2 && paces_fetch<IO>();
  const uint8_t* pace_from = nullptr;
  if constexpr (paced) pace_from = pp.fetch;
  VI scw[4];
  ld<4, IO, !paced>(pp, o + 192, scw);
  VI isc[TM];
  NPULLM_UNROLL_I8
  for (int m = 0; m < TM; ++m) isc[m] = IO::zero();
  // ia (sub-block j's dot sums) scaled by its signed scale into isc.
  auto add_scaled = [&](const VI (&ia)[TM], int j) NPULLM_HOT_LAMBDA {
    const VI sc = IO::sext8(scw[j / 4], j % 4);
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) isc[m] = IO::add(isc[m], IO::mullo(ia[m], sc));
  };
  // Two dot steps (dwords g, g + 1 of quarter q of half h) for every row of x.
  auto dot_pair = [&](VI (&ia)[TM], const VI (&w)[2], int h, int q, int g) NPULLM_HOT_LAMBDA {
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) {
      const int8_t* xr = x.q + m * x.ldq + 256 * u + 128 * h + 32 * q + 4 * g;
      const VI xb[2] = {IO::bcast32(xr), IO::bcast32(xr + 4)};
      ia[m] = IO::dot2_u8(ia[m], w, xb);
    }
  };
  auto init = [&](VI (&ia)[TM], int j) NPULLM_HOT_LAMBDA {
    NPULLM_UNROLL_I8
    for (int m = 0; m < TM; ++m) ia[m] = IO::set1(x.c[m * x.ldc + 16 * u + j]);
  };
  if constexpr (is_packed<PN>() && TM <= 2) {
    NPULLM_UNROLL_I8
    for (int h = 0; h < 2; ++h) {
      NPULLM_UNROLL_I8
      for (int jj = 0; jj < 2; ++jj) {  // sub-block jj of 16 in each quarter: dwords 4jj .. 4jj + 3
        VI ia[4][TM];
        NPULLM_UNROLL_I8
        for (int q = 0; q < 4; ++q) init(ia[q], 8 * h + 2 * q + jj);
        NPULLM_UNROLL_I8
        for (int g = 4 * jj; g < 4 * jj + 4; g += 2) {
          VI w[4][2];
          NPULLM_UNROLL_I8
          for (int i = 0; i < 2; ++i) {
            const VI a = ld1<IO, !paced>(pp, o + 64 * h + 4 * (g + i));
            const VI b = ld1<IO, !paced>(pp, o + 64 * h + 32 + 4 * (g + i));
            const VI hq = ld1<IO, !paced>(pp, o + 128 + 32 * h + 4 * (g + i));
            if constexpr (paced) paced_fetch<53, 48>(pace_from, 6 * (4 * h + 2 * jj + (g - 4 * jj) / 2) + i);
            NPULLM_UNROLL_I8
            for (int q = 0; q < 4; ++q) w[q][i] = q6k_weight<IO>(q % 2 ? b : a, hq, q);
          }
          NPULLM_UNROLL_I8
          for (int q = 0; q < 4; ++q) {
            if constexpr (paced) paced_fetch<53, 48>(pace_from, 6 * (4 * h + 2 * jj + (g - 4 * jj) / 2) + 2 + q);
            dot_pair(ia[q], w[q], h, q, g);
          }
        }
        NPULLM_UNROLL_I8
        for (int q = 0; q < 4; ++q) add_scaled(ia[q], 8 * h + 2 * q + jj);
      }
    }
  } else {
    NPULLM_UNROLL_I8
    for (int h = 0; h < 2; ++h) {
      VI qh[8];
      ld<8>(pp, o + 128 + 32 * h, qh);
      NPULLM_UNROLL_I8
      for (int half = 0; half < 2; ++half) {  // ql bytes 0..31 (quarters 0, 2), then 32..63 (1, 3)
        VI t[8];
        if constexpr (is_packed<PN>()) {  // a line at a time (PackedPanel)
          NPULLM_UNROLL_I8
          for (int g = 0; g < 8; ++g) t[g] = ld1<IO>(pp, o + 64 * h + 32 * half + 4 * g);
        } else {
          ld<8>(pp, o + 64 * h + 32 * half, t);
        }
        NPULLM_UNROLL_I8
        for (int hi = 0; hi < 2; ++hi) {
          const int quarter = half + 2 * hi;
          NPULLM_UNROLL_I8
          for (int jj = 0; jj < 2; ++jj) {  // the two sub-blocks of 16 in this quarter
            VI ia[TM];
            init(ia, 8 * h + 2 * quarter + jj);
            NPULLM_UNROLL_I8
            for (int g = 4 * jj; g < 4 * jj + 4; g += 2) {
              const VI w[2] = {q6k_weight<IO>(t[g], qh[g], quarter), q6k_weight<IO>(t[g + 1], qh[g + 1], quarter)};
              dot_pair(ia, w, h, quarter, g);
            }
            add_scaled(ia, 8 * h + 2 * quarter + jj);
          }
        }
      }
    }
  }
  const VF d = IO::f16hi(ld1<IO, !paced>(pp, o + 206));
  NPULLM_UNROLL_I8
  for (int m = 0; m < TM; ++m)
    facc[m][0] = IO::fmaf(IO::cvt(isc[m]), IO::mulf(IO::bcastf(x.d[m * x.ldd + u]), d), facc[m][0]);
}

// ---- decode of the 32-element types, 8 blocks at a time -------------------------------------------
//
// For M <= kGemvMaxM, 8 consecutive blocks of a row (144 bytes for Q4_0 ... 272 for Q8_0, always a
// multiple of 16) are read as whole 32-byte pieces (tload8) plus at most one 16-byte tail (tload4):
// dwords D[0 ..) of the group. A field at byte offset f of the group is D[f / 4] when f % 4 == 0,
// and mid_dword(D, f / 4) when f % 4 == 2 (block sizes are even). Each piece is loaded just before
// the first block that needs it, so at most two pieces are live. Compared with block pairs this
// moves fewer bytes through shuffles and reads each row in aligned 32-byte steps, which streamed
// from memory at the Q4_K rate where pairs did not (2 threads: ~42 vs ~27 GB/s).
template <GgmlType T>
constexpr int64_t block_bytes() {
  return T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22 : T == GgmlType::Q5_1 ? 24 : 34;
}

// A packed octet's 64-byte lines (each a dword of the panel's 16 rows): what its paced fetches cover.
template <GgmlType T>
constexpr int octet_lines() {
  return static_cast<int>(8 * block_bytes<T>() / 4);
}

template <class IO>
NPULLM_HOT typename IO::VI field32(const typename IO::VI* d, int64_t f) {
  return f % 4 == 0 ? d[f / 4] : mid_dword<IO>(d, static_cast<int>(f / 4));
}

// The last dword field32 reads for the n bytes at offset f (n a multiple of 4).
constexpr int64_t last_dword(int64_t f, int64_t n) { return f % 4 == 0 ? (f + n) / 4 - 1 : (f + n + 2) / 4 - 1; }

// kPaced: block `blk` of an octet whose fetch base is `fetch` paces the octet's fetches over its 8
// dot steps (paced_fetch).
template <class IO, GgmlType T, int TM, bool kPaced = false>
NPULLM_HOT void tile_nibbles(const typename IO::VI* q4, typename IO::VI dm, const XQ& x, int64_t u,
                             typename IO::VF (&facc)[TM][1], const uint8_t* fetch = nullptr, int blk = 0) {
  constexpr int kLines = octet_lines<T>();
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  VI lo[4], hi[4];
  NPULLM_UNROLL_I8
  for (int g = 0; g < 4; ++g) {
    lo[g] = IO::and_(q4[g], 0x0F0F0F0F);
    hi[g] = IO::and_(q4[g], static_cast<int32_t>(0xF0F0F0F0u));
  }
  const VF dw = IO::f16lo(dm);
  NPULLM_UNROLL_I8
  for (int m = 0; m < TM; ++m) {
    const int8_t* xr = x.q + m * x.ldq + 32 * u;
    VI a = T == GgmlType::Q4_0 ? IO::set1(x.c[m * x.ldc + u]) : IO::zero();
    VI b = IO::zero();
    NPULLM_UNROLL_I8
    for (int g = 0; g < 4; ++g) {
      if (kPaced && m == 0) paced_fetch<kLines, 64>(fetch, 8 * blk + 2 * g);
      a = IO::dot_u8(a, lo[g], IO::bcast32(xr + 4 * g));
      if (kPaced && m == 0) paced_fetch<kLines, 64>(fetch, 8 * blk + 2 * g + 1);
      b = IO::dot_u8(b, hi[g], IO::bcast32(xr + 16 + 4 * g));
    }
    const VI ia = IO::add(a, IO::srai(b, 4));
    const VF dx = IO::bcastf(x.d[m * x.ldd + u]);
    facc[m][0] = IO::fmaf(IO::cvt(ia), IO::mulf(dx, dw), facc[m][0]);
    if constexpr (T == GgmlType::Q4_1) facc[m][0] = IO::fmaf(IO::f16hi(dm), IO::bcastf(x.s[m * x.ldd + u]), facc[m][0]);
  }
}

template <class IO, GgmlType T, int TM, class PN>
NPULLM_HOT void gemv_octet(const PN& p, int64_t u0, const XQ& x, typename IO::VF (&facc)[TM][1]) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  constexpr int64_t B = block_bytes<T>();
  constexpr int64_t total = 8 * B;            // bytes of the group
  constexpr int n32 = static_cast<int>(total / 32);  // whole 32-byte pieces; total % 32 is 0 or 16
  constexpr int kLines = octet_lines<T>();
  const auto uv = unit_at(p, (u0 >> 3) * total, total, fetch_ahead_bytes<T>());  // (u0 is a multiple of 8)
  const auto& pp = uv.first;
  const int64_t o = uv.second;
  constexpr bool nibbles = (T == GgmlType::Q4_0 || T == GgmlType::Q4_1) && has_hi_nibble_dot<IO>();
  constexpr bool five = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
  // Q8_0, the nibble types and the 5-bit types pace the octet's fetches over its work
  // (paced_fetch); their octets are dword-aligned (o is 0), so the unit's lines start at pp.fetch.
  constexpr bool paced = is_packed<PN>() && paces_fetch<IO>() && (T == GgmlType::Q8_0 || nibbles || five);
  const uint8_t* pace_from = nullptr;
  if constexpr (paced) pace_from = pp.fetch;
  VI D[total / 4];
  int loaded = 0;  // dwords of D loaded so far
  auto need = [&](int64_t upto_dword) {  // makes D[0 .. upto_dword] available
    while (loaded <= upto_dword) {
      if constexpr (is_packed<PN>()) {  // a line at a time (PackedPanel)
        ld<1, IO, !paced>(pp, o + 4 * loaded, D + loaded);
        loaded += 1;
      } else if (loaded / 8 < n32) {
        ld<8>(pp, o + 4 * loaded, D + loaded);
        loaded += 8;
      } else {
        ld<4>(pp, o + 4 * loaded, D + loaded);
        loaded += 4;
      }
    }
  };
  NPULLM_UNROLL_I8
  for (int b = 0; b < 8; ++b) {
    const int64_t f = b * B;  // the block's first byte in the group
    VI dec[10];
    VF* decf = reinterpret_cast<VF*>(dec);
    if constexpr (T == GgmlType::Q8_0) {
      need(last_dword(f + 2, 32));
      VI dm = D[(f - f % 4) / 4];  // d sits at f: dword-aligned, or the high half
      if (f % 4 == 2) dm = IO::srli(dm, 16);
      NPULLM_UNROLL_I8
      for (int g = 0; g < 8; ++g) {
        const VI w = field32<IO>(D, f + 2 + 4 * g);
        if constexpr (paced) paced_fetch<kLines, 64>(pace_from, 8 * b + g);
        dec[g] = IO::kVnni ? IO::xor_(w, static_cast<int32_t>(0x80808080u)) : w;
      }
      decf[8] = IO::f16lo(dm);
    } else {
      constexpr int64_t qs = T == GgmlType::Q4_0 ? 2 : T == GgmlType::Q4_1 ? 4 : T == GgmlType::Q5_0 ? 6 : 8;
      need(last_dword(f + qs, 16));
      VI dm = D[(f - f % 4) / 4];  // d (and m) sit at f: dword-aligned, or the high half
      if (f % 4 == 2) dm = IO::srli(dm, 16);
      VI q4[4];
      NPULLM_UNROLL_I8
      // (5-bit types: 8 paced steps a block, one after each qs dword, two around the fifth
      // bits' merge and two in tile_unit)
      for (int g = 0; g < 4; ++g) {
        q4[g] = field32<IO>(D, f + qs + 4 * g);
        if constexpr (paced && five) paced_fetch<kLines, 64>(pace_from, 8 * b + g);
      }
      if constexpr (nibbles) {
        // (Q4_1: f is dword-aligned, dm holds d | m)
        tile_nibbles<IO, T, TM, paced>(q4, dm, x, u0 + b, facc, pace_from, b);
        continue;
      }
      if constexpr (paced && five) paced_fetch<kLines, 64>(pace_from, 8 * b + 4);
      const VI qh = five ? field32<IO>(D, f + (T == GgmlType::Q5_0 ? 2 : 4)) : IO::zero();
      nibbles_to_g<IO, five>(q4, qh, dec);
      if constexpr (paced && five) paced_fetch<kLines, 64>(pace_from, 8 * b + 5);
      decf[8] = IO::f16lo(dm);
      if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) {
        // m is the high half of the dword at f: f is dword-aligned for these types
        decf[9] = IO::f16hi(D[f / 4]);
      }
    }
    const VI* dp[1] = {dec};
    tile_unit<IO, T, TM, 1, paced && five ? kLines : 0>(dp, x, 0, u0 + b, facc, pace_from, b);
  }
}

// MXFP4, 8 blocks (136 bytes = 34 dwords) of the panel's rows for M <= kGemvMaxM, as gemv_octet:
// the group's dwords D are loaded as they are first needed (rows: 32-byte transposes, then the last
// 16 bytes; a packed panel, whose octets start on a dword since 136 = 4 * 34, a line at a time), and
// block b, which starts at byte 17 b, takes its fields from them with shifts known at compile time.
template <class IO, int TM, class PN>
NPULLM_HOT void gemv_octet_mxfp4(const PN& p, int64_t u0, const XQ& x, typename IO::VF (&facc)[TM][1]) {
  using VI = typename IO::VI;
  constexpr int64_t total = 8 * 17;
  constexpr int kLines = static_cast<int>(total / 4);  // a packed octet's lines
  const auto uv = unit_at(p, (u0 >> 3) * total, total, fetch_ahead_bytes<GgmlType::MXFP4>());
  const auto& pp = uv.first;
  const int64_t o = uv.second;
  // Packed (o is 0): the octet's fetches paced over its 8 blocks (paced_fetch).
  constexpr bool paced = is_packed<PN>() && paces_fetch<IO>();
  const uint8_t* pace_from = nullptr;
  if constexpr (paced) pace_from = pp.fetch;
  VI D[kLines];
  int loaded = 0;  // dwords of D loaded so far
  auto need = [&](int upto_dword) NPULLM_HOT_LAMBDA {  // makes D[0 .. upto_dword] available
    while (loaded <= upto_dword) {
      if constexpr (is_packed<PN>()) {
        ld<1, IO, !paced>(pp, o + 4 * loaded, D + loaded);
        loaded += 1;
      } else if (loaded < 32) {
        ld<8>(pp, o + 4 * loaded, D + loaded);
        loaded += 8;
      } else {
        ld<4>(pp, o + 120, D + 30);  // the last 16 bytes (D[30], D[31] again, the same values)
        loaded = kLines;
      }
    }
  };
  auto block = [&]<int B>() NPULLM_HOT_LAMBDA {
    constexpr int f = 17 * B;  // the block's first byte in the group
    need((f + 16) / 4);
    if constexpr (paced) paced_fetch<kLines, 8>(pace_from, B);
    VI dec[9];
    mxfp4_fields<IO, f % 4>(D + f / 4, dec);
    const VI* dp[1] = {dec};
    tile_unit<IO, GgmlType::MXFP4, TM, 1>(dp, x, 0, u0 + B, facc);
  };
  [&]<int... B>(std::integer_sequence<int, B...>) NPULLM_HOT_LAMBDA {
    (block.template operator()<B>(), ...);
  }(std::make_integer_sequence<int, 8>{});
}

// ---- Q8_0 decode, row-wise (IO::kRowQ8, M = 1) -----------------------------------------------------
//
// Q8_0 has the least decode work per byte, so the transposition above (gemv_octet: 16 rows x 32
// bytes into 8 vectors, plus the shifts the odd blocks' 2-byte offset needs) is what limits it.
// Here each row is read as stored, one 64-byte window per block pair (j, j + 1): bytes 2 .. 65
// of the pair, qs_j | d_j+1 | qs_j+1[0..29], dotted with activations laid out the same way, zeros
// facing d_j+1 (IO::q8_act). IO::q8_rows gives the integer dots I_j, I_j+1 with lane r = row r,
// less the two products of qs_j+1[30..31]: those bytes and d_j+2 are the 4 bytes between this
// window and the next, which one gather brings in, already one row per lane, so one more dot
// step adds them, and its high half is the next pair's d_j+2. d_j+1 comes out of the windows
// (q8_rows' dodd), d_0 from one gather per panel. The integers are exact, hence the very ones the
// transposed path computes, and the float step is tile_unit's (block j, then j + 1): the same
// bits. Measured against gemv_octet (Xeon with AVX-512 VNNI, 1 thread, weights resident in L2 so
// that the kernel and not memory is timed, both paths in one process, medians of 11): 38.8 ->
// 52.4 GB/s (K 2048), 39.6 -> 49.8 GB/s (K 5632); about a third of that from the unrolled
// prefetch below. M > 1 keeps gemv_octet: its transposed weights serve every row of x, where
// this path redoes the reduction per row (8 % slower at M = 4).
template <class IO>
constexpr bool has_row_q8() {
  if constexpr (requires { IO::kRowQ8; }) return IO::kRowQ8;
  else return false;
}

// Blocks u, u + 1 (kPair) or block u alone of the panel into acc. dcarry holds d_u of each row in
// its low half (`d_hi` false) or high half; on return from a pair that is not the row's last, it
// holds d_u+2 in the high half.
template <class IO, bool kPair>
NPULLM_HOT void gemv_q8_rows(const Panel<IO>& p, typename IO::VI ridx, int64_t u, int64_t nu, const XQ& x,
                             typename IO::VI& dcarry, bool d_hi, typename IO::VF& acc) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  const int64_t o = 34 * u;
  VI x4[4], i0, i1, dodd;
  IO::template q8_act<kPair>(x.q + 32 * u, x4);
  IO::template q8_rows<kPair>(p.rows, o, x4, i0, i1, dodd);
  const VF dw0 = d_hi ? IO::f16hi_w(dcarry) : IO::f16lo_w(dcarry);
  // + c: -128 * sum(q), for the weights' + 128 (tile_unit starts its accumulator there).
  acc = IO::fmaf(IO::cvt(IO::add(i0, IO::set1(x.c[u]))), IO::mulf(IO::bcastf(x.d[u]), dw0), acc);
  if constexpr (kPair) {
    // The 4 bytes after the window: qs_u+1[30..31], d_u+2 (at 34u + 66); for the row's last pair
    // qs_u+1[28..31] instead (at 34u + 64: nothing past the row is read).
    const bool last = u + 2 >= nu;
    const VI gap = IO::gather_at(p.rows[0] + o + (last ? 64 : 66), ridx);
    const uint32_t x2 = static_cast<uint32_t>(static_cast<uint8_t>(x.q[32 * u + 62])) |
                        static_cast<uint32_t>(static_cast<uint8_t>(x.q[32 * u + 63])) << 8;  // x_u+1[30..31]
    i1 = IO::dot_u8(i1, IO::xor_(gap, static_cast<int32_t>(0x80808080u)), IO::set1(static_cast<int32_t>(last ? x2 << 16 : x2)));
    acc = IO::fmaf(IO::cvt(IO::add(i1, IO::set1(x.c[u + 1]))), IO::mulf(IO::bcastf(x.d[u + 1]), IO::f16lo_w(dodd)), acc);
    dcarry = gap;
  }
}

// One panel against one row of x, pair by pair. Prefetch as in gemv_panels (the next panel,
// [next, pf_end), one sweep paced over this panel), unrolled: a pair consumes 16 x 68 = 1088
// bytes = 17 lines, so 17 lines per pair (9 for an odd last block) keep pace exactly. (A loop
// of prefetches with computed bounds, as gemv_panels has, cost ~15 % here.)
template <class IO>
void gemv_panel_q8_rows(const uint8_t* W, size_t row_bytes, int64_t nu, const XQ& x, const Panel<IO>& pan,
                        int64_t next, int64_t pf_end, typename IO::VF& acc) {
  using VI = typename IO::VI;
  const VI ridx = IO::row_index(pan, row_bytes);
  VI dcarry = IO::gather_at(pan.rows[0], ridx);  // d_0 in the low half
  const uint8_t* pf = W + next;
  const uint8_t* const pf_stop = W + pf_end;
  int64_t u = 0;
  for (; u + 2 <= nu; u += 2, pf += 1088) {
    if (pf < pf_stop) {
      NPULLM_UNROLL_I8
      for (int l = 0; l < 17; ++l) __builtin_prefetch(pf + 64 * l, 0, 3);
    }
    gemv_q8_rows<IO, true>(pan, ridx, u, nu, x, dcarry, u != 0, acc);
  }
  if (u < nu) {
    if (pf < pf_stop) {
      NPULLM_UNROLL_I8
      for (int l = 0; l < 9; ++l) __builtin_prefetch(pf + 64 * l, 0, 3);
    }
    gemv_q8_rows<IO, false>(pan, ridx, u, nu, x, dcarry, u != 0, acc);
  }
}

// ---- drivers ---------------------------------------------------------------------------------------

// Stores R outputs of x row m (lanes past `valid` are dropped): (acc + bias) + res, as epilogue().
template <class IO>
inline void store_outputs(typename IO::VF acc, const float* bias, const float* res, float* out, int64_t N,
                          int64_t m, int64_t n, int valid) {
  using VF = typename IO::VF;
  VF v = acc;
  if (bias) v = IO::addf(v, IO::loadf_n(bias + n, valid));
  if (res) v = IO::addf(v, IO::loadf_n(res + m * N + n, valid));
  IO::storef_n(out + m * N + n, v, valid);
}

template <class IO, GgmlType T, int TM, int P>
NPULLM_HOT void run_units(const typename IO::VI* const* dec, int64_t unit_stride_vecs, int64_t nu, const XQ& x,
                      int64_t xm, typename IO::VF (&facc)[TM][P]) {
  const typename IO::VI* d[P];
  for (int q = 0; q < P; ++q) d[q] = dec[q];
  for (int64_t u = 0; u < nu; ++u) {
    tile_unit<IO, T, TM, P>(d, x, xm, u, facc);
    for (int q = 0; q < P; ++q) d[q] += unit_stride_vecs;
  }
}

// Decode: the rows [n, n + P * R) of W against TM = M rows of x, one unit (or pair) at a time.
//
// Prefetch. A panel reads its R rows side by side, column by column: R concurrent streams, too
// many for the hardware prefetchers, which left decode at a third of the memory bandwidth. But
// the rows of consecutive panels are contiguous, so while a panel is computed the next one (the
// bytes [n + R, n + 2R) rows, up to n_end) is prefetched into L1 as one linear sweep, spread
// evenly over the steps. Prefetching exactly one panel ahead measured best (a shorter distance
// misses the last rows of big panels; prefetching into L2 only was slower). A packed panel
// (Panels16) is one linear run already: its loads fetch ahead themselves (PackedPanel).
template <class IO, class PN, GgmlType T, int TM, int P>
void gemv_panels(const uint8_t* W, size_t row_bytes, int64_t nu, const XQ& x, int64_t m0, const float* bias,
                 const float* res, float* out, int64_t N, int64_t n, int64_t n_end) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  PN pan[P];
  for (int q = 0; q < P; ++q) make_panel<IO>(W, row_bytes, n + q * IO::R, n_end, pan[q]);
  constexpr int V = unit_vecs(T);
  constexpr bool octets = act_format(T) == ActFormat::Q8_0 && P == 1;
  constexpr int S = octets ? 8 : has_pair_decode(T) ? 2 : 1;  // units decoded per step
  constexpr bool fused = P == 1 && (T == GgmlType::Q4_K || T == GgmlType::Q5_K || T == GgmlType::Q6_K);
  alignas(64) VI buf[P][fused ? 1 : 2 * V];  // decoded units (the fused K-quant decode needs none)
  VF facc[TM][P];
  for (int m = 0; m < TM; ++m)
    for (int q = 0; q < P; ++q) facc[m][q] = IO::zerof();
  // Byte offsets in W: the next panel starts at `next`; nothing at or past `pf_end` is fetched.
  // That is the end of the matrix, not of this call's rows [n, n_end): the last panels of a chunk
  // fetch the first of the next one, which the CPU device arranges to be, most of the time, the
  // chunk this thread takes next (WorkerPool::in_step_range), so a thread's stream stays warm from chunk to chunk.
  // (Small matrices, 896 x 896, 2 threads, 4 chunks each: Q4_0 22.9 -> 27.6 GB/s.)
  const int64_t panel_bytes = P * IO::R * static_cast<int64_t>(row_bytes);
  const int64_t next = n * static_cast<int64_t>(row_bytes) + panel_bytes;
  const int64_t pf_end = N * static_cast<int64_t>(row_bytes);
  if constexpr (T == GgmlType::Q8_0 && TM == 1 && P == 1 && has_row_q8<IO>() && !is_packed<PN>()) {
    if (IO::R * static_cast<int64_t>(row_bytes) <= INT32_MAX) {  // gather offsets are int32
      gemv_panel_q8_rows<IO>(W, row_bytes, nu, x, pan[0], next, pf_end, facc[0][0]);
      store_outputs<IO>(facc[0][0], bias, res, out, N, m0, n, pan[0].valid);
      return;
    }
  }
  // A step consumes step_bytes of the panel and prefetches as many of the next, by a fixed
  // number of unrolled prefetches (a loop to a computed bound cost 2-7 % of the kernel's time,
  // Q4_0 and K-quants with the weights in L2).
  constexpr int64_t step_bytes = P * IO::R * S * unit_bytes(T);
  constexpr int kLines = static_cast<int>((step_bytes + 63) / 64);
  const uint8_t* pfp = W + next;
  const uint8_t* const pf_stop = W + pf_end;
  // A packed panel fetches as it goes instead, with each load (PackedPanel).
  constexpr bool packed = is_packed<PN>();
  if constexpr (packed) {
    pan[0].stop = pf_stop;
  }
  for (int64_t u = 0; u < nu; u += S, pfp += step_bytes) {
    const int cnt = nu - u < S ? static_cast<int>(nu - u) : S;
    if (!packed && pfp < pf_stop) {
      _Pragma("GCC unroll 128")
      for (int l = 0; l < kLines; ++l) __builtin_prefetch(pfp + 64 * l, 0, 3);
    }
    if constexpr (octets) {
      if (cnt == 8) {
        if constexpr (T == GgmlType::MXFP4) gemv_octet_mxfp4<IO, TM, PN>(pan[0], u, x, facc);
        else gemv_octet<IO, T, TM, PN>(pan[0], u, x, facc);
      } else {  // the last nu % 8 blocks: pairs, then a single one
        for (int64_t v = u; v < nu; v += 2) {
          const int c2 = nu - v < 2 ? 1 : 2;
          decode_units<IO, T>(fetching_at(pan[0], v * unit_bytes(T), c2 * unit_bytes(T), fetch_ahead_bytes<T>()), v, c2, buf[0]);
          for (int i = 0; i < c2; ++i) {
            const VI* dec[1] = {buf[0] + i * V};
            tile_unit<IO, T, TM, 1>(dec, x, 0, v + i, facc);
          }
        }
      }
    } else if constexpr (fused && T != GgmlType::Q6_K) {
      gemv_unit_k4<IO, T, TM>(pan[0], u, x, facc);
    } else if constexpr (fused) {
      gemv_unit_q6k<IO, TM>(pan[0], u, x, facc);
    } else {
      for (int q = 0; q < P; ++q) decode_units<IO, T>(pan[q], u, cnt, buf[q]);
      for (int i = 0; i < cnt; ++i) {
        const VI* dec[P];
        for (int q = 0; q < P; ++q) dec[q] = buf[q] + i * V;
        tile_unit<IO, T, TM, P>(dec, x, 0, u + i, facc);
      }
    }
  }
  for (int m = 0; m < TM; ++m)
    for (int q = 0; q < P; ++q)
      store_outputs<IO>(facc[m][q], bias, res, out, N, m0 + m, n + q * IO::R, pan[q].valid);
}

// Prefill: P panels starting at row n are decoded into `pbuf` (all nu units), then every row of
// the chunk [m0, m0 + mc) runs against them in tiles of TM rows.
template <class IO, class PN, GgmlType T, int TM, int P>
void gemm_panels(const uint8_t* W, size_t row_bytes, int64_t nu, const XQ& x, int64_t m0, int64_t mc,
                 const float* bias, const float* res, float* out, int64_t N, int64_t n, int64_t n_end,
                 typename IO::VI* pbuf) {
  using VI = typename IO::VI;
  using VF = typename IO::VF;
  constexpr int V = unit_vecs(T);
  PN pan[P];
  const VI* dec[P];
  for (int q = 0; q < P; ++q) {
    make_panel<IO>(W, row_bytes, n + q * IO::R, n_end, pan[q]);
    VI* d = pbuf + q * nu * V;
    for (int64_t u = 0; u < nu; u += 2) decode_units<IO, T>(pan[q], u, nu - u < 2 ? 1 : 2, d + u * V);
    dec[q] = d;
  }
  int64_t m = 0;
  for (; m + TM <= mc; m += TM) {
    VF facc[TM][P];
    for (int i = 0; i < TM; ++i)
      for (int q = 0; q < P; ++q) facc[i][q] = IO::zerof();
    run_units<IO, T, TM, P>(dec, V, nu, x, m, facc);
    for (int i = 0; i < TM; ++i)
      for (int q = 0; q < P; ++q) store_outputs<IO>(facc[i][q], bias, res, out, N, m0 + m + i, n + q * IO::R, pan[q].valid);
  }
  for (; m < mc; ++m) {
    VF facc[1][P];
    for (int q = 0; q < P; ++q) facc[0][q] = IO::zerof();
    run_units<IO, T, 1, P>(dec, V, nu, x, m, facc);
    for (int q = 0; q < P; ++q) store_outputs<IO>(facc[0][q], bias, res, out, N, m0 + m, n + q * IO::R, pan[q].valid);
  }
}

// One panel at a time: decoding two side by side (more rows in flight) measured slower, the
// decoded vectors no longer fit in registers.
template <class IO, class PN, GgmlType T, int TM>
void gemv_range(const uint8_t* W, size_t row_bytes, int64_t nu, const XQ& x, int64_t m0, const float* bias,
                const float* res, float* out, int64_t N, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; n += IO::R) gemv_panels<IO, PN, T, TM, 1>(W, row_bytes, nu, x, m0, bias, res, out, N, n, n1);
}

template <class IO, class PN, GgmlType T>
void int8_matmul_typed(const float* x, int64_t M, int64_t K, const uint8_t* W, size_t row_bytes,
                       const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1,
                       void* work, const void* xpre) {
  using VI = typename IO::VI;
  // work = [x quants | d | c | s | panels], each part 64-byte aligned.
  auto* base = static_cast<uint8_t*>(work);
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  XQ xq;
  xq.ldq = align64(K);
  xq.ldd = K / 32;
  xq.ldc = K / 16;
  xq.q = reinterpret_cast<int8_t*>(base);
  base += kChunkRows * xq.ldq;
  xq.d = reinterpret_cast<float*>(base);
  base += align64(kChunkRows * 4 * xq.ldd);
  xq.s = reinterpret_cast<float*>(base);
  base += align64(kChunkRows * 4 * xq.ldd);
  xq.c = reinterpret_cast<int32_t*>(base);
  base += align64(kChunkRows * 4 * xq.ldc);
  VI* pbuf = reinterpret_cast<VI*>(base);
  const int64_t nu = K / unit_elems(T);
  constexpr int TMg = IO::R >= 16 ? 4 : 2;  // prefill tile rows: accumulators must fit in registers
  for (int64_t m0 = 0; m0 < M; m0 += kChunkRows) {
    const int64_t mc = M - m0 < kChunkRows ? M - m0 : kChunkRows;
    if (xpre) xq = xq_view(xpre, M, K, m0);  // quantised by int8_quantize_x, same bytes
    else quantize_chunk<IO>(T, x + m0 * K, K, mc, xq);
    switch (mc) {
      case 1: gemv_range<IO, PN, T, 1>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
      case 2: gemv_range<IO, PN, T, 2>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
      case 3: gemv_range<IO, PN, T, 3>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
      case 4: gemv_range<IO, PN, T, 4>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
      default: break;
    }
    if constexpr (IO::R >= 16 && kGemvMaxMWide == 8) {
      switch (mc) {
        case 5: gemv_range<IO, PN, T, 5>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
        case 6: gemv_range<IO, PN, T, 6>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
        case 7: gemv_range<IO, PN, T, 7>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
        case 8: gemv_range<IO, PN, T, 8>(W, row_bytes, nu, xq, m0, bias, res, out, N, n0, n1); continue;
        default: break;
      }
    }
    int64_t n = n0;
    for (; n + kPanels * IO::R <= n1; n += kPanels * IO::R)
      gemm_panels<IO, PN, T, TMg, kPanels>(W, row_bytes, nu, xq, m0, mc, bias, res, out, N, n, n1, pbuf);
    for (; n < n1; n += IO::R)
      gemm_panels<IO, PN, T, TMg, 1>(W, row_bytes, nu, xq, m0, mc, bias, res, out, N, n, n1, pbuf);
  }
}

// Rows [m0, m1) of x quantised for weights of type wt into a buffer of xq_all_bytes(M, K).
template <class IO>
void int8_quantize_x(GgmlType wt, const float* x, int64_t M, int64_t K, void* dst, int64_t m0, int64_t m1) {
  XQ xq = xq_view(dst, M, K, m0);
  quantize_chunk<IO>(wt, x + m0 * K, K, m1 - m0, xq);
}

// Entry: wt must satisfy int8_supported(wt); work holds int8_work_bytes(K) bytes (+ 64 for
// alignment). xpre: null, or x already quantised for wt by int8_quantize_x (all M rows).
// packed: W is in the Panels16 layout (formats/weight_layout.h), else in rows as GGUF stores it.
template <class IO, class PN>
void int8_matmul_layout(const float* x, int64_t M, int64_t K, const uint8_t* W, GgmlType wt, size_t row_bytes,
                        const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1, void* work,
                        const void* xpre) {
  switch (wt) {
#define NPULLM_I8_CASE(TYPE) \
    case GgmlType::TYPE: int8_matmul_typed<IO, PN, GgmlType::TYPE>(x, M, K, W, row_bytes, bias, res, out, N, n0, n1, work, xpre); return;
    NPULLM_I8_CASE(Q4_0) NPULLM_I8_CASE(Q4_1) NPULLM_I8_CASE(Q5_0) NPULLM_I8_CASE(Q5_1) NPULLM_I8_CASE(Q8_0)
    NPULLM_I8_CASE(MXFP4) NPULLM_I8_CASE(Q4_K) NPULLM_I8_CASE(Q5_K) NPULLM_I8_CASE(Q6_K)
#undef NPULLM_I8_CASE
    default: return;  // not reached: kernels.cpp routes only int8_supported types here
  }
}

template <class IO>
void int8_matmul(const float* x, int64_t M, int64_t K, const void* Wv, GgmlType wt, size_t row_bytes, bool packed,
                 const float* bias, const float* res, float* out, int64_t N, int64_t n0, int64_t n1, void* work,
                 const void* xpre) {
  const auto* W = static_cast<const uint8_t*>(Wv);
  if (packed) int8_matmul_layout<IO, PackedPanel<IO>>(x, M, K, W, wt, row_bytes, bias, res, out, N, n0, n1, work, xpre);
  else int8_matmul_layout<IO, Panel<IO>>(x, M, K, W, wt, row_bytes, bias, res, out, N, n0, n1, work, xpre);
}

#undef NPULLM_UNROLL_I8

}  // namespace
}  // namespace npullm::cpu::detail
