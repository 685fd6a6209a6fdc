#include "server/openai_request.h"

#include <cmath>
#include <fmt/format.h>

namespace npullm::server {

using nlohmann::json;

json ApiError::body() const {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

namespace {

// Thrown inside the parser, turned into the result at its top.
struct Invalid {
  ApiError error;
};

[[noreturn]] void invalid(const std::string& param, const std::string& message) { throw Invalid{bad_request(message, param)}; }

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a non-integer number";
    default: return "a number";
  }
}

// The value of `key`, or null when absent (null counts as absent, as in OpenAI's API).
const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& o, const char* key, double lo, double hi) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) invalid(key, fmt::format("'{}' must be a number, not {}", key, type_name(*v)));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) invalid(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, v->dump()));
  return d;
}

std::optional<int64_t> integer(const json& o, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) invalid(key, fmt::format("'{}' must be an integer, not {}", key, type_name(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    invalid(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, v->dump()));
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi) invalid(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, i));
  return i;
}

std::optional<bool> boolean(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) invalid(key, fmt::format("'{}' must be a boolean, not {}", key, type_name(*v)));
  return v->get<bool>();
}

// Message content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string content_text(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) invalid(where, fmt::format("'{}' must be a string or an array of text parts, not {}", where, type_name(c)));
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object()) invalid(at, fmt::format("'{}' must be an object", at));
    const json* type = field(part, "type");
    if (!type || !type->is_string()) invalid(at + ".type", fmt::format("'{}.type' must be a string", at));
    if (*type != "text") invalid(at + ".type", fmt::format("content parts of type '{}' are not supported (only 'text')", type->get<std::string>()));
    const json* text = field(part, "text");
    if (!text || !text->is_string()) invalid(at + ".text", fmt::format("'{}.text' must be a string", at));
    out += text->get<std::string>();
  }
  return out;
}

ChatRequest parse_messages(const json& o) {
  const json* m = field(o, "messages");
  if (!m) invalid("messages", "'messages' is required");
  if (!m->is_array()) invalid("messages", fmt::format("'messages' must be an array, not {}", type_name(*m)));
  if (m->empty()) invalid("messages", "'messages' must hold at least one message");
  ChatRequest r;
  bool has_user = false;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!msg.is_object()) invalid(at, fmt::format("'{}' must be an object, not {}", at, type_name(msg)));
    const json* role = field(msg, "role");
    if (!role) invalid(at + ".role", fmt::format("'{}.role' is required", at));
    if (!role->is_string()) invalid(at + ".role", fmt::format("'{}.role' must be a string", at));
    std::string r_name = role->get<std::string>();
    if (r_name == "developer") r_name = "system";  // OpenAI's newer name for system instructions
    if (r_name != "system" && r_name != "user" && r_name != "assistant")
      invalid(at + ".role", fmt::format("'{}.role' must be 'system', 'developer', 'user' or 'assistant' (got '{}')", at, r_name));
    const json* content = field(msg, "content");
    if (!content) invalid(at + ".content", fmt::format("'{}.content' is required", at));
    r.messages.push_back({r_name, content_text(*content, at + ".content")});
    has_user |= r_name == "user";
  }
  if (!has_user) invalid("messages", "'messages' must hold at least one user message");
  return r;
}

CompletionRequest parse_prompt(const json& o, const RequestLimits& limits) {
  const json* p = field(o, "prompt");
  if (!p) invalid("prompt", "'prompt' is required");
  CompletionRequest r;
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    for (const json& id : *p) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limits.n_vocab)
        invalid("prompt", fmt::format("token ids in 'prompt' must be integers in [0, {})", limits.n_vocab));
      r.prompt_ids.push_back(id.get<int32_t>());
    }
  } else {
    invalid("prompt", "'prompt' must be a string, an array of one string, or a non-empty array of token ids");
  }
  if (r.prompt.empty() && r.prompt_ids.empty()) invalid("prompt", "'prompt' is empty");
  return r;
}

ApiRequest parse(const json& o, bool chat, const RequestLimits& limits) {
  if (!o.is_object()) invalid("", fmt::format("the request body must be a JSON object, not {}", type_name(o)));
  ApiRequest r;
  if (const json* m = field(o, "model")) {
    if (!m->is_string()) invalid("model", "'model' must be a string");
    r.model = m->get<std::string>();
  }
  r.stream = boolean(o, "stream").value_or(false);
  if (const json* so = field(o, "stream_options")) {
    if (!so->is_object()) invalid("stream_options", "'stream_options' must be an object");
    r.include_usage = boolean(*so, "include_usage").value_or(false);
  }
  if (auto n = integer(o, "n", 1, 128); n && *n != 1) invalid("n", "only n = 1 is supported");
  if (boolean(o, "logprobs").value_or(false) || field(o, "top_logprobs")) invalid("logprobs", "logprobs are not supported");
  if (const json* t = field(o, "tools"); t && !(t->is_array() && t->empty())) invalid("tools", "tools are not supported");
  if (field(o, "functions")) invalid("functions", "functions are not supported");
  if (!chat) {
    if (boolean(o, "echo").value_or(false)) invalid("echo", "echo is not supported");
    if (const json* s = field(o, "suffix"); s && !(s->is_string() && s->get<std::string>().empty())) invalid("suffix", "suffix is not supported");
    if (auto b = integer(o, "best_of", 1, 128); b && *b != 1) invalid("best_of", "only best_of = 1 is supported");
  }

  GenerationConfig& g = r.gen;
  if (auto v = number(o, "temperature", 0.0, 2.0)) g.temperature = static_cast<float>(*v);
  else g.temperature = 1.0f;  // OpenAI's default
  if (auto v = number(o, "top_p", 0.0, 1.0)) g.top_p = static_cast<float>(*v);
  if (auto v = number(o, "presence_penalty", -2.0, 2.0)) g.presence_penalty = static_cast<float>(*v);
  if (auto v = number(o, "frequency_penalty", -2.0, 2.0)) g.frequency_penalty = static_cast<float>(*v);
  if (auto v = integer(o, "top_k", 0, 1 << 20)) g.top_k = static_cast<int32_t>(*v);
  if (auto v = number(o, "min_p", 0.0, 1.0)) g.min_p = static_cast<float>(*v);
  if (auto v = number(o, "repeat_penalty", 0.01, 10.0)) g.repetition_penalty = static_cast<float>(*v);
  std::optional<int64_t> max_tokens = integer(o, "max_completion_tokens", 1, limits.max_tokens);
  if (!max_tokens) max_tokens = integer(o, "max_tokens", 1, limits.max_tokens);
  if (max_tokens) {
    r.has_max_tokens = true;
    g.max_new_tokens = *max_tokens;
  }
  if (auto v = integer(o, "seed", INT64_MIN, INT64_MAX)) {
    r.has_seed = true;
    g.seed = static_cast<uint64_t>(*v);
  }
  if (const json* s = field(o, "stop")) {
    if (s->is_string()) {
      g.stop_strings = {s->get<std::string>()};
    } else if (s->is_array()) {
      if (s->size() > 4) invalid("stop", "'stop' may hold at most 4 strings");
      for (const json& x : *s) {
        if (!x.is_string()) invalid("stop", "'stop' must be a string or an array of strings");
        g.stop_strings.push_back(x.get<std::string>());
      }
    } else {
      invalid("stop", fmt::format("'stop' must be a string or an array of strings, not {}", type_name(*s)));
    }
    for (const std::string& x : g.stop_strings)
      if (x.empty()) invalid("stop", "stop strings must not be empty");
  }
  if (chat) r.body = parse_messages(o);
  else r.body = parse_prompt(o, limits);
  return r;
}

}  // namespace

std::variant<ApiRequest, ApiError> parse_request(const std::string& body, bool chat, const RequestLimits& limits) {
  json o;
  try {
    o = json::parse(body);
  } catch (const json::exception& e) {
    // nlohmann reports invalid UTF-8 inside strings as a parse error too, and a number beyond
    // double's range (1e309) as out_of_range.406, not as a parse error.
    return bad_request(fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  try {
    return parse(o, chat, limits);
  } catch (const Invalid& e) {
    return e.error;
  } catch (const json::exception& e) {
    return bad_request(fmt::format("invalid request: {}", e.what()));
  }
}

}  // namespace npullm::server
