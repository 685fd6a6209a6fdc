// LLMPipeline chat on stories260K: turns reuse the K/V state (each prefills only its new tokens and
// answers as a fresh session fed the same ids would), the capacity policies carry a conversation far
// past the largest capacity, stop strings and cancellation behave exactly.
#include <gtest/gtest.h>

#include <npullm/llm_pipeline.h>
#include <set>

#include "test_util.h"

namespace npullm {
namespace {

constexpr const char* kModel = "models/llama2c/stories260K.gguf";
// A plain template: stories260K has no chat template of its own.
constexpr const char* kTemplate =
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

PipelineConfig config(std::vector<int64_t> variants, ContextPolicy policy = ContextPolicy::Shift) {
  PipelineConfig c;
  c.prefill_chunk = 16;
  c.variants = std::move(variants);
  c.use_cache = false;
  c.threads = 1;
  c.chat_template = kTemplate;
  c.context_policy = policy;
  return c;
}

GenerationConfig greedy(int64_t n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  return g;
}

TEST(ChatSession, EachTurnPrefillsOnlyItsNewTokensAndMatchesAFreshSession) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline chat(test::shared_path(kModel), config({256, 512}));
  LLMPipeline fresh(test::shared_path(kModel), config({256, 512}));
  chat.start_chat("You tell short stories.");
  const std::vector<std::string> turns = {"Tell me about a cat.", "What did the cat eat?", "Where did it sleep?",
                                          "How did the story end?"};
  size_t before = 0;
  for (size_t t = 0; t < turns.size(); ++t) {
    const GenerationResult r = chat.generate(turns[t], greedy(24));
    ASSERT_FALSE(r.ids.empty());
    // Only the new tokens were prefilled: everything before them was already in the state.
    EXPECT_EQ(r.metrics.prefill_tokens, static_cast<int64_t>(r.prompt_ids.size()));
    EXPECT_EQ(r.context_ids.size(), before + r.prompt_ids.size()) << "turn " << t;
    if (t > 0) {
      EXPECT_LT(r.prompt_ids.size(), r.context_ids.size() / 2) << "turn " << t;
    }
    EXPECT_EQ(r.metrics.reprefills, 0);
    // A fresh session given the identical ids in one prefill says the same.
    const GenerationResult f = fresh.generate_ids(r.context_ids, greedy(24));
    EXPECT_EQ(f.ids, r.ids) << "turn " << t;
    EXPECT_EQ(f.metrics.prefill_tokens, static_cast<int64_t>(r.context_ids.size()));
    // Every generated id is now in the state except the last, which the next turn prefills first.
    EXPECT_EQ(chat.conversation_ids().size(), r.context_ids.size() + r.ids.size());
    before = static_cast<size_t>(chat.kv_position());
    EXPECT_EQ(before + 1, chat.conversation_ids().size());
  }
  EXPECT_EQ(chat.history().size(), 1 + 2 * turns.size());
}

// Drives a conversation to about 4x the largest capacity (128 rows).
struct LongChat {
  int64_t total_tokens = 0, shifts = 0, reprefills = 0;
  std::vector<GenerationResult> results;
};

LongChat long_chat(LLMPipeline& p) {
  LongChat out;
  p.start_chat("Stories.");
  for (int t = 0; t < 14; ++t) {
    GenerationResult r = p.generate("Once upon a time there was a girl called Lily " + std::to_string(t), greedy(24));
    out.total_tokens += static_cast<int64_t>(r.prompt_ids.size() + r.ids.size());
    out.shifts += r.metrics.context_shifts;
    out.reprefills += r.metrics.reprefills;
    EXPECT_LE(p.kv_position(), p.capacity());
    // Positions stay contiguous: the state holds exactly the conversation's tokens, rows 0..n-1.
    EXPECT_EQ(p.kv_position() + 1, static_cast<int64_t>(p.conversation_ids().size())) << "turn " << t;
    out.results.push_back(std::move(r));
  }
  return out;
}

void expect_not_degenerate(const LongChat& c) {
  for (const GenerationResult& r : c.results) {
    std::set<int32_t> distinct(r.ids.begin(), r.ids.end());
    EXPECT_GE(distinct.size(), 5u) << "reply collapsed: " << r.text;
  }
}

TEST(ChatSession, ShiftPolicyCarriesFourTimesTheCapacityWithoutReprefill) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline p(test::shared_path(kModel), config({64, 128}, ContextPolicy::Shift));
  const LongChat c = long_chat(p);
  EXPECT_GE(c.total_tokens, 4 * p.capacity());
  EXPECT_GT(c.shifts, 0);
  EXPECT_EQ(c.reprefills, 0);
  expect_not_degenerate(c);
}

TEST(ChatSession, TruncatePolicyDropsOldTurnsKeepsTheSystemMessage) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline p(test::shared_path(kModel), config({64, 128}, ContextPolicy::Truncate));
  const LongChat c = long_chat(p);
  EXPECT_GE(c.total_tokens, 4 * p.capacity());
  EXPECT_GT(c.reprefills, 0);
  EXPECT_EQ(c.shifts, 0);
  // A truncated turn re-prefilled its context: it answers exactly as a fresh session fed the same ids.
  LLMPipeline fresh(test::shared_path(kModel), config({64, 128}, ContextPolicy::Truncate));
  int truncated = 0;
  for (size_t t = 0; t < c.results.size(); ++t) {
    const GenerationResult& r = c.results[t];
    if (r.metrics.reprefills == 0) continue;
    ++truncated;
    EXPECT_EQ(r.context_ids.front(), 1) << "turn " << t << ": BOS kept";
    EXPECT_EQ(fresh.generate_ids(r.context_ids, greedy(24)).ids, r.ids) << "turn " << t;
  }
  EXPECT_GT(truncated, 0);
  ASSERT_FALSE(p.history().empty());
  EXPECT_EQ(p.history().front().role, "system");
  EXPECT_LT(p.history().size(), 1u + 2 * 14);
  expect_not_degenerate(c);
}

TEST(ChatSession, APromptLongerThanTheCapacityIsCutNotRefused) {
  NPULLM_REQUIRE_SHARED(kModel);
  for (ContextPolicy policy : {ContextPolicy::Shift, ContextPolicy::Truncate}) {
    LLMPipeline p(test::shared_path(kModel), config({64}, policy));
    std::string longer;
    for (int i = 0; i < 40; ++i) longer += "The dog ran to the park. ";
    const GenerationResult r = p.generate(longer, greedy(8));
    EXPECT_LE(static_cast<int64_t>(r.prompt_ids.size()), p.capacity());
    EXPECT_FALSE(r.ids.empty());
    // Kept: the first token (BOS) and the prompt's end, as many tokens as fit beside the reply.
    const std::vector<int32_t> full = p.tokenize(longer, /*add_bos=*/true);
    const size_t n = r.prompt_ids.size();
    ASSERT_GT(full.size(), n);
    ASSERT_GE(n, 2u);
    std::vector<int32_t> want{full.front()};
    want.insert(want.end(), full.end() - static_cast<std::ptrdiff_t>(n - 1), full.end());
    EXPECT_EQ(r.prompt_ids, want);
    EXPECT_EQ(r.context_ids, want);
  }
}

TEST(ChatSession, StopStringEndsTheOutputBeforeIt) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline p(test::shared_path(kModel), config({256}));
  // Greedy: "Once upon a time, there was a little girl named Lily. She loved ..." (llama2.c).
  GenerationConfig g = greedy(60);
  g.stop_strings = {"Lily"};
  const GenerationResult r = p.generate("Once upon a time", g);
  EXPECT_EQ(r.text, ", there was a little girl named ");
  EXPECT_EQ(r.finish, FinishReason::StopString);
  g.stop_strings = {", there"};  // at the very start of the output
  const GenerationResult r2 = p.generate("Once upon a time", g);
  EXPECT_EQ(r2.text, "");
  EXPECT_EQ(r2.finish, FinishReason::StopString);
}

TEST(ChatSession, CancellingFromTheStreamerStopsWithinOneTokenAndKeepsTheSessionUsable) {
  NPULLM_REQUIRE_SHARED(kModel);
  LLMPipeline p(test::shared_path(kModel), config({256}));
  p.start_chat();
  int pieces = 0;
  const GenerationResult r = p.generate("Tell me a story.", greedy(100), [&](std::string_view) { return ++pieces < 3; });
  EXPECT_EQ(r.finish, FinishReason::Cancelled);
  EXPECT_EQ(pieces, 3);
  EXPECT_LE(r.ids.size(), 4u);  // the piece that cancelled may span a token or two
  const GenerationResult next = p.generate("And then?", greedy(10));
  EXPECT_EQ(next.ids.size(), 10u);
  EXPECT_EQ(next.metrics.reprefills, 0);
}

}  // namespace
}  // namespace npullm

namespace npullm {
namespace {

// A chat turn's new ids are those a one-shot tokenization of the rendered conversation gives the
// same text: the text a turn adds after the previous reply continues that text, so a SentencePiece
// vocab gives it no dummy-prefix U+2581 of its own (and a byte-level BPE vocab nothing extra). The
// first turn is compared whole; later ones on the text after the previous reply (the reply's own
// ids are the model's choice, not necessarily the tokenizer's, so they are left out).
struct DeltaCase {
  const char* model;
  const char* chat_template;
};

class ChatDelta : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(ChatDelta, TurnIdsEqualAOneShotTokenizationOfTheConversation) {
  NPULLM_REQUIRE_SHARED(GetParam().model);
  PipelineConfig c;
  c.use_cache = false;
  c.variants = {256, 512};
  c.threads = 1;
  c.chat_template = GetParam().chat_template;
  LLMPipeline chat(test::shared_path(GetParam().model), c);
  chat.start_chat("Be brief.");
  std::vector<ChatMessage> messages = {{"system", "Be brief."}};
  for (const char* user : {"Tell me about a cat.", "What did it eat?", "Where did it sleep?"}) {
    const GenerationResult r = chat.generate(user, greedy(6));
    messages.push_back({"user", user});
    ASSERT_EQ(r.metrics.reprefills, 0);
    // BOS as a chat turn adds it: unless the template wrote it already.
    std::vector<int32_t> one_shot = chat.tokenize(chat.apply_chat_template(messages, true), true, true);
    if (one_shot.size() > 1 && one_shot[0] == chat.bos_id() && one_shot[1] == chat.bos_id()) one_shot.erase(one_shot.begin());
    if (messages.size() == 2) {
      EXPECT_EQ(r.context_ids, one_shot) << "first turn";
    } else {
      // prompt_ids = the previous reply's last token (sampled, not yet run) + this turn's new text.
      ASSERT_GE(r.prompt_ids.size(), 2u);
      const std::vector<int32_t> added(r.prompt_ids.begin() + 1, r.prompt_ids.end());
      ASSERT_GE(one_shot.size(), added.size());
      const std::vector<int32_t> tail(one_shot.end() - static_cast<long>(added.size()), one_shot.end());
      EXPECT_EQ(added, tail) << "turn " << messages.size() / 2 << ": the new text's ids differ from a one-shot tokenization";
    }
    messages.push_back({"assistant", r.text});
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatDelta,
                         ::testing::Values(DeltaCase{"models/llama2c/stories260K.gguf", "chatml"},
                                           DeltaCase{"models/llama2c/stories260K.gguf", "llama2"},
                                           DeltaCase{"golden/qwen2-gpt2.Q4_0.gguf", "chatml"}),
                         [](const auto& info) { return std::string(info.index == 2 ? "bpe_" : "spm_") + info.param.chat_template; });

}  // namespace
}  // namespace npullm
