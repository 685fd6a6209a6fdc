// Speculative decoding (issue 47): the guessing side (n-gram lookup, a prediction followed through
// edits, the adaptive K), the acceptance rule (greedy: the token decoding would give; sampling: the
// model's distribution kept exactly, by a chi-square test on a tiny vocabulary), and the same
// answer: greedy output identical with speculation on and off for every K and draft source, on
// stories260K and the golden models, in one-shot generation and chat, wherever the output stops.
#include <gtest/gtest.h>

#include <npullm/llm_pipeline.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "genai/sampling/sampler.h"
#include "genai/speculative/speculator.h"
#include "test_util.h"

namespace npullm {
namespace {

using Ids = std::vector<int32_t>;

// ---------------------------------------------------------------------------------------------
// the guessing side

TEST(SpecLookup, TheLatestEarlierOccurrenceOfTheLongestSuffixGivesTheGuesses) {
  const Ids seq{5, 1, 2, 3, 9, 8, 1, 2, 3, 7, 4, 1, 2, 3};
  // "1 2 3" occurs at 1 and 6 before the end: the latest (6) is followed by 7 4 1.
  EXPECT_EQ(genai::prompt_lookup(seq, 3, 3, 1), (Ids{7, 4, 1}));
  EXPECT_EQ(genai::prompt_lookup(seq, 10, 3, 1), (Ids{7, 4, 1, 2, 3}));  // up to the end of the sequence
  // No earlier "x 3" with x = 6: the 1-gram "3" still matches (if allowed).
  const Ids other{5, 1, 2, 3, 9, 8, 6, 3};
  EXPECT_EQ(genai::prompt_lookup(other, 2, 3, 1), (Ids{9, 8}));
  EXPECT_TRUE(genai::prompt_lookup(other, 2, 3, 2).empty());
  EXPECT_TRUE(genai::prompt_lookup(Ids{1, 2, 3, 4}, 4, 3, 1).empty());  // nothing repeats
  // The occurrence nearest a cursor, when one is given.
  const Ids text{4, 1, 2, 6, 1, 2, 7, 1, 2, 8};
  EXPECT_EQ(genai::ngram_continuation(text, Ids{9, 1, 2}, 2, 2, 5), 6);
  EXPECT_EQ(genai::ngram_continuation(text, Ids{9, 1, 2}, 2, 2, 0), 3);
  EXPECT_EQ(genai::ngram_continuation(text, Ids{9, 1, 2}, 2, 2, -1), 9);
}

TEST(SpecPrediction, GuessesFollowThePredictionThroughASubstitutionAndAnInsertion) {
  const Ids prompt{100, 101};
  Ids pred;
  for (int32_t t = 10; t < 30; ++t) pred.push_back(t);
  genai::PredictionDraft d(pred, static_cast<int64_t>(prompt.size()), 3, 1);
  Ids seq = prompt;
  seq.push_back(10);                           // the reply starts as predicted
  EXPECT_EQ(d.propose(seq, 3), (Ids{11, 12, 13}));
  seq.insert(seq.end(), {11, 55});             // 11 accepted, 12 replaced by 55 (an edit)
  EXPECT_EQ(d.propose(seq, 3), (Ids{13, 14, 15}));  // a substitution: on at the same place
  seq.insert(seq.end(), {13, 14, 15, 16});     // all accepted and the next one
  EXPECT_EQ(d.propose(seq, 2), (Ids{17, 18}));
  seq.insert(seq.end(), {77, 78, 17, 18});     // two tokens inserted, then the prediction again
  EXPECT_EQ(d.propose(seq, 2), (Ids{19, 20}));  // found again by its last two tokens
  seq.insert(seq.end(), {19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29});
  EXPECT_TRUE(d.propose(seq, 2).empty());      // past the prediction's end
}

TEST(SpecSchedule, KGrowsWhenAllAreAcceptedShrinksOtherwiseAndPausesAfterNone) {
  genai::KSchedule s(7, true);
  EXPECT_EQ(s.next(), 7);
  s.record(7, 3);
  EXPECT_EQ(s.next(), 6);
  s.record(6, 6);
  EXPECT_EQ(s.next(), 7);  // +2, capped at max_k
  s.record(7, 0);          // none: K 6, a pause of 1 step
  EXPECT_EQ(s.next(), 0);
  EXPECT_EQ(s.next(), 6);
  s.record(6, 0);  // none again: pause 2
  EXPECT_EQ(s.next(), 0);
  EXPECT_EQ(s.next(), 0);
  EXPECT_EQ(s.next(), 5);
  s.record(5, 1);  // some accepted: no pause
  EXPECT_EQ(s.next(), 4);
  genai::KSchedule fixed(4, false);
  fixed.record(4, 1);
  EXPECT_EQ(fixed.next(), 4);
}

TEST(SpecCosts, TheKOfTheMostTokensForTheirCostIsChosenOnceEachBlobIsTimed) {
  genai::StepCosts c({2, 4, 8});
  EXPECT_EQ(c.best_k(7, 0.9), 0);  // no decode step timed: this step is one
  c.decode_took(0.010);
  EXPECT_EQ(c.best_k(7, 0.9), 1);  // the blobs not yet timed are tried, smallest first
  c.verify_took(2, 0.009);
  EXPECT_EQ(c.best_k(7, 0.9), 3);
  c.verify_took(4, 0.011);
  EXPECT_EQ(c.best_k(7, 0.9), 7);
  c.verify_took(8, 0.022);
  EXPECT_NEAR(c.ratio(8), 2.2, 1e-9);
  // r 0.9 / 1.1 / 2.2 (Zen 5's TinyLlama) at a = 0.9: tokens per decode step's time are 1.9 / 0.9 =
  // 2.11 for K 1, 3.44 / 1.1 = 3.13 for K 3, 5.70 / 2.2 = 2.59 for K 7.
  EXPECT_EQ(c.best_k(7, 0.9), 3);
  EXPECT_EQ(c.best_k(2, 0.9), 2);  // 2.71 / 1.1 against 2.11: the schedule's K itself is a candidate
  // Where 8 rows cost little more than 4 the most guesses win (5.70 / 1.2 = 4.74), unless guesses
  // are mostly wrong (a = 0.3: 1.44, 1.29, 1.19).
  for (int i = 0; i < 40; ++i) c.verify_took(8, 0.012);  // the average follows recent steps
  EXPECT_NEAR(c.ratio(8), 1.2, 1e-3);
  EXPECT_EQ(c.best_k(7, 0.9), 7);
  EXPECT_EQ(c.best_k(7, 0.3), 1);
  // A draft model's steps cost too, K + 1 of them a verify step: at c = 0.5, K 1 1.9 / 1.9 = 1.0,
  // K 3 3.44 / 3.1 = 1.11, K 7 5.70 / 5.2 = 1.10; at c = 1 (the model as its own draft, a = 1) K 7
  // 8 / 9.2 = 0.87 against K 1's 2 / 2.9 = 0.69.
  c.draft_took(4, 0.020);
  EXPECT_NEAR(c.draft_cost(), 0.5, 1e-9);
  EXPECT_EQ(c.best_k(7, 0.9), 3);
  for (int i = 0; i < 40; ++i) c.draft_took(1, 0.010);
  EXPECT_EQ(c.best_k(7, 1.0), 7);
}

// ---------------------------------------------------------------------------------------------
// the acceptance rule

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(SpecAcceptance, GreedyAcceptsExactlyTheArgmaxAndUsesNoRandomness) {
  const std::vector<float> lg = logits_of({0.1, 0.5, 0.2, 0.2});
  for (uint64_t seed : {1u, 2u}) {
    genai::SamplerConfig c;
    c.seed = seed;
    genai::Sampler s(c);
    for (int32_t guess = 0; guess < 4; ++guess) {
      const genai::Sampler::Verdict v = s.verify(lg, guess);
      EXPECT_EQ(v.id, 1);
      EXPECT_EQ(v.accepted, guess == 1);
    }
  }
}

// Chi-square of observed counts against probabilities (cells with p > 0; a draw where p = 0 fails).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = p[i] * static_cast<double>(n);
    x2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return x2;
}

// With sampling, guess-then-verify draws from the sampler's own distribution (the chain's final
// p, filters and temperature included), whatever the guess: likely, unlikely, or filtered out.
TEST(SpecAcceptance, SamplingKeepsTheTargetDistributionWhateverTheGuess) {
  const std::vector<float> lg = logits_of({0.4, 0.3, 0.15, 0.1, 0.05});
  struct Case {
    float temperature;
    int32_t top_k;
  };
  for (const Case cs : {Case{1.0f, 0}, Case{0.7f, 3}}) {
    genai::SamplerConfig c;
    c.temperature = cs.temperature;
    c.top_k = cs.top_k;
    c.seed = 42;
    genai::Sampler s(c);
    std::vector<double> p(5, 0.0);
    for (const genai::Candidate& x : s.distribution(lg)) p[static_cast<size_t>(x.id)] = x.p;
    for (int32_t guess : {0, 2, 4}) {
      SCOPED_TRACE(testing::Message() << "T " << cs.temperature << " top_k " << cs.top_k << " guess " << guess);
      constexpr int64_t n = 200000;
      std::vector<int64_t> counts(5, 0);
      int64_t accepted = 0;
      for (int64_t i = 0; i < n; ++i) {
        const genai::Sampler::Verdict v = s.verify(lg, guess);
        ++counts[static_cast<size_t>(v.id)];
        accepted += v.accepted;
        ASSERT_EQ(v.accepted, v.id == guess);
      }
      // df <= 4: 25 is p < 1e-4, so a correct rule fails this once in > 10,000 seeds; a rule off
      // by 1 % of mass on a likely token gives ~ 40 here.
      EXPECT_LT(chi_square(counts, p, n), 25.0);
      // The guess is accepted with its probability.
      EXPECT_NEAR(static_cast<double>(accepted) / n, p[static_cast<size_t>(guess)], 0.005);
    }
  }
  // The test has teeth: a plausible wrong rule (a rejection draws from p itself, the guess not
  // taken out) puts p(g) + (1 - p(g)) p(g) on the guess, and the same test throws it out.
  genai::SamplerConfig c;
  c.temperature = 1.0f;
  c.seed = 9;
  genai::Sampler s(c), ref(c);
  const std::vector<double> p{0.4, 0.3, 0.15, 0.1, 0.05};
  std::vector<int64_t> wrong(5, 0);
  constexpr int64_t n = 20000;
  for (int64_t i = 0; i < n; ++i) {
    const genai::Sampler::Verdict v = s.verify(lg, 2);
    ++wrong[static_cast<size_t>(v.accepted ? 2 : ref.sample(lg))];
  }
  EXPECT_GT(chi_square(wrong, p, n), 100.0);
}

// ---------------------------------------------------------------------------------------------
// the same answer

PipelineConfig pipeline_config(int64_t spec_max_k, const std::string& draft = "") {
  PipelineConfig c;
  c.prefill_chunk = 16;
  c.variants = {128, 256};
  c.use_cache = false;
  c.threads = 2;
  c.spec_max_k = spec_max_k;
  c.draft_model = draft;
  return c;
}

GenerationConfig greedy(int64_t n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  g.ignore_eos = true;  // the golden models' random weights may end early
  return g;
}

// An oracle draft: the reference continuation, each guess replaced by another token with
// probability 1 - alpha.
std::function<Ids(const Ids&, int64_t)> oracle(const Ids& context, const Ids& reference, double alpha, int32_t n_vocab,
                                               uint64_t seed) {
  auto rng = std::make_shared<std::mt19937_64>(seed);
  const size_t ctx = context.size();
  return [=](const Ids& seq, int64_t k) {
    Ids out;
    for (size_t g = seq.size() - ctx; g < reference.size() && static_cast<int64_t>(out.size()) < k; ++g) {
      const bool right = std::uniform_real_distribution<double>(0, 1)(*rng) < alpha;
      out.push_back(right ? reference[g] : (reference[g] + 1) % n_vocab);
    }
    return out;
  };
}

void expect_same(const GenerationResult& off, const GenerationResult& on, const std::string& what) {
  EXPECT_EQ(on.ids, off.ids) << what;
  EXPECT_EQ(on.text, off.text) << what;
  EXPECT_EQ(on.finish, off.finish) << what;
  EXPECT_GT(on.metrics.spec_verify_steps, 0) << what;
  EXPECT_EQ(on.metrics.kv_bytes_copied, 0) << what;
}

struct SameAnswerModel {
  const char* path;
  const char* prompt;
};

class SpecSameAnswer : public ::testing::TestWithParam<SameAnswerModel> {};

TEST_P(SpecSameAnswer, GreedyOutputIsIdenticalForEveryKAndDraftSource) {
  NPULLM_REQUIRE_SHARED(GetParam().path);
  const std::string path = test::shared_path(GetParam().path);
  LLMPipeline plain(path, pipeline_config(0));
  const GenerationResult off = plain.generate(GetParam().prompt, greedy(120));
  ASSERT_GT(off.ids.size(), 20u);
  const int32_t V = static_cast<int32_t>(plain.n_vocab());
  LLMPipeline spec(path, pipeline_config(15, path));  // the model is its own draft model
  for (int64_t k : {1, 3, 7, 15}) {
    GenerationConfig g = greedy(120);
    g.speculative.max_k = k;
    g.speculative.mode = SpecMode::Lookup;
    expect_same(off, spec.generate(GetParam().prompt, g), "lookup, K " + std::to_string(k));
    g.speculative.adaptive = false;
    expect_same(off, spec.generate(GetParam().prompt, g), "lookup, fixed K " + std::to_string(k));
    g.speculative.adaptive = true;
    g.speculative.mode = SpecMode::Draft;
    const GenerationResult d = spec.generate(GetParam().prompt, g);
    expect_same(off, d, "draft model, K " + std::to_string(k));
    EXPECT_EQ(d.metrics.spec_accepted, d.metrics.spec_drafted) << "the model as its own draft is always right";
    g.speculative.mode = SpecMode::Off;
    for (double alpha : {0.0, 0.5, 0.9, 1.0}) {
      g.speculative.draft_fn = oracle(off.context_ids, off.ids, alpha, V, 7);
      const GenerationResult o = spec.generate(GetParam().prompt, g);
      expect_same(off, o, "oracle " + std::to_string(alpha) + ", K " + std::to_string(k));
      if (alpha == 1.0) {
        EXPECT_EQ(o.metrics.spec_accepted, o.metrics.spec_drafted);
      }
      if (alpha == 0.0) {
        EXPECT_EQ(o.metrics.spec_accepted, 0);
      }
    }
    g.speculative.draft_fn = nullptr;
    // The reply itself as the prediction, and the reply with a tenth of its tokens changed.
    g.speculative.prediction = off.text;
    const GenerationResult p = spec.generate(GetParam().prompt, g);
    expect_same(off, p, "prediction, K " + std::to_string(k));
    EXPECT_GT(p.metrics.prediction_accepted, 0);
    if (spec.tokenize(off.text) == off.ids) {  // the reply's text tokenizes back to its ids
      EXPECT_GE(p.metrics.prediction_accepted, 8 * p.metrics.prediction_rejected) << "the exact reply predicted";
    }
    Ids edited = off.ids;
    for (size_t i = 5; i < edited.size(); i += 10) edited[i] = (edited[i] + 3) % V;
    g.speculative.prediction = spec.detokenize(edited);
    expect_same(off, spec.generate(GetParam().prompt, g), "edited prediction, K " + std::to_string(k));
    g.speculative.prediction.clear();
    // The same edit sent as ids, K fixed: the guesses follow the reply through every substitution,
    // so at least half of what K allows of the unchanged tokens is taken from it (a verify step
    // yields at most K guessed tokens of every K + 1; each edit loses the guesses after it in its step).
    // Losing the prediction at the first edit would take 5.
    g.speculative.prediction_ids = edited;
    g.speculative.adaptive = false;  // K guesses every step, whatever the steps cost here
    const GenerationResult pi = spec.generate(GetParam().prompt, g);
    g.speculative.adaptive = true;
    expect_same(off, pi, "edited prediction as ids, K " + std::to_string(k));
    const int64_t edits = static_cast<int64_t>((edited.size() - 5 + 9) / 10);
    EXPECT_GE(pi.metrics.prediction_accepted, (static_cast<int64_t>(off.ids.size()) - edits) * k / (k + 1) / 2) << "K " << k;
    g.speculative.prediction_ids.clear();
  }
}

std::string param_name(const ::testing::TestParamInfo<SameAnswerModel>& i) {
  static const char* const names[] = {"stories260K", "qwen2_Q4_0", "llama_Q8_0"};
  return names[i.index];
}

INSTANTIATE_TEST_SUITE_P(Models, SpecSameAnswer,
                         ::testing::Values(SameAnswerModel{"models/llama2c/stories260K.gguf", "Once upon a time"},
                                           SameAnswerModel{"golden/qwen2-gpt2.Q4_0.gguf", "The quick brown fox"},
                                           SameAnswerModel{"golden/llama-spm.Q8_0.gguf", "Hello world, hello"}),
                         param_name);

// Wherever the output ends (a token limit, a stop string inside a verified run), the text, the ids
// and what the next turn sees are those of decoding token by token.
TEST(SpecSameAnswerStories, EndsAndChatTurnsAreThoseOfDecodingOneByOne) {
  NPULLM_REQUIRE_SHARED(test::kStoriesModel);
  const std::string path = test::shared_path(test::kStoriesModel);
  LLMPipeline plain(path, pipeline_config(0));
  LLMPipeline spec(path, pipeline_config(7));
  GenerationConfig on = greedy(1);
  on.speculative.mode = SpecMode::Lookup;
  for (int64_t n : {1, 2, 3, 9, 40, 200}) {
    GenerationConfig g = greedy(n);
    on.max_new_tokens = n;
    const GenerationResult a = plain.generate("Once upon a time", g), b = spec.generate("Once upon a time", on);
    EXPECT_EQ(b.ids, a.ids) << n;
    EXPECT_EQ(b.text, a.text) << n;
    EXPECT_EQ(spec.conversation_ids(), plain.conversation_ids()) << n;
    EXPECT_EQ(spec.kv_position(), plain.kv_position()) << n;
  }
  // A stop string taken from the middle of the reply.
  const GenerationResult full = plain.generate("Once upon a time", greedy(150));
  const std::string stop = full.text.substr(full.text.size() / 2, 6);
  GenerationConfig g = greedy(150);
  g.stop_strings = {stop};
  on.max_new_tokens = 150;
  on.stop_strings = {stop};
  const GenerationResult a = plain.generate("Once upon a time", g), b = spec.generate("Once upon a time", on);
  EXPECT_EQ(b.text, a.text);
  EXPECT_EQ(b.finish, FinishReason::StopString);
  EXPECT_EQ(spec.conversation_ids(), plain.conversation_ids());
  // Chat: three turns, each reusing the state the previous one (and its rolled-back rows) left.
  PipelineConfig pc = pipeline_config(0), sc = pipeline_config(7);
  pc.chat_template = sc.chat_template =
      "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
  LLMPipeline chat_off(path, pc), chat_on(path, sc);
  chat_off.start_chat("Tell a story.");
  chat_on.start_chat("Tell a story.");
  on.stop_strings.clear();
  on.max_new_tokens = 60;
  for (const char* user : {"Once upon a time there was a cat.", "The cat saw a dog.", "Then they played."}) {
    const GenerationResult x = chat_off.generate(user, greedy(60)), y = chat_on.generate(user, on);
    EXPECT_EQ(y.text, x.text) << user;
    EXPECT_EQ(y.metrics.kv_bytes_copied, x.metrics.kv_bytes_copied);  // context shifts only, as without
  }
  EXPECT_EQ(chat_on.conversation_ids(), chat_off.conversation_ids());
}

// Sampling with speculation draws valid tokens; the counts add up.
TEST(SpecSampling, MetricsAddUpAndTheRunIsReproducible) {
  NPULLM_REQUIRE_SHARED(test::kStoriesModel);
  LLMPipeline spec(test::shared_path(test::kStoriesModel), pipeline_config(7));
  GenerationConfig g = greedy(100);
  g.temperature = 0.8f;
  g.seed = 3;
  g.speculative.mode = SpecMode::Lookup;
  const GenerationResult a = spec.generate("Once upon a time", g), b = spec.generate("Once upon a time", g);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_GT(a.metrics.spec_verify_steps, 0);
  EXPECT_LE(a.metrics.spec_accepted, a.metrics.spec_drafted);
  EXPECT_EQ(a.metrics.kv_bytes_copied, 0);
}

TEST(SpecRefusals, SpeculationTheConfigurationCannotRunIsRefusedByName) {
  NPULLM_REQUIRE_SHARED(test::kStoriesModel);
  const std::string path = test::shared_path(test::kStoriesModel);
  LLMPipeline none(path, pipeline_config(0));
  GenerationConfig g = greedy(4);
  g.speculative.mode = SpecMode::Lookup;
  EXPECT_NE(test::error_of([&] { none.generate("Once", g); }).find("spec_max_k"), std::string::npos);
  LLMPipeline some(path, pipeline_config(3));
  g.speculative.mode = SpecMode::Draft;
  EXPECT_NE(test::error_of([&] { some.generate("Once", g); }).find("draft_model"), std::string::npos);
  g.speculative.mode = SpecMode::Off;
  g.speculative.prediction_ids = {1, static_cast<int32_t>(some.n_vocab())};
  EXPECT_NE(test::error_of([&] { some.generate("Once", g); }).find("prediction id"), std::string::npos);
  PipelineConfig bad = pipeline_config(3, test::shared_path("golden/qwen2-gpt2.Q4_0.gguf"));
  if (std::filesystem::exists(bad.draft_model)) {
    EXPECT_NE(test::error_of([&] { LLMPipeline p(path, bad); }).find("share the vocabulary"), std::string::npos);
  }
}

}  // namespace
}  // namespace npullm
