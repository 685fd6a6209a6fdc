// gpt-oss's harmony tool calls in genai/tools (Family::Harmony): the family read from gpt-oss's
// template, conversations with tools, calls and results rendered through it as Jinja2 renders them
// (tests/data/chat/harmony_cases.json), the calls the template writes and the ones the model writes
// parsed back into ToolCalls (whole or a byte at a time: the same), what tool_choice constrains, and
// the serving scheduler handing a call on to the parser (stories260K made to write the markup).
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "genai/grammar/compile.h"
#include "genai/jinja/builtin_templates.h"
#include "genai/jinja/template.h"
#include "genai/serving/scheduler.h"
#include "genai/tools/tool_call_parser.h"
#include "genai/tools/tool_constraint.h"
#include "genai/tools/tool_prompt.h"
#include "../grammar/grammar_test_util.h"
#include "test_util.h"

namespace npullm::genai::tools {
namespace {

using nlohmann::ordered_json;

std::string harmony_source() { return test::read_file(test::repo_data_path("chat/harmony.jinja")); }

jinja::RenderOptions fixed_date() {  // the date harmony_cases.json was rendered with
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 10;
  t.tm_mday = 29;
  t.tm_wday = 0;
  t.tm_yday = 332;
  return jinja::RenderOptions{t};
}

std::vector<Tool> weather_tools() {
  Tool w{"get_weather", "Get the current weather in a city",
         ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false})"),
         false};
  Tool t{"get_time", "The current time", nullptr, false};
  return {w, t};
}

std::vector<std::string> names_of(const std::vector<Tool>& tools) {
  std::vector<std::string> n;
  for (const Tool& t : tools) n.push_back(t.name);
  return n;
}

struct Parsed {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
};

// `text` through a fresh parser, cut into pieces of `step` bytes (0: whole).
Parsed parse(const std::string& text, size_t step, ToolCallParser::Mode mode = ToolCallParser::Mode::Auto, bool parallel = true) {
  ToolCallParser p(Family::Harmony, mode, names_of(weather_tools()), parallel, "call_t_");
  Parsed out;
  auto take = [&](const ToolCallParser::Delta& d) {
    out.content += d.content;
    out.reasoning += d.reasoning;
    out.calls.insert(out.calls.end(), d.calls.begin(), d.calls.end());
  };
  if (step == 0) take(p.feed(text));
  else
    for (size_t i = 0; i < text.size(); i += step) take(p.feed(std::string_view(text).substr(i, step)));
  take(p.finish());
  EXPECT_EQ(out.content, p.content());
  EXPECT_EQ(out.reasoning, p.reasoning());
  EXPECT_EQ(out.calls, p.calls());
  return out;
}

// Whole, a byte at a time and in 7-byte pieces: one answer.
Parsed parse_every_way(const std::string& text, ToolCallParser::Mode mode = ToolCallParser::Mode::Auto, bool parallel = true) {
  SCOPED_TRACE(text);
  const Parsed whole = parse(text, 0, mode, parallel);
  for (size_t step : {1, 7}) {
    const Parsed p = parse(text, step, mode, parallel);
    EXPECT_EQ(p.content, whole.content) << step;
    EXPECT_EQ(p.reasoning, whole.reasoning) << step;
    EXPECT_EQ(p.calls, whole.calls) << step;
  }
  return whole;
}

// ---- The family and the rendering ------------------------------------------------------------

TEST(HarmonyTools, GptOssTemplatesAreTheHarmonyFamily) {
  EXPECT_EQ(detect_family(harmony_source()), Family::Harmony);
  const jinja::BuiltinTemplate* builtin = jinja::find_builtin_template("harmony");
  ASSERT_NE(builtin, nullptr);
  EXPECT_EQ(detect_family(builtin->source), Family::Harmony);
  EXPECT_STREQ(family_name(Family::Harmony), "harmony");
  EXPECT_EQ(trigger_of(Family::Harmony), "json<|message|>");
}

// The golden conversations with tools, built from the OpenAI-side structures (arguments as the JSON
// text a client sends), render as Jinja2 renders Hugging Face's variables.
TEST(HarmonyTools, ToolsCallsAndResultsRenderAsJinja2) {
  const ordered_json cases = ordered_json::parse(test::read_file(test::repo_data_path("chat/harmony_cases.json")))["cases"];
  const std::string source = harmony_source();
  size_t checked = 0;
  for (const ordered_json& c : cases) {
    const std::string conv = c["conversation"];
    if (conv != "tools" && conv != "tool_call_answered") continue;
    SCOPED_TRACE(conv + (c["add_generation_prompt"].get<bool>() ? " +gen" : ""));
    std::vector<Tool> tools;
    for (const ordered_json& t : c["variables"]["tools"])
      tools.push_back({t["function"]["name"], t["function"].value("description", ""), t["function"].value("parameters", ordered_json()), false});
    std::vector<Message> msgs;
    for (const ordered_json& m : c["messages"]) {
      Message x{m["role"], m.value("content", ""), {}, m.value("tool_call_id", ""), ""};
      if (m.contains("tool_calls"))
        for (const ordered_json& tc : m["tool_calls"]) x.tool_calls.push_back({tc["id"], tc["function"]["name"], tc["function"]["arguments"].dump()});
      msgs.push_back(std::move(x));
    }
    if (conv == "tool_call_answered") msgs[2].tool_call_id = "call_1";
    const TemplateInput in = template_input(Family::Harmony, msgs, tools, ToolChoice{});
    const std::string got = jinja::render_chat_template(source, in.messages, c["add_generation_prompt"], c["bos_token"], c["eos_token"],
                                                        in.extra, fixed_date());
    EXPECT_EQ(got, c["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 4u);
}

// Several calls in one assistant turn: gpt-oss's template writes one per message and names a result
// after the latest call, so each call is followed by its own result.
TEST(HarmonyTools, ParallelCallsBecomeOneMessageEachFollowedByItsResult) {
  const std::vector<Message> msgs = {
      {"user", "Weather and time in Oslo?", {}, "", ""},
      {"assistant", "", {{"c1", "get_weather", R"({"city":"Oslo"})"}, {"c2", "get_time", "{}"}}, "", ""},
      {"tool", "09:00", {}, "c2", ""},
      {"tool", "rain", {}, "c1", ""},
  };
  const TemplateInput in = template_input(Family::Harmony, msgs, weather_tools(), ToolChoice{});
  ASSERT_EQ(in.messages.size(), 5u);
  const std::string text = jinja::render_chat_template(harmony_source(), in.messages, true, "<|startoftext|>", "<|return|>", in.extra,
                                                       fixed_date());
  const std::string call1 = R"(<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>)";
  const std::string res1 = R"(<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"rain"<|end|>)";
  const std::string call2 = R"(<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>)";
  const std::string res2 = R"(<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>"09:00"<|end|>)";
  EXPECT_NE(text.find(call1 + res1 + call2 + res2 + "<|start|>assistant"), std::string::npos) << text;
  EXPECT_NE(text.find("type get_time = () => any;"), std::string::npos) << text;
  // tool_choice none: no tools shown, the earlier calls still rendered.
  const TemplateInput none = template_input(Family::Harmony, msgs, weather_tools(), ToolChoice{ToolChoice::Mode::None, ""});
  EXPECT_FALSE(none.extra.contains("tools"));
}

// ---- Parsing ---------------------------------------------------------------------------------

// The call as the template writes it (an earlier turn) reads back as the call it was made from.
TEST(HarmonyTools, TheTemplatesCallReadsBackAsTheSameCall) {
  const std::vector<Message> msgs = {
      {"user", "Weather in Paris?", {}, "", ""},
      {"assistant", "", {{"c1", "get_weather", R"({"city":"Paris"})"}}, "", ""},
  };
  const TemplateInput in = template_input(Family::Harmony, msgs, weather_tools(), ToolChoice{});
  const std::string text = jinja::render_chat_template(harmony_source(), in.messages, false, "<|startoftext|>", "<|return|>", in.extra,
                                                       fixed_date());
  const size_t at = text.find("<|start|>assistant to=");
  ASSERT_NE(at, std::string::npos) << text;
  const Parsed p = parse_every_way(text.substr(at));
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0], (ToolCall{"call_t_0", "get_weather", R"({"city":"Paris"})"}));
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.reasoning, "");
}

// What gpt-oss itself writes: the analysis, then a commentary message to the function with
// <|constrain|>json (the prompt ends in <|start|>assistant, so the reply starts at <|channel|>).
TEST(HarmonyTools, TheModelsOwnCallAfterItsReasoning) {
  const Parsed p = parse_every_way(
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
      "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0], (ToolCall{"call_t_0", "get_weather", R"({"city":"Paris"})"}));
  EXPECT_EQ(p.reasoning, "Need the weather.");
  EXPECT_EQ(p.content, "");
  // Without the end markers (control tokens a vocabulary may not print) and the reply cut after the
  // arguments (<|call|> stopped it): the same.
  const Parsed q = parse_every_way(
      "<|channel|>analysis<|message|>Need the weather.<|start|>assistant<|channel|>commentary to=functions.get_time "
      "<|constrain|>json<|message|>{}");
  ASSERT_EQ(q.calls.size(), 1u);
  EXPECT_EQ(q.calls[0].name, "get_time");
  EXPECT_EQ(q.calls[0].arguments, "{}");
  // A preamble for the user, then the call.
  const Parsed r = parse_every_way(
      "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary to=functions.get_time "
      "<|constrain|>json<|message|>{}<|call|>");
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 1u);
  // A plain final answer: content, no calls.
  const Parsed f = parse_every_way("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.");
  EXPECT_EQ(f.content, "It is sunny.");
  EXPECT_EQ(f.reasoning, "Easy.");
  EXPECT_TRUE(f.calls.empty());
}

// What the serving scheduler hands on: the visible reply, with the calls written back as harmony
// call messages (HarmonyParser::render_call); text before them is content.
TEST(HarmonyTools, TheSchedulersVisibleReplyWithItsCalls) {
  const std::string call = HarmonyParser::render_call({"functions.get_weather", "json", R"({"city": "Rome"})"});
  EXPECT_EQ(call, R"(<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}<|call|>)");
  const Parsed p = parse_every_way("Let me check. " + call);
  EXPECT_EQ(p.content, "Let me check.");  // the space before a call is not content
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0], (ToolCall{"call_t_0", "get_weather", R"({"city":"Rome"})"}));
  // Two calls; parallel_tool_calls false keeps the first.
  const std::string two = call + HarmonyParser::render_call({"functions.get_time", "json", "{}"});
  EXPECT_EQ(parse_every_way(two).calls.size(), 2u);
  const Parsed first = parse_every_way(two, ToolCallParser::Mode::Required, false);
  ASSERT_EQ(first.calls.size(), 1u);
  EXPECT_EQ(first.calls[0].name, "get_weather");
  // A plain reply stays as it is, white space and all.
  EXPECT_EQ(parse_every_way("Just text, no call.\n").content, "Just text, no call.\n");
}

// A message to another recipient, an unknown function, or arguments that are not a JSON object:
// not a call of ours, so the text stays in the content.
TEST(HarmonyTools, WhatIsNotACallOfOurToolsStaysText) {
  for (const HarmonyParser::Call& c : {HarmonyParser::Call{"functions.launch", "json", "{}"}, HarmonyParser::Call{"browser.search", "json", "{}"},
                                       HarmonyParser::Call{"functions.get_time", "json", "[1]"},
                                       HarmonyParser::Call{"functions.get_time", "json", "{oops"}}) {
    const std::string text = HarmonyParser::render_call(c);
    const Parsed p = parse_every_way(text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// ---- Constraints -----------------------------------------------------------------------------

TEST(HarmonyTools, AutoConstrainsTheArgumentsAfterTheHeaderRequiredTheWholeCall) {
  const std::vector<Tool> tools = weather_tools();
  // auto: free until a call's header ends, then the arguments under the tool's schema.
  const StructuredOutput a = tool_constraint(Family::Harmony, tools, ToolChoice{}, true);
  EXPECT_EQ(a.kind, StructuredOutput::Kind::JsonSchema);
  EXPECT_EQ(a.trigger, "json<|message|>");
  const auto ga = grammar::compile(a);
  EXPECT_TRUE(test::in_language(ga, R"({"city": "Paris"})"));
  EXPECT_TRUE(test::in_language(ga, "{}"));  // get_time's (no parameters)
  EXPECT_FALSE(test::in_language(ga, R"({"city": 3})"));
  EXPECT_FALSE(test::in_language(ga, R"({"town": "Paris"})"));

  // required: from the first token, gpt-oss's own header with an offered name, then that
  // function's arguments under its own schema.
  const StructuredOutput r = tool_constraint(Family::Harmony, tools, ToolChoice{ToolChoice::Mode::Required, ""}, true);
  EXPECT_EQ(r.kind, StructuredOutput::Kind::PrefixedJsonSchemas);
  EXPECT_EQ(r.trigger, "");
  const auto gr = grammar::compile(r);
  const std::string head = "<|channel|>commentary to=functions.";
  EXPECT_TRUE(test::in_language(gr, head + R"(get_weather <|constrain|>json<|message|>{"city": "Paris"})"));
  EXPECT_TRUE(test::in_language(gr, head + "get_weather <|constrain|>json<|message|>{\n  \"city\": \"\\u00e9\\n\"\n}"));
  EXPECT_TRUE(test::in_language(gr, head + "get_time <|constrain|>json<|message|>{}"));
  EXPECT_FALSE(test::in_language(gr, head + R"(get_weather <|constrain|>json<|message|>{"city": 3})"));
  EXPECT_FALSE(test::in_language(gr, head + R"(get_weather <|constrain|>json<|message|>{"town": "Paris"})"));
  EXPECT_FALSE(test::in_language(gr, head + R"(get_weather <|constrain|>json<|message|>{})"));  // city is required
  EXPECT_FALSE(test::in_language(gr, head + R"(get_time <|constrain|>json<|message|>{"city": "Paris"})"));  // not get_time's
  EXPECT_FALSE(test::in_language(gr, head + "launch <|constrain|>json<|message|>{}"));
  EXPECT_FALSE(test::in_language(gr, head + "get_time <|constrain|>json<|message|>[]"));
  EXPECT_FALSE(test::in_language(gr, head + "get_time <|constrain|>json<|message|>{} trailing"));
  EXPECT_FALSE(test::in_language(gr, "<|channel|>final<|message|>hello"));
  // The constrained reply reads back as the call.
  const Parsed p = parse_every_way(head + R"(get_weather <|constrain|>json<|message|>{"city": "Paris"})", ToolCallParser::Mode::Required);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  // A named function: that name only.
  const StructuredOutput n = tool_constraint(Family::Harmony, tools, ToolChoice{ToolChoice::Mode::Named, "get_time"}, true);
  const auto gn = grammar::compile(n);
  EXPECT_TRUE(test::in_language(gn, head + "get_time <|constrain|>json<|message|>{}"));
  EXPECT_FALSE(test::in_language(gn, head + R"(get_weather <|constrain|>json<|message|>{"city": "Paris"})"));
  // none: nothing.
  EXPECT_EQ(tool_constraint(Family::Harmony, tools, ToolChoice{ToolChoice::Mode::None, ""}, true).kind, StructuredOutput::Kind::None);
}

// ---- Through the serving scheduler -------------------------------------------------------------

// stories260K under the built-in harmony template, made by a grammar to reason and then call a
// function the way gpt-oss does: a chat reply (split_reasoning) hands the reasoning to on_reasoning
// and the call, in the visible reply, to the harmony parser, which reads the call.
TEST(HarmonyTools, SchedulerHandsTheCallToTheParser) {
  const char* kModel = "models/llama2c/stories260K.gguf";
  NPULLM_REQUIRE_SHARED(kModel);
  PipelineConfig pc;
  pc.use_cache = false;
  pc.variants = {256, 1024};
  pc.prefill_chunk = 16;
  pc.threads = 2;
  pc.chat_template = "harmony";
  genai::SchedulerConfig sc;
  sc.parallel = 1;
  genai::Scheduler sched(test::shared_path(kModel), pc, sc);

  const std::vector<Tool> tools = weather_tools();
  const std::vector<Message> msgs = {{"user", "Weather in Paris?", {}, "", ""}};
  const TemplateInput in = template_input(Family::Harmony, msgs, tools, ToolChoice{});
  genai::ServeRequest r;
  r.prompt_ids = sched.encode_chat(in.messages, in.extra);
  r.gen.max_new_tokens = 400;
  r.gen.structured.kind = StructuredOutput::Kind::Gbnf;
  r.gen.structured.source =
      "root ::= \"<|channel|>analysis<|message|>\" [a-z]{2,6} \" \" [a-z]{2,6} "
      "\"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\\\"city\\\": \\\"\" [a-z]{2,6} "
      "\"\\\"}\"\n";
  r.split_reasoning = true;
  auto text = std::make_shared<std::string>();
  auto reasoning = std::make_shared<std::string>();
  auto done = std::make_shared<std::promise<genai::ServeResult>>();
  r.on_text = [text](std::string_view p) {
    *text += p;
    return true;
  };
  r.on_reasoning = [reasoning](std::string_view p) {
    *reasoning += p;
    return true;
  };
  r.on_done = [done](const genai::ServeResult& res) { done->set_value(res); };
  sched.submit(std::move(r));
  const genai::ServeResult res = done->get_future().get();
  ASSERT_EQ(res.error, "");
  EXPECT_EQ(*text, res.text);
  EXPECT_EQ(*reasoning, res.reasoning);
  EXPECT_FALSE(reasoning->empty());
  const Parsed p = parse_every_way(*text);
  ASSERT_EQ(p.calls.size(), 1u) << *text;
  EXPECT_EQ(p.calls[0].name, "get_weather");
  const ordered_json args = ordered_json::parse(p.calls[0].arguments);
  ASSERT_TRUE(args.contains("city"));
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.reasoning, "");  // the scheduler already took it out
}

}  // namespace
}  // namespace npullm::genai::tools
