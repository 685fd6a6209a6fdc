// Microbenchmarks of the CPU matmul kernels (Google Benchmark).
//
//   npullm_bench_kernels --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Read/<threads>              bandwidth of a plain vector read loop over 1 GiB: the roofline the
//                             decode figures are compared with (bytes_per_second).
// Decode/<type>/K/N/<threads> one token (M = 1) through an N x K weight matrix; bytes_per_second
//                             counts the weight bytes streamed. The matrix is one of several
//                             copies (together >= 512 MiB) used in turn, so every call reads from
//                             memory, not from cache, as in a real model.
// Prefill/<type>/M/K/N/<threads>  M tokens at once; FLOP/s = 2 M N K / time.
// Matmuls are split over N in chunks like the CPU device does (threads * 4 chunks, multiples of
// 16 rows) and run on its worker pool. The machine is often shared: quote medians.
#include <benchmark/benchmark.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/cpu/kernels.h"
#include "device/cpu/worker_pool.h"
#include "formats/ggml_types.h"

namespace {

using npullm::GgmlType;
namespace cpu = npullm::cpu;

// ---- read roofline ---------------------------------------------------------------------------

__attribute__((target("avx512f"))) int64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
  }
  alignas(64) int64_t out[8];
  _mm512_store_si512(out, _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d)));
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

struct Aligned {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], Aligned>;

Buffer alloc(size_t n) {
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
  return Buffer(p);
}

void BM_Read(benchmark::State& st, int threads) {
  const size_t n = size_t{1} << 30;
  Buffer buf = alloc(n);
  for (size_t i = 0; i < n; i += 4096) std::memset(buf.get() + i, static_cast<int>(i >> 12), 4096);
  cpu::WorkerPool pool(threads);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const size_t per = n / static_cast<size_t>(threads);
  int64_t sink = 0;
  for (auto _ : st) {
    pool.run(threads, [&](int64_t item, int) {
      const uint8_t* p = buf.get() + static_cast<size_t>(item) * per;
      const int64_t r = avx512 ? read_avx512(p, per) : read_avx2(p, per);
      if (r == 42) sink += 1;  // keeps the loop
    });
  }
  benchmark::DoNotOptimize(sink);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(n));
}

// ---- weights ---------------------------------------------------------------------------------

// Random quant bytes with small random fp16 scales (so every code path sees ordinary numbers).
void fill_weights(GgmlType t, uint8_t* w, size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    const uint32_t r = rng();
    std::memcpy(w + i, &r, 4);
  }
  std::vector<int> f16;  // byte offsets of f16 fields inside a block
  int64_t bs = npullm::ggml_type_traits(t).type_size;
  switch (t) {
    case GgmlType::F32: {
      std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
      for (size_t i = 0; i + 4 <= bytes; i += 4) {
        const float f = ud(rng);
        std::memcpy(w + i, &f, 4);
      }
      return;
    }
    case GgmlType::F16: case GgmlType::BF16: f16 = {0}; bs = 2; break;
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL: f16 = {0}; break;
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: f16 = {0, 2}; break;
    case GgmlType::Q6_K: f16 = {208}; break;
    case GgmlType::Q3_K: f16 = {108}; break;
    case GgmlType::Q2_K: f16 = {80, 82}; break;
    default: break;
  }
  std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
  for (size_t off = 0; off + static_cast<size_t>(bs) <= bytes; off += static_cast<size_t>(bs))
    for (int f : f16) {
      const uint16_t h = t == GgmlType::BF16 ? npullm::fp32_to_bf16(ud(rng)) : npullm::fp32_to_fp16(ud(rng));
      std::memcpy(w + off + f, &h, 2);
    }
}

struct Problem {
  GgmlType type;
  int64_t M, K, N;
  size_t matrix_bytes;
  std::vector<Buffer> copies;
  std::vector<float> x, out;
  std::vector<std::vector<float>> work;  // one per worker
};

std::unique_ptr<Problem> make_problem(GgmlType t, int64_t M, int64_t K, int64_t N, int threads, size_t min_total) {
  auto p = std::make_unique<Problem>();
  p->type = t, p->M = M, p->K = K, p->N = N;
  p->matrix_bytes = npullm::ggml_row_bytes(t, K) * static_cast<size_t>(N);
  const size_t n_copies = std::max<size_t>(1, (min_total + p->matrix_bytes - 1) / p->matrix_bytes);
  for (size_t c = 0; c < n_copies; ++c) {
    p->copies.push_back(alloc(p->matrix_bytes));
    fill_weights(t, p->copies.back().get(), p->matrix_bytes, static_cast<uint32_t>(c + 1));
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  p->x.resize(static_cast<size_t>(M * K));
  for (float& f : p->x) f = nd(rng);
  p->out.assign(static_cast<size_t>(M * N), 0.0f);
  p->work.assign(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(cpu::matmul_work_floats(K))));
  return p;
}

// One matmul split as the CPU device splits it: threads * 4 chunks of N, multiples of 16 rows.
void run_matmul(cpu::WorkerPool& pool, Problem& p, const uint8_t* W) {
  const int64_t grain = 16;
  const int64_t chunks = std::min<int64_t>((p.N + grain - 1) / grain, pool.threads() * 4);
  const int64_t per = (p.N + chunks - 1) / chunks;
  const int64_t step = (per + grain - 1) / grain * grain;
  pool.run(chunks, [&](int64_t c, int worker) {
    const int64_t b = std::min(p.N, c * step), e = std::min(p.N, b + step);
    if (b < e)
      cpu::matmul(p.x.data(), p.M, p.K, W, p.type, nullptr, nullptr, p.out.data(), p.N, b, e,
                  p.work[static_cast<size_t>(worker)].data());
  });
}

void BM_Decode(benchmark::State& st, GgmlType t, int64_t K, int64_t N, int threads) {
  auto p = make_problem(t, 1, K, N, threads, size_t{512} << 20);
  cpu::WorkerPool pool(threads);
  size_t next = 0;
  for (auto _ : st) {
    run_matmul(pool, *p, p->copies[next].get());
    next = (next + 1) % p->copies.size();
  }
  benchmark::DoNotOptimize(p->out.data());
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(p->matrix_bytes));
}

void BM_Prefill(benchmark::State& st, GgmlType t, int64_t M, int64_t K, int64_t N, int threads) {
  auto p = make_problem(t, M, K, N, threads, 0);
  cpu::WorkerPool pool(threads);
  for (auto _ : st) run_matmul(pool, *p, p->copies[0].get());
  benchmark::DoNotOptimize(p->out.data());
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * double(M) * double(N) * double(K) * double(st.iterations()),
                                             benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  const GgmlType decode_types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                   GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                   GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q3_K};
  const GgmlType prefill_types[] = {GgmlType::F16,  GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0,
                                    GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  // TinyLlama-1.1B: ffn_up/gate (K 2048 -> N 5632), attn (2048 -> 2048), ffn_down (5632 -> 2048).
  const std::pair<int64_t, int64_t> decode_shapes[] = {{2048, 5632}, {2048, 2048}, {5632, 2048}};
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(("Read/" + std::to_string(threads)).c_str(), BM_Read, threads)->UseRealTime();
    for (GgmlType t : decode_types)
      for (auto [K, N] : decode_shapes) {
        const std::string name = "Decode/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(K) + "/" +
                                 std::to_string(N) + "/" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Decode, t, K, N, threads)->UseRealTime();
      }
    for (GgmlType t : prefill_types)
      for (int64_t M : {64, 128, 512}) {
        const std::string name = "Prefill/" + std::string(npullm::ggml_type_name(t)) + "/" + std::to_string(M) +
                                 "/2048/2048/" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Prefill, t, M, int64_t{2048}, int64_t{2048}, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
