// A harmony reply (gpt-oss) through the real generation paths, LLMPipeline's chat and the serving
// scheduler, under the built-in "harmony" template: the reasoning never reaches the visible reply.
// stories260K is made to write the markup by a grammar (structured output): its vocabulary spells
// "<|channel|>analysis<|message|>..." with ordinary tokens, which print the same text a gpt-oss
// vocabulary prints for its marker tokens (TokenizerO200k checks that side), so the text the
// parser sees is the text a gpt-oss reply gives.
#include <gtest/gtest.h>

#include <future>
#include <npullm/llm_pipeline.h>
#include <regex>

#include "genai/serving/scheduler.h"
#include "test_util.h"

namespace npullm {
namespace {

const char* kModel = "models/llama2c/stories260K.gguf";

// Analysis, then the final channel, each a few lowercase words (the grammar leaves the words to
// the model; the markup is forced).
const char* kHarmonyReply =
    "root ::= \"<|channel|>analysis<|message|>\" [a-z]{2,6} \" \" [a-z]{2,6} "
    "\"<|start|>assistant<|channel|>final<|message|>\" [a-z]{2,6} \" \" [a-z]{2,6}\n";
const std::regex kWords("[a-z]{2,6} [a-z]{2,6}");

PipelineConfig pipeline_config() {
  PipelineConfig c;
  c.use_cache = false;
  c.variants = {256, 1024};
  c.prefill_chunk = 16;
  c.threads = 2;
  c.chat_template = "harmony";
  return c;
}

GenerationConfig harmony_reply() {
  GenerationConfig g;
  g.max_new_tokens = 120;
  g.structured.kind = StructuredOutput::Kind::Gbnf;
  g.structured.source = kHarmonyReply;
  return g;
}

TEST(HarmonyReply, ChatStreamsAndKeepsOnlyTheFinalChannel) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline pipe(test::shared_path(kModel), pipeline_config());
  pipe.start_chat("Be brief.");
  std::string streamed;
  const GenerationResult r = pipe.generate("Hello", harmony_reply(), [&](std::string_view piece) {
    streamed += piece;
    return true;
  });
  EXPECT_TRUE(std::regex_match(r.text, kWords)) << r.text;
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(pipe.history().back().role, "assistant");
  EXPECT_EQ(pipe.history().back().content, r.text);
  // The next turn renders the history through gpt-oss's template, which refuses channel markup in
  // an assistant's content: it must not be there.
  const GenerationResult next = pipe.generate("And then?", harmony_reply());
  EXPECT_TRUE(std::regex_match(next.text, kWords)) << next.text;
  EXPECT_EQ(pipe.history().size(), 5u);
}

TEST(HarmonyReply, SchedulerSplitsReasoningFromTheReply) {
  NPULLM_REQUIRE_SHARED(kModel);
  genai::SchedulerConfig sc;
  sc.parallel = 2;
  genai::Scheduler sched(test::shared_path(kModel), pipeline_config(), sc);
  const std::vector<ChatMessage> messages = {{"user", "Hello"}};

  struct Run {
    genai::ServeResult result;
    std::string text, reasoning;  // what on_text / on_reasoning received
  };
  auto serve = [&](bool split) {
    auto run = std::make_shared<Run>();
    auto done = std::make_shared<std::promise<void>>();
    genai::ServeRequest r;
    r.prompt_ids = sched.encode_chat(messages);
    r.gen = harmony_reply();
    r.split_reasoning = split;
    r.on_text = [run](std::string_view p) {
      run->text += p;
      return true;
    };
    r.on_reasoning = [run](std::string_view p) {
      run->reasoning += p;
      return true;
    };
    r.on_done = [run, done](const genai::ServeResult& res) {
      run->result = res;
      done->set_value();
    };
    sched.submit(std::move(r));
    done->get_future().wait();
    return *run;
  };

  const Run raw = serve(false);  // a completion: the text as generated
  const Run chat = serve(true);  // a chat reply: split
  EXPECT_EQ(raw.result.error, "");
  EXPECT_EQ(chat.result.error, "");
  EXPECT_EQ(raw.result.reasoning, "");
  EXPECT_TRUE(std::regex_match(chat.result.text, kWords)) << chat.result.text;
  EXPECT_TRUE(std::regex_match(chat.result.reasoning, kWords)) << chat.result.reasoning;
  EXPECT_EQ(chat.text, chat.result.text);
  EXPECT_EQ(chat.reasoning, chat.result.reasoning);
  // Greedy: the same tokens both times; split, they are exactly the raw text's two bodies.
  EXPECT_EQ(chat.result.ids, raw.result.ids);
  EXPECT_EQ(raw.result.text, "<|channel|>analysis<|message|>" + chat.result.reasoning +
                                 "<|start|>assistant<|channel|>final<|message|>" + chat.result.text);
}

}  // namespace
}  // namespace npullm
