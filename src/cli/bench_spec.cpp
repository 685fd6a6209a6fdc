// npullm bench --spec lookup|draft|oracle --spec-k K: what speculative decoding costs and gains
// (issue 47's figures).
//
//   verify_cost_ratio  r(K) = t_verify(K+1 rows) / t_decode(1 row), medians of interleaved steps at
//                      the same depth (half of each capacity; every step rolled back, so the depth
//                      stays), per capacity and per verify blob size; the headline is the smallest
//                      capacity's, for K + 1 rows. verify_cost_ratio_run: the same at the depth
//                      the generation's steps had on average (the prompt and half the reply),
//                      which the predictions below use: a verify step's attention (K + 1 query
//                      rows) grows with depth faster than a decode step's, so r does too, and r
//                      at half of a capacity far above the reply overstated the runs' costs
//   draft_cost_ratio   c = t_decode of the draft model / t_decode of the model (--spec draft)
//   tg_tps, tg_tps_off decode tokens/s of the same greedy generation (-n tokens from the prompt)
//                      with speculation and without (medians of -r runs each, the two kinds
//                      alternated; the pipeline's decode time: verify steps, guessing and decode
//                      steps, not the prompt's prefill)
//   acceptance         accepted guesses / guesses; accepted_per_verify: accepted / verify steps
//   predicted_speedup  what the run's own steps cost by r and c, in decode steps: each verify
//                      step of k guesses r of the blob that holds k + 1 rows, each of the draft
//                      model's decode steps c, each other step 1, against one step a token
//   prediction         --prediction FILE, or --spec-edit F: the model's own greedy reply with a
//                      fraction F of its tokens replaced by random others (as token ids), as a
//                      caller editing a file sends it; prediction_accepted /
//                      prediction_rejected count its guesses as OpenAI's usage does
//   oracle             --spec-oracle A,...: a draft of known acceptance A (the model's own greedy
//                      reply, each guess replaced by another token with probability 1 - A), K
//                      fixed: measured speed-up beside (1 - A^(K+1)) / ((1 - A) r(K)), at A and
//                      at the rate the draws gave (alpha_drawn)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"
#include "genai/sampling/sampler.h"
#include "genai/speculative/step_costs.h"

namespace npullm::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Median decode step and median verify step of each size at `depth` in slot 0, interleaved: a
// decode step, then one verify step of each size, each rolled back.
struct StepTimes {
  double decode_s = 0;
  std::vector<double> verify_s;  // by verify size

  double r(size_t s) const { return verify_s[s] / decode_s; }  // r of verify size s
  nlohmann::json r_by_k(const std::vector<int64_t>& sizes) const {  // {"K": r}, K = size - 1
    nlohmann::json out = nlohmann::json::object();
    for (size_t s = 0; s < sizes.size(); ++s) out[std::to_string(sizes[s] - 1)] = r(s);
    return out;
  }
};
StepTimes time_steps(npuw::LlmRuntime& rt, int64_t depth, const std::vector<int64_t>& sizes, int steps, std::mt19937& rng) {
  const int64_t V = rt.n_vocab();
  auto random_id = [&] { return static_cast<int32_t>(rng() % static_cast<uint32_t>(V)); };
  rt.reset();
  std::vector<int32_t> ctx(static_cast<size_t>(depth));
  for (int32_t& id : ctx) id = random_id();
  if (depth > 0) rt.prefill(ctx);
  std::vector<double> dec;
  std::vector<std::vector<double>> ver(sizes.size());
  for (int i = 0; i < steps + 2; ++i) {  // the first two rounds warm up
    auto t0 = Clock::now();
    rt.decode(random_id());
    if (i >= 2) dec.push_back(seconds(t0, Clock::now()));
    rt.rollback(0, depth);
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<int32_t> run(static_cast<size_t>(sizes[s]));
      for (int32_t& id : run) id = random_id();
      t0 = Clock::now();
      rt.verify(0, run);
      if (i >= 2) ver[s].push_back(seconds(t0, Clock::now()));
      rt.rollback(0, depth);
    }
  }
  StepTimes t;
  t.decode_s = median(dec);
  for (auto& v : ver) t.verify_s.push_back(median(v));
  return t;
}

struct GenFigures {
  double tps = 0;  // median decode tokens/s
  double tps_off = 0;  // median decode tokens/s of the runs without speculation between them (run_gen's `off`)
  double acceptance = 0, accepted_per_verify = 0, mean_k = 0;
  int64_t drafted = 0, accepted = 0, verify_steps = 0, generated = 0;
  int64_t prediction_accepted = 0, prediction_rejected = 0, draft_steps = 0;
  std::vector<int64_t> steps_by_guesses;  // [k]: verify steps of k guesses, all runs
  bool same_ids = true;  // every run's ids equal to `expect` (when given)
};

// reps runs of g; with `off`, each after a run of off (off, g, off, g, ...): on a shared machine the
// speed drifts over tens of seconds, and a ratio of two medians taken a minute apart drifted with
// it (TinyLlama at 2 threads: an off median of 53.9 t/s beside 75 in the minutes before).
GenFigures run_gen(LLMPipeline& pipe, const std::string& prompt, const GenerationConfig& g, int64_t reps,
                   const std::vector<int32_t>* expect = nullptr, const GenerationConfig* off = nullptr) {
  std::vector<double> tps, tps_off;
  GenFigures f;
  for (int64_t r = 0; r < reps; ++r) {
    if (off) tps_off.push_back(pipe.generate(prompt, *off).metrics.decode_tps);
    const GenerationResult res = pipe.generate(prompt, g);
    if (expect && res.ids != *expect) f.same_ids = false;
    f.prediction_accepted += res.metrics.prediction_accepted;
    f.prediction_rejected += res.metrics.prediction_rejected;
    f.draft_steps += res.metrics.spec_draft_steps;
    const auto& by = res.metrics.spec_steps_by_guesses;
    if (f.steps_by_guesses.size() < by.size()) f.steps_by_guesses.resize(by.size(), 0);
    for (size_t k = 0; k < by.size(); ++k) f.steps_by_guesses[k] += by[k];
    tps.push_back(res.metrics.decode_tps);
    f.drafted += res.metrics.spec_drafted;
    f.accepted += res.metrics.spec_accepted;
    f.verify_steps += res.metrics.spec_verify_steps;
    f.generated += res.metrics.generated_tokens;
  }
  f.tps = median(tps);
  f.tps_off = median(tps_off);
  f.acceptance = f.drafted > 0 ? static_cast<double>(f.accepted) / static_cast<double>(f.drafted) : 0.0;
  f.accepted_per_verify = f.verify_steps > 0 ? static_cast<double>(f.accepted) / static_cast<double>(f.verify_steps) : 0.0;
  f.mean_k = f.verify_steps > 0 ? static_cast<double>(f.drafted) / static_cast<double>(f.verify_steps) : 0.0;
  return f;
}

// Expected tokens per verify step over its cost, for acceptance a, K guesses, verify cost r and
// draft cost c per guess (relative to a decode step): the fixed-K speed-up.
double expected_speedup(double a, double k, double r, double c) { return genai::expected_tokens(a, k) / (c * k + r); }

}  // namespace

int bench_spec(const std::string& model, const SpecBenchOptions& so, const npuw::RuntimeConfig& rc_in, const PipelineConfig& pc_in) {
  if (so.k < 1 || so.k > 63) fail("--spec-k must be between 1 and 63 (got {})", so.k);
  if (so.mode == "draft" && so.draft_model.empty()) fail("--spec draft needs --draft-model FILE");
  if (so.mode != "draft" && !so.draft_model.empty()) fail("--draft-model needs --spec draft");
  if (so.mode == "oracle" && (so.edit >= 0 || !so.prediction_file.empty()))
    fail("--spec oracle guesses from the reply itself: --prediction and --spec-edit are for lookup and draft");
  std::mt19937 rng(1234);
  PipelineConfig pc = pc_in;
  pc.spec_max_k = so.k;
  if (so.mode == "draft") pc.draft_model = so.draft_model;
  npuw::RuntimeConfig rc = rc_in;
  rc.verify_sizes.clear();
  for (int64_t s = 2;; s *= 2) {
    rc.verify_sizes.push_back(s);
    if (s >= so.k + 1) break;
  }
  if (pc.variants.empty() && rc.variants.empty()) {
    // Room for the prompt and the generated tokens, in the default power-of-two steps.
    rc.max_prompt_len = pc.max_prompt_len = 512;
    rc.min_response_len = pc.min_response_len = std::max<int64_t>(so.n_gen + 1, 128);
  }

  // r(K) per capacity and verify size; c for a draft model.
  nlohmann::json by_capacity = nlohmann::json::array();
  double r_k = 0;  // the smallest capacity's, for the blob that holds K + 1 rows
  std::vector<int64_t> sizes;
  size_t k_blob = 0;  // the verify size that holds K + 1 rows (the sizes above end with one)
  double draft_cost = 0;
  {
    npuw::LlmRuntime rt(model, rc);
    sizes = rt.config().verify_sizes;
    k_blob = static_cast<size_t>(std::find_if(sizes.begin(), sizes.end(), [&](int64_t s) { return s >= so.k + 1; }) - sizes.begin());
    for (int64_t cap : rt.variants()) {
      const int64_t depth = std::max<int64_t>(0, cap / 2 - sizes.back());
      const StepTimes t = time_steps(rt, depth, sizes, 16, rng);
      by_capacity.push_back({{"capacity", cap}, {"depth", depth}, {"decode_ms", t.decode_s * 1e3}, {"r_by_k", t.r_by_k(sizes)}});
      if (r_k == 0) r_k = t.r(k_blob);
    }
    if (so.mode == "draft") {
      npuw::RuntimeConfig dc = rc;
      dc.verify_sizes.clear();
      npuw::LlmRuntime draft(so.draft_model, dc);
      const StepTimes td = time_steps(draft, 64, {}, 32, rng), tt = time_steps(rt, 64, {}, 32, rng);
      draft_cost = td.decode_s / tt.decode_s;
    }
  }

  // (Destroyed before r is timed at the runs' depth: a second runtime would hold a second copy of
  // the weights.)
  std::optional<LLMPipeline> pipe_holder(std::in_place, model, pc);
  LLMPipeline& pipe = *pipe_holder;
  const std::string description = pipe.description();
  const std::string prompt = so.prompt;
  GenerationConfig off;
  off.max_new_tokens = so.n_gen;
  off.ignore_eos = true;
  pipe.generate(prompt, off);  // warm-up
  const GenerationResult reference = pipe.generate(prompt, off);

  GenerationConfig on = off;
  on.speculative.max_k = so.k;
  on.speculative.adaptive = !so.fixed_k;
  if (!so.prediction_file.empty()) on.speculative.prediction = read_text(so.prediction_file);
  int64_t edited = 0;
  if (so.edit >= 0) {
    // An edit of the reply: each token, with probability `edit`, replaced by another one. Sent as
    // ids (Speculation::prediction_ids): a random-weight model's reply is rarely in the tokenizer's
    // own split, so as text it would differ from the reply in more tokens than were edited.
    std::mt19937_64 erng(7);
    std::vector<int32_t> ids = reference.ids;
    const uint64_t V = static_cast<uint64_t>(pipe.n_vocab());
    for (int32_t& id : ids)
      if (std::uniform_real_distribution<double>(0, 1)(erng) < so.edit) {
        const int32_t was = id;
        while (id == was) id = static_cast<int32_t>(erng() % V);
        ++edited;
      }
    on.speculative.prediction_ids = ids;
  }
  GenFigures f_on;
  nlohmann::json oracle = nlohmann::json::array();
  if (so.mode == "oracle") {
    if (so.alphas.empty()) fail("--spec oracle needs --spec-oracle A[,A...] (acceptance rates in [0, 1])");
    on.speculative.adaptive = false;
    const std::vector<int32_t> ref = reference.ids;
    const size_t ctx = reference.context_ids.size();
    const int32_t V = static_cast<int32_t>(pipe.n_vocab());
    for (double a : so.alphas) {
      auto orng = std::make_shared<std::mt19937_64>(99);
      // The draws' own rate of right guesses: a few hundred draws scatter several points around a
      // (seed 99's first 385 give 73 % at a = 0.8), so the formula is given at both.
      auto right = std::make_shared<std::pair<int64_t, int64_t>>(0, 0);
      on.speculative.draft_fn = [=](const std::vector<int32_t>& seq, int64_t k) {
        std::vector<int32_t> out;
        for (size_t g = seq.size() - ctx; g < ref.size() && static_cast<int64_t>(out.size()) < k; ++g) {
          const bool ok = std::uniform_real_distribution<double>(0, 1)(*orng) < a;
          out.push_back(ok ? ref[g] : (ref[g] + 1) % V);
          right->first += ok;
          ++right->second;
        }
        return out;
      };
      const GenFigures f = run_gen(pipe, prompt, on, so.repetitions, nullptr, &off);
      const double drawn = right->second > 0 ? static_cast<double>(right->first) / static_cast<double>(right->second) : a;
      oracle.push_back({{"alpha", a}, {"alpha_drawn", drawn}, {"acceptance", f.acceptance}, {"accepted_per_verify", f.accepted_per_verify},
                        {"tg_tps", f.tps}, {"tg_tps_off", f.tps_off}, {"speedup", f.tps / f.tps_off}});  // (predictions: below, by r at the runs' depth)
      f_on = f;
    }
  } else {
    on.speculative.mode = so.mode == "draft" ? SpecMode::Draft : SpecMode::Lookup;
    f_on = run_gen(pipe, prompt, on, so.repetitions, &reference.ids, &off);
  }
  // r at the depth the runs' steps had on average, each blob size (verify_cost_ratio_run).
  int64_t run_depth = static_cast<int64_t>(reference.context_ids.size()) + so.n_gen / 2;
  pipe_holder.reset();
  StepTimes run_t;
  {
    npuw::LlmRuntime rt(model, rc);
    run_depth = std::max<int64_t>(0, std::min(run_depth, rt.variants().back() - sizes.back()));  // the largest verify must fit
    run_t = time_steps(rt, run_depth, sizes, 16, rng);
  }
  const double r_k_run = run_t.r(k_blob);
  const nlohmann::json r_run_by_k = run_t.r_by_k(sizes);
  for (auto& o : oracle) {
    o["predicted_speedup"] = expected_speedup(o["alpha"].get<double>(), static_cast<double>(so.k), r_k_run, 0.0);
    o["predicted_speedup_drawn"] = expected_speedup(o["alpha_drawn"].get<double>(), static_cast<double>(so.k), r_k_run, 0.0);
  }

  // What the steps the run took cost by r (at the runs' depth) and c: each verify step of k guesses
  // costs r of the blob that holds k + 1 rows, each draft decode step c, each other step one decode
  // step.
  double predicted = 1.0;
  if (f_on.verify_steps > 0) {
    double verify = 0;
    for (size_t k = 1; k < f_on.steps_by_guesses.size(); ++k) {
      const auto blob = std::find_if(sizes.begin(), sizes.end(), [&](int64_t s) { return s >= static_cast<int64_t>(k) + 1; });
      verify += static_cast<double>(f_on.steps_by_guesses[k]) * (blob == sizes.end() ? r_k_run : run_t.r(static_cast<size_t>(blob - sizes.begin())));
    }
    const double decodes = std::max(0.0, static_cast<double>(f_on.generated - f_on.verify_steps - f_on.accepted));
    const double draft = so.mode == "draft" ? draft_cost * static_cast<double>(f_on.draft_steps) : 0.0;
    predicted = static_cast<double>(f_on.generated) / (verify + draft + decodes);
  }

  nlohmann::json spec = {{"mode", so.mode},
                         {"k", so.k},
                         {"adaptive", !so.fixed_k && so.mode != "oracle"},
                         {"verify_cost_ratio", r_k},
                         {"verify_cost_ratio_by_capacity", by_capacity},
                         {"verify_cost_ratio_run", {{"depth", run_depth}, {"decode_ms", run_t.decode_s * 1e3}, {"r", r_k_run}, {"r_by_k", r_run_by_k}}},
                         {"accepted_per_verify", f_on.accepted_per_verify},
                         {"tokens_per_verify", f_on.verify_steps > 0 ? 1.0 + f_on.accepted_per_verify : 0.0},
                         {"acceptance", f_on.acceptance},
                         {"mean_k", f_on.mean_k},
                         {"drafted", f_on.drafted},
                         {"accepted", f_on.accepted},
                         {"verify_steps", f_on.verify_steps},
                         {"tg_tps", f_on.tps},
                         {"tg_tps_off", f_on.tps_off},
                         {"speedup", f_on.tps_off > 0 ? f_on.tps / f_on.tps_off : 0.0},
                         {"predicted_speedup", predicted},
                         {"prediction_accepted", f_on.prediction_accepted},
                         {"draft_steps", f_on.draft_steps},
                         {"steps_by_guesses", f_on.steps_by_guesses},
                         {"prediction_rejected", f_on.prediction_rejected},
                         {"same_ids", f_on.same_ids},
                         {"n_gen", so.n_gen},
                         {"repetitions", so.repetitions}};
  if (so.mode == "draft") spec["draft_cost_ratio"] = draft_cost;
  if (so.edit >= 0) spec["prediction_edit"] = {{"fraction", so.edit}, {"tokens_changed", edited}, {"tokens", reference.ids.size()}};
  if (!oracle.empty()) spec["oracle"] = oracle;
  if (so.json) {
    fmt::print("{}\n", nlohmann::json{{"model", model}, {"device", description}, {"spec", spec}}.dump());
    return 0;
  }
  fmt::print("model {} | {}\n", model, description);
  fmt::print("verify cost r(K) = t_verify(K+1) / t_decode(1), at half of each capacity:\n");
  // r(K) by K ascending (the JSON object's keys sort as text: "15" before "3").
  auto r_list = [&](const nlohmann::json& by_k) {
    std::string parts;
    for (int64_t size : sizes) {
      const std::string k = std::to_string(size - 1);
      if (by_k.contains(k)) parts += fmt::format("{}r({}) {:.2f}", parts.empty() ? "" : ", ", k, by_k[k].get<double>());
    }
    return parts;
  };
  for (const auto& c : by_capacity) {
    const std::string parts = r_list(c["r_by_k"]);
    fmt::print("  capacity {:>5} (depth {:>4}, decode {:.2f} ms): {}\n", c["capacity"].get<int64_t>(), c["depth"].get<int64_t>(),
               c["decode_ms"].get<double>(), parts);
  }
  fmt::print("  at the runs' mean depth {} (decode {:.2f} ms): {}; the predictions below use these\n", run_depth, run_t.decode_s * 1e3,
             r_list(r_run_by_k));
  if (so.mode == "draft") fmt::print("draft model cost c = {:.3f} of a decode step per guess\n", draft_cost);
  for (const auto& o : oracle)
    fmt::print("oracle alpha {:.2f} (drawn {:.3f}): acceptance {:.3f}, {:.2f} accepted per verify, tg {:.1f} t/s, speed-up {:.2f}x "
               "(predicted {:.2f}x; at the drawn rate {:.2f}x)\n",
               o["alpha"].get<double>(), o["alpha_drawn"].get<double>(), o["acceptance"].get<double>(), o["accepted_per_verify"].get<double>(),
               o["tg_tps"].get<double>(), o["speedup"].get<double>(), o["predicted_speedup"].get<double>(),
               o["predicted_speedup_drawn"].get<double>());
  fmt::print("{} K {}: acceptance {:.3f} ({} of {} guesses), {:.2f} accepted per verify step (mean K {:.2f}); tg {:.1f} t/s against "
             "{:.1f} off: {:.2f}x (predicted from r, c and the acceptance: {:.2f}x)\n",
             so.mode, so.k, f_on.acceptance, f_on.accepted, f_on.drafted, f_on.accepted_per_verify, f_on.mean_k, f_on.tps, f_on.tps_off,
             f_on.tps_off > 0 ? f_on.tps / f_on.tps_off : 0.0, predicted);
  if (!on.speculative.prediction.empty() || !on.speculative.prediction_ids.empty())
    fmt::print("prediction{}: {} guesses accepted, {} rejected\n",
               so.edit >= 0 ? fmt::format(" (the greedy reply, {} of its {} tokens changed)", edited, reference.ids.size()) : "",
               f_on.prediction_accepted, f_on.prediction_rejected);
  if (so.mode != "oracle") fmt::print("same ids as without speculation: {}\n", f_on.same_ids ? "yes" : "NO");
  return 0;
}

}  // namespace npullm::cli
