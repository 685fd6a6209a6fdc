// The OpenAI response side of tool calls: a parsed reply (genai/tools' ToolCallParser) -> the
// non-streamed message {content, tool_calls} and the streamed deltas, built from the same parser
// output, so that a client assembling the deltas gets the non-streamed message.
#pragma once
#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

#include "genai/tools/tool_call_parser.h"

namespace npullm::server {

// {"id", "type": "function", "function": {"name", "arguments"}}
nlohmann::json tool_call_json(const genai::tools::ToolCall& c);

// The assistant message of a whole reply: content (null when it only calls tools) and tool_calls.
nlohmann::json tool_reply_message(const genai::tools::ToolCallParser& parsed);

// The `delta` objects of one parser step: its content, then per completed call one delta with its
// index, id, type and function.name (arguments ""), then its arguments in pieces of about
// `piece` bytes (never cutting a UTF-8 sequence). `calls_said` counts the calls streamed so far.
std::vector<nlohmann::json> tool_reply_deltas(const genai::tools::ToolCallParser::Delta& d, size_t& calls_said, size_t piece = 24);

}  // namespace npullm::server
