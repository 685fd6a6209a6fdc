// A conversation with tools -> what the chat template is rendered with: the messages as the
// template expects them (tool calls with their arguments as objects, tool results) and the extra
// variables (`tools`), per template family (tool_types.h). Templates with their own tool syntax
// get the tools and calls the way Hugging Face's apply_chat_template passes them; for templates
// without (Family::Generic) npullm writes the tools into the system turn, calls into the assistant
// text and results into user turns, merging turns of one role so that templates that insist on
// alternating user/assistant turns (Gemma 3) still render.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "genai/tools/tool_types.h"

namespace npullm::genai::tools {

struct TemplateInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // e.g. {"tools": [...]}
};

// `tools` are shown to the model unless `choice` is None (then only earlier calls and results are
// rendered). Throws npullm::Error when an earlier call's arguments are not JSON.
TemplateInput template_input(Family family, const std::vector<Message>& messages, const std::vector<Tool>& tools,
                             const ToolChoice& choice);

// The tools as Hugging Face templates take them: [{"type": "function", "function": {name, description, parameters}}].
nlohmann::ordered_json tools_json(const std::vector<Tool>& tools);

}  // namespace npullm::genai::tools
