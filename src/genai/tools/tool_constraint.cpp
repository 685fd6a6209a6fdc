#include "genai/tools/tool_constraint.h"

namespace npullm::genai::tools {

using nlohmann::ordered_json;

ordered_json call_schema(Family family, const Tool& tool) {
  // An omitted parameters schema means the function takes none: only {} is allowed.
  const ordered_json params = tool.parameters.is_null()
                                  ? ordered_json{{"type", "object"}, {"properties", ordered_json::object()}, {"additionalProperties", false}}
                                  : tool.parameters;
  const char* args = family == Family::Llama3 ? "parameters" : "arguments";
  return {{"type", "object"},
          {"properties", {{"name", {{"const", tool.name}}}, {args, params}}},
          {"required", {"name", args}},
          {"additionalProperties", false}};
}

std::string trigger_of(Family family) {
  switch (family) {
    case Family::Hermes:
    case Family::Generic: return "<tool_call>";
    case Family::Phi4Mini: return "<|tool_call|>";
    case Family::Llama3: return "<|python_tag|>";
  }
  return "";
}

StructuredOutput tool_constraint(Family family, const std::vector<Tool>& tools, const ToolChoice& choice, bool parallel) {
  StructuredOutput s;
  if (choice.mode == ToolChoice::Mode::None || tools.empty()) return s;
  ordered_json alternatives = ordered_json::array();
  for (const Tool& t : tools)
    if (choice.mode != ToolChoice::Mode::Named || t.name == choice.name) alternatives.push_back(call_schema(family, t));
  const ordered_json one = alternatives.size() == 1 ? alternatives[0] : ordered_json{{"anyOf", alternatives}};
  ordered_json array = {{"type", "array"}, {"items", one}, {"minItems", 1}, {"maxItems", parallel ? kMaxParallelCalls : 1}};
  s.kind = StructuredOutput::Kind::JsonSchema;
  if (choice.mode == ToolChoice::Mode::Auto) {
    s.trigger = trigger_of(family);
    s.source = (family == Family::Phi4Mini ? array : one).dump();
  } else {
    s.source = (family == Family::Llama3 ? one : array).dump();
  }
  return s;
}

}  // namespace npullm::genai::tools
