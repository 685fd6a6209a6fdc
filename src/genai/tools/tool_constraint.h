// How a reply with tools is constrained (GenerationConfig::structured, served by genai/grammar):
//   required / a named function: from the first token, a JSON Schema of the family's call JSON
//     (an array of calls, one at most unless parallel calls are allowed; Llama 3 makes one call)
//     whose arguments follow each tool's parameters schema; the parser (tool_call_parser.h) takes
//     that bare JSON as the calls; gpt-oss (harmony): its call header naming an offered
//     function, then that function's arguments under its schema (StructuredOutput's
//     PrefixedJsonSchemas);
//   auto: lazily, from the family's trigger (<tool_call>, <|tool_call|>, <|python_tag|>) on, the
//     JSON that follows it (the grammar ends the reply after that JSON, so one call, or for
//     Phi-4-mini one array of calls);
//   none: not at all.
#pragma once
#include <vector>

#include <npullm/llm_pipeline.h>
#include <nlohmann/json.hpp>

#include "genai/tools/tool_types.h"

namespace npullm::genai::tools {

// Calls one constrained reply may make at most (parallel_tool_calls): OpenAI states no bound, but
// without one a model that keeps adding calls would only stop at max_tokens, its reply cut.
inline constexpr int kMaxParallelCalls = 8;

StructuredOutput tool_constraint(Family family, const std::vector<Tool>& tools, const ToolChoice& choice, bool parallel);

// The JSON Schema of one call of `tool` in the family's form ({"name": const, "arguments"|"parameters": schema}).
nlohmann::ordered_json call_schema(Family family, const Tool& tool);

// The text after which a family's call JSON begins (auto); "" for none.
std::string trigger_of(Family family);

}  // namespace npullm::genai::tools
