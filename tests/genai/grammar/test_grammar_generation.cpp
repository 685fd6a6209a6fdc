// Structured output end to end: GenerationConfig::structured honoured by LLMPipeline (stories260K)
// and by the serving scheduler (each request its own grammar state; the same text as the pipeline),
// refusals thrown before anything is generated, and the Qwen2 vocabulary (151,936 tokens) driven by
// random logits under a schema: the text parses (nlohmann) and meets the schema, checked by hand.
#include <gtest/gtest.h>

#include <future>
#include <npullm/llm_pipeline.h>
#include <random>
#include <regex>

#include "formats/gguf.h"
#include "genai/grammar/structured.h"
#include "genai/serving/scheduler.h"
#include "genai/tokenizer/tokenizer.h"
#include "test_util.h"

namespace npullm {
namespace {

const char* kModel = "models/llama2c/stories260K.gguf";

const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":8},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["red","green"]},"maxItems":3}},
  "required":["name","age"],"additionalProperties":false})";

// The schema above, checked without the grammar engine.
void expect_person(const std::string& text) {
  SCOPED_TRACE(text);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text));
  ASSERT_TRUE(j.is_object());
  for (auto it = j.begin(); it != j.end(); ++it) EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "tags") << it.key();
  ASSERT_TRUE(j.contains("name") && j["name"].is_string());
  const size_t n = j["name"].get<std::string>().size();  // ASCII here or not: at least 1 code point, at most 8 * 4 bytes
  EXPECT_TRUE(n >= 1 && n <= 32);
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer());
  EXPECT_TRUE(j["age"].get<int64_t>() >= 0 && j["age"].get<int64_t>() <= 120);
  if (j.contains("tags")) {
    ASSERT_TRUE(j["tags"].is_array());
    EXPECT_LE(j["tags"].size(), 3u);
    for (const auto& t : j["tags"]) EXPECT_TRUE(t == "red" || t == "green") << t.dump();
  }
}

PipelineConfig pipeline_config() {
  PipelineConfig c;
  c.use_cache = false;
  c.variants = {256, 1024};
  c.prefill_chunk = 16;
  c.threads = 2;
  return c;
}

GenerationConfig structured(StructuredOutput::Kind kind, const std::string& source, int64_t n = 700) {
  GenerationConfig g;
  g.max_new_tokens = n;
  g.structured.kind = kind;
  g.structured.source = source;
  return g;
}

TEST(GrammarGeneration, PipelineHonoursSchemaRegexAndGrammar) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline pipe(test::shared_path(kModel), pipeline_config());
  const GenerationResult r = pipe.generate("Once upon a time", structured(StructuredOutput::Kind::JsonSchema, kPersonSchema));
  expect_person(r.text);
  EXPECT_EQ(r.finish, FinishReason::Eos);  // forced once nothing else may follow

  GenerationConfig sampled = structured(StructuredOutput::Kind::JsonSchema, kPersonSchema);
  sampled.temperature = 1.0f;
  sampled.seed = 5;
  expect_person(pipe.generate("Lily", sampled).text);

  const GenerationResult re = pipe.generate("Tom", structured(StructuredOutput::Kind::Regex, "(yes|no), [a-z ]{3,12}\\."));
  EXPECT_TRUE(std::regex_match(re.text, std::regex("(yes|no), [a-z ]{3,12}\\."))) << re.text;
  const GenerationResult gb = pipe.generate("Tom", structured(StructuredOutput::Kind::Gbnf, "root ::= [0-9]{4} \"-\" [0-9]{2}\n"));
  EXPECT_TRUE(std::regex_match(gb.text, std::regex("[0-9]{4}-[0-9]{2}"))) << gb.text;
  const GenerationResult obj = pipe.generate("Tom", structured(StructuredOutput::Kind::JsonObject, "", 60));
  if (obj.finish == FinishReason::Eos) EXPECT_TRUE(nlohmann::json::parse(obj.text).is_object()) << obj.text;
  else EXPECT_EQ(obj.text.substr(0, 1), "{");
}

// Jump-forward: where the schema allows one continuation (a key's letters once its quote is out),
// the forced tokens go in with one prefill run. The text still meets the schema, the forced tokens
// are counted and are part of the reply's ids, and without jump-forward nothing is counted.
TEST(GrammarGeneration, JumpForwardAppendsForcedStretchesAndKeepsTheSchema) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline pipe(test::shared_path(kModel), pipeline_config());
  const char* schema = R"({"type":"object","properties":{"firstname":{"type":"string","maxLength":6},
      "lastname":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":99}},
      "required":["firstname","lastname","age"],"additionalProperties":false})";
  for (const char* prompt : {"Once upon a time", "Lily"}) {
    GenerationConfig g = structured(StructuredOutput::Kind::JsonSchema, schema, 200);
    const GenerationResult on = pipe.generate(prompt, g);
    SCOPED_TRACE(on.text);
    const nlohmann::json j = nlohmann::json::parse(on.text);
    EXPECT_EQ(j.size(), 3u);
    EXPECT_TRUE(j["firstname"].is_string() && j["lastname"].is_string() && j["age"].is_number_integer());
    EXPECT_EQ(on.finish, FinishReason::Eos);
    // "firstname", "lastname", "age": the letters after each opening quote are forced.
    EXPECT_GE(on.metrics.forced_tokens, 3);
    EXPECT_EQ(static_cast<int64_t>(on.ids.size()), on.metrics.generated_tokens);
    EXPECT_EQ(pipe.detokenize(on.ids), on.text);
    g.structured.jump_forward = false;
    const GenerationResult off = pipe.generate(prompt, g);
    EXPECT_EQ(off.metrics.forced_tokens, 0);
    const nlohmann::json k = nlohmann::json::parse(off.text);
    EXPECT_EQ(k.size(), 3u) << off.text;
  }
}

TEST(GrammarGeneration, LazyTriggerLeavesTheTextBeforeItFree) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline pipe(test::shared_path(kModel), pipeline_config());
  const GenerationResult free_text = pipe.generate("Once upon a time", [] { GenerationConfig g; g.max_new_tokens = 30; return g; }());
  // The trigger is a word the free text reaches: up to it the text is the same, after it a number.
  const std::string trigger = free_text.text.substr(0, std::min<size_t>(12, free_text.text.size()));
  ASSERT_FALSE(trigger.empty());
  GenerationConfig g = structured(StructuredOutput::Kind::Regex, " [0-9]{2}!", 40);
  g.structured.trigger = trigger;
  const GenerationResult r = pipe.generate("Once upon a time", g);
  ASSERT_GE(r.text.size(), trigger.size());
  EXPECT_EQ(r.text.substr(0, trigger.size()), trigger);
  EXPECT_TRUE(std::regex_match(r.text.substr(trigger.size()), std::regex(" [0-9]{2}!"))) << r.text;
}

TEST(GrammarGeneration, RefusedSchemasThrowBeforeGenerating) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline pipe(test::shared_path(kModel), pipeline_config());
  const std::string why = test::error_of([&] { pipe.generate("x", structured(StructuredOutput::Kind::JsonSchema, R"({"not":{}})")); });
  EXPECT_NE(why.find("'not'"), std::string::npos) << why;
  EXPECT_NE(test::error_of([&] { pipe.generate("x", structured(StructuredOutput::Kind::Gbnf, "root ::= undefined\n")); }), "");
  EXPECT_NE(test::error_of([&] { pipe.generate("x", structured(StructuredOutput::Kind::Regex, "(a")); }), "");
  // Speculation with a grammar is not implemented: refused by name, not dropped.
  GenerationConfig spec = structured(StructuredOutput::Kind::Regex, "[a-z]+");
  spec.speculative.mode = SpecMode::Lookup;
  EXPECT_NE(test::error_of([&] { pipe.generate("x", spec); }).find("speculative decoding"), std::string::npos);
  genai::SchedulerConfig sc;
  sc.parallel = 2;
  genai::Scheduler sched(test::shared_path(kModel), pipeline_config(), sc);
  genai::ServeRequest req;
  req.prompt_ids = sched.encode_prompt("x");
  req.gen = structured(StructuredOutput::Kind::JsonSchema, R"({"if":{}})");
  EXPECT_NE(test::error_of([&] { sched.submit(std::move(req)); }).find("'if'"), std::string::npos);
}

TEST(GrammarGeneration, SchedulerGivesEachRequestItsOwnGrammarAndThePipelinesText) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  const std::vector<GenerationConfig> gens = {
      structured(StructuredOutput::Kind::JsonSchema, kPersonSchema),
      structured(StructuredOutput::Kind::Regex, "(yes|no), [a-z ]{3,12}\\."),
      [] { GenerationConfig g; g.max_new_tokens = 20; return g; }(),
      structured(StructuredOutput::Kind::JsonSchema, R"({"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":4})")};
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "One day", "She was happy"};
  LLMPipeline pipe(path, pipeline_config());
  std::vector<std::string> want;
  for (size_t i = 0; i < gens.size(); ++i) want.push_back(pipe.generate(prompts[i], gens[i]).text);

  genai::SchedulerConfig sc;
  sc.parallel = 4;
  genai::Scheduler sched(path, pipeline_config(), sc);
  std::vector<std::future<genai::ServeResult>> got;
  for (size_t i = 0; i < gens.size(); ++i) {
    auto done = std::make_shared<std::promise<genai::ServeResult>>();
    got.push_back(done->get_future());
    genai::ServeRequest r;
    r.prompt_ids = sched.encode_prompt(prompts[i]);
    r.gen = gens[i];
    r.on_done = [done](const genai::ServeResult& res) { done->set_value(res); };
    sched.submit(std::move(r));
  }
  for (size_t i = 0; i < gens.size(); ++i) {
    const genai::ServeResult r = got[i].get();
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.text, want[i]) << prompts[i];
  }
  expect_person(want[0]);
  const nlohmann::json arr = nlohmann::json::parse(want[3]);
  EXPECT_TRUE(arr.is_array() && arr.size() >= 2 && arr.size() <= 4) << want[3];
}

// Jump-forward when serving: a request alone runs its forced stretches as one prefill run, beside
// others it queues the same tokens for the batched decode steps (a prefill run would stall the
// other rows). Either way the ids are the pipeline's and the forced tokens are counted.
TEST(GrammarGeneration, SchedulerJumpsAloneAndQueuesForcedTokensBesideOthers) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string path = test::shared_path(kModel);
  const char* schema = R"({"type":"object","properties":{"firstname":{"type":"string","maxLength":6},
      "lastname":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":99}},
      "required":["firstname","lastname","age"],"additionalProperties":false})";
  const std::vector<std::string> prompts = {"Once upon a time", "Lily", "The little dog"};
  const GenerationConfig g = structured(StructuredOutput::Kind::JsonSchema, schema, 200);
  LLMPipeline pipe(path, pipeline_config());
  std::vector<GenerationResult> want;
  for (const std::string& p : prompts) want.push_back(pipe.generate(p, g));
  for (int64_t parallel : {1, 3}) {
    genai::SchedulerConfig sc;
    sc.parallel = parallel;
    genai::Scheduler sched(path, pipeline_config(), sc);
    std::vector<std::future<genai::ServeResult>> got;
    for (const std::string& p : prompts) {
      auto done = std::make_shared<std::promise<genai::ServeResult>>();
      got.push_back(done->get_future());
      genai::ServeRequest r;
      r.prompt_ids = sched.encode_prompt(p);
      r.gen = g;
      r.on_done = [done](const genai::ServeResult& res) { done->set_value(res); };
      sched.submit(std::move(r));
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      const genai::ServeResult r = got[i].get();
      SCOPED_TRACE(prompts[i] + ", parallel " + std::to_string(parallel));
      EXPECT_EQ(r.error, "");
      EXPECT_EQ(r.ids, want[i].ids);
      EXPECT_EQ(r.text, want[i].text);
      EXPECT_EQ(r.forced_tokens, want[i].metrics.forced_tokens);
      EXPECT_GE(r.forced_tokens, 3);
    }
  }
}

TEST(GrammarGeneration, Qwen2VocabularyUnderRandomLogitsMakesValidJson) {
  const char* vocab = "models/vocab/ggml-vocab-qwen2.gguf";
  NPULLM_REQUIRE_SHARED(vocab);
  auto f = GgufFile::open(test::shared_path(vocab));
  const genai::Tokenizer tok(genai::Vocab::from_gguf(*f));
  ASSERT_EQ(tok.n_vocab(), 151936);
  const auto trie = genai::grammar::make_token_trie(tok);
  std::mt19937 rng(11);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(tok.n_vocab()));
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE(run);
    StructuredOutput so{StructuredOutput::Kind::JsonSchema, kPersonSchema, ""};
    auto dec = genai::grammar::StructuredDecoder::make(so, trie, {tok.eos()});
    genai::SamplerConfig sc;
    sc.temperature = run % 2 ? 0.7f : 0.0f;
    sc.seed = static_cast<uint64_t>(run);
    genai::Sampler sampler(sc);
    std::vector<int32_t> ids;
    bool ended = false;
    for (int step = 0; step < 2000 && !ended; ++step) {
      if (dec->must_end()) { ended = true; break; }
      for (float& x : logits) x = noise(rng);
      const int32_t id = dec->sample(sampler, logits);
      if (id == tok.eos()) { ended = true; break; }
      ASSERT_TRUE(dec->accept(id));
      ids.push_back(id);
    }
    EXPECT_TRUE(ended);
    expect_person(tok.decode(ids));
    EXPECT_GT(dec->rejections(), 0);  // random logits pick refused tokens: the mask path ran
  }
}

}  // namespace
}  // namespace npullm
