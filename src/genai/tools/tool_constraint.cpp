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

namespace {

// A tool's arguments schema; an omitted one means the function takes none: only {} is allowed.
ordered_json arguments_schema(const Tool& tool) {
  return tool.parameters.is_null()
             ? ordered_json{{"type", "object"}, {"properties", ordered_json::object()}, {"additionalProperties", false}}
             : tool.parameters;
}

// Harmony under required / a named function: from the first token, gpt-oss's own call header
// naming one of the offered functions, then that function's arguments under its schema (one
// prefixed schema per function; white space inside the arguments is bounded, as for any schema).
std::string harmony_required_alternatives(const std::vector<const Tool*>& tools) {
  ordered_json alts = ordered_json::array();
  for (const Tool* t : tools)
    alts.push_back({{"prefix", "<|channel|>commentary to=functions." + t->name + " <|constrain|>json<|message|>"},
                    {"schema", arguments_schema(*t)}});
  return alts.dump();
}

}  // namespace

std::string trigger_of(Family family) {
  switch (family) {
    case Family::Hermes:
    case Family::Generic: return "<tool_call>";
    case Family::Phi4Mini: return "<|tool_call|>";
    case Family::Llama3: return "<|python_tag|>";
    case Family::Harmony: return "json<|message|>";  // the end of a call's header, in both its forms
  }
  return "";
}

StructuredOutput tool_constraint(Family family, const std::vector<Tool>& tools, const ToolChoice& choice, bool parallel) {
  StructuredOutput s;
  if (choice.mode == ToolChoice::Mode::None || tools.empty()) return s;
  if (family == Family::Harmony) {
    // One call per reply (a harmony message has one recipient, and <|call|> ends the reply).
    std::vector<const Tool*> offered;
    for (const Tool& t : tools)
      if (choice.mode != ToolChoice::Mode::Named || t.name == choice.name) offered.push_back(&t);
    if (choice.mode == ToolChoice::Mode::Auto) {
      // From the header's end on, the arguments: the tool's schema (any of them: the name was
      // written before the trigger, free; the parser checks it is one of the offered).
      ordered_json alternatives = ordered_json::array();
      for (const Tool* t : offered) alternatives.push_back(arguments_schema(*t));
      s.kind = StructuredOutput::Kind::JsonSchema;
      s.source = (alternatives.size() == 1 ? alternatives[0] : ordered_json{{"anyOf", alternatives}}).dump();
      s.trigger = trigger_of(family);
    } else {
      s.kind = StructuredOutput::Kind::PrefixedJsonSchemas;
      s.source = harmony_required_alternatives(offered);
    }
    return s;
  }
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
