// npullm bench: prompt processing (pp) and token generation (tg) speed in the manner of llama-bench,
// plus time to first token, peak RSS, K/V bytes copied per token, padding, and decode as a fraction
// of the memory roofline measured on the spot.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/bandwidth.h"
#include "cli/busy_load.h"
#include "cli/commands.h"
#include "common/error.h"
#include "blob/task.h"
#include "device/device.h"
#include "formats/gguf.h"
#include "genai/sampling/sampler.h"

namespace npullm::cli {

namespace {

struct BenchOptions {
  std::string model;
  int64_t n_prompt = 512, n_gen = 128, repetitions = 3, ttft_prompt = 32;
  int64_t parallel = 0, parallel_prompt = 32;  // --parallel N: N sequences decoding together
  // --depth D[,D2...]: tg after D tokens of context (llama-bench -d). With several depths every
  // repetition runs tg at each in turn, so that each depth's run is next in time to the others' (a
  // shared machine's memory speed moves within minutes) and their ratio is taken run by run; then
  // the depths' steps are interleaved in one run (run()), the tighter figure.
  std::vector<int64_t> depths{0};
  int busy = 0;                                // --busy N: N busy-looping processes beside the timed tests
  bool json = false;
  RuntimeOptions rt;
};

// {"MatMul": ms per token, ...} for the ops whose stages ran.
nlohmann::json stage_ms_json(const int64_t* stage_ns, int64_t tokens) {
  nlohmann::json j = nlohmann::json::object();
  for (int op = 0; op < device::Device::Counters::kOps; ++op)
    if (stage_ns[op] > 0 && tokens > 0)
      j[blob::op_name(static_cast<uint32_t>(op))] = static_cast<double>(stage_ns[op]) / 1e6 / static_cast<double>(tokens);
  return j;
}

// Adds the MatMul kinds' runs and time between two readings of the counters (a kind keeps its
// index for the device's lifetime; kinds first seen after `before` start from zero).
void add_kinds(std::vector<device::Device::Counters::MatMulKind>& sum, const std::vector<device::Device::Counters::MatMulKind>& before,
               const std::vector<device::Device::Counters::MatMulKind>& after) {
  for (size_t k = 0; k < after.size(); ++k) {
    if (k >= sum.size()) sum.push_back({after[k].label, after[k].rows, after[k].weight_bytes, 0, 0});
    sum[k].runs += after[k].runs - (k < before.size() ? before[k].runs : 0);
    sum[k].ns += after[k].ns - (k < before.size() ? before[k].ns : 0);
  }
}

// The decode steps' MatMul kinds, the most time first: time and runs a token, the weight bytes a
// run reads, and the rate that makes (what each stage reads of the roofline).
struct KindRate {
  const device::Device::Counters::MatMulKind* kind;
  double ms_per_token, runs_per_token, gbps;
};
std::vector<KindRate> kind_rates(const std::vector<device::Device::Counters::MatMulKind>& kinds, int64_t tokens) {
  std::vector<KindRate> out;
  for (const auto& k : kinds)
    if (k.runs > 0 && k.ns > 0 && tokens > 0)
      out.push_back({&k, static_cast<double>(k.ns) / 1e6 / static_cast<double>(tokens), static_cast<double>(k.runs) / static_cast<double>(tokens),
                     static_cast<double>(k.weight_bytes) * static_cast<double>(k.runs) / static_cast<double>(k.ns)});
  std::sort(out.begin(), out.end(), [](const KindRate& a, const KindRate& b) { return a.ms_per_token > b.ms_per_token; });
  return out;
}

nlohmann::json kinds_json(const std::vector<device::Device::Counters::MatMulKind>& kinds, int64_t tokens) {
  nlohmann::json j = nlohmann::json::array();
  for (const KindRate& r : kind_rates(kinds, tokens))
    j.push_back({{"weights", r.kind->label}, {"rows", r.kind->rows}, {"ms_per_token", r.ms_per_token},
                 {"runs_per_token", r.runs_per_token}, {"weight_bytes", r.kind->weight_bytes}, {"gbps", r.gbps}});
  return j;
}

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct MeanSd {
  double mean = 0, sd = 0;
};
MeanSd mean_sd(const std::vector<double>& v) {
  MeanSd m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.sd += (x - m.mean) * (x - m.mean);
  m.sd = v.size() > 1 ? std::sqrt(m.sd / static_cast<double>(v.size() - 1)) : 0.0;
  return m;
}
std::vector<double> gbps(std::vector<double> v) {
  for (double& x : v) x /= 1e9;
  return v;
}
// Resident bytes now (/proc/self/statm), and the peak so far (getrusage); 0 where unknown.
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0.0;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}
double peak_resident_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0;
}
// Decode steps a slot takes in a row in bench's interleaved depth measure (run()).
constexpr int64_t kInterleaveRun = 8;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes of weights one decoded token reads: every matrix once; of the embedding table only one row,
// unless it doubles as the output matrix; of a mixture of experts' 3-D expert tensors (and their
// biases) only the k slabs the token chose (its active bytes: attention, router, k experts, output).
double weight_bytes_per_token(const GgufFile& f, const model::HParams& hp) {
  double total = 0;
  const bool tied = f.find_tensor("output.weight") == nullptr;
  for (const GgufTensorInfo& t : f.tensors()) {
    const bool expert = hp.is_moe() && t.name.find("_exps.") != std::string::npos && !t.dims.empty() &&
                        t.dims.back() == hp.n_expert;
    if (t.name == "token_embd.weight" && !tied) total += static_cast<double>(t.n_bytes) / static_cast<double>(t.rows());
    else if (expert) total += static_cast<double>(t.n_bytes) * static_cast<double>(hp.n_expert_used) / static_cast<double>(hp.n_expert);
    else total += static_cast<double>(t.n_bytes);
  }
  return total;
}

int run(BenchOptions& o) {
  npuw::RuntimeConfig cfg = o.rt.resolve();
  // Default prefill chunk: the prompt in one run up to 128 tokens, then runs of 128. On the
  // machines measured a 512-token chunk prefills 4-6 % faster but its scratch arena is ~20 MiB
  // bigger, which is 7 % of a 0.5B model's file (bench/RESULTS.md); --prefill-chunk overrides.
  if (!o.rt.chunk_given) cfg.prefill_chunk = std::clamp<int64_t>(std::max(o.n_prompt, o.ttft_prompt), 1, 128);
  const int64_t max_depth = *std::max_element(o.depths.begin(), o.depths.end());
  if (cfg.variants.empty()) {
    // Room for the prompt and the generated tokens, in the default power-of-two steps.
    cfg.max_prompt_len = std::max({o.n_prompt, o.ttft_prompt, max_depth});
    cfg.min_response_len = o.n_gen + 1 + (o.parallel > 0 ? o.parallel_prompt : 0);
  }
  if (o.parallel > 0) cfg.parallel = o.parallel;
  // Several depths are also measured interleaved, a slot each (below); a run of one step has none timed.
  const bool interleaved = o.depths.size() > 1 && o.n_gen >= 2;
  if (interleaved) cfg.parallel = std::max<int64_t>(cfg.parallel, static_cast<int64_t>(o.depths.size()));
  npuw::LlmRuntime rt(o.model, cfg);
  // Loaded (and compiled) on a quiet machine; the timed tests run beside the busy processes.
  std::optional<BusyLoad> busy;
  if (o.busy > 0) busy.emplace(o.busy);
  const int64_t V = rt.n_vocab();
  std::mt19937 rng(1234);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    return ids;
  };
  if (o.n_prompt + 1 > rt.capacity() || max_depth + o.n_gen + 1 > rt.capacity())
    fail("the K/V capacity {} is too small for -p {} / --depth {} + -n {}", rt.capacity(), o.n_prompt, max_depth, o.n_gen);

  // Warm-up (as llama-bench does): one untimed run of the prompt and a few decode steps, so page
  // faults, first touches of scratch and cold caches are not measured.
  rt.reset();
  if (o.n_prompt > 0) rt.prefill(random_ids(o.n_prompt));
  rt.reset();
  for (int i = 0; i < 4; ++i) rt.decode(static_cast<int32_t>(rng() % static_cast<uint32_t>(V)));

  std::vector<double> pp, ttft;
  const size_t n_depths = o.depths.size();
  std::vector<std::vector<double>> tg_at(n_depths);  // tg runs at each depth, in repetition order
  std::vector<double>& tg = tg_at[0];
  double stages_per_token = 0, sync_per_token = 0;  // of the last tg run
  int64_t solo_periods = 0;  // of all tg runs: the worker pool ran alone after a thread was held up
  // Of all tg runs: stage wall time by op code, and the tokens and seconds they cover.
  int64_t stage_ns[device::Device::Counters::kOps] = {};
  std::vector<device::Device::Counters::MatMulKind> tg_kinds;  // of all tg runs: runs and time of each kind
  double tg_seconds = 0;
  int64_t tg_tokens = 0;
  int64_t tg_expert_bytes = 0, tg_expert_slabs = 0;  // of all tg runs: expert slabs a mixture of experts read
  const npuw::RuntimeStats s0 = rt.stats();
  const double bytes_per_token = weight_bytes_per_token(rt.gguf(), rt.hparams());
  // The roofline: read bandwidth on a working set the size of what a decode step reads (cache speed
  // for a model that fits in the caches, DRAM speed for one that does not), on the pages the weights
  // are on (huge unless --no-huge-pages). A shared machine's memory speed moves with its neighbours'
  // traffic by tens of percent within minutes, so on a quiet run it is measured before the first tg
  // run and after each, and each run is judged against the mean of the two around it. With --busy the
  // busy processes would slow the read loop itself: then it is measured once, after them.
  std::optional<ReadBandwidthProbe> probe;
  std::vector<double> bandwidths, roofline_fractions;
  // The probe's working set stays resident through the timed runs; the peak RSS reported is the
  // runtime's: the peak before it, or the peak after it less what it holds.
  const double peak_before_probe = peak_resident_bytes();
  double probe_resident = 0;
  if (o.n_gen > 0 && o.busy == 0) {
    const double r0 = resident_bytes();
    probe.emplace(rt.device_threads(), static_cast<size_t>(bytes_per_token), rt.config().huge_pages);
    probe_resident = std::max(0.0, resident_bytes() - r0);
    bandwidths.push_back(probe->measure());
  }
  for (int64_t r = 0; r < o.repetitions; ++r) {
    if (o.n_prompt > 0) {
      rt.reset();
      const auto ids = random_ids(o.n_prompt);
      const auto t0 = Clock::now();
      rt.prefill(ids);
      pp.push_back(static_cast<double>(o.n_prompt) / seconds(t0, Clock::now()));
    }
    for (size_t di = 0; di < n_depths && o.n_gen > 0; ++di) {
      const int64_t depth = o.depths[di];
      rt.reset();
      if (depth > 0) rt.prefill(random_ids(depth));  // the context the timed tokens attend (untimed)
      int32_t id = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
      const auto c0 = rt.device_counters();
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < o.n_gen; ++i) {
        auto logits = rt.decode(id);
        id = genai::argmax(logits);
      }
      const double took = seconds(t0, Clock::now());
      tg_at[di].push_back(static_cast<double>(o.n_gen) / took);
      if (probe) {
        bandwidths.push_back(probe->measure());
        // (the roofline counts the weights only: judged at the first depth given)
        const double around = (bandwidths[bandwidths.size() - 2] + bandwidths.back()) / 2;
        if (around > 0 && di == 0) roofline_fractions.push_back(tg.back() * bytes_per_token / around);
      }
      const auto c1 = rt.device_counters();
      for (int op = 0; op < device::Device::Counters::kOps; ++op) stage_ns[op] += c1.stage_ns[op] - c0.stage_ns[op];
      add_kinds(tg_kinds, c0.matmul_kinds, c1.matmul_kinds);
      tg_expert_bytes += c1.expert_bytes - c0.expert_bytes;
      tg_expert_slabs += c1.expert_slabs - c0.expert_slabs;
      tg_seconds += took;
      tg_tokens += o.n_gen;
      stages_per_token = static_cast<double>(c1.stages - c0.stages) / static_cast<double>(o.n_gen);
      sync_per_token = static_cast<double>(c1.parallel_stages - c0.parallel_stages) / static_cast<double>(o.n_gen);
      solo_periods += c1.solo_periods - c0.solo_periods;
    }
    if (o.ttft_prompt > 0) {
      rt.reset();
      const auto ids = random_ids(o.ttft_prompt);
      const auto t0 = Clock::now();
      auto logits = rt.prefill(ids);
      volatile int32_t first = genai::argmax(logits);
      (void)first;
      ttft.push_back(seconds(t0, Clock::now()) * 1000.0);
    }
  }
  // Each depth against the first: per repetition the ratio of its two runs (back to back), and
  // the median of those.
  std::vector<std::vector<double>> pair_ratios(n_depths);
  std::vector<double> depth_ratio(n_depths, 1.0);
  for (size_t di = 1; di < n_depths && !tg.empty(); ++di) {
    for (size_t k = 0; k < tg.size(); ++k) pair_ratios[di].push_back(tg_at[di][k] / tg[k]);
    depth_ratio[di] = median(pair_ratios[di]);
  }
  // Each depth against the first, interleaved: a slot per depth, each prefilled with its context,
  // then runs of kInterleaveRun single decode steps that take the slots in turn (~0.2 s a run), so
  // every depth's steps see the machine as the others' do within a second (a neighbour's memory
  // traffic moved the back-to-back pairs above by up to 15 %, bench/RESULTS.md). A slot's steps
  // follow one another as in a generation (a step also reads K/V the one before it left in the
  // caches); the first of each run, which follows the other slot's, is not timed. The ratio is of the medians
  // of the steps' times; every slot steps through decode_batch with one token.
  std::vector<std::vector<double>> step_s(n_depths);
  std::vector<double> step_ratio(n_depths, 1.0);
  // Of the timed steps at each depth: stage wall time by op code (where the growth with depth goes).
  std::vector<std::array<int64_t, device::Device::Counters::kOps>> step_stage_ns(n_depths);
  if (interleaved) {
    for (int64_t r = 0; r < o.repetitions; ++r) {
      std::vector<npuw::SlotToken> next(n_depths);
      for (size_t di = 0; di < n_depths; ++di) {
        const auto slot = static_cast<int64_t>(di);
        rt.reset(slot);
        if (o.depths[di] > 0) rt.prefill_slot(slot, random_ids(o.depths[di]));
        next[di] = {slot, static_cast<int32_t>(rng() % static_cast<uint32_t>(V))};
      }
      for (int64_t i = 0; i < o.n_gen; i += kInterleaveRun)
        for (size_t di = 0; di < n_depths; ++di)
          for (int64_t k = 0; k < kInterleaveRun && i + k < o.n_gen; ++k) {
            const auto c0 = rt.device_counters();
            const auto t0 = Clock::now();
            auto logits = rt.decode_batch(std::span<const npuw::SlotToken>(&next[di], 1));
            if (k > 0) {
              step_s[di].push_back(seconds(t0, Clock::now()));
              const auto c1 = rt.device_counters();
              for (int op = 0; op < device::Device::Counters::kOps; ++op) step_stage_ns[di][op] += c1.stage_ns[op] - c0.stage_ns[op];
            }
            next[di].id = genai::argmax(logits);
          }
    }
    for (size_t di = 1; di < n_depths; ++di) step_ratio[di] = median(step_s[0]) / median(step_s[di]);
  }
  // Parallel decode: every slot gets its own random prompt, then n_gen steps decode all of them
  // together (one batched blob run per step), as llama-batched-bench's S_TG measures.
  std::vector<double> tg_par;
  if (o.parallel > 0 && o.n_gen > 0) {
    const int64_t n = o.parallel;
    if (o.parallel_prompt + o.n_gen + 1 > rt.capacity())
      fail("the K/V capacity {} is too small for --parallel-prompt {} + -n {}", rt.capacity(), o.parallel_prompt, o.n_gen);
    for (int64_t r = 0; r < o.repetitions + 1; ++r) {  // the first run is a warm-up
      std::vector<npuw::SlotToken> batch(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) {
        rt.reset(k);
        auto logits = rt.prefill_slot(k, random_ids(std::max<int64_t>(o.parallel_prompt, 1)));
        batch[static_cast<size_t>(k)] = {k, genai::argmax(logits)};
      }
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < o.n_gen; ++i) {
        auto logits = rt.decode_batch(batch);
        for (int64_t k = 0; k < n; ++k) {
          auto row = logits.subspan(static_cast<size_t>(k * V), static_cast<size_t>(V));
          batch[static_cast<size_t>(k)].id = genai::argmax(row);
        }
      }
      if (r > 0) tg_par.push_back(static_cast<double>(n * o.n_gen) / seconds(t0, Clock::now()));
    }
  }
  const MeanSd par = tg_par.empty() ? MeanSd{} : mean_sd(tg_par);

  const npuw::RuntimeStats& s1 = rt.stats();
  const double decoded = static_cast<double>(s1.decode_tokens - s0.decode_tokens);
  const double computed = static_cast<double>((s1.prefill_tokens - s0.prefill_tokens) + (s1.padded_positions - s0.padded_positions));
  const double padded_fraction = computed > 0 ? static_cast<double>(s1.padded_positions - s0.padded_positions) / computed : 0.0;
  const double kv_copied_per_token = decoded > 0 ? static_cast<double>(s1.kv_bytes_copied - s0.kv_bytes_copied) / decoded : 0.0;

  busy.reset();  // the roofline below is the quiet machine's
  const double peak_rss = probe_resident > 0 ? std::max(peak_before_probe, peak_resident_bytes() - probe_resident)
                                             : peak_resident_bytes();
  const MeanSd pps = pp.empty() ? MeanSd{} : mean_sd(pp), tgs = tg.empty() ? MeanSd{} : mean_sd(tg);
  probe.reset();
  if (bandwidths.empty())
    bandwidths.push_back(ReadBandwidthProbe(rt.device_threads(), static_cast<size_t>(bytes_per_token), rt.config().huge_pages).measure());
  const double bandwidth = median(bandwidths);
  // The median run's fraction of the bandwidth measured around it (or of the one measure).
  const double roofline_fraction = !roofline_fractions.empty() ? median(roofline_fractions)
                                   : bandwidth > 0                ? tgs.mean * bytes_per_token / bandwidth
                                                                  : 0.0;
  const double ttft_ms = ttft.empty() ? 0.0 : median(ttft);
  // What a decode step at a depth reads besides the weights: the K/V rows it attends (a
  // full-length layer's rows up to its position, on average the depth plus half the tokens
  // generated; a sliding-window layer's ring, at most its rows), and the roofline of weights + K/V.
  const npuw::RuntimeStats& kv_st = rt.stats();
  auto kv_read_per_token = [&](int64_t depth) {
    const double rows = static_cast<double>(depth) + static_cast<double>(o.n_gen + 1) / 2.0;
    const double ring = kv_st.kv_ring_rows > 0
                            ? static_cast<double>(kv_st.kv_ring_bytes) * std::min(1.0, rows / static_cast<double>(kv_st.kv_ring_rows))
                            : 0.0;
    return rows * static_cast<double>(kv_st.kv_row_bytes) + ring;
  };
  auto roofline_tps = [&](int64_t depth) {
    return bandwidth > 0 ? bandwidth / (bytes_per_token + kv_read_per_token(depth)) : 0.0;
  };

  // Long context at the roofline (issue 48): depth D should cost no more per K/V byte than the
  // weights do, tg(D) >= 0.9 x tg(first) x (W + KV(first)) / (W + KV(D)) (W: weight bytes a step).
  auto bytes_line_tps = [&](size_t di) {
    const double w = static_cast<double>(bytes_per_token), first = mean_sd(tg_at[0]).mean;
    return 0.9 * first * (w + kv_read_per_token(o.depths[0])) / (w + kv_read_per_token(o.depths[di]));
  };
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"threads", rt.device_threads()},
                        {"pp", {{"n", o.n_prompt}, {"tps_mean", pps.mean}, {"tps_sd", pps.sd}}},
                        {"tg", {{"n", o.n_gen}, {"depth", o.depths[0]}, {"tps_mean", tgs.mean}, {"tps_sd", tgs.sd},
                                {"kv_bytes_read_per_token", kv_read_per_token(o.depths[0])},
                                {"roofline_tps_weights_and_kv", roofline_tps(o.depths[0])}}},
                        {"ttft_ms", ttft.empty() ? nlohmann::json(nullptr) : nlohmann::json(ttft_ms)},
                        {"peak_rss_bytes", peak_rss},
                        {"kv_bytes_copied_per_token", kv_copied_per_token},
                        {"padded_fraction", padded_fraction},
                        {"roofline_fraction", roofline_fraction},
                        {"bandwidth_gbps", bandwidth / 1e9},
                        {"bandwidth_gbps_measures", gbps(bandwidths)},
                        {"roofline_fraction_per_run", roofline_fractions},
                        {"huge_pages", rt.config().huge_pages},
                        {"huge_page_weight_bytes", rt.stats().huge_page_weight_bytes},
                        {"weight_bytes_per_token", bytes_per_token},
                        // Mixtures of experts: expert bytes and slabs a decoded token read, measured.
                        {"expert_bytes_per_token", tg_tokens > 0 ? static_cast<double>(tg_expert_bytes) / static_cast<double>(tg_tokens) : 0.0},
                        {"expert_slabs_per_token", tg_tokens > 0 ? static_cast<double>(tg_expert_slabs) / static_cast<double>(tg_tokens) : 0.0},
                        {"prefill_chunk", cfg.prefill_chunk},
                        {"variants", rt.variants()},
                        {"kv_type", kv_type_option(cfg.kv_type)},
                        {"busy", o.busy},
                        {"stages_per_token", stages_per_token},
                        {"sync_points_per_token", sync_per_token},
                        {"solo_periods", solo_periods},
                        {"stage_ms_per_token", stage_ms_json(stage_ns, tg_tokens)},
                        // The tg runs' whole time over their tokens: the time the stages above are part of
                        // (1000 / tps_mean is not, where runs differ: a mean of rates).
                        {"tg_ms_per_token", tg_tokens > 0 ? tg_seconds * 1e3 / static_cast<double>(tg_tokens) : 0.0},
                        // The decode MatMul stages by the weights they read: time, runs, bytes, rate.
                        {"matmul_stages", kinds_json(tg_kinds, tg_tokens)},
                        // The K/V allocation: full-length layers' rows plus the sliding-window rings.
                        {"kv", {{"bytes", rt.stats().kv_bytes},
                                {"bytes_per_position", rt.stats().kv_row_bytes},
                                {"ring_rows", rt.stats().kv_ring_rows},
                                {"ring_bytes_per_slot", rt.stats().kv_ring_bytes}}},
                        {"device", rt.device_name()}};
    if (!tg_par.empty())
      j["parallel"] = {{"n", o.parallel},
                       {"prompt", o.parallel_prompt},
                       {"tg_tps_total", par.mean},
                       {"tg_tps_total_sd", par.sd},
                       {"tg_tps_per_seq", par.mean / static_cast<double>(o.parallel)},
                       {"speedup_vs_batch1", tgs.mean > 0 ? par.mean / tgs.mean : 0.0},
                       {"batch_sizes", rt.batch_sizes()}};
    if (n_depths > 1 && !tg.empty()) {
      j["tg_depths"] = nlohmann::json::array();
      for (size_t di = 0; di < n_depths; ++di) {
        const MeanSd m = mean_sd(tg_at[di]);
        nlohmann::json d = {{"depth", o.depths[di]}, {"tps_mean", m.mean}, {"tps_sd", m.sd}, {"tps_runs", tg_at[di]},
                            {"ratio_to_first", depth_ratio[di]},
                            {"kv_bytes_read_per_token", kv_read_per_token(o.depths[di])},
                            {"roofline_tps", roofline_tps(o.depths[di])},
                            {"roofline_fraction", roofline_tps(o.depths[di]) > 0 ? m.mean / roofline_tps(o.depths[di]) : 0.0}};
        if (di > 0) {
          d["bytes_line_tps"] = bytes_line_tps(di);
          d["bytes_line_fraction"] = bytes_line_tps(di) > 0 ? m.mean / bytes_line_tps(di) : 0.0;
        }
        if (interleaved) {
          d["interleaved_steps"] = step_s[di].size();
          d["interleaved_step_ms_median"] = 1e3 * median(step_s[di]);
          d["interleaved_ratio_to_first"] = step_ratio[di];
          d["interleaved_stage_ms_per_step"] = stage_ms_json(step_stage_ns[di].data(), static_cast<int64_t>(step_s[di].size()));
        }
        j["tg_depths"].push_back(d);
      }
    }
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("model {} | {} | chunk {} | variants {}{}\n", o.model, rt.device_name(), cfg.prefill_chunk, rt.variants().size(),
               o.busy > 0 ? fmt::format(" | {} busy-looping process(es) beside", o.busy) : "");
    fmt::print("| test   |          t/s |\n|--------|--------------|\n");
    if (!pp.empty()) fmt::print("| pp{:<4} | {:>7.2f} ± {:<4.2f} |\n", o.n_prompt, pps.mean, pps.sd);
    for (size_t di = 0; di < n_depths && !tg.empty(); ++di) {
      const MeanSd m = mean_sd(tg_at[di]);
      fmt::print("| tg{:<4}{} | {:>7.2f} ± {:<4.2f} |\n", o.n_gen, o.depths[di] > 0 ? fmt::format(" @ d{}", o.depths[di]) : "", m.mean, m.sd);
    }
    for (size_t di = 0; di < n_depths && !tg.empty() && bandwidth > 0; ++di) {
      const MeanSd m = mean_sd(tg_at[di]);
      const double roof = roofline_tps(o.depths[di]);
      fmt::print("depth {}: a step reads {:.1f} MB of weights and {:.1f} MB of K/V; at {:.1f} GB/s that allows {:.1f} t/s, "
                 "tg is {:.0f}% of it\n",
                 o.depths[di], bytes_per_token / 1e6, kv_read_per_token(o.depths[di]) / 1e6, bandwidth / 1e9, roof,
                 roof > 0 ? 100.0 * m.mean / roof : 0.0);
    }
    for (size_t di = 1; di < n_depths && !tg.empty(); ++di) {
      const double line = bytes_line_tps(di);
      fmt::print("depth {}: the bytes-bound line, 0.9 x tg at depth {} x its bytes a step / these, is {:.1f} t/s; tg is {:.0f}% of it\n",
                 o.depths[di], o.depths[0], line, line > 0 ? 100.0 * mean_sd(tg_at[di]).mean / line : 0.0);
    }
    for (size_t di = 1; di < n_depths && !tg.empty(); ++di) {
      std::string runs;
      for (double r : pair_ratios[di]) runs += fmt::format("{}{:.1f}%", runs.empty() ? "" : ", ", 100.0 * r);
      fmt::print("tg at depth {} is {:.1f}% of tg at depth {} (median of the {} repetitions' back-to-back pairs: {})\n", o.depths[di],
                 100.0 * depth_ratio[di], o.depths[0], tg.size(), runs);
      if (interleaved)
        fmt::print("tg at depth {} is {:.1f}% of tg at depth {} interleaved (a slot at each depth, runs of {} decode steps in turn; "
                   "{} timed steps each, median {:.2f} ms against {:.2f} ms)\n",
                   o.depths[di], 100.0 * step_ratio[di], o.depths[0], kInterleaveRun, step_s[di].size(), 1e3 * median(step_s[di]),
                   1e3 * median(step_s[0]));
    }
    // Where each depth's step time goes (means of the timed steps), so the growth shows by op.
    for (size_t di = 0; di < n_depths && interleaved && !tg.empty(); ++di) {
      const nlohmann::json ms = stage_ms_json(step_stage_ns[di].data(), static_cast<int64_t>(step_s[di].size()));
      std::string parts;
      for (auto it = ms.begin(); it != ms.end(); ++it)
        parts += fmt::format("{}{} {:.2f} ms", parts.empty() ? "" : ", ", it.key(), it.value().get<double>());
      fmt::print("interleaved steps at depth {}: {} (stage time, mean a step)\n", o.depths[di], parts);
    }
    if (!tg_par.empty())
      fmt::print("| tg{:<4} x {} sequences | {:>7.2f} ± {:<4.2f} total, {:.2f} per sequence, {:.2f}x batch-1 tg |\n", o.n_gen, o.parallel,
                 par.mean, par.sd, par.mean / static_cast<double>(o.parallel), tgs.mean > 0 ? par.mean / tgs.mean : 0.0);
    if (!ttft.empty()) fmt::print("time to first token ({} tokens): {:.1f} ms (median)\n", o.ttft_prompt, ttft_ms);
    fmt::print("peak RSS {:.1f} MiB; K/V bytes copied per generated token {:.0f}; padded fraction {:.3f}\n", peak_rss / 1048576.0,
               kv_copied_per_token, padded_fraction);
    if (!tg.empty())
      fmt::print("decode: {:.0f} stages per token, {:.0f} of them on several threads (synchronisation points); "
                 "{} time(s) the threads fell back to one for a while (a thread held up by another process)\n",
                 stages_per_token, sync_per_token, solo_periods);
    if (tg_tokens > 0) {
      // Where a token's time goes: the stages by op, and what runs between them (sampling the
      // logits, the runtime's bookkeeping, submitting to the queue).
      const double per_token_ms = tg_seconds * 1e3 / static_cast<double>(tg_tokens);
      double staged_ms = 0;
      std::string parts;
      for (int op = 0; op < device::Device::Counters::kOps; ++op) {
        if (stage_ns[op] == 0) continue;
        const double ms = static_cast<double>(stage_ns[op]) / 1e6 / static_cast<double>(tg_tokens);
        staged_ms += ms;
        parts += fmt::format("{}{} {:.2f} ms ({:.0f}%)", parts.empty() ? "" : ", ", blob::op_name(static_cast<uint32_t>(op)), ms,
                             100.0 * ms / per_token_ms);
      }
      fmt::print("decode time per token {:.2f} ms: {}; between stages {:.2f} ms\n", per_token_ms, parts, per_token_ms - staged_ms);
      fmt::print("decode MatMul stages by the weights they read (a token: time, runs; a run: MB read; rate):\n");
      for (const KindRate& r : kind_rates(tg_kinds, tg_tokens))
        fmt::print("  {:>7.3f} ms {:>4.0f}x {:>8.3f} MB {:>6.1f} GB/s  {}\n", r.ms_per_token, r.runs_per_token, r.kind->weight_bytes / 1e6,
                   r.gbps, r.kind->label);
    }
    if (tg_expert_slabs > 0)
      fmt::print("experts: a decoded token read {:.1f} expert slabs, {:.1f} MiB (of {} experts, {} used per token and layer)\n",
                 static_cast<double>(tg_expert_slabs) / static_cast<double>(tg_tokens),
                 static_cast<double>(tg_expert_bytes) / static_cast<double>(tg_tokens) / 1048576.0, rt.hparams().n_expert,
                 rt.hparams().n_expert_used);
    const npuw::RuntimeStats& st = rt.stats();
    fmt::print("K/V {:.2f} MiB: {} bytes per position (full-length layers) x {} rows x {} slot(s){}\n", st.kv_bytes / 1048576.0,
               st.kv_row_bytes, rt.capacity(), rt.slots(),
               st.kv_ring_rows > 0 ? fmt::format(" + sliding-window rings of {} rows, {} bytes per slot", st.kv_ring_rows, st.kv_ring_bytes) : "");
    std::string runs;
    for (double f : roofline_fractions) runs += fmt::format("{}{:.0f}%", runs.empty() ? "" : ", ", f * 100.0);
    fmt::print("decode reads {:.1f} MiB of weights per token; read bandwidth here on that working set {:.1f} GB/s ({}{}); "
               "decode at {:.0f}% of that roofline{}\n",
               bytes_per_token / 1048576.0, bandwidth / 1e9,
               rt.config().huge_pages ? fmt::format("huge pages, as {:.1f} MiB of the weights are", st.huge_page_weight_bytes / 1048576.0)
                                      : std::string("4 KiB pages, as the mapped weights are"),
               bandwidths.size() > 1 ? fmt::format("; median of {} measures, {:.1f}-{:.1f}", bandwidths.size(),
                                                   *std::min_element(bandwidths.begin(), bandwidths.end()) / 1e9,
                                                   *std::max_element(bandwidths.begin(), bandwidths.end()) / 1e9)
                                     : std::string(),
               roofline_fraction * 100.0, runs.empty() ? std::string() : fmt::format(" (median run; runs {}, each against the bandwidth measured before and after it)", runs));
  }
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prompt processing and generation speed (like llama-bench)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-p,--n-prompt", o->n_prompt, "prompt tokens for the pp test (0 = skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", o->n_gen, "generated tokens for the tg test (0 = skip)")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "repetitions of each test")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--ttft-prompt", o->ttft_prompt, "prompt tokens for the time-to-first-token test (0 = skip)")->capture_default_str();
  cmd->add_option("--depth", o->depths,
                  "tokens of context prefilled (untimed) before each tg run, as llama-bench's -d; several (32,1024): "
                  "each repetition runs tg at each in turn, then a slot per depth takes runs of 8 steps in turn, and "
                  "both ratios to the first are reported")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--parallel", o->parallel, "also decode N sequences together (batched blobs) and report aggregate and per-sequence tg")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--parallel-prompt", o->parallel_prompt, "prompt tokens of each sequence before the parallel tg test")->capture_default_str();
  cmd->add_option("--busy", o->busy, "run N busy-looping processes beside the timed tests (a shared, busy machine)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  cmd->add_flag("--json", o->json, "print one JSON object");
  auto schema = std::make_shared<std::string>();
  cmd->add_option("--json-schema", *schema, "instead: what structured output under this JSON Schema costs (compile, mask and "
                  "check time per token, decode with and without it)")->check(CLI::ExistingFile);
  auto spec = std::make_shared<SpecBenchOptions>();
  cmd->add_option("--spec", spec->mode, "instead: speculative decoding's costs and gains (verify cost r(K), acceptance, tg with and "
                  "without) with guesses from prompt lookup, a draft model, or an oracle of known acceptance")
      ->check(CLI::IsMember({"lookup", "draft", "oracle"}));
  cmd->add_option("--spec-k", spec->k, "--spec: the most guesses per verify step")->capture_default_str()->check(CLI::Range(1, 63));
  cmd->add_flag("--spec-fixed-k", spec->fixed_k, "--spec: always K guesses (no adaptive K)");
  cmd->add_option("--spec-oracle", spec->alphas, "--spec oracle: acceptance rates to run, e.g. 0,0.5,0.8,1")->delimiter(',');
  cmd->add_option("--spec-prompt", spec->prompt, "--spec: the prompt")->capture_default_str();
  cmd->add_option("--prediction", spec->prediction_file, "--spec: a file with the expected reply (Predicted Outputs)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--spec-edit", spec->edit,
                  "--spec: the prediction is the model's own greedy reply to the prompt with this fraction of its tokens "
                  "changed (an edit), e.g. 0.1")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes("--prediction");
  cmd->add_option("--draft-model", spec->draft_model, "--spec draft: the draft model")->check(CLI::ExistingFile);
  o->rt.add_to(cmd);
  actions.push_back([cmd, o, schema, spec]() -> int {
    if (!cmd->parsed()) return -1;
    if (!cmd->get_option("--spec")->empty()) {
      spec->n_gen = o->n_gen;
      spec->repetitions = o->repetitions;
      spec->json = o->json;
      GenerateOptions go;
      go.rt = o->rt;
      return bench_spec(o->model, *spec, o->rt.resolve(), go.pipeline_config());
    }
    if (schema->empty()) return run(*o);
    GenerateOptions go;
    go.rt = o->rt;
    return bench_grammar(o->model, *schema, o->n_gen, go.pipeline_config(), o->json);
  });
}

}  // namespace npullm::cli
