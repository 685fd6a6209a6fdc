// Microbenchmarks of the CPU matmul kernels (Google Benchmark).
//
//   npullm_bench_kernels --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Read/<threads>              bandwidth of a plain vector read loop over 1 GiB: the roofline the
//                             decode figures are compared with (bytes_per_second).
// DecodePanels/<type>/K/N/<threads>  the same with the weight in the Panels16 layout.
// DecodeWarm/<type>/K/N/1    one small Panels16 matrix again and again (in L2), one thread: the
//                             kernel's arithmetic rate, for telling compute-bound from memory-bound.
// Decode/<type>/K/N/<threads> one token (M = 1) through an N x K weight matrix; bytes_per_second
//                             counts the weight bytes streamed. The matrix is one of the copies
//                             filling a 1 GiB arena, used in turn, so every call reads from
//                             memory, not from cache, as in a real model.
// Prefill/<type>/M/K/N/<threads>  M tokens at once; FLOP/s = 2 M N K / time.
// Verify/<type>/M/K/N/<threads>  M tokens (a speculative verify step: M - 1 guesses) through a
//                             Panels16 matrix from memory, as Decode, x quantised once up front as
//                             the CPU device does: its time over M = 1's is the matmuls' part of
//                             the verify cost r(M - 1) (issue 47).
// AttentionDecode/F16/C       one token's attention over C keys (TinyLlama's heads), one thread.
// AttentionDecodeCold/F16/C   the same with K/V from memory (another copy each time, as in decode).
// AttentionDecode[Cold]/Q8_0/1024  the same with a Q8_0 K/V cache (--kv-type q8_0).
// AttentionDecode[Cold]HeadMajor/F16/1024  the same keys with each K/V head's rows contiguous
//                             ([Hkv, C, hd], one group at a time) instead of the cache's [C, Hkv,
//                             hd]: what that layout would be worth.
// PoolStage/<threads>         an empty stage of the worker pool: its synchronisation cost.
// Fma/<threads>               512-bit fma a second on each thread (items_per_second: all threads
//                             together), 12 independent chains: the arithmetic ceiling the
//                             attention and verify kernels are compared with, as Read is the
//                             memory's (AVX-512 machines only).
// PrefillIsa/<isa>/<type>/M/K/N/<threads>  the same on a forced path (avx512 = VNNI, amx), x
//                             quantised up front as the device does: paths side by side in one run.
// Matmuls are split over N in chunks like the CPU device does (threads * 4 chunks, multiples of
// 16 rows) and run on its worker pool. The machine is often shared: quote medians.
#include <benchmark/benchmark.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/page_buffer.h"
#include "device/cpu/kernels.h"
#include "device/cpu/worker_pool.h"
#include "formats/ggml_types.h"
#include "formats/weight_layout.h"

namespace {

using npullm::GgmlType;
namespace cpu = npullm::cpu;

// ---- read roofline ---------------------------------------------------------------------------

// One 64-byte load per iteration: on this Xeon that streams 17.6-18.2 GB/s per core where four
// loads per iteration stream 15.6-15.9 (the shape `npullm bench`'s roofline uses too, with a
// fetching variant beside it: src/cli/bandwidth.cpp).
__attribute__((target("avx512f"))) int64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a = _mm512_setzero_si512();
  for (size_t i = 0; i + 64 <= n; i += 64) a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
  alignas(64) int64_t out[8];
  _mm512_store_si512(out, a);
  return out[0] ^ out[7];
}

__attribute__((target("avx2"))) int64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  return _mm256_extract_epi64(_mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d)), 0);
}

// Memory as the runtime holds weights and K/V: on transparent huge pages where the kernel gives
// them (common/page_buffer.h), so the read loop and the kernels see the same TLB behaviour.
// NPULLM_BENCH_SMALL_PAGES=1 measures both on 4 KiB pages instead.
using Buffer = npullm::PageBuffer;

Buffer alloc(size_t n) {
  static const bool huge = std::getenv("NPULLM_BENCH_SMALL_PAGES") == nullptr;
  return Buffer((n + 63) / 64 * 64, huge);
}

void BM_Read(benchmark::State& st, int threads) {
  const size_t n = size_t{1} << 30;
  Buffer buf = alloc(n);
  for (size_t i = 0; i < n; i += 4096) std::memset(buf.data() + i, static_cast<int>(i >> 12), 4096);
  // (a separate GiB from the decode arena: both together exceed any cache)
  cpu::WorkerPool pool(threads);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const size_t per = n / static_cast<size_t>(threads);
  int64_t sink = 0;
  for (auto _ : st) {
    pool.run(threads, [&](int64_t item, int) {
      const uint8_t* p = buf.data() + static_cast<size_t>(item) * per;
      const int64_t r = avx512 ? read_avx512(p, per) : read_avx2(p, per);
      if (r == 42) sink += 1;  // keeps the loop
    });
  }
  benchmark::DoNotOptimize(sink);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n));
}

// ---- fma ceiling -----------------------------------------------------------------------------

// 12 independent chains, more than the fma latency (4) times the pipes (2) needs; 96 fma a loop.
__attribute__((target("avx512f"))) float fma_chains(int64_t loops) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t l = 0; l < loops; ++l)
    for (int r = 0; r < 8; ++r)
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  float s = 0.0f;
  for (int i = 0; i < 12; ++i) s += _mm512_reduce_add_ps(a[i]);
  return s;
}

void BM_Fma(benchmark::State& st, int threads) {
  if (!__builtin_cpu_supports("avx512f")) {
    st.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  constexpr int64_t kLoops = 1 << 20;  // 96 Mi fma a thread a call
  cpu::WorkerPool pool(threads);
  std::vector<float> sinks(static_cast<size_t>(threads));  // one a worker: keeps the chains
  for (auto _ : st) pool.run(threads, [&](int64_t, int w) { sinks[static_cast<size_t>(w)] += fma_chains(kLoops); });
  benchmark::DoNotOptimize(sinks.data());
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations()) * threads * kLoops * 96);
}

// ---- weights ---------------------------------------------------------------------------------

uint64_t splitmix(uint64_t& z) {
  uint64_t r = (z += 0x9E3779B97F4A7C15ull);
  r = (r ^ (r >> 30)) * 0xBF58476D1CE4E5B9ull;
  r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
  return r ^ (r >> 31);
}

// Random bytes in every block; fp16 / bf16 scale fields (and F32 values) then made small and
// finite, so every code path sees ordinary numbers.
void fill_weights(GgmlType t, uint8_t* w, size_t bytes, uint64_t seed) {
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t r = splitmix(seed);
    std::memcpy(w + i, &r, 8);
  }
  auto small = [&] { return static_cast<float>(static_cast<int>(splitmix(seed) % 2001) - 1000) * 5e-5f; };
  std::vector<int> f16;  // byte offsets of fp16 fields inside a block
  size_t bs = static_cast<size_t>(npullm::ggml_type_traits(t).type_size);
  switch (t) {
    case GgmlType::F32:
      for (size_t i = 0; i + 4 <= bytes; i += 4) {
        const float f = small();
        std::memcpy(w + i, &f, 4);
      }
      return;
    case GgmlType::F16: case GgmlType::BF16: f16 = {0}; bs = 2; break;
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL: f16 = {0}; break;
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: f16 = {0, 2}; break;
    case GgmlType::Q6_K: f16 = {208}; break;
    case GgmlType::Q3_K: f16 = {108}; break;
    case GgmlType::Q2_K: f16 = {80, 82}; break;
    case GgmlType::MXFP4:  // scale bytes 120..123 (2^-8 .. 2^-5): weights below 0.4 (golden gpt-oss: 123, 124)
      for (size_t off = 0; off + bs <= bytes; off += bs) w[off] = static_cast<uint8_t>(120 + splitmix(seed) % 4);
      return;
    default: break;
  }
  for (size_t off = 0; off + bs <= bytes; off += bs)
    for (int f : f16) {
      const uint16_t h = t == GgmlType::BF16 ? npullm::fp32_to_bf16(small()) : npullm::fp32_to_fp16(small());
      std::memcpy(w + off + f, &h, 2);
    }
}

// One arena for every decode benchmark: 1 GiB, far more than the last-level cache, holding as
// many copies of the matrix as fit; the benchmark uses them in turn so each call streams from
// memory.
constexpr size_t kArenaBytes = size_t{1} << 30;

uint8_t* arena() {
  static Buffer a = alloc(kArenaBytes);
  return a.data();
}

struct Problem {
  GgmlType type;
  npullm::WeightLayout layout = npullm::WeightLayout::Rows;
  int64_t M, K, N;
  size_t matrix_bytes, stride;  // a copy's size, and the distance between copies (64-aligned)
  Buffer own;                   // prefill: one copy of its own
  uint8_t* base = nullptr;
  size_t n_copies = 1;
  std::vector<float> x, out;
  std::vector<std::vector<float>> work;  // one per worker
  const uint8_t* copy(size_t i) const { return base + i * stride; }
};

std::unique_ptr<Problem> make_problem(GgmlType t, int64_t M, int64_t K, int64_t N, int threads, bool use_arena,
                                      npullm::WeightLayout layout = npullm::WeightLayout::Rows) {
  auto p = std::make_unique<Problem>();
  p->type = t, p->M = M, p->K = K, p->N = N, p->layout = layout;
  p->matrix_bytes = npullm::weight_bytes(t, N, K, layout);
  p->stride = (p->matrix_bytes + 63) / 64 * 64;
  if (use_arena) {
    p->base = arena();
    p->n_copies = kArenaBytes / p->stride;
  } else {
    p->own = alloc(p->stride);
    p->base = p->own.data();
  }
  if (layout == npullm::WeightLayout::Rows) {
    fill_weights(t, p->base, p->n_copies * p->stride, 1234);
  } else {  // one matrix made as rows, packed, and copied
    const size_t rows_bytes = npullm::ggml_row_bytes(t, K) * static_cast<size_t>(N);
    Buffer rows = alloc(rows_bytes);
    fill_weights(t, rows.data(), rows_bytes, 1234);
    npullm::pack_panels16(t, rows.data(), N, K, p->base, 0, (N + 15) / 16);
    for (size_t i = 1; i < p->n_copies; ++i) std::memcpy(p->base + i * p->stride, p->base, p->matrix_bytes);
  }
  uint64_t seed = 7;
  p->x.resize(static_cast<size_t>(M * K));
  for (float& f : p->x) f = static_cast<float>(static_cast<int>(splitmix(seed) % 2001) - 1000) * 1e-3f;
  p->out.assign(static_cast<size_t>(M * N), 0.0f);
  p->work.assign(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(cpu::matmul_work_floats(K))));
  return p;
}

// One matmul split as the CPU device splits it: threads * 4 chunks of N, multiples of 16 rows,
// item k running chunk WorkerPool::in_step_range(k, chunks).
void run_matmul(cpu::WorkerPool& pool, Problem& p, const uint8_t* W, const void* xq = nullptr) {
  const int64_t grain = 16;
  const int64_t chunks = std::min<int64_t>((p.N + grain - 1) / grain, pool.threads() * 4);
  const int64_t per = (p.N + chunks - 1) / chunks;
  const int64_t step = (per + grain - 1) / grain * grain;
  pool.run(chunks, [&](int64_t k, int worker) {
    const int64_t c = pool.in_step_range(k, chunks);
    const int64_t b = std::min(p.N, c * step), e = std::min(p.N, b + step);
    if (b < e)
      cpu::matmul(p.x.data(), p.M, p.K, W, p.type, nullptr, nullptr, p.out.data(), p.N, b, e,
                  p.work[static_cast<size_t>(worker)].data(), xq, p.layout);
  });
}

// prequantize: x quantised once up front (outside the timed loop), as the CPU device does for a
// stage, instead of by each chunk's call (Verify/: at M = 8 that is 8 rows again per chunk).
void BM_Decode(benchmark::State& st, GgmlType t, int64_t K, int64_t N, int threads, npullm::WeightLayout layout,
               int64_t M, bool prequantize) {
  auto p = make_problem(t, M, K, N, threads, /*use_arena=*/true, layout);
  const int64_t xq_bytes = prequantize ? cpu::prequantized_x_bytes(t, M, K) : 0;
  Buffer xq = alloc(static_cast<size_t>(std::max<int64_t>(xq_bytes, 64)));
  if (xq_bytes > 0) cpu::prequantize_x(t, p->x.data(), M, K, xq.data(), 0, M);
  cpu::WorkerPool pool(threads);
  size_t next = 0;
  for (auto _ : st) {
    run_matmul(pool, *p, p->copy(next), xq_bytes > 0 ? xq.data() : nullptr);
    next = (next + 1) % p->n_copies;
  }
  benchmark::DoNotOptimize(p->out.data());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(p->matrix_bytes));
}

// The same matmul on one small Panels16 matrix read again and again, so that it stays in L2: the
// kernel's own rate, without memory. Where DecodePanels (from memory) is close to this, the kernel's
// arithmetic, not the memory, bounds decode.
void BM_DecodeWarm(benchmark::State& st, GgmlType t, int64_t K, int64_t N, int64_t M) {
  auto p = make_problem(t, M, K, N, 1, /*use_arena=*/false, npullm::WeightLayout::Panels16);
  cpu::WorkerPool pool(1);
  for (auto _ : st) run_matmul(pool, *p, p->copy(0));
  benchmark::DoNotOptimize(p->out.data());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(p->matrix_bytes));
}

void BM_Prefill(benchmark::State& st, GgmlType t, int64_t M, int64_t K, int64_t N, int threads) {
  auto p = make_problem(t, M, K, N, threads, /*use_arena=*/false);
  cpu::WorkerPool pool(threads);
  for (auto _ : st) run_matmul(pool, *p, p->copy(0));
  benchmark::DoNotOptimize(p->out.data());
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M) * double(N) * double(K) * double(st.iterations()),
                                             benchmark::Counter::kIsRate);
}

// One stage of the CPU device with no work in it: wake the pool, hand out 4 items per thread,
// wait for all. The time per iteration is the synchronisation a stage costs.
void BM_PoolStage(benchmark::State& st, int threads) {
  cpu::WorkerPool pool(threads);
  std::vector<int64_t> done(static_cast<size_t>(threads) * 16, 0);  // one cache line per worker
  for (auto _ : st) pool.run(4 * threads, [&](int64_t, int w) { done[static_cast<size_t>(w) * 16]++; });
  benchmark::DoNotOptimize(done.data());
}

// The prefill matmul on a forced code path (e.g. "avx512" = VNNI against "amx"), with x
// quantised once up front as the CPU device does for a stage (outside the timed loop), so paths
// compare on the same shapes in one run. The previously active path is restored afterwards.
void BM_PrefillIsa(benchmark::State& st, std::string isa, GgmlType t, int64_t M, int64_t K, int64_t N, int threads) {
  const std::string before = cpu::kernel_isa();
  if (!cpu::kernel_force_isa(isa.c_str())) {
    st.SkipWithError(("this CPU or build has no " + isa + " path").c_str());
    return;
  }
  auto p = make_problem(t, M, K, N, threads, /*use_arena=*/false);
  const int64_t xq_bytes = cpu::prequantized_x_bytes(t, M, K);
  Buffer xq = alloc(static_cast<size_t>(std::max<int64_t>(xq_bytes, 64)));
  if (xq_bytes > 0) cpu::prequantize_x(t, p->x.data(), M, K, xq.data(), 0, M);
  cpu::WorkerPool pool(threads);
  const int64_t grain = 16;
  const int64_t chunks = std::min<int64_t>((N + grain - 1) / grain, pool.threads() * 4);
  const int64_t per = (N + chunks - 1) / chunks;
  const int64_t step = (per + grain - 1) / grain * grain;
  for (auto _ : st) {
    pool.run(chunks, [&](int64_t c, int worker) {
      const int64_t b = std::min(N, c * step), e = std::min(N, b + step);
      if (b < e)
        cpu::matmul(p->x.data(), M, K, p->copy(0), t, nullptr, nullptr, p->out.data(), N, b, e,
                    p->work[static_cast<size_t>(worker)].data(), xq_bytes > 0 ? xq.data() : nullptr);
    });
  }
  benchmark::DoNotOptimize(p->out.data());
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M) * double(N) * double(K) * double(st.iterations()),
                                             benchmark::Counter::kIsRate);
  cpu::kernel_force_isa(before.c_str());
}

// One decode token's attention over C keys with TinyLlama's heads (32 query heads sharing 4 K/V
// heads of 64), K/V of type kv (F16 or Q8_0), every key visible, on one thread: what one layer's
// Attention task costs at that context length (keys/s counts query-head x key pairs). Warm: the
// same K/V every call, in cache. Cold: as in a decode step, where a layer's K/V was last read a
// whole token (all the weights) ago: a different copy of K/V each call, from 512 MiB. Head-major:
// the same buffers read as [Hkv, C, hd], each group one call over its own contiguous rows (Hkv = 1
// there); the values differ from the row-major run's, the work does not.
struct AttnShape {
  int64_t H, Hkv, hd;
};
constexpr AttnShape kTinyLlamaHeads{32, 4, 64};
constexpr AttnShape kQwen25Heads{14, 2, 64};  // Qwen2.5-0.5B: two groups of 7

void BM_AttentionDecodeShape(benchmark::State& st, AttnShape shape, int64_t C, bool cold, bool head_major, GgmlType kv) {
  const int64_t H = shape.H, Hkv = shape.Hkv, hd = shape.hd;
  std::vector<float> q(static_cast<size_t>(H * hd)), out(q.size()), work(static_cast<size_t>(cpu::attention_work_floats(C, hd)));
  std::vector<float> kf(static_cast<size_t>(C * Hkv * hd));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
  for (size_t i = 0; i < kf.size(); ++i) kf[i] = static_cast<float>((i * 104729) % 89) / 89.0f - 0.5f;
  // K and V of copy c at 2c and 2c + 1 (the same values for both, as TinyLlama's shapes are).
  const size_t bytes = static_cast<size_t>(ggml_row_bytes(kv, static_cast<int64_t>(kf.size())));
  const size_t copies = cold ? std::max<size_t>(2, (size_t{512} << 20) / (2 * bytes)) : 1;
  npullm::PageBuffer buf(2 * bytes * copies, true);
  quantize_row(kv, kf.data(), buf.data(), static_cast<int64_t>(kf.size()));
  for (size_t c = 1; c < 2 * copies; ++c) std::memcpy(buf.data() + c * bytes, buf.data(), bytes);
  std::vector<float> mask(static_cast<size_t>(C), 0.0f);
  size_t c = 0;
  for (auto _ : st) {
    const uint8_t* k = buf.data() + 2 * c * bytes;
    if (head_major) {
      const int64_t group = H / Hkv;
      const size_t head = bytes / static_cast<size_t>(Hkv);  // one K/V head's C rows
      for (int64_t g = 0; g < Hkv; ++g)
        cpu::attention(q.data() + g * group * hd, k + g * head, kv, k + bytes + g * head, kv, mask.data(),
                       out.data() + g * group * hd, group, 1, hd, C, 0, 0.125f, 0, group, work.data());
    } else {
      cpu::attention(q.data(), k, kv, k + bytes, kv, mask.data(), out.data(), H, Hkv, hd, C, 0, 0.125f, 0,
                     H, work.data());
    }
    c = (c + 1) % copies;
  }
  benchmark::DoNotOptimize(out.data());
  st.counters["keys/s"] = benchmark::Counter(double(H) * double(C) * double(st.iterations()), benchmark::Counter::kIsRate);
  st.SetBytesProcessed(static_cast<int64_t>(2 * bytes) * st.iterations());
}
// One decode token's attention over C keys (Qwen2.5-0.5B's heads, every key visible, from memory
// as in decode) on a pool of `threads`, the way the CPU device shares it out: split by heads (each
// thread a run of heads sharing a K/V head, over all keys) or by keys (cpu::attention_part: each
// thread a contiguous range of blocks of 256 keys for every head, then cpu::attention_merge).
// Warm (`cold` false): one copy of K/V read every call, in cache where it fits (2,048 keys of
// Qwen2.5's heads are 1 MiB: half an L2 each on two threads): the arithmetic without the memory.
void BM_AttentionPool(benchmark::State& st, AttnShape shape, int64_t C, GgmlType kv, int threads, bool by_keys, bool cold) {
  const int64_t H = shape.H, Hkv = shape.Hkv, hd = shape.hd;
  cpu::WorkerPool pool(threads);
  std::vector<float> q(static_cast<size_t>(H * hd)), out(q.size());
  std::vector<std::vector<float>> work(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(cpu::attention_work_floats(C, hd))));
  const int64_t runs = cpu::attention_runs(H, Hkv), pf = cpu::attention_partial_floats(C, hd);
  std::vector<float> partials(static_cast<size_t>(runs * pf));
  std::vector<float> kf(static_cast<size_t>(C * Hkv * hd));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
  for (size_t i = 0; i < kf.size(); ++i) kf[i] = static_cast<float>((i * 104729) % 89) / 89.0f - 0.5f;
  const size_t bytes = static_cast<size_t>(ggml_row_bytes(kv, static_cast<int64_t>(kf.size())));
  const size_t copies = cold ? std::max<size_t>(2, (size_t{512} << 20) / (2 * bytes)) : 1;
  npullm::PageBuffer buf(2 * bytes * copies, true);
  quantize_row(kv, kf.data(), buf.data(), static_cast<int64_t>(kf.size()));
  for (size_t c = 1; c < 2 * copies; ++c) std::memcpy(buf.data() + c * bytes, buf.data(), bytes);
  const int64_t nb = cpu::attention_key_blocks(nullptr, C, 0);
  const int64_t parts = by_keys ? threads * 2 : 0;
  size_t c = 0;
  for (auto _ : st) {
    const uint8_t* k = buf.data() + 2 * c * bytes;
    if (by_keys) {
      const cpu::AttentionQuery a{q.data(), k, kv, k + bytes, kv, nullptr, H, Hkv, hd, C, 0, 0.125f};
      pool.run(parts, [&](int64_t item, int worker) {
        const int64_t j = pool.in_step_range(item, parts);
        cpu::attention_part(a, 0, runs, j * nb / parts, (j + 1) * nb / parts, work[static_cast<size_t>(worker)].data(), partials.data());
      });
      pool.run(runs, [&](int64_t item, int) { cpu::attention_merge(a, nb, item, item + 1, partials.data(), out.data()); });
    } else {
      const int64_t group = H / Hkv;
      pool.run(Hkv, [&](int64_t g, int worker) {
        cpu::attention(q.data(), k, kv, k + bytes, kv, nullptr, out.data(), H, Hkv, hd, C, 0, 0.125f, g * group, (g + 1) * group,
                       work[static_cast<size_t>(worker)].data());
      });
    }
    c = (c + 1) % copies;
  }
  benchmark::DoNotOptimize(out.data());
  st.SetBytesProcessed(static_cast<int64_t>(2 * bytes) * st.iterations());
}

void BM_AttentionDecode(benchmark::State& st, int64_t C, bool cold, bool head_major, GgmlType kv) {
  BM_AttentionDecodeShape(st, kTinyLlamaHeads, C, cold, head_major, kv);
}

}  // namespace

int main(int argc, char** argv) {
  const GgmlType decode_types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                   GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                   GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q3_K,
                                   GgmlType::IQ4_NL, GgmlType::MXFP4};
  const GgmlType prefill_types[] = {GgmlType::F16,  GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0,
                                    GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                                    GgmlType::MXFP4};
  // TinyLlama-1.1B: ffn_up/gate (K 2048 -> N 5632), attn (2048 -> 2048), ffn_down (5632 -> 2048).
  const std::pair<int64_t, int64_t> decode_shapes[] = {{2048, 5632}, {2048, 2048}, {5632, 2048}};
  // gpt-oss-20b's expert matrices (2880 -> 2880: 90 blocks of 32 per row, 11 octets and 2), for the
  // 4-bit types of 32-element blocks: MXFP4 (its experts' type) against Q4_0 and IQ4_NL.
  const GgmlType expert_types[] = {GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::MXFP4};
  for (int64_t C : {32, 256, 1024})
    benchmark::RegisterBenchmark(("AttentionDecode/F16/" + std::to_string(C)).c_str(), BM_AttentionDecode, C, false, false, GgmlType::F16)
        ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("AttentionDecodeCold/F16/1024", BM_AttentionDecode, 1024, true, false, GgmlType::F16)->Unit(benchmark::kMicrosecond);
  for (bool cold : {false, true})
    benchmark::RegisterBenchmark(cold ? "AttentionDecodeCold/Q8_0/1024" : "AttentionDecode/Q8_0/1024", BM_AttentionDecode, 1024, cold,
                                 false, GgmlType::Q8_0)
        ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("AttentionDecodeHeadMajor/F16/1024", BM_AttentionDecode, 1024, false, true, GgmlType::F16)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("AttentionDecodeColdHeadMajor/F16/1024", BM_AttentionDecode, 1024, true, true, GgmlType::F16)
      ->Unit(benchmark::kMicrosecond);
  for (GgmlType kv : {GgmlType::F16, GgmlType::Q8_0}) {
    const std::string type(ggml_type_name(kv));
    benchmark::RegisterBenchmark(("AttentionDecodeCold/Qwen25/" + type + "/30000").c_str(), BM_AttentionDecodeShape, kQwen25Heads,
                                 30000, true, false, kv)
        ->Unit(benchmark::kMicrosecond);
    for (bool by_keys : {false, true})
      benchmark::RegisterBenchmark(("AttentionBy" + std::string(by_keys ? "Keys" : "Heads") + "/Qwen25/" + type + "/30000/2").c_str(),
                                   BM_AttentionPool, kQwen25Heads, 30000, kv, 2, by_keys, true)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    for (bool cold : {false, true})
      benchmark::RegisterBenchmark(("AttentionByKeys" + std::string(cold ? "Cold" : "Warm") + "/Qwen25/" + type + "/2048/2").c_str(),
                                   BM_AttentionPool, kQwen25Heads, 2048, kv, 2, true, cold)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  }
  // TinyLlama's four groups of 8 at 1,024 keys (issue 48's 95 % line): the split over keys against
  // the split by heads (two groups a thread), from memory.
  for (bool by_keys : {false, true})
    benchmark::RegisterBenchmark(("AttentionBy" + std::string(by_keys ? "Keys" : "Heads") + "/TinyLlama/F16/1024/2").c_str(),
                                 BM_AttentionPool, kTinyLlamaHeads, 1024, GgmlType::F16, 2, by_keys, true)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("Read/" + std::to_string(threads)).c_str(), BM_Read, threads)->UseRealTime();
    benchmark::RegisterBenchmark(("Fma/" + std::to_string(threads)).c_str(), BM_Fma, threads)->UseRealTime();
    benchmark::RegisterBenchmark(("PoolStage/" + std::to_string(threads)).c_str(), BM_PoolStage, threads)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    for (GgmlType t : decode_types)
      for (auto [K, N] : decode_shapes) {
        const std::string name = "Decode/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(K) + "/" +
                                 std::to_string(N) + "/" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Decode, t, K, N, threads, npullm::WeightLayout::Rows, int64_t{1}, false)->UseRealTime();
        if (cpu::matmul_reads_panels16(t, K))
          benchmark::RegisterBenchmark(("DecodePanels" + name.substr(6)).c_str(), BM_Decode, t, K, N, threads,
                                       npullm::WeightLayout::Panels16, int64_t{1}, false)
              ->UseRealTime();
      }
    // (Q6_K: the output matrix of the Q4_0 files, a verify step's logits of every row.)
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6_K})
      for (int64_t M : {1, 2, 4, 8, 16}) {
        const std::string name = "Verify/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(M) + "/2048/5632/" +
                                 std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Decode, t, int64_t{2048}, int64_t{5632}, threads, npullm::WeightLayout::Panels16,
                                     M, true)
            ->UseRealTime();
      }
    for (GgmlType t : expert_types) {
      const std::string name = "Decode/" + std::string(npullm::ggml_type_name(t)) + "/2880/2880/" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), BM_Decode, t, int64_t{2880}, int64_t{2880}, threads, npullm::WeightLayout::Rows,
                                   int64_t{1}, false)
          ->UseRealTime();
      if (cpu::matmul_reads_panels16(t, 2880))
        benchmark::RegisterBenchmark(("DecodePanels" + name.substr(6)).c_str(), BM_Decode, t, int64_t{2880}, int64_t{2880},
                                     threads, npullm::WeightLayout::Panels16, int64_t{1}, false)
            ->UseRealTime();
      for (int64_t M : {64, 512}) {
        const std::string pname = "Prefill/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(M) +
                                  "/2880/2880/" + std::to_string(threads);
        benchmark::RegisterBenchmark(pname.c_str(), BM_Prefill, t, M, int64_t{2880}, int64_t{2880}, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
    // 2048 x 256: 280 KB (Q4_0) to 590 KB (Q8_0), resident in a 1 MB L2; 896 x 512 (Qwen2.5-0.5B's
    // width: 28 blocks of 32 per row, not a whole number of 8-block octets) about as much.
    const std::pair<int64_t, int64_t> warm_shapes[] = {{2048, 256}, {896, 512}};
    if (threads == 1)
      for (auto [K, N] : warm_shapes)
        for (GgmlType t : decode_types)
          if (cpu::matmul_reads_panels16(t, K))
            benchmark::RegisterBenchmark(("DecodeWarm/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(K) + "/" +
                                          std::to_string(N) + "/1").c_str(),
                                         BM_DecodeWarm, t, K, N, int64_t{1})
                ->UseRealTime();
    // VerifyWarm/<type>/M/2048/N/1: a verify step's M tokens against an L2-resident matrix (N 256
    // and 768: their difference leaves out the per-call quantisation of x), the gemv kernel's
    // arithmetic at M rows without the memory (Verify/ is the same from memory).
    if (threads == 1)
      for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0})
        for (int64_t M : {1, 2, 4, 8, 16})
          for (int64_t N : {256, 768})
            benchmark::RegisterBenchmark(("VerifyWarm/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(M) +
                                          "/2048/" + std::to_string(N) + "/1").c_str(),
                                         BM_DecodeWarm, t, int64_t{2048}, N, M)
                ->UseRealTime();
    for (GgmlType t : prefill_types)
      for (int64_t M : {64, 128, 512}) {
        const std::string name = "Prefill/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(M) +
                                 "/2048/2048/" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Prefill, t, M, int64_t{2048}, int64_t{2048}, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
  }
  // PrefillIsa/<isa>/<type>/M/K/N/<threads>: the AVX-512 VNNI and AMX paths side by side
  // (TinyLlama's attention and ffn_up/gate shapes, and a 64-token prefill chunk).
  const GgmlType isa_types[] = {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K};
  for (int threads : {1, 2})
    for (GgmlType t : isa_types)
      for (auto [M, N] : {std::pair<int64_t, int64_t>{512, 2048}, {512, 5632}, {64, 2048}})
        for (const char* isa : {"avx512", "amx"}) {
          const std::string name = "PrefillIsa/" + std::string(isa) + "/" + std::string(npullm::ggml_type_name(t)) + "/" +
                                   std::to_string(M) + "/2048/" + std::to_string(N) + "/" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_PrefillIsa, std::string(isa), t, M, int64_t{2048}, N, threads)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
