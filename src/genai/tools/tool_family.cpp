#include "genai/tools/tool_types.h"

namespace npullm::genai::tools {

Family detect_family(std::string_view src) {
  auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  // The markers each family's template writes when it renders tools or calls; a template that
  // mentions none of them has no tool syntax of its own.
  // gpt-oss's harmony template (the markers ChatFormat::harmony() looks for too).
  if (has("<|channel|>") && has("<|message|>")) return Family::Harmony;
  if (has("<tool_call>")) return Family::Hermes;
  if (has("<|python_tag|>") || has("ipython")) return Family::Llama3;
  if (has("<|tool_call|>") || has("<|/tool|>")) return Family::Phi4Mini;
  return Family::Generic;
}

const char* family_name(Family f) {
  switch (f) {
    case Family::Hermes: return "hermes";
    case Family::Llama3: return "llama3";
    case Family::Phi4Mini: return "phi4-mini";
    case Family::Harmony: return "harmony";
    case Family::Generic: return "generic";
  }
  return "?";
}

}  // namespace npullm::genai::tools
