// genai/tools: conversations with tools rendered through real chat templates (against Jinja2's
// renderings with Hugging Face's variables, tests/data/chat/tool_call_cases.json), each family's
// tool-call output parsed back (whole or a byte at a time: the same content and calls), and the
// constraints tool_choice asks for.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "genai/jinja/template.h"
#include "genai/tools/tool_call_parser.h"
#include "genai/tools/tool_constraint.h"
#include "genai/tools/tool_prompt.h"
#include "test_util.h"

namespace npullm::genai::tools {
namespace {

using nlohmann::ordered_json;

std::vector<Tool> weather_tools() {
  Tool w{"get_weather", "Get the current weather in a city",
         ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"), false};
  Tool t{"get_time", "", nullptr, false};
  return {w, t};
}

// ---- Rendering -----------------------------------------------------------------------------------

TEST(ToolTemplates, FamiliesAreReadFromTheTemplateSource) {
  const std::string dir = test::shared_path("golden/chat/templates/");
  NPULLM_REQUIRE_FILE(dir + "qwen3.jinja", "");
  EXPECT_EQ(detect_family(test::read_file(dir + "qwen3.jinja")), Family::Hermes);
  for (const char* name : {"gemma3", "chatml", "llama3", "llama3_1", "phi3", "llama2", "mistral", "zephyr"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(detect_family(test::read_file(dir + name + ".jinja")), Family::Generic);
  }
  // The markers of Llama 3.1's and Phi-4-mini's own templates.
  EXPECT_EQ(detect_family("{{- '<|python_tag|>' + tool_call.name }}"), Family::Llama3);
  EXPECT_EQ(detect_family("{%- if message.role == 'ipython' %}"), Family::Llama3);
  EXPECT_EQ(detect_family("{{ '<|tool|>' + message['tools'] + '<|/tool|>' }}"), Family::Phi4Mini);
}

// Jinja2 over Hugging Face's variables (tools as [{"type": "function", ...}], calls with arguments
// as mappings, role "tool" with tool_call_id) vs genai/tools from the OpenAI-side structures.
TEST(ToolTemplates, QwenRendersToolsCallsAndResultsAsJinja2) {
  const std::string path = test::repo_data_path("chat/tool_call_cases.json");
  const ordered_json cases = ordered_json::parse(test::read_file(path))["cases"];
  ASSERT_FALSE(cases.empty());
  for (const ordered_json& c : cases) {
    SCOPED_TRACE(c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>());
    const std::string tpath = test::shared_path("golden/chat/templates/" + c["template"].get<std::string>() + ".jinja");
    NPULLM_REQUIRE_FILE(tpath, "");
    const std::string source = test::read_file(tpath);
    std::vector<Tool> tools;
    for (const ordered_json& t : c["tools"])
      tools.push_back({t["function"]["name"], t["function"]["description"], t["function"]["parameters"], false});
    std::vector<Message> msgs;
    for (const ordered_json& m : c["messages"]) {
      Message x{m["role"], m["content"], {}, m.value("tool_call_id", ""), ""};
      if (m.contains("tool_calls"))
        for (const ordered_json& tc : m["tool_calls"])
          x.tool_calls.push_back({tc["id"], tc["function"]["name"], tc["function"]["arguments"].dump()});  // as a client sends it: text
      msgs.push_back(std::move(x));
    }
    const Family f = detect_family(source);
    ASSERT_EQ(f, Family::Hermes);
    const TemplateInput in = template_input(f, msgs, tools, ToolChoice{});
    EXPECT_EQ(in.extra["tools"], c["tools"]);
    EXPECT_EQ(in.messages, c["messages"]);
    EXPECT_EQ(jinja::render_chat_template(source, in.messages, true, c["bos_token"], c["eos_token"], in.extra), c["expected"].get<std::string>());
    // tool_choice none: the tools are not shown, earlier calls still are.
    const TemplateInput none = template_input(f, msgs, tools, ToolChoice{ToolChoice::Mode::None, ""});
    EXPECT_FALSE(none.extra.contains("tools"));
  }
}

// A template without tool syntax (Gemma 3 insists on alternating user / model turns): the tools in
// the system turn, calls as <tool_call> blocks, results as user turns, merged where roles repeat.
TEST(ToolTemplates, GenericTemplatesGetToolsCallsAndResultsAsText) {
  const std::string tpath = test::shared_path("golden/chat/templates/gemma3.jinja");
  NPULLM_REQUIRE_FILE(tpath, "");
  const std::string source = test::read_file(tpath);
  const std::vector<Message> msgs = {
      {"system", "Be brief.", {}, "", ""},
      {"user", "Weather and time in Oslo?", {}, "", ""},
      {"assistant", "", {{"c1", "get_weather", R"({"city":"Oslo"})"}, {"c2", "get_time", "{}"}}, "", ""},
      {"tool", "rain", {}, "c1", ""},
      {"tool", "09:00", {}, "c2", ""},
      {"user", "And tomorrow?", {}, "", ""},
  };
  const TemplateInput in = template_input(Family::Generic, msgs, weather_tools(), ToolChoice{});
  ASSERT_EQ(in.messages.size(), 4u);  // system, user, assistant, user (two results and the question merged)
  EXPECT_EQ(in.messages[0]["role"], "system");
  EXPECT_EQ(in.messages[3]["role"], "user");
  EXPECT_FALSE(in.extra.contains("tools"));
  const std::string text = jinja::render_chat_template(source, in.messages, true, "<bos>", "<eos>", in.extra);
  EXPECT_NE(text.find("Be brief.\n\n# Tools"), std::string::npos) << text;
  EXPECT_NE(text.find(R"({"name":"get_weather","description":"Get the current weather in a city","parameters":{"type":"object")"), std::string::npos);
  EXPECT_NE(text.find("<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>"),
            std::string::npos) << text;
  EXPECT_NE(text.find("<tool_response>\nrain\n</tool_response>\n\n<tool_response>\n09:00\n</tool_response>\n\nAnd tomorrow?"), std::string::npos) << text;
}

TEST(ToolTemplates, PhiFourMiniGetsToolsInTheSystemTurnAndCallsInTheContent) {
  const std::vector<Message> msgs = {
      {"user", "Weather?", {}, "", ""},
      {"assistant", "", {{"c1", "get_weather", R"({"city":"Oslo"})"}}, "", ""},
      {"tool", "rain", {}, "c1", ""},
  };
  const TemplateInput in = template_input(Family::Phi4Mini, msgs, weather_tools(), ToolChoice{});
  ASSERT_EQ(in.messages.size(), 4u);
  EXPECT_EQ(in.messages[0]["role"], "system");
  const ordered_json fns = ordered_json::parse(in.messages[0]["tools"].get<std::string>());
  ASSERT_EQ(fns.size(), 2u);
  EXPECT_EQ(fns[0]["name"], "get_weather");
  EXPECT_EQ(fns[1]["parameters"], ordered_json::parse(R"({"type":"object","properties":{}})"));
  EXPECT_EQ(in.messages[2]["content"], R"(<|tool_call|>[{"name":"get_weather","arguments":{"city":"Oslo"}}]<|/tool_call|>)");
  EXPECT_EQ(in.messages[3]["tool_call_id"], "c1");
}

TEST(ToolTemplates, ArgumentsThatAreNotJsonAreRefused) {
  const std::vector<Message> msgs = {{"user", "x", {}, "", ""}, {"assistant", "", {{"c1", "get_time", "{oops"}}, "", ""}};
  EXPECT_NE(test::error_of([&] { template_input(Family::Hermes, msgs, weather_tools(), ToolChoice{}); }).find("not JSON"), std::string::npos);
}

// ---- Parsing -------------------------------------------------------------------------------------

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
};

// Parses `text` whole and a byte at a time; both must agree, and the deltas must add up to the result.
Parsed parse(Family f, const std::string& text, ToolCallParser::Mode mode = ToolCallParser::Mode::Auto, bool parallel = true) {
  const std::vector<std::string> names = {"get_weather", "get_time"};
  ToolCallParser whole(f, mode, names, parallel, "call_");
  ToolCallParser::Delta a = whole.feed(text);
  ToolCallParser::Delta b = whole.finish();
  EXPECT_EQ(a.content + b.content, whole.content());

  ToolCallParser bytes(f, mode, names, parallel, "call_");
  std::string content;
  std::vector<ToolCall> calls;
  auto add = [&](const ToolCallParser::Delta& d) {
    content += d.content;
    calls.insert(calls.end(), d.calls.begin(), d.calls.end());
  };
  for (char ch : text) add(bytes.feed(std::string_view(&ch, 1)));
  add(bytes.finish());
  EXPECT_EQ(content, whole.content()) << "streamed content differs for: " << text;
  EXPECT_EQ(calls, whole.calls()) << "streamed calls differ for: " << text;
  EXPECT_EQ(bytes.content(), whole.content());
  return {whole.content(), whole.calls()};
}

TEST(ToolCallParser, HermesCallsAfterTextAndThinking) {
  Parsed p = parse(Family::Hermes,
                   "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                   "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n");
  EXPECT_EQ(p.content, "<think>\nThe user wants weather.\n</think>\n\nLet me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0], (ToolCall{"call_0", "get_weather", R"({"city":"Paris"})"}));
  EXPECT_EQ(p.calls[1], (ToolCall{"call_1", "get_time", "{}"}));

  // The lazy grammar ends the reply right after the call's JSON: no closing tag.
  p = parse(Family::Hermes, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"days\":[1,2]}}");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo","days":[1,2]})");

  // Arguments given as JSON text are read as the object they spell.
  p = parse(Family::Hermes, "<tool_call>{\"name\":\"get_time\",\"arguments\":\"{\\\"zone\\\":\\\"UTC\\\"}\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"zone":"UTC"})");

  // Text after the calls stays content (without the whitespace around the calls).
  p = parse(Family::Hermes, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>\n\nDone. ");
  EXPECT_EQ(p.content, "Done.");
  EXPECT_EQ(p.calls.size(), 1u);
}

TEST(ToolCallParser, WhatIsNotACallOfOurToolsStaysText) {
  for (const std::string& text : {
           std::string("Hello <tool world> and <tool_c"),                                          // marker beginnings
           std::string("<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>"),             // a tool not offered
           std::string("<tool_call>{\"name\":\"get_time\",\"arguments\":{</tool_call> tail  "),     // broken JSON
           std::string("<tool_call>[]</tool_call>"),                                               // no call
           std::string("<tool_call>{\"name\":\"get_time\",\"arguments\":[1]}</tool_call>"),         // arguments not an object
           std::string("  plain text with trailing space \n"),
           std::string(""),
       }) {
    SCOPED_TRACE(text);
    const Parsed p = parse(Family::Hermes, text);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, text);  // byte for byte
  }
}

TEST(ToolCallParser, LlamaThreeJsonWithOrWithoutPythonTag) {
  Parsed p = parse(Family::Llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0], (ToolCall{"call_0", "get_weather", R"({"city":"Rome"})"}));
  EXPECT_EQ(p.content, "");
  p = parse(Family::Llama3, "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"zone\": \"CET\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"zone":"CET"})");
  // JSON that is not a call, and text that merely contains JSON, are content.
  for (const std::string& text : {std::string("{\"answer\": 42}"), std::string("The result is {\"name\": \"get_time\", \"parameters\": {}}")}) {
    p = parse(Family::Llama3, text);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallParser, PhiFourMiniCallArrays) {
  const std::string calls = R"([{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {"zone": "CET"}}])";
  for (const std::string& text : {"<|tool_call|>" + calls + "<|/tool_call|>", calls}) {  // markers printed or not
    SCOPED_TRACE(text);
    const Parsed p = parse(Family::Phi4Mini, text);
    ASSERT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.calls[1], (ToolCall{"call_1", "get_time", R"({"zone":"CET"})"}));
    EXPECT_EQ(p.content, "");
  }
}

TEST(ToolCallParser, RequiredReadsTheBareConstrainedJson) {
  const std::string two = R"(  [{"name":"get_weather","arguments":{"city":"Oslo"}},{"name":"get_time","arguments":{}}])";
  for (Family f : {Family::Hermes, Family::Generic, Family::Phi4Mini}) {
    Parsed p = parse(f, two, ToolCallParser::Mode::Required);
    EXPECT_EQ(p.calls.size(), 2u);
    EXPECT_EQ(p.content, "");
    p = parse(f, two, ToolCallParser::Mode::Required, /*parallel=*/false);  // parallel_tool_calls false: the first
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
  }
  // Cut short (max_tokens): no call, the text as it came.
  const Parsed p = parse(Family::Hermes, R"([{"name":"get_weather","argu)", ToolCallParser::Mode::Required);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, R"([{"name":"get_weather","argu)");
}

// ---- Constraints ---------------------------------------------------------------------------------

TEST(ToolConstraint, RequiredFromTheFirstTokenAutoFromTheTrigger) {
  const std::vector<Tool> tools = weather_tools();
  StructuredOutput s = tool_constraint(Family::Hermes, tools, {ToolChoice::Mode::Required, ""}, true);
  EXPECT_EQ(s.kind, StructuredOutput::Kind::JsonSchema);
  EXPECT_EQ(s.trigger, "");
  ordered_json j = ordered_json::parse(s.source);
  EXPECT_EQ(j["type"], "array");
  EXPECT_EQ(j["minItems"], 1);
  EXPECT_EQ(j["maxItems"], kMaxParallelCalls);
  ASSERT_EQ(j["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(j["items"]["anyOf"][0]["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(j["items"]["anyOf"][0]["properties"]["arguments"], tools[0].parameters);
  // An omitted parameters schema: only {}.
  EXPECT_EQ(j["items"]["anyOf"][1]["properties"]["arguments"]["additionalProperties"], false);

  s = tool_constraint(Family::Hermes, tools, {ToolChoice::Mode::Named, "get_time"}, false);
  j = ordered_json::parse(s.source);
  EXPECT_EQ(j["maxItems"], 1);
  EXPECT_EQ(j["items"]["properties"]["name"]["const"], "get_time");

  s = tool_constraint(Family::Hermes, tools, {ToolChoice::Mode::Auto, ""}, true);
  EXPECT_EQ(s.trigger, "<tool_call>");
  EXPECT_EQ(ordered_json::parse(s.source)["anyOf"].size(), 2u);
  EXPECT_EQ(tool_constraint(Family::Phi4Mini, tools, {ToolChoice::Mode::Auto, ""}, true).trigger, "<|tool_call|>");
  EXPECT_EQ(ordered_json::parse(tool_constraint(Family::Phi4Mini, tools, {ToolChoice::Mode::Auto, ""}, true).source)["type"], "array");

  // Llama 3 makes one call, its arguments under "parameters".
  s = tool_constraint(Family::Llama3, tools, {ToolChoice::Mode::Named, "get_weather"}, true);
  j = ordered_json::parse(s.source);
  EXPECT_EQ(j["required"], ordered_json::parse(R"(["name","parameters"])"));
  EXPECT_EQ(tool_constraint(Family::Hermes, tools, {ToolChoice::Mode::None, ""}, true).kind, StructuredOutput::Kind::None);
}

}  // namespace
}  // namespace npullm::genai::tools
