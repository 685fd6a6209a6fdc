// The request layer's structured-output and tool fields: response_format, llama.cpp's grammar and
// json_schema, vLLM's guided_*, tools / tool_choice / parallel_tool_calls, assistant tool_calls and
// tool results; and every other field of OpenAI's chat API reference, each honoured or refused with
// a 400 naming it (tests/server/structured.mjs sends the same through HTTP).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <variant>

#include "server/openai_request.h"

namespace npullm::server {
namespace {

const RequestLimits kLimits{1000000, 512};
using Kind = StructuredOutput::Kind;
using Mode = genai::tools::ToolChoice::Mode;

std::string chat(const std::string& extra, const std::string& messages = R"([{"role":"user","content":"x"}])") {
  return R"({"messages":)" + messages + (extra.empty() ? "" : "," + extra) + "}";
}

ApiRequest ok(const std::string& body, bool is_chat = true) {
  auto r = parse_request(body, is_chat, kLimits);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << e->message;
  return std::holds_alternative<ApiRequest>(r) ? std::get<ApiRequest>(r) : ApiRequest{};
}

// The param the 400 names ("<accepted>" when the body was accepted).
std::string refused(const std::string& body, bool is_chat = true) {
  auto r = parse_request(body, is_chat, kLimits);
  if (std::holds_alternative<ApiRequest>(r)) return "<accepted>";
  const ApiError& e = std::get<ApiError>(r);
  EXPECT_EQ(e.status, 400) << body;
  EXPECT_FALSE(e.message.empty());
  return e.param;
}

TEST(StructuredRequest, ResponseFormatBecomesTheStructuredOutput) {
  EXPECT_EQ(ok(chat(R"("response_format":{"type":"text"})")).gen.structured.kind, Kind::None);
  ApiRequest r = ok(chat(R"("response_format":{"type":"json_object"})"));
  EXPECT_EQ(r.gen.structured.kind, Kind::JsonObject);
  EXPECT_EQ(r.structured_param, "response_format");
  r = ok(chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"person","description":"d","strict":true,
      "schema":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}}})"));
  EXPECT_EQ(r.gen.structured.kind, Kind::JsonSchema);
  // The schema's text keeps the order sent: the constrained output writes properties in it.
  EXPECT_EQ(r.gen.structured.source,
            R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]})");
  EXPECT_TRUE(r.gen.structured.trigger.empty());
  // llama.cpp's forms.
  r = ok(chat(R"("response_format":{"type":"json_object","schema":{"type":"array"}})"));
  EXPECT_EQ(r.gen.structured.kind, Kind::JsonSchema);
  EXPECT_EQ(r.gen.structured.source, R"({"type":"array"})");
  r = ok(chat(R"("grammar":"root ::= \"yes\" | \"no\"")"));
  EXPECT_EQ(r.gen.structured.kind, Kind::Gbnf);
  EXPECT_EQ(r.gen.structured.source, R"(root ::= "yes" | "no")");
  EXPECT_EQ(ok(chat(R"("json_schema":{"type":"boolean"})")).gen.structured.source, R"({"type":"boolean"})");
  // On /v1/completions too.
  EXPECT_EQ(ok(R"({"prompt":"x","grammar":"root ::= \"a\""})", false).gen.structured.kind, Kind::Gbnf);
  // vLLM's forms.
  EXPECT_EQ(ok(chat(R"("guided_json":"{\"type\":\"string\"}")")).gen.structured.source, R"({"type":"string"})");
  r = ok(chat(R"("guided_regex":"[0-9]{3}")"));
  EXPECT_EQ(r.gen.structured.kind, Kind::Regex);
  EXPECT_EQ(r.gen.structured.source, "[0-9]{3}");
  EXPECT_EQ(ok(chat(R"("guided_choice":["a.b","c|d"])")).gen.structured.source, R"((a\.b|c\|d))");
}

TEST(StructuredRequest, StructuredFieldsOutOfShapeAreRefusedByName) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("response_format":"json")", "response_format"},
      {R"("response_format":{})", "response_format.type"},
      {R"("response_format":{"type":"xml"})", "response_format.type"},
      {R"("response_format":{"type":"json_schema"})", "response_format.json_schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":{}}})", "response_format.json_schema.name"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"a b","schema":{}}})", "response_format.json_schema.name"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"a","schema":[]}})", "response_format.json_schema.schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"name":"a","strict":"yes"}})", "response_format.json_schema.strict"},
      {R"("grammar":"")", "grammar"},
      {R"("grammar":5)", "grammar"},
      {R"("json_schema":"{}")", "json_schema"},
      {R"("guided_json":"{oops")", "guided_json"},
      {R"("guided_choice":[])", "guided_choice"},
      {R"("guided_grammar":"start: x")", "guided_grammar"},
      {R"("response_format":{"type":"json_object"},"grammar":"root ::= \"a\"")", "grammar"},
      // One constraint at a time: a format and tool calls do not combine.
      {R"("response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"f"}}])", "response_format"},
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(refused(chat(extra)), param) << extra;
  EXPECT_EQ(refused(chat(R"("response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none")")),
            "<accepted>");
}

TEST(StructuredRequest, ToolsToolChoiceAndParallelCalls) {
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","strict":true,
          "parameters":{"type":"object","properties":{"city":{"type":"string"},"a":{"type":"number"}}}}},
         {"type":"function","function":{"name":"get-time"}}])";
  ApiRequest r = ok(chat(tools));
  const ChatRequest* c = &std::get<ChatRequest>(r.body);
  ASSERT_EQ(c->tools.size(), 2u);
  EXPECT_EQ(c->tools[0].name, "get_weather");
  EXPECT_EQ(c->tools[0].description, "Weather");
  EXPECT_TRUE(c->tools[0].strict);
  EXPECT_EQ(c->tools[0].parameters.dump(), R"({"type":"object","properties":{"city":{"type":"string"},"a":{"type":"number"}}})");
  EXPECT_TRUE(c->tools[1].parameters.is_null());
  EXPECT_EQ(c->tool_choice.mode, Mode::Auto);
  EXPECT_TRUE(c->parallel_tool_calls);
  EXPECT_TRUE(c->uses_tools());
  EXPECT_EQ(r.gen.structured.kind, Kind::None);  // the server sets it from the model's template family

  r = ok(chat(tools + R"(,"tool_choice":"required","parallel_tool_calls":false)"));
  EXPECT_EQ(std::get<ChatRequest>(r.body).tool_choice.mode, Mode::Required);
  EXPECT_FALSE(std::get<ChatRequest>(r.body).parallel_tool_calls);
  r = ok(chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"get-time"}})"));
  EXPECT_EQ(std::get<ChatRequest>(r.body).tool_choice.mode, Mode::Named);
  EXPECT_EQ(std::get<ChatRequest>(r.body).tool_choice.name, "get-time");
  EXPECT_EQ(std::get<ChatRequest>(ok(chat(tools + R"(,"tool_choice":"none")")).body).tool_choice.mode, Mode::None);
  // No tools: none, and nothing to render through genai/tools.
  r = ok(chat(R"("tools":[])"));
  EXPECT_EQ(std::get<ChatRequest>(r.body).tool_choice.mode, Mode::None);
  EXPECT_FALSE(std::get<ChatRequest>(r.body).uses_tools());

  const std::pair<std::string, std::string> cases[] = {
      {R"("tools":{})", "tools"},
      {R"("tools":[1])", "tools[0]"},
      {R"("tools":[{"function":{"name":"f"}}])", "tools[0].type"},
      {R"("tools":[{"type":"custom","custom":{"name":"f"}}])", "tools[0].type"},
      {R"("tools":[{"type":"function"}])", "tools[0].function"},
      {R"("tools":[{"type":"function","function":{}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"a.b"}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])", "tools[1].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}])", "tools[0].function.parameters"},
      {R"("tools":[{"type":"function","function":{"name":"f","description":7}}])", "tools[0].function.description"},
      {R"("tools":[{"type":"function","function":{"name":"f","strict":1}}])", "tools[0].function.strict"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes")", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}})", "tool_choice.function.name"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{}})", "tool_choice.type"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"parallel_tool_calls":"no")", "parallel_tool_calls"},
      {R"("functions":[{"name":"f"}])", "functions"},
      {R"("function_call":"auto")", "function_call"},
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(refused(chat(extra)), param) << extra;
  EXPECT_EQ(refused(R"({"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]})", false), "tools");
}

TEST(StructuredRequest, AssistantToolCallsAndToolResults) {
  const std::string history = R"([{"role":"user","content":"Weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"rain"}]}])";
  const ApiRequest r = ok(chat("", history));
  const auto& m = std::get<ChatRequest>(r.body).messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].content, "");
  ASSERT_EQ(m[1].tool_calls.size(), 1u);
  EXPECT_EQ(m[1].tool_calls[0], (genai::tools::ToolCall{"call_1", "get_weather", R"({"city":"Oslo"})"}));
  EXPECT_EQ(m[2].role, "tool");
  EXPECT_EQ(m[2].tool_call_id, "call_1");
  EXPECT_EQ(m[2].content, "rain");
  EXPECT_TRUE(std::get<ChatRequest>(r.body).uses_tools());  // a history with calls renders through genai/tools

  const std::pair<std::string, std::string> cases[] = {
      {R"([{"role":"user","content":"x"},{"role":"tool","content":"r","tool_call_id":"nope"}])", "messages[1].tool_call_id"},
      {R"([{"role":"user","content":"x"},{"role":"tool","content":"r"}])", "messages[1].tool_call_id"},
      {R"([{"role":"user","content":"x","tool_calls":[]}])", "messages[0].tool_calls"},
      {R"([{"role":"user","content":"x","tool_call_id":"a"}])", "messages[0].tool_call_id"},
      {R"([{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}])", "messages[1].tool_calls[0].id"},
      {R"([{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{x"}}]}])", "messages[1].tool_calls[0].function.arguments"},
      {R"([{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":{}}}]}])", "messages[1].tool_calls[0].function.arguments"},
      {R"([{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"custom","custom":{}}]}])", "messages[1].tool_calls[0].type"},
      {R"([{"role":"user","content":"x"},{"role":"assistant"}])", "messages[1].content"},
      {R"([{"role":"user","content":"x"},{"role":"assistant","content":"","refusal":"no"}])", "messages[1].refusal"},
      {R"([{"role":"user","content":"x"},{"role":"assistant","content":"","function_call":{}}])", "messages[1].function_call"},
      {R"([{"role":"user","content":"x","name":5}])", "messages[0].name"},
      {R"([{"role":"function","content":"x","name":"f"}])", "messages[0].role"},
  };
  for (const auto& [messages, param] : cases) EXPECT_EQ(refused(chat("", messages)), param) << messages;
}

// Every other field of OpenAI's chat completion request: honoured, or refused by name.
TEST(StructuredRequest, EveryDocumentedFieldIsHonouredOrRefused) {
  for (const char* accepted : {R"("logit_bias":{})", R"("modalities":["text"])", R"("store":false)", R"("user":"u")",
                               R"("safety_identifier":"s")", R"("prompt_cache_key":"k")", R"("service_tier":"auto")",
                               R"("metadata":{"a":"b"})", R"("parallel_tool_calls":true)", R"("stream_options":{"include_usage":false})",
                               R"("prediction":{"type":"content","content":"x"})",
                               R"("prediction":{"type":"content","content":[{"type":"text","text":"x"}]})"})
    EXPECT_EQ(refused(chat(accepted)), "<accepted>") << accepted;
  const std::pair<std::string, std::string> cases[] = {
      {R"("logit_bias":{"5":10})", "logit_bias"},
      {R"("audio":{"voice":"alloy","format":"wav"})", "audio"},
      {R"("modalities":["text","audio"])", "modalities"},
      {R"("prediction":{"type":"text","content":"x"})", "prediction"},
      {R"("prediction":{"type":"content","content":5})", "prediction"},
      {R"("prediction":{"type":"content","content":[{"type":"image_url"}]})", "prediction"},
      {R"("web_search_options":{})", "web_search_options"},
      {R"("reasoning_effort":"extreme")", "reasoning_effort"},
      {R"("reasoning_effort":2)", "reasoning_effort"},
      {R"("verbosity":"low")", "verbosity"},
      {R"("store":true)", "store"},
      {R"("metadata":"x")", "metadata"},
      {R"("user":5)", "user"},
      {R"("n":3)", "n"},
      {R"("logprobs":true)", "logprobs"},
      {R"("top_logprobs":2)", "logprobs"},
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(refused(chat(extra)), param) << extra;
  // reasoning_effort: low, medium or high, for the chat template (refused where there is none).
  for (const char* effort : {"low", "medium", "high"}) {
    auto e = parse_request(chat(fmt::format(R"("reasoning_effort":"{}")", effort)), true, kLimits);
    ASSERT_TRUE(std::holds_alternative<ApiRequest>(e)) << effort;
    EXPECT_EQ(std::get<ChatRequest>(std::get<ApiRequest>(e).body).reasoning_effort, effort);
  }
  auto completion = parse_request(R"({"prompt":"a","reasoning_effort":"low"})", false, kLimits);
  ASSERT_TRUE(std::holds_alternative<ApiError>(completion));
  EXPECT_EQ(std::get<ApiError>(completion).param, "reasoning_effort");
  // Predicted Outputs: the text becomes the speculation's prediction (the server honours it with
  // --spec lookup and refuses it otherwise; tests/server/structured.mjs, test_scheduler.cpp).
  auto r = parse_request(chat(R"("prediction":{"type":"content","content":[{"type":"text","text":"ab"},{"type":"text","text":"c"}]})"), true, kLimits);
  ASSERT_TRUE(std::holds_alternative<ApiRequest>(r));
  EXPECT_EQ(std::get<ApiRequest>(r).gen.speculative.prediction, "abc");
}

// Bodies are parsed with their keys in order, which costs k^2 for an object of k keys: a body
// with a huge object is refused while parsing (before its k^2 could add up).
TEST(StructuredRequest, AnObjectWithTooManyKeysIsRefusedWhileParsing) {
  std::string meta;
  for (int i = 0; i < 200000; ++i) meta += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  auto r = parse_request(chat("\"metadata\":{" + meta + "}"), true, kLimits);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_NE(std::get<ApiError>(r).message.find("more than 512 keys"), std::string::npos);
  EXPECT_EQ(refused(chat(R"("metadata":{"a":"b","c":"d"})")), "<accepted>");
}

}  // namespace
}  // namespace npullm::server
