#include "server/openai_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fmt/format.h>

namespace npullm::server {

// Bodies are read with their keys in the order sent: a JSON Schema's property order is the order the
// constrained output writes them in.
using json = nlohmann::ordered_json;

bool ChatRequest::uses_tools() const {
  if (!tools.empty()) return true;
  for (const auto& m : messages)
    if (m.role == "tool" || !m.tool_calls.empty()) return true;
  return false;
}

nlohmann::json ApiError::body() const {
  return nlohmann::json{{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}}}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

namespace {

// Keys one object of a body may have (see parse_request).
constexpr size_t kMaxObjectKeys = 512;

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

// `at`: where `o` is in the body ("" at its top), so that a nested field's error names its path.
std::optional<bool> boolean(const json& o, const char* key, const std::string& at = "") {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  const std::string where = at.empty() ? key : at + "." + key;
  if (!v->is_boolean()) invalid(where, fmt::format("'{}' must be a boolean, not {}", where, type_name(*v)));
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

// OpenAI's rule for function names: letters, digits, '_' and '-', at most 64.
bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::string string_field(const json& o, const char* key, const std::string& at, bool required) {
  const json* v = field(o, key);
  const std::string where = at.empty() ? key : at + "." + key;
  if (!v) {
    if (required) invalid(where, fmt::format("'{}' is required", where));
    return "";
  }
  if (!v->is_string()) invalid(where, fmt::format("'{}' must be a string, not {}", where, type_name(*v)));
  return v->get<std::string>();
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}].
std::vector<genai::tools::ToolCall> parse_tool_calls(const json& calls, const std::string& at) {
  if (!calls.is_array()) invalid(at, fmt::format("'{}' must be an array, not {}", at, type_name(calls)));
  std::vector<genai::tools::ToolCall> out;
  for (size_t j = 0; j < calls.size(); ++j) {
    const json& c = calls[j];
    const std::string cat = fmt::format("{}[{}]", at, j);
    if (!c.is_object()) invalid(cat, fmt::format("'{}' must be an object", cat));
    genai::tools::ToolCall call;
    call.id = string_field(c, "id", cat, true);
    const std::string type = string_field(c, "type", cat, false);
    if (!type.empty() && type != "function")
      invalid(cat + ".type", fmt::format("'{}.type' must be 'function' (got '{}')", cat, type));
    const json* fn = field(c, "function");
    if (!fn || !fn->is_object()) invalid(cat + ".function", fmt::format("'{}.function' must be an object", cat));
    call.name = string_field(*fn, "name", cat + ".function", true);
    call.arguments = string_field(*fn, "arguments", cat + ".function", true);
    json args;
    try {
      args = json::parse(call.arguments);
    } catch (const json::exception&) {
    }
    if (!args.is_object())
      invalid(cat + ".function.arguments", fmt::format("'{}.function.arguments' must be a JSON object as text", cat));
    out.push_back(std::move(call));
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
  std::vector<std::string> call_ids;  // of earlier assistant turns: what a tool message answers
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!msg.is_object()) invalid(at, fmt::format("'{}' must be an object, not {}", at, type_name(msg)));
    const json* role = field(msg, "role");
    if (!role) invalid(at + ".role", fmt::format("'{}.role' is required", at));
    if (!role->is_string()) invalid(at + ".role", fmt::format("'{}.role' must be a string", at));
    std::string r_name = role->get<std::string>();
    if (r_name == "developer") r_name = "system";  // OpenAI's newer name for system instructions
    if (r_name != "system" && r_name != "user" && r_name != "assistant" && r_name != "tool")
      invalid(at + ".role", fmt::format("'{}.role' must be 'system', 'developer', 'user', 'assistant' or 'tool' (got '{}')", at, r_name));
    for (const char* k : {"audio", "function_call", "refusal"})
      if (field(msg, k)) invalid(at + "." + k, fmt::format("'{}.{}' is not supported", at, k));
    genai::tools::Message out;
    out.role = r_name;
    out.name = string_field(msg, "name", at, false);
    if (const json* tc = field(msg, "tool_calls")) {
      if (r_name != "assistant") invalid(at + ".tool_calls", fmt::format("'{}.tool_calls' is only for assistant messages", at));
      out.tool_calls = parse_tool_calls(*tc, at + ".tool_calls");
      for (const auto& c : out.tool_calls) call_ids.push_back(c.id);
    }
    if (r_name == "tool") {
      out.tool_call_id = string_field(msg, "tool_call_id", at, true);
      if (std::find(call_ids.begin(), call_ids.end(), out.tool_call_id) == call_ids.end())
        invalid(at + ".tool_call_id", fmt::format("'{}.tool_call_id' ('{}') answers no tool call of an earlier assistant message",
                                                  at, out.tool_call_id));
    } else if (field(msg, "tool_call_id")) {
      invalid(at + ".tool_call_id", fmt::format("'{}.tool_call_id' is only for tool messages", at));
    }
    const json* content = field(msg, "content");
    if (content) out.content = content_text(*content, at + ".content");
    else if (out.tool_calls.empty()) invalid(at + ".content", fmt::format("'{}.content' is required", at));
    has_user |= r_name == "user";
    r.messages.push_back(std::move(out));
  }
  if (!has_user) invalid("messages", "'messages' must hold at least one user message");
  return r;
}

// tools, tool_choice and parallel_tool_calls.
void parse_tools(const json& o, ChatRequest& r) {
  using genai::tools::ToolChoice;
  if (const json* t = field(o, "tools")) {
    if (!t->is_array()) invalid("tools", fmt::format("'tools' must be an array, not {}", type_name(*t)));
    for (size_t i = 0; i < t->size(); ++i) {
      const json& x = (*t)[i];
      const std::string at = fmt::format("tools[{}]", i);
      if (!x.is_object()) invalid(at, fmt::format("'{}' must be an object", at));
      const std::string type = string_field(x, "type", at, true);
      if (type != "function") invalid(at + ".type", fmt::format("tools of type '{}' are not supported (only 'function')", type));
      const json* fn = field(x, "function");
      if (!fn) invalid(at + ".function", fmt::format("'{}.function' is required", at));
      if (!fn->is_object()) invalid(at + ".function", fmt::format("'{}.function' must be an object", at));
      genai::tools::Tool tool;
      tool.name = string_field(*fn, "name", at + ".function", true);
      if (!valid_function_name(tool.name))
        invalid(at + ".function.name", fmt::format("'{}.function.name' must be 1 to 64 letters, digits, '_' or '-' (got '{}')", at, tool.name));
      for (const auto& other : r.tools)
        if (other.name == tool.name) invalid(at + ".function.name", fmt::format("two tools are named '{}'", tool.name));
      tool.description = string_field(*fn, "description", at + ".function", false);
      if (const json* p = field(*fn, "parameters")) {
        if (!p->is_object()) invalid(at + ".function.parameters", fmt::format("'{}.function.parameters' must be a JSON Schema object", at));
        tool.parameters = *p;
      }
      tool.strict = boolean(*fn, "strict", at + ".function").value_or(false);
      r.tools.push_back(std::move(tool));
    }
  }
  r.tool_choice.mode = r.tools.empty() ? ToolChoice::Mode::None : ToolChoice::Mode::Auto;
  if (const json* c = field(o, "tool_choice")) {
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none") r.tool_choice.mode = ToolChoice::Mode::None;
      else if (s == "auto") r.tool_choice.mode = ToolChoice::Mode::Auto;
      else if (s == "required") r.tool_choice.mode = ToolChoice::Mode::Required;
      else invalid("tool_choice", fmt::format("'tool_choice' must be 'none', 'auto', 'required' or a function (got '{}')", s));
    } else if (c->is_object()) {
      const std::string type = string_field(*c, "type", "tool_choice", true);
      if (type != "function") invalid("tool_choice.type", fmt::format("tool_choice of type '{}' is not supported (only 'function')", type));
      const json* fn = field(*c, "function");
      if (!fn || !fn->is_object()) invalid("tool_choice.function", "'tool_choice.function' must be an object");
      r.tool_choice.mode = ToolChoice::Mode::Named;
      r.tool_choice.name = string_field(*fn, "name", "tool_choice.function", true);
      bool known = false;
      for (const auto& t : r.tools) known |= t.name == r.tool_choice.name;
      if (!known) invalid("tool_choice.function.name", fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", r.tool_choice.name));
    } else {
      invalid("tool_choice", fmt::format("'tool_choice' must be a string or an object, not {}", type_name(*c)));
    }
    if (r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::None)
      invalid("tool_choice", "'tool_choice' asks for a tool call, but 'tools' is empty");
  }
  r.parallel_tool_calls = boolean(o, "parallel_tool_calls").value_or(true);
}

// A JSON Schema given in a request: an object (its text is what genai/grammar compiles).
std::string schema_text(const json& v, const std::string& where) {
  if (!v.is_object()) invalid(where, fmt::format("'{}' must be a JSON Schema object, not {}", where, type_name(v)));
  return v.dump();
}

// response_format, llama.cpp's grammar / json_schema and vLLM's guided_* fields: at most one.
void parse_structured(const json& o, ApiRequest& r) {
  StructuredOutput& so = r.gen.structured;
  auto set = [&](const char* param, StructuredOutput::Kind kind, std::string source) {
    if (!r.structured_param.empty())
      invalid(param, fmt::format("'{}' and '{}' both constrain the output; send one", r.structured_param, param));
    r.structured_param = param;
    so.kind = kind;
    so.source = std::move(source);
  };
  using Kind = StructuredOutput::Kind;
  if (const json* rf = field(o, "response_format")) {
    if (!rf->is_object()) invalid("response_format", fmt::format("'response_format' must be an object, not {}", type_name(*rf)));
    const std::string type = string_field(*rf, "type", "response_format", true);
    if (type == "json_object") {
      // llama.cpp's extension: {"type": "json_object", "schema": {...}}.
      if (const json* sc = field(*rf, "schema")) set("response_format", Kind::JsonSchema, schema_text(*sc, "response_format.schema"));
      else set("response_format", Kind::JsonObject, "");
    } else if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      if (!js) invalid("response_format.json_schema", "'response_format.json_schema' is required with type 'json_schema'");
      if (!js->is_object()) invalid("response_format.json_schema", "'response_format.json_schema' must be an object");
      const std::string name = string_field(*js, "name", "response_format.json_schema", true);
      if (!valid_function_name(name))
        invalid("response_format.json_schema.name", fmt::format("'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-' (got '{}')", name));
      string_field(*js, "description", "response_format.json_schema", false);  // guidance for the model; checked, not used
      boolean(*js, "strict", "response_format.json_schema");  // npullm always keeps to the schema: strict or not, the output follows it
      if (const json* sc = field(*js, "schema")) set("response_format", Kind::JsonSchema, schema_text(*sc, "response_format.json_schema.schema"));
      else set("response_format", Kind::JsonObject, "");
    } else if (type != "text") {
      invalid("response_format.type", fmt::format("'response_format.type' must be 'text', 'json_object' or 'json_schema' (got '{}')", type));
    }
  }
  if (const json* g = field(o, "grammar")) {
    if (!g->is_string() || g->get<std::string>().empty()) invalid("grammar", "'grammar' must be a non-empty string (a GBNF grammar)");
    set("grammar", Kind::Gbnf, g->get<std::string>());
  }
  if (const json* js = field(o, "json_schema")) set("json_schema", Kind::JsonSchema, schema_text(*js, "json_schema"));
  if (const json* gj = field(o, "guided_json")) {
    if (gj->is_string()) {
      json parsed;
      try {
        parsed = json::parse(gj->get<std::string>());
      } catch (const json::exception&) {
        invalid("guided_json", "'guided_json' is not JSON");
      }
      set("guided_json", Kind::JsonSchema, schema_text(parsed, "guided_json"));
    } else {
      set("guided_json", Kind::JsonSchema, schema_text(*gj, "guided_json"));
    }
  }
  if (const json* gr = field(o, "guided_regex")) {
    if (!gr->is_string() || gr->get<std::string>().empty()) invalid("guided_regex", "'guided_regex' must be a non-empty string");
    set("guided_regex", Kind::Regex, gr->get<std::string>());
  }
  if (const json* gc = field(o, "guided_choice")) {
    if (!gc->is_array() || gc->empty()) invalid("guided_choice", "'guided_choice' must be a non-empty array of strings");
    std::string re;
    for (const json& c : *gc) {
      if (!c.is_string()) invalid("guided_choice", "'guided_choice' must be a non-empty array of strings");
      if (!re.empty()) re += '|';
      for (char ch : c.get<std::string>()) {
        if (std::strchr("\\^$.|?*+()[]{}", ch)) re += '\\';
        re += ch;
      }
    }
    set("guided_choice", Kind::Regex, "(" + re + ")");
  }
  if (field(o, "guided_grammar")) invalid("guided_grammar", "'guided_grammar' is not supported; send a GBNF grammar as 'grammar'");
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
    r.include_usage = boolean(*so, "include_usage", "stream_options").value_or(false);
  }
  if (auto n = integer(o, "n", 1, 128); n && *n != 1) invalid("n", "only n = 1 is supported");
  if (boolean(o, "logprobs").value_or(false) || field(o, "top_logprobs")) invalid("logprobs", "logprobs are not supported");
  // Fields of OpenAI's API that npullm cannot honour: refused by name rather than ignored.
  if (field(o, "functions")) invalid("functions", "'functions' (deprecated) is not supported; use 'tools'");
  if (field(o, "function_call")) invalid("function_call", "'function_call' (deprecated) is not supported; use 'tool_choice'");
  if (const json* lb = field(o, "logit_bias"); lb && !(lb->is_object() && lb->empty())) invalid("logit_bias", "'logit_bias' is not supported");
  // Predicted Outputs: {"type": "content", "content": text or [{"type": "text", "text": ...}]}, the
  // text the reply is expected to be mostly; speculative decoding takes its guesses from it.
  if (const json* pr = field(o, "prediction")) {
    if (!pr->is_object() || pr->value("type", json()) != "content" || !pr->contains("content"))
      invalid("prediction", "'prediction' must be {\"type\": \"content\", \"content\": ...}");
    const json& c = (*pr)["content"];
    std::string text;
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {
      for (const json& part : c) {
        if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
          invalid("prediction", "'prediction.content' parts must be {\"type\": \"text\", \"text\": string}");
        text += part["text"].get<std::string>();
      }
    } else {
      invalid("prediction", "'prediction.content' must be a string or an array of text parts");
    }
    r.gen.speculative.prediction = std::move(text);
  }
  for (const char* k : {"audio", "web_search_options", "verbosity"})
    if (field(o, k)) invalid(k, fmt::format("'{}' is not supported", k));
  if (const json* mo = field(o, "modalities"); mo && *mo != json::array({"text"}))
    invalid("modalities", "only the modality 'text' is supported");
  if (boolean(o, "store").value_or(false)) invalid("store", "'store' is not supported: npullm keeps no completions");
  // Accepted and without effect on the reply, as their meaning has none here: user,
  // safety_identifier, metadata (tags for a store), service_tier (one tier), prompt_cache_key (the
  // prefix cache reuses shared prefixes by itself).
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key", "service_tier"})
    if (const json* v = field(o, k); v && !v->is_string()) invalid(k, fmt::format("'{}' must be a string, not {}", k, type_name(*v)));
  if (const json* md = field(o, "metadata"); md && !md->is_object()) invalid("metadata", "'metadata' must be an object");
  if (!chat) {
    if (field(o, "tools")) invalid("tools", "'tools' is for /v1/chat/completions");
    if (field(o, "tool_choice")) invalid("tool_choice", "'tool_choice' is for /v1/chat/completions");
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
  parse_structured(o, r);
  if (chat) {
    ChatRequest c = parse_messages(o);
    parse_tools(o, c);
    if (const json* e = field(o, "reasoning_effort")) {
      if (!e->is_string() || (*e != "low" && *e != "medium" && *e != "high"))
        invalid("reasoning_effort", "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
      c.reasoning_effort = e->get<std::string>();
    }
    if (c.tool_choice.mode != genai::tools::ToolChoice::Mode::None && !r.structured_param.empty())
      invalid(r.structured_param, fmt::format("'{}' cannot be combined with tool calls; send tool_choice 'none' or no tools", r.structured_param));
    r.body = std::move(c);
  } else {
    if (field(o, "reasoning_effort")) invalid("reasoning_effort", "'reasoning_effort' applies to chat completions (a chat template)");
    r.body = parse_prompt(o, limits);
  }
  return r;
}

}  // namespace

std::variant<ApiRequest, ApiError> parse_request(const std::string& body, bool chat, const RequestLimits& limits) {
  json o;
  // An ordered object finds a key by walking its keys, so parsing an object of k keys costs k^2:
  // a hostile body of one object with a million keys would take minutes. No request needs many
  // keys in one object; more than kMaxObjectKeys is refused while parsing.
  std::vector<size_t> keys;  // per open object, its keys so far
  bool too_many = false;
  auto count = [&](int, json::parse_event_t ev, json&) {
    if (ev == json::parse_event_t::object_start) keys.push_back(0);
    else if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty() && ++keys.back() > kMaxObjectKeys) too_many = true;
    if (too_many) throw Invalid{bad_request(fmt::format("an object in the request body has more than {} keys", kMaxObjectKeys))};
    return true;
  };
  try {
    o = json::parse(body, count);
  } catch (const Invalid& e) {
    return e.error;
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
