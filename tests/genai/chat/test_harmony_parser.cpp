// HarmonyParser: gpt-oss's replies split into the visible reply, the reasoning and tool calls, the
// same whether the reply arrives whole, a byte at a time or in the pieces a detokenizer gives. The
// replies are written the way the model emits them (OpenAI's harmony format: analysis, then
// <|start|>assistant<|channel|>final), with the markers a detokenizer prints: <|start|>,
// <|channel|>, <|message|>, <|constrain|> (USER_DEFINED) and, where a vocabulary prints them, the
// control tokens <|end|>, <|return|>, <|call|>.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "genai/chat/harmony_parser.h"

namespace npullm::genai {
namespace {

struct Split {
  std::string content, reasoning;
  std::vector<HarmonyParser::Call> calls;
  std::string streamed_content, streamed_reasoning;  // the deltas, concatenated
};

// Feeds `pieces` and finishes; checks that the deltas add up to the totals.
Split parse(const std::vector<std::string>& pieces) {
  HarmonyParser p;
  Split s;
  for (const std::string& piece : pieces) {
    const HarmonyParser::Delta d = p.feed(piece);
    s.streamed_content += d.content;
    s.streamed_reasoning += d.reasoning;
  }
  const HarmonyParser::Delta d = p.finish();
  s.streamed_content += d.content;
  s.streamed_reasoning += d.reasoning;
  s.content = p.content();
  s.reasoning = p.reasoning();
  s.calls = p.calls();
  EXPECT_EQ(s.streamed_content, s.content);
  EXPECT_EQ(s.streamed_reasoning, s.reasoning);
  return s;
}

std::vector<std::string> bytes_of(const std::string& text) {
  std::vector<std::string> out;
  for (char c : text) out.emplace_back(1, c);
  return out;
}

// Whole, a byte at a time, and cut at every position into two pieces: the same split each time.
Split parse_every_way(const std::string& text) {
  const Split whole = parse({text});
  auto same = [&](const Split& s, const std::string& how) {
    EXPECT_EQ(s.content, whole.content) << how;
    EXPECT_EQ(s.reasoning, whole.reasoning) << how;
    EXPECT_EQ(s.calls.size(), whole.calls.size()) << how;
    for (size_t i = 0; i < s.calls.size() && i < whole.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].recipient, whole.calls[i].recipient) << how;
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments) << how;
    }
  };
  same(parse(bytes_of(text)), "a byte at a time");
  for (size_t cut = 1; cut < text.size(); ++cut) same(parse({text.substr(0, cut), text.substr(cut)}), "cut at " + std::to_string(cut));
  return whole;
}

TEST(HarmonyParser, AnalysisIsReasoningFinalIsTheReply) {
  // As printed by our detokenizer: <|end|> and <|return|> are control tokens and print nothing.
  const Split s = parse_every_way(
      "<|channel|>analysis<|message|>The user asks 2+2. That is 4.<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.");
  EXPECT_EQ(s.reasoning, "The user asks 2+2. That is 4.");
  EXPECT_EQ(s.content, "2 + 2 = 4.");
  EXPECT_TRUE(s.calls.empty());
}

TEST(HarmonyParser, EndMarkersEndABodyWhenPrinted) {
  const Split s = parse_every_way(
      "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>answer<|return|>");
  EXPECT_EQ(s.reasoning, "think");
  EXPECT_EQ(s.content, "answer");
}

TEST(HarmonyParser, FinalWithoutAnalysis) {
  const Split s = parse_every_way("<|channel|>final<|message|>Hello there!");
  EXPECT_EQ(s.content, "Hello there!");
  EXPECT_EQ(s.reasoning, "");
}

TEST(HarmonyParser, ChannelWithoutStartBeginsTheNextMessage) {
  const Split s = parse_every_way("<|channel|>analysis<|message|>a<|channel|>final<|message|>b");
  EXPECT_EQ(s.reasoning, "a");
  EXPECT_EQ(s.content, "b");
}

TEST(HarmonyParser, ReasoningStreamsBeforeTheReplyIsKnown) {
  HarmonyParser p;
  EXPECT_EQ(p.feed("<|channel|>analysis<|message|>Let me").reasoning, "Let me");
  EXPECT_EQ(p.feed(" think").reasoning, " think");
  // A partial marker is held back, then turns out to be text.
  HarmonyParser::Delta d = p.feed(" a <|st");
  EXPECT_EQ(d.reasoning, " a ");
  d = p.feed("uff");
  EXPECT_EQ(d.reasoning, "<|stuff");
  d = p.feed("<|start|>assistant<|channel|>final<|message|>Ok");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Ok");
  EXPECT_EQ(p.finish().content, "");
  EXPECT_EQ(p.content(), "Ok");
  EXPECT_EQ(p.reasoning(), "Let me think a <|stuff");
}

TEST(HarmonyParser, NoAnalysisTextLeaksIntoContentWhileStreaming) {
  // However the reasoning is cut, no content appears before the final channel's header.
  const std::string text = "<|channel|>analysis<|message|>secret plan<|start|>assistant<|channel|>final<|message|>public";
  for (size_t cut = 1; cut < text.size(); ++cut) {
    HarmonyParser p;
    const std::string first = p.feed(text.substr(0, cut)).content;
    EXPECT_EQ(first.find("secret"), std::string::npos) << cut;
    EXPECT_TRUE(std::string("public").rfind(first, 0) == 0) << "cut " << cut << ": content [" << first << "]";
  }
}

TEST(HarmonyParser, ToolCallsAreNeitherReplyNorReasoning) {
  // Both places a recipient may stand, with the content type after the channel or <|constrain|>.
  const Split a = parse_every_way(
      "<|channel|>analysis<|message|>Need weather.<|start|>assistant to=functions.get_weather<|channel|>commentary json"
      "<|message|>{\"city\": \"Paris\"}<|call|>");
  EXPECT_EQ(a.reasoning, "Need weather.");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].recipient, "functions.get_weather");
  EXPECT_EQ(a.calls[0].constraint, "json");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\"}");

  const Split b = parse_every_way("<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{\"q\":1}");
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_EQ(b.calls[0].recipient, "functions.lookup");
  EXPECT_EQ(b.calls[0].constraint, "json");
  EXPECT_EQ(b.calls[0].arguments, "{\"q\":1}");
  EXPECT_EQ(b.content, "");
}

TEST(HarmonyParser, CommentaryWithoutRecipientIsForTheUser) {
  const Split s = parse_every_way(
      "<|channel|>commentary<|message|>Checking the weather now.<|start|>assistant<|channel|>final<|message|>Sunny.");
  EXPECT_EQ(s.content, "Checking the weather now.Sunny.");
}

TEST(HarmonyParser, PlainTextIsTheReply) {
  // A model that does not speak harmony: short and long replies, with and without a "<".
  EXPECT_EQ(parse_every_way("Hi!").content, "Hi!");
  const std::string long_text(300, 'x');
  EXPECT_EQ(parse_every_way(long_text + " a<b c").content, long_text + " a<b c");
  // Long plain text streams before the reply ends.
  HarmonyParser p;
  EXPECT_EQ(p.feed(long_text).content, long_text);
}

TEST(HarmonyParser, UnfinishedHeaderAndEmptyReply) {
  EXPECT_EQ(parse_every_way("<|channel|>analysis").content, "");
  EXPECT_EQ(parse_every_way("<|channel|>analysis").reasoning, "");
  EXPECT_EQ(parse({}).content, "");
  // A reply cut short inside the reasoning: that reasoning, and no reply.
  const Split s = parse_every_way("<|channel|>analysis<|message|>half a tho");
  EXPECT_EQ(s.reasoning, "half a tho");
  EXPECT_EQ(s.content, "");
}

TEST(HarmonyParser, Utf8AndMarkupLookalikesInBodies) {
  const Split s = parse_every_way(
      "<|channel|>analysis<|message|>Grüße 世界 🙂 a<b |> <|x|><|start|>assistant<|channel|>final<|message|>Réponse: <tag>|ok|");
  EXPECT_EQ(s.reasoning, "Grüße 世界 🙂 a<b |> <|x|>");
  EXPECT_EQ(s.content, "Réponse: <tag>|ok|");
}

}  // namespace
}  // namespace npullm::genai
