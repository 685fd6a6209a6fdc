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
  std::vector<ChatMessage> messages;
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
  GenerationConfig gen;
  std::variant<ChatRequest, CompletionRequest> body;
};

// Limits of what a request may ask for.
struct RequestLimits {
  int64_t max_tokens = 1000000;       // above this max_tokens is absurd (400)
  int64_t n_vocab = 0;                // token ids in a prompt must be below this
};

// Parses and validates a /v1/chat/completions (chat = true) or /v1/completions body. Unknown keys
// are ignored, as OpenAI-compatible servers do; keys whose meaning npullm cannot honour (n > 1,
// logprobs, tools, ...) are refused rather than silently dropped.
std::variant<ApiRequest, ApiError> parse_request(const std::string& body, bool chat, const RequestLimits& limits);

}  // namespace npullm::server
