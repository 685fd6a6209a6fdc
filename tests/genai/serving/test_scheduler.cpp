// The serving scheduler (continuous batching over npuw's sequence slots), on stories260K:
// every request's text equals LLMPipeline's for the same prompt and settings (greedy and seeded
// sampling), whatever runs beside it and whenever it arrives; a prompt sharing a prefix with what
// a free slot holds reuses those rows, and one another slot holds (or runs later) is copied in;
// cancellation frees the slot; a full queue is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <npullm/llm_pipeline.h>
#include <thread>

#include "genai/serving/scheduler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

const char* kModel = "models/llama2c/stories260K.gguf";

PipelineConfig pipeline_config() {
  PipelineConfig c;
  c.use_cache = false;
  c.variants = {64, 128, 256};
  c.prefill_chunk = 16;
  c.threads = 2;
  return c;
}

struct Outcome {
  genai::ServeResult result;
  std::string streamed;
};

// Submits and returns a future of the outcome; the text streamed is collected too.
std::future<Outcome> start(genai::Scheduler& s, std::vector<int32_t> ids, GenerationConfig g) {
  auto out = std::make_shared<Outcome>();
  auto done = std::make_shared<std::promise<Outcome>>();
  genai::ServeRequest r;
  r.prompt_ids = std::move(ids);
  r.gen = std::move(g);
  r.on_text = [out](std::string_view piece) {
    out->streamed += piece;
    return true;
  };
  r.on_done = [out, done](const genai::ServeResult& res) {
    out->result = res;
    done->set_value(*out);
  };
  s.submit(std::move(r));
  return done->get_future();
}

GenerationConfig greedy(int64_t n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  return g;
}

// The ids of `text` as it continues a prompt (without the BOS encode_prompt puts first).
std::vector<int32_t> tail(genai::Scheduler& sched, const char* text) {
  const std::vector<int32_t> v = sched.encode_prompt(text);
  return std::vector<int32_t>(v.begin() + 1, v.end());
}

TEST(Scheduler, EveryRequestGetsThePipelinesTextWhateverRunsBesideIt) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  LLMPipeline pipe(path, pipeline_config());
  const std::vector<std::string> prompts = {
      "Once upon a time", "The little dog", "Lily and Tom went to the park. They saw a big tree and a small bird. The bird",
      "One day", "Tim had a red ball. He liked to play with it every day in the garden with his friend Sam, who",
      "She was happy"};
  std::vector<GenerationConfig> gens;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationConfig g = greedy(40 + 17 * static_cast<int64_t>(i % 3));
    if (i % 2 == 1) {  // seeded sampling: the same draws as the pipeline's
      g.temperature = 0.8f;
      g.top_p = 0.9f;
      g.seed = 100 + i;
    }
    if (i == 3) g.stop_strings = {"."};
    gens.push_back(g);
  }
  std::vector<GenerationResult> want;
  for (size_t i = 0; i < prompts.size(); ++i) want.push_back(pipe.generate(prompts[i], gens[i]));

  genai::SchedulerConfig sc;
  sc.parallel = 4;
  genai::Scheduler sched(path, pipeline_config(), sc);
  std::vector<std::future<Outcome>> got;
  for (size_t i = 0; i < prompts.size(); ++i) {
    got.push_back(start(sched, sched.encode_prompt(prompts[i]), gens[i]));
    std::this_thread::sleep_for(std::chrono::milliseconds(i % 2 ? 0 : 3));  // arrivals while others decode
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    const Outcome o = got[i].get();
    EXPECT_EQ(o.result.error, "");
    EXPECT_EQ(o.result.text, want[i].text);
    EXPECT_EQ(o.streamed, want[i].text);
    EXPECT_EQ(o.result.ids, want[i].ids);
    EXPECT_EQ(o.result.finish, want[i].finish);
    EXPECT_EQ(o.result.prompt_tokens, static_cast<int64_t>(want[i].prompt_ids.size()));
  }
  const genai::SchedulerStatus st = sched.status();
  EXPECT_EQ(st.requests_done, prompts.size());
  EXPECT_EQ(st.busy_slots, 0);
  EXPECT_GT(sched.runtime().stats().batched_steps, 0);
  EXPECT_EQ(sched.runtime().stats().kv_bytes_copied, 0);
  EXPECT_EQ(st.ttft_ms.count, prompts.size());
}

// Speculative decoding inside continuous batching (issue 47): two sequences decoding at once, each
// guessing from its own text (prompt lookup) or from a prediction, checked together in verify steps;
// with greedy sampling every reply is the plain pipeline's, the guesses are counted, rejected rows
// are given up without copies, and a later request reuses a speculating slot's rows as usual.
TEST(Scheduler, SpeculationGivesThePlainTextAndCountsItsGuesses) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  LLMPipeline pipe(path, pipeline_config());
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Once upon a time, there was"};
  std::vector<GenerationResult> want;
  for (const std::string& p : prompts) want.push_back(pipe.generate(p, greedy(120)));

  PipelineConfig pc = pipeline_config();
  pc.spec_max_k = 7;
  genai::SchedulerConfig sc;
  sc.parallel = 2;
  genai::Scheduler sched(path, pc, sc);
  std::vector<GenerationConfig> gens(prompts.size(), greedy(120));
  gens[0].speculative.mode = SpecMode::Lookup;
  gens[1].speculative.prediction = want[1].text;  // the reply itself: nearly every guess right
  gens[2].speculative.mode = SpecMode::Lookup;
  std::vector<std::future<Outcome>> got;
  for (size_t i = 0; i < 2; ++i) got.push_back(start(sched, sched.encode_prompt(prompts[i]), gens[i]));
  std::vector<Outcome> outs;
  for (auto& f : got) outs.push_back(f.get());
  outs.push_back(start(sched, sched.encode_prompt(prompts[2]), gens[2]).get());  // after: reuses a slot's prefix
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    EXPECT_EQ(outs[i].result.error, "");
    EXPECT_EQ(outs[i].result.ids, want[i].ids);
    EXPECT_EQ(outs[i].streamed, want[i].text);
    EXPECT_LE(outs[i].result.spec_accepted, outs[i].result.spec_drafted);
  }
  EXPECT_GT(outs[0].result.spec_drafted, 0);
  EXPECT_GT(outs[1].result.prediction_accepted, 4 * outs[1].result.prediction_rejected);
  EXPECT_GT(outs[2].result.cached_tokens, 0);
  const genai::SchedulerStatus st = sched.status();
  EXPECT_GT(st.spec_verify_steps, 0u);
  EXPECT_GT(st.spec_accepted, 0u);
  EXPECT_EQ(st.spec_drafted, static_cast<uint64_t>(outs[0].result.spec_drafted + outs[1].result.spec_drafted + outs[2].result.spec_drafted));
  uint64_t at = 0;
  for (uint64_t n : st.spec_accepted_at) at += n;
  EXPECT_EQ(at, st.spec_accepted);
  EXPECT_EQ(sched.runtime().stats().kv_bytes_copied, 0);
  EXPECT_GT(sched.runtime().stats().rolled_back_rows, 0);
}

// A draft model when serving: the draft runtime has a slot per sequence slot, each request's draft
// brought to its own sequence there. The model as its own draft guesses every token right, so
// replies are the plain pipeline's and every guess is accepted, for two requests at once and for
// a later one in a slot whose draft rows belong to an earlier request.
TEST(Scheduler, ADraftModelGuessesForEachSlotFromItsOwnRows) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  LLMPipeline pipe(path, pipeline_config());
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "One day, a girl"};
  std::vector<GenerationResult> want;
  for (const std::string& p : prompts) want.push_back(pipe.generate(p, greedy(100)));

  PipelineConfig pc = pipeline_config();
  pc.spec_max_k = 7;
  pc.draft_model = path;
  genai::SchedulerConfig sc;
  sc.parallel = 2;
  genai::Scheduler sched(path, pc, sc);
  GenerationConfig g = greedy(100);
  g.speculative.mode = SpecMode::Draft;
  std::vector<std::future<Outcome>> got;
  for (size_t i = 0; i < 2; ++i) got.push_back(start(sched, sched.encode_prompt(prompts[i]), g));
  std::vector<Outcome> outs;
  for (auto& f : got) outs.push_back(f.get());
  outs.push_back(start(sched, sched.encode_prompt(prompts[2]), g).get());
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(prompts[i]);
    EXPECT_EQ(outs[i].result.error, "");
    EXPECT_EQ(outs[i].result.ids, want[i].ids);
    EXPECT_GT(outs[i].result.spec_drafted, 0);
    EXPECT_EQ(outs[i].result.spec_accepted, outs[i].result.spec_drafted) << "the model as its own draft is always right";
  }
  // Without a draft model the mode is refused at submission, by name.
  genai::Scheduler plain(path, pipeline_config(), sc);
  EXPECT_NE(test::error_of([&] { start(plain, plain.encode_prompt("Once"), g).get(); }).find("--draft-model"), std::string::npos);
}

TEST(Scheduler, APromptSharingAPrefixWithAFreeSlotPrefillsOnlyTheRest) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  genai::SchedulerConfig sc;
  sc.parallel = 2;
  genai::Scheduler sched(path, pipeline_config(), sc);
  const std::vector<int32_t> first = sched.encode_prompt("Once upon a time there was a little girl");
  const Outcome a = start(sched, first, greedy(20)).get();
  EXPECT_EQ(a.result.cached_tokens, 0);
  // A second turn: the first prompt, its reply and more text.
  std::vector<int32_t> second = first;
  second.insert(second.end(), a.result.ids.begin(), a.result.ids.end());
  const std::vector<int32_t> more = sched.encode_prompt("The end. One day");
  second.insert(second.end(), more.begin() + 1, more.end());  // without BOS
  const Outcome b = start(sched, second, greedy(20)).get();
  // Every row the first request ran is reused: its prompt and its reply but the last token
  // (sampled, never run).
  EXPECT_EQ(b.result.cached_tokens, static_cast<int64_t>(first.size() + a.result.ids.size() - 1));
  EXPECT_EQ(b.result.prompt_tokens, static_cast<int64_t>(second.size()));
  LLMPipeline pipe(path, pipeline_config());
  EXPECT_EQ(b.result.text, pipe.generate_ids(second, greedy(20)).text);
  EXPECT_EQ(sched.status().cached_tokens, static_cast<uint64_t>(b.result.cached_tokens));
}

// A request whose prompt shares a long prefix with one still running in another slot (a common
// system prompt) gets that slot's rows copied in: it prefills only the rest and answers as
// LLMPipeline does for its whole prompt.
TEST(Scheduler, APromptSharingAPrefixWithABusySlotCopiesItsRows) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  genai::SchedulerConfig sc;
  sc.parallel = 2;
  genai::Scheduler sched(path, pipeline_config(), sc);
  std::vector<int32_t> pa = sched.encode_prompt(
      "Once upon a time there was a little girl named Lily. She lived in a small house with her mom and dad. Every day she");
  std::vector<int32_t> pb = pa;
  const std::vector<int32_t> ta = tail(sched, " went to the park to play."), tb = tail(sched, " liked to sing songs with her dog.");
  pa.insert(pa.end(), ta.begin(), ta.end());
  pb.insert(pb.end(), tb.begin(), tb.end());
  size_t shared = 0;
  while (shared < pa.size() && shared < pb.size() && pa[shared] == pb[shared]) ++shared;
  ASSERT_GE(shared, genai::Scheduler::kMinCopiedRows + 8);
  ASSERT_LT(shared, pb.size());

  // B is submitted when A streams its first piece: A's prompt rows are in and it keeps decoding
  // (ignore_eos), so its slot is busy when B is admitted.
  GenerationConfig ga = greedy(60);
  ga.ignore_eos = true;
  std::promise<genai::ServeResult> done_a, done_b;
  bool b_sent = false;
  genai::ServeRequest b;
  b.prompt_ids = pb;
  b.gen = greedy(20);
  b.on_done = [&](const genai::ServeResult& r) { done_b.set_value(r); };
  genai::ServeRequest a;
  a.prompt_ids = pa;
  a.gen = ga;
  a.on_text = [&](std::string_view) {
    if (!b_sent) {
      b_sent = true;
      sched.submit(std::move(b));
    }
    return true;
  };
  a.on_done = [&](const genai::ServeResult& r) { done_a.set_value(r); };
  sched.submit(std::move(a));
  const genai::ServeResult ra = done_a.get_future().get(), rb = done_b.get_future().get();
  EXPECT_EQ(ra.error, "");
  EXPECT_EQ(rb.error, "");
  EXPECT_EQ(ra.cached_tokens, 0);
  EXPECT_NE(rb.slot, ra.slot);
  EXPECT_EQ(rb.cached_tokens, static_cast<int64_t>(shared));
  EXPECT_EQ(sched.status().copied_prefix_rows, shared);
  EXPECT_EQ(sched.runtime().stats().kv_bytes_copied, static_cast<int64_t>(shared) * sched.runtime().stats().kv_row_bytes);
  LLMPipeline pipe(path, pipeline_config());
  EXPECT_EQ(rb.text, pipe.generate_ids(pb, greedy(20)).text);
  EXPECT_EQ(rb.ids, pipe.generate_ids(pb, greedy(20)).ids);
}

// Two requests that share a long prefix, admitted together while a third still prefills: neither
// slot holds the prefix when they are admitted, and prefill goes to the earliest request first, so
// the second takes the first's rows once they are in instead of prefilling them again.
TEST(Scheduler, ARequestAdmittedBesideOneStillPrefillingItsPrefixCopiesTheRowsLater) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  genai::SchedulerConfig sc;
  sc.parallel = 3;
  genai::Scheduler sched(path, pipeline_config(), sc);
  std::vector<int32_t> pc = sched.encode_prompt(
      "Tom had a big red ball. He liked to kick it in the garden every morning. One day the ball went over "
      "the fence and into the garden of an old man. Tom was scared, but he knocked on the door. The old man "
      "smiled and gave the ball back. He said Tom could come and play in his garden too. Tom was very happy. "
      "From that day on, Tom and the old man were good friends, and they played ball together every day.");
  std::vector<int32_t> pa = sched.encode_prompt(
      "Once upon a time there was a little girl named Lily. She lived in a small house with her mom and dad. "
      "Every day she went outside to look at the sky, and every night she");
  std::vector<int32_t> pb = pa;
  const std::vector<int32_t> ta = tail(sched, " went to the park to play."), tb = tail(sched, " liked to sing songs with her dog.");
  pa.insert(pa.end(), ta.begin(), ta.end());
  pb.insert(pb.end(), tb.begin(), tb.end());
  size_t shared = 0;
  while (shared < pa.size() && shared < pb.size() && pa[shared] == pb[shared]) ++shared;
  ASSERT_GE(shared, 2 * genai::Scheduler::kMinCopiedRows);
  ASSERT_GE(pc.size(), 8u * 16);  // C prefills in 8 chunks or more while A and B are submitted
  std::future<Outcome> c = start(sched, pc, greedy(4));
  std::future<Outcome> a = start(sched, pa, greedy(12));
  std::future<Outcome> b = start(sched, pb, greedy(12));
  const genai::ServeResult rc = c.get().result, ra = a.get().result, rb = b.get().result;
  for (const genai::ServeResult* r : {&rc, &ra, &rb}) EXPECT_EQ(r->error, "");
  EXPECT_EQ(ra.cached_tokens, 0);
  EXPECT_EQ(rb.cached_tokens, static_cast<int64_t>(shared));
  const genai::SchedulerStatus st = sched.status();
  EXPECT_EQ(st.copied_prefix_rows, shared);
  EXPECT_LE(st.copied_prefix_rows, st.cached_tokens);  // the copied rows are a part of the cached ones
  LLMPipeline pipe(path, pipeline_config());
  EXPECT_EQ(rb.ids, pipe.generate_ids(pb, greedy(12)).ids);
  EXPECT_EQ(ra.ids, pipe.generate_ids(pa, greedy(12)).ids);
}

TEST(Scheduler, CancellationFreesTheSlotAndAFullQueueIsRefused) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  genai::SchedulerConfig sc;
  sc.parallel = 1;
  sc.max_queue = 1;
  genai::Scheduler sched(path, pipeline_config(), sc);
  GenerationConfig g = greedy(200);
  g.ignore_eos = true;

  // A client that goes away after three pieces.
  std::promise<genai::ServeResult> done;
  int pieces = 0;
  genai::ServeRequest r;
  r.prompt_ids = sched.encode_prompt("Once upon a time");
  r.gen = g;
  r.on_text = [&](std::string_view) { return ++pieces < 3; };
  r.on_done = [&](const genai::ServeResult& res) { done.set_value(res); };
  sched.submit(std::move(r));
  const genai::ServeResult res = done.get_future().get();
  EXPECT_EQ(res.finish, FinishReason::Cancelled);
  EXPECT_EQ(pieces, 3);
  EXPECT_LE(res.ids.size(), 4u);  // within a step of the refusal

  // One slot busy with a long request, one waiting: a third is refused.
  int refused = 0;
  std::vector<std::future<Outcome>> running;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    try {
      running.push_back(start(sched, sched.encode_prompt("Once upon a time"), g));
    } catch (const genai::QueueFull&) {
      ++refused;
    }
  }
  EXPECT_GE(refused, 1);
  // Cancel by id: everything ends, and the slot is free.
  for (uint64_t id = 1; id < 10; ++id) sched.cancel(id);
  for (auto& f : running) EXPECT_EQ(f.get().result.finish, FinishReason::Cancelled);
  for (int i = 0; i < 100 && sched.status().busy_slots; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(sched.status().busy_slots, 0);

  // Bad requests are refused before queueing.
  genai::ServeRequest empty;
  EXPECT_THROW(sched.submit(empty), Error);
  genai::ServeRequest huge;
  huge.prompt_ids.assign(300, 1);
  EXPECT_THROW(sched.submit(huge), Error);
  genai::ServeRequest bad_p;
  bad_p.prompt_ids = {1};
  bad_p.gen.top_p = 2.0f;
  EXPECT_THROW(sched.submit(bad_p), Error);
}

}  // namespace
}  // namespace npullm
