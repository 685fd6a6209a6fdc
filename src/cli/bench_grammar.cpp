// npullm bench --json-schema FILE: what structured output costs (issue 46's figures).
//
//   compile_ms      median time to compile the schema (uncached), 21 runs
//   mask_us_p50/99  grammar work per token when the sampled token is refused every time: random
//                   logits over the model's vocabulary, so each step checks the token and then
//                   builds (or reuses, for a state seen before) the full mask. The worst case, for
//                   a schema's first request; mask_warm_us_p50/99 the same for later requests
//                   (requests 5-8 of 8, each starting from what the ones before it built)
//   check_us_p50/99 grammar work per token on the model's own greedy reply (the common case: the
//                   chosen token is checked and taken, no mask)
//   forced_tokens   tokens of that reply appended by jump-forward (one prefill run per forced
//                   stretch); one_choice_steps: replayed steps where the grammar allowed one token;
//                   tg_tps_no_jump: the same reply without jump-forward
//   tg4_tps         four sequences through the serving scheduler, aggregate decode tokens/s with the
//                   schema; tg4_tps_off the same without
//   (the decode figures are timed once the schema's token classes are built: classes_ms is that
//   one-time cost, paid on a thread of its own the first time a schema is used)
//   tg_tps          decode tokens/s of that reply, wall clock after the first token (sampling and
//                   the grammar included); tg_tps_off the same run without the schema
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <future>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"
#include "formats/gguf.h"
#include "genai/grammar/compile.h"
#include "genai/grammar/structured.h"
#include "genai/grammar/token_classes.h"
#include "genai/serving/scheduler.h"
#include "genai/tokenizer/tokenizer.h"

namespace npullm::cli {

namespace {

using Clock = std::chrono::steady_clock;
double us_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

int popcount(std::span<const uint64_t> m) {
  int n = 0;
  for (uint64_t w : m) n += __builtin_popcountll(w);
  return n;
}

}  // namespace

int bench_grammar(const std::string& model, const std::string& schema_file, int64_t n_gen, const PipelineConfig& cfg, bool json) {
  std::ifstream in(schema_file, std::ios::binary);
  if (!in) fail("--json-schema: cannot read '{}'", schema_file);
  std::stringstream ss;
  ss << in.rdbuf();
  const StructuredOutput so{StructuredOutput::Kind::JsonSchema, ss.str(), ""};

  std::vector<double> compile_ms;
  for (int i = 0; i < 21; ++i) {
    const auto t0 = Clock::now();
    genai::grammar::compile_uncached(so);
    compile_ms.push_back(us_between(t0, Clock::now()) / 1000.0);
  }
  const auto grammar = genai::grammar::compile(so);

  // The vocabulary's trie, which the pipeline and the scheduler below share (make_token_trie keeps
  // one per vocabulary), and the schema's token classes over it, built to the end before anything
  // is timed: the decode figures are a schema's steady state, as a server sees a schema it has
  // seen before; building the classes is a one-time cost, timed apart (classes_ms, below).
  auto f = GgufFile::open(model);
  const genai::Tokenizer tok(genai::Vocab::from_gguf(*f));
  const auto t_trie = Clock::now();
  const auto trie = genai::grammar::make_token_trie(tok);
  const double trie_ms = us_between(t_trie, Clock::now()) / 1000.0;
  genai::grammar::token_classes(grammar, trie)->precompute();

  // The reply with and without the schema (greedy; the grammar ends it when nothing may follow), and
  // with the schema but without jump-forward: five rounds, the three runs of a round back to back,
  // each keeping its best, so that a machine that slows down for a while costs all three alike (one
  // after the other, best of three each, the ratio scattered 90-106 % on the 2-vCPU VM).
  LLMPipeline pipe(model, cfg);
  auto once = [&](const GenerationConfig& g, GenerationResult& out) {
    const auto t0 = Clock::now();
    out = pipe.generate("JSON:", g);
    const double ms = us_between(t0, Clock::now()) / 1000.0 - out.metrics.ttft_ms;
    return out.ids.size() > 1 && ms > 0 ? static_cast<double>(out.ids.size() - 1) * 1000.0 / ms : 0.0;
  };
  GenerationConfig off;
  off.max_new_tokens = n_gen;
  off.ignore_eos = true;
  GenerationConfig on = off;
  on.structured = so;
  GenerationConfig no_jump = on;
  no_jump.structured.jump_forward = false;
  GenerationResult r_off, r_on, r_no_jump;
  double tps_off = 0, tps_on = 0, tps_no_jump = 0;
  for (int round = 0; round < 5; ++round) {
    tps_off = std::max(tps_off, once(off, r_off));
    tps_on = std::max(tps_on, once(on, r_on));
    tps_no_jump = std::max(tps_no_jump, once(no_jump, r_no_jump));
  }
  // Four sequences at once through the serving scheduler (continuous batching, each request its own
  // grammar state): aggregate decode tokens/s after the last first token. Rounds without and with
  // the schema alternate on one scheduler, five of each, and each keeps its best: a machine that
  // slows down for a while then costs both alike.
  constexpr int64_t kSeqs = 4;
  double par_off = 0, par_on = 0;
  {
    genai::SchedulerConfig sc;
    sc.parallel = kSeqs;
    genai::Scheduler sched(model, cfg, sc);
    auto round = [&](const GenerationConfig& g) {
      std::vector<std::future<genai::ServeResult>> done;
      const auto t0 = Clock::now();
      for (int64_t k = 0; k < kSeqs; ++k) {
        auto p = std::make_shared<std::promise<genai::ServeResult>>();
        done.push_back(p->get_future());
        genai::ServeRequest r;
        r.prompt_ids = sched.encode_prompt(fmt::format("JSON {}:", k));
        r.gen = g;
        r.on_done = [p](const genai::ServeResult& res) { p->set_value(res); };
        sched.submit(std::move(r));
      }
      int64_t tokens = 0;
      double last_first_ms = 0;
      for (auto& f : done) {
        const genai::ServeResult res = f.get();
        if (!res.error.empty()) fail("bench: {}", res.error);
        tokens += static_cast<int64_t>(res.ids.size()) - 1;
        last_first_ms = std::max(last_first_ms, res.ttft_ms);
      }
      const double ms = us_between(t0, Clock::now()) / 1000.0 - last_first_ms;
      return ms > 0 ? static_cast<double>(tokens) * 1000.0 / ms : 0.0;
    };
    for (int rep = 0; rep < 5; ++rep) {
      par_off = std::max(par_off, round(off));
      par_on = std::max(par_on, round(on));
    }
  }

  const std::vector<int32_t> ends = {tok.eos()};
  // The schema's token classes over this vocabulary (what a request's grammar is given when it is
  // made, off the decode thread): built once here, timed.
  const auto t_classes = Clock::now();
  auto classes = std::make_shared<genai::grammar::TokenClasses>(grammar, trie);
  const size_t n_contexts = classes->precompute();
  const double classes_ms = us_between(t_classes, Clock::now()) / 1000.0;

  // Random logits: the sampled token is refused at (nearly) every step, so the mask path runs.
  // Cold: one request's walk with classes of its own (no other request of the schema before it,
  // so every matcher state and mask is built on the way). Warm: requests 5-8 of eight such walks
  // (each its own random path) sharing the schema's classes, as a server's requests do: each
  // starts from the states and masks the requests before it left (TokenClasses::warm_start).
  auto random_walk = [&](std::shared_ptr<genai::grammar::TokenClasses> cls, uint32_t seed, std::vector<double>& out) {
    genai::grammar::TokenMatcher tm(grammar, trie, ends, "", std::move(cls));
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(tok.n_vocab()));
    genai::Sampler sampler(genai::SamplerConfig{});
    for (int64_t step = 0; step < std::max<int64_t>(n_gen, 64) && !tm.must_end(); ++step) {
      for (float& x : logits) x = noise(rng);
      int32_t id = sampler.sample(logits);
      const auto t0 = Clock::now();
      if (!tm.allowed(id)) id = sampler.sample(logits, tm.mask());
      out.push_back(us_between(t0, Clock::now()));
      if (tm.is_end(id) || !tm.accept(id)) break;
    }
  };
  std::vector<double> mask_us, mask_warm_us, discard;
  random_walk(classes, 1, mask_us);
  {
    auto shared = std::make_shared<genai::grammar::TokenClasses>(grammar, trie);
    shared->precompute();
    for (uint32_t req = 0; req < 8; ++req) random_walk(shared, 100 + req, req < 4 ? discard : mask_warm_us);
  }

  // Replay of the model's reply: the check per token, and the steps with one choice.
  std::vector<double> check_us;
  int64_t one_choice = 0;
  {
    genai::grammar::TokenMatcher tm(grammar, trie, ends, "", classes);
    for (int32_t id : r_on.ids) {
      if (popcount(tm.mask()) == 1) ++one_choice;
      const auto t0 = Clock::now();
      const bool ok = tm.allowed(id) && tm.accept(id);
      check_us.push_back(us_between(t0, Clock::now()));
      if (!ok) fail("bench: the reply's token {} is not allowed on replay", id);
    }
  }

  nlohmann::json g = {{"mask_us_p50", quantile(mask_us, 0.5)},
                      {"mask_us_p99", quantile(mask_us, 0.99)},
                      {"mask_warm_us_p50", quantile(mask_warm_us, 0.5)},
                      {"mask_warm_us_p99", quantile(mask_warm_us, 0.99)},
                      {"mask_warm_steps", mask_warm_us.size()},
                      {"mask_steps", mask_us.size()},
                      {"check_us_p50", quantile(check_us, 0.5)},
                      {"check_us_p99", quantile(check_us, 0.99)},
                      {"compile_ms", quantile(compile_ms, 0.5)},
                      {"forced_tokens", r_on.metrics.forced_tokens},
                      {"one_choice_steps", one_choice},
                      {"tg_tps_no_jump", tps_no_jump},
                      {"tokens_no_jump", r_no_jump.ids.size()},
                      {"tokens", r_on.ids.size()},
                      {"tg_tps", tps_on},
                      {"tg_tps_off", tps_off},
                      {"tg_ratio", tps_off > 0 ? tps_on / tps_off : 0.0},
                      {"tg4_tps", par_on},
                      {"tg4_tps_off", par_off},
                      {"tg4_ratio", par_off > 0 ? par_on / par_off : 0.0},
                      {"trie_ms", trie_ms},
                      {"classes_ms", classes_ms},
                      {"classes_contexts", n_contexts},
                      {"classes_mib", static_cast<double>(classes->bytes()) / (1 << 20)},
                      {"n_vocab", tok.n_vocab()},
                      {"reply", r_on.text}};
  if (json) {
    fmt::print("{}\n", nlohmann::json{{"model", model}, {"grammar", g}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("model {} | vocabulary {} tokens (trie built in {:.0f} ms)\n", model, tok.n_vocab(), trie_ms);
    fmt::print("schema compile {:.2f} ms (median of 21); token classes over the vocabulary {:.0f} ms ({} contexts, {:.1f} MiB)\n",
               quantile(compile_ms, 0.5), classes_ms, n_contexts, static_cast<double>(classes->bytes()) / (1 << 20));
    fmt::print("grammar work per token: refused every step (random logits) p50 {:.0f} us, p99 {:.0f} us for a schema's first "
               "request, p50 {:.0f} us, p99 {:.0f} us for later ones (warm); the model's own reply p50 {:.1f} us, p99 {:.1f} us\n",
               quantile(mask_us, 0.5), quantile(mask_us, 0.99), quantile(mask_warm_us, 0.5), quantile(mask_warm_us, 0.99),
               quantile(check_us, 0.5), quantile(check_us, 0.99));
    fmt::print("decode {:.2f} t/s with the schema ({} tokens, {} appended by jump-forward; {} steps with one choice), {:.2f} t/s "
               "without the schema ({:.1f} %); without jump-forward {:.2f} t/s ({} tokens)\n",
               tps_on, r_on.ids.size(), r_on.metrics.forced_tokens, one_choice, tps_off, tps_off > 0 ? 100.0 * tps_on / tps_off : 0.0,
               tps_no_jump, r_no_jump.ids.size());
    fmt::print("4 sequences (serving scheduler): {:.2f} t/s in all with the schema, {:.2f} without ({:.1f} %)\n", par_on, par_off,
               par_off > 0 ? 100.0 * par_on / par_off : 0.0);
  }
  return 0;
}

}  // namespace npullm::cli
