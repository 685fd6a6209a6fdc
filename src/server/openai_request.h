// The OpenAI request layer: a JSON body -> a validated request, or an ApiError that says what is
// wrong, with the HTTP status and the error object OpenAI's API returns. Nothing here touches the
// model: the server hands the validated request to genai's scheduler.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <npullm/llm_pipeline.h>
#include <nlohmann/json.hpp>

#include "genai/tools/tool_types.h"

namespace npullm::server {

// An error as OpenAI reports it: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  nlohmann::json body() const;
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");

struct ChatRequest {
  std::vector<genai::tools::Message> messages;  // tool calls and results included
  std::vector<genai::tools::Tool> tools;
  genai::tools::ToolChoice tool_choice;         // auto with tools, none without
  bool parallel_tool_calls = true;
  // "low", "medium" or "high", handed to the chat template as `reasoning_effort` (gpt-oss's harmony
  // template writes it into the system message); empty: not sent, the template's default.
  std::string reasoning_effort;
  // Tools offered or tool calls / results in the history: rendered through genai/tools.
  bool uses_tools() const;
};

struct CompletionRequest {
  std::string prompt;                 // text, or
  std::vector<int32_t> prompt_ids;    // token ids given directly
};

struct ApiRequest {
  std::string model;                  // as sent (may be empty)
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool has_max_tokens = false;
  bool has_seed = false;
  GenerationConfig gen;               // gen.structured: from response_format, grammar or json_schema
  std::string structured_param;       // the field that set gen.structured ("" when none)
  std::variant<ChatRequest, CompletionRequest> body;
};

// Limits of what a request may ask for.
struct RequestLimits {
  int64_t max_tokens = 1000000;       // above this max_tokens is absurd (400)
  int64_t n_vocab = 0;                // token ids in a prompt must be below this
};

// Parses and validates a /v1/chat/completions (chat = true) or /v1/completions body. Unknown keys
// are ignored, as OpenAI-compatible servers do; every field of OpenAI's API reference is honoured
// or, where npullm cannot (n > 1, logprobs, logit_bias, audio, ...), refused with a 400 naming it,
// never silently dropped. Structured output: response_format (text, json_object, json_schema),
// llama.cpp's `grammar` (GBNF) and `json_schema`, vLLM's guided_json / guided_regex / guided_choice;
// tools: tools, tool_choice, parallel_tool_calls, assistant tool_calls and role "tool" messages.
std::variant<ApiRequest, ApiError> parse_request(const std::string& body, bool chat, const RequestLimits& limits);

}  // namespace npullm::server
