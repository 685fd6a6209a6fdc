#include "server/openai_response.h"

#include <algorithm>

namespace npullm::server {

using nlohmann::json;
using genai::tools::ToolCall;

json tool_call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

json tool_reply_message(const genai::tools::ToolCallParser& parsed) {
  json m = {{"role", "assistant"}, {"content", parsed.content()}};
  if (parsed.calls().empty()) return m;
  if (parsed.content().empty()) m["content"] = nullptr;  // as OpenAI: a reply of calls only has no content
  m["tool_calls"] = json::array();
  for (const ToolCall& c : parsed.calls()) m["tool_calls"].push_back(tool_call_json(c));
  return m;
}

std::vector<json> tool_reply_deltas(const genai::tools::ToolCallParser::Delta& d, size_t& calls_said, size_t piece) {
  std::vector<json> out;
  if (!d.content.empty()) out.push_back({{"content", d.content}});
  for (const ToolCall& c : d.calls) {
    const size_t index = calls_said++;
    auto delta = [](json call) { return json{{"tool_calls", json::array({std::move(call)})}}; };
    out.push_back(delta({{"index", index}, {"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", ""}}}}));
    const std::string& a = c.arguments;
    for (size_t at = 0; at < a.size();) {
      size_t end = std::min(a.size(), at + std::max<size_t>(piece, 1));
      while (end < a.size() && (static_cast<unsigned char>(a[end]) & 0xC0) == 0x80) ++end;  // not inside a UTF-8 sequence
      out.push_back(delta({{"index", index}, {"function", {{"arguments", a.substr(at, end - at)}}}}));
      at = end;
    }
  }
  return out;
}

}  // namespace npullm::server
