// The Jinja engine: lexer, parser and interpreter (filters, tests, methods, operators, macros,
// loops, string formatting), rendering the template with chat-template variables under the
// engine's limits (loop iterations, recursion depth, output size), which must turn any runaway
// template into an npullm::Error rather than a hang or an exhausted memory.
//
// Input: the template source, then optionally a NUL byte and a JSON object of variables (used
// when it parses; otherwise a fixed conversation with a system prompt, a tool call and tools).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "genai/jinja/template.h"

using namespace npullm;
using nlohmann::ordered_json;

namespace {
const ordered_json& default_vars() {
  static const ordered_json v = ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <b>there</b> \u00e9\u4e16"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "c1",
        "function": {"name": "get", "arguments": {"q": "x", "n": 3}}}]},
      {"role": "tool", "content": "{\"ok\": true}", "tool_call_id": "c1"},
      {"role": "assistant", "content": "<think>r</think>Done."},
      {"role": "user", "content": [{"type": "text", "text": "more"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get", "description": "d",
      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false, "documents": null
  })");
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_at_nul(data, size);
  const std::string_view source = parts.first, vars_text = parts.second;
  ordered_json vars = ordered_json::parse(vars_text, nullptr, /*allow_exceptions=*/false);
  if (!vars.is_object()) vars = default_vars();
  genai::jinja::RenderOptions opt;
  opt.now = std::tm{};
  opt.now->tm_year = 125;
  opt.now->tm_mday = 1;
  // Tighter than the defaults so each run stays fast; the checks are the same code.
  opt.limits.max_loop_iterations = 20000;
  opt.limits.max_output_bytes = 1 << 20;
  fuzz::expect_ok_or_error([&] {
    const genai::jinja::Template t(source, "fuzz");
    const std::string out = t.render(vars, opt);
    if (out.size() > opt.limits.max_output_bytes) __builtin_trap();  // the limit did not hold
  });
  return 0;
}
