// Tool calls (OpenAI's "function calling") in genai: the tools a request offers, the calls a reply
// makes, the messages that carry calls and their results, and which tool-call syntax a model's chat
// template speaks. The server turns its JSON into these; genai/tools renders them through the chat
// template (tool_prompt.h), parses the model's reply back (tool_call_parser.h) and says how a reply
// is constrained (tool_constraint.h). Nothing here knows HTTP.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace npullm::genai::tools {

// A function the model may call.
struct Tool {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters;  // a JSON Schema of the arguments object; null: no parameters
  bool strict = false;                // OpenAI's strict: the arguments follow the schema (always so when constrained)
};

// One call a reply makes (or an earlier assistant turn made).
struct ToolCall {
  std::string id;         // "call_..." (the server's), echoed back by the tool's result message
  std::string name;
  std::string arguments;  // the arguments object as JSON text
  bool operator==(const ToolCall&) const = default;
};

// A chat message that may carry tool calls (assistant) or a tool's result (role "tool").
struct Message {
  std::string role;                   // system, user, assistant, tool
  std::string content;                // text ("" for an assistant turn that only calls tools)
  std::vector<ToolCall> tool_calls;   // assistant only
  std::string tool_call_id;           // tool only: which call this is the result of
  std::string name;                   // optional participant name (passed to the template)
};

// tool_choice: none (no call; tools not shown), auto (the model decides; constrained once its call
// syntax begins), required (at least one call, constrained from the first token), or one named function.
struct ToolChoice {
  enum class Mode { None, Auto, Required, Named };
  Mode mode = Mode::Auto;
  std::string name;                   // Named: the function
};

// The tool-call syntax of a chat template, read from its source:
//   Hermes   Qwen2.5 / Qwen3 (and Hermes-style templates): <tool_call>{"name", "arguments"}</tool_call>
//   Llama3   Llama 3.1 / 3.2 / 3.3: {"name", "parameters"} as the whole reply, maybe after <|python_tag|>
//   Phi4Mini Phi-4-mini: <|tool_call|>[{"name", "arguments"}, ...]<|/tool_call|>; tools in the system turn
//   Harmony  gpt-oss: a message to a recipient, <|channel|>commentary to=functions.NAME <|constrain|>json
//            <|message|>{arguments}<|call|> (the template writes earlier calls as <|start|>assistant
//            to=functions.NAME<|channel|>commentary json<|message|>...); one call per message
//   Generic  templates with no tool syntax (Gemma 3, Llama 3.0, ChatML, ...): npullm describes the
//            tools in the system turn and asks for the Hermes form, which it parses back
enum class Family { Hermes, Llama3, Phi4Mini, Harmony, Generic };

Family detect_family(std::string_view template_source);
const char* family_name(Family f);

}  // namespace npullm::genai::tools
