// npullm bench --json-schema FILE: what structured output costs (issue 46's figures).
//
//   compile_ms      median time to compile the schema (uncached), 21 runs
//   mask_us_p50/99  grammar work per token when the sampled token is refused every time: random
//                   logits over the model's vocabulary, so each step checks the token and then
//                   builds (or reuses, for a state seen before) the full mask. The worst case.
//   check_us_p50/99 grammar work per token on the model's own greedy reply (the common case: the
//                   chosen token is checked and taken, no mask)
//   forced_tokens   steps of that reply where the grammar allowed exactly one token
//   tg_tps          decode tokens/s of that reply, wall clock after the first token (sampling and
//                   the grammar included); tg_tps_off the same run without the schema
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"
#include "formats/gguf.h"
#include "genai/grammar/compile.h"
#include "genai/grammar/structured.h"
#include "genai/grammar/token_classes.h"
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

  // The reply with and without the schema (greedy; the grammar ends it when nothing may follow).
  LLMPipeline pipe(model, cfg);
  auto timed = [&](const GenerationConfig& g, GenerationResult& out) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      out = pipe.generate("JSON:", g);
      const double ms = us_between(t0, Clock::now()) / 1000.0 - out.metrics.ttft_ms;
      const double tps = out.ids.size() > 1 && ms > 0 ? static_cast<double>(out.ids.size() - 1) * 1000.0 / ms : 0.0;
      best = std::max(best, tps);
    }
    return best;
  };
  GenerationConfig off;
  off.max_new_tokens = n_gen;
  off.ignore_eos = true;
  GenerationResult r_off, r_on;
  const double tps_off = timed(off, r_off);
  GenerationConfig on = off;
  on.structured = so;
  const double tps_on = timed(on, r_on);

  // The vocabulary, for the per-token figures.
  auto f = GgufFile::open(model);
  const genai::Tokenizer tok(genai::Vocab::from_gguf(*f));
  const auto t_trie = Clock::now();
  const auto trie = genai::grammar::make_token_trie(tok);
  const double trie_ms = us_between(t_trie, Clock::now()) / 1000.0;
  const std::vector<int32_t> ends = {tok.eos()};
  // The schema's token classes over this vocabulary (what a request's grammar is given when it is
  // made, off the decode thread): built once here, timed.
  const auto t_classes = Clock::now();
  auto classes = std::make_shared<genai::grammar::TokenClasses>(grammar, trie);
  const size_t n_contexts = classes->precompute();
  const double classes_ms = us_between(t_classes, Clock::now()) / 1000.0;

  // Replay of the model's reply: the check per token, and the steps with one choice.
  std::vector<double> check_us;
  int64_t forced = 0;
  {
    genai::grammar::TokenMatcher tm(grammar, trie, ends, "", classes);
    for (int32_t id : r_on.ids) {
      if (popcount(tm.mask()) == 1) ++forced;
      const auto t0 = Clock::now();
      const bool ok = tm.allowed(id) && tm.accept(id);
      check_us.push_back(us_between(t0, Clock::now()));
      if (!ok) fail("bench: the reply's token {} is not allowed on replay", id);
    }
  }

  // Random logits: the sampled token is refused at (nearly) every step, so the mask path runs.
  std::vector<double> mask_us;
  {
    genai::grammar::TokenMatcher tm(grammar, trie, ends, "", classes);
    std::mt19937 rng(1);
    std::normal_distribution<float> noise(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(tok.n_vocab()));
    genai::Sampler sampler(genai::SamplerConfig{});
    for (int64_t step = 0; step < std::max<int64_t>(n_gen, 64) && !tm.must_end(); ++step) {
      for (float& x : logits) x = noise(rng);
      int32_t id = sampler.sample(logits);
      const auto t0 = Clock::now();
      if (!tm.allowed(id)) id = sampler.sample(logits, tm.mask());
      mask_us.push_back(us_between(t0, Clock::now()));
      if (tm.is_end(id) || !tm.accept(id)) break;
    }
  }

  nlohmann::json g = {{"mask_us_p50", quantile(mask_us, 0.5)},
                      {"mask_us_p99", quantile(mask_us, 0.99)},
                      {"mask_steps", mask_us.size()},
                      {"check_us_p50", quantile(check_us, 0.5)},
                      {"check_us_p99", quantile(check_us, 0.99)},
                      {"compile_ms", quantile(compile_ms, 0.5)},
                      {"forced_tokens", forced},
                      {"tokens", r_on.ids.size()},
                      {"tg_tps", tps_on},
                      {"tg_tps_off", tps_off},
                      {"tg_ratio", tps_off > 0 ? tps_on / tps_off : 0.0},
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
    fmt::print("grammar work per token: refused every step (random logits) p50 {:.0f} us, p99 {:.0f} us; "
               "the model's own reply p50 {:.1f} us, p99 {:.1f} us\n",
               quantile(mask_us, 0.5), quantile(mask_us, 0.99), quantile(check_us, 0.5), quantile(check_us, 0.99));
    fmt::print("decode {:.2f} t/s with the schema ({} tokens, {} forced), {:.2f} t/s without ({:.1f} %)\n", tps_on, r_on.ids.size(),
               forced, tps_off, tps_off > 0 ? 100.0 * tps_on / tps_off : 0.0);
  }
  return 0;
}

}  // namespace npullm::cli
