// Built-in chat templates of common model families (llama2, llama3, mistral, zephyr, phi3, chatml,
// qwen3, gemma3, deepseek_v3, harmony, ...), looked up by name.
#pragma once
#include <span>
#include <string_view>

namespace npullm::genai::jinja {

struct BuiltinTemplate {
  std::string_view name;
  std::string_view source;     // Jinja source, as the model family publishes it
  std::string_view bos_token;  // what the template expects as bos_token / eos_token ("" if none)
  std::string_view eos_token;
  std::string_view description;
};

std::span<const BuiltinTemplate> builtin_templates();
// nullptr when no built-in template has that name.
const BuiltinTemplate* find_builtin_template(std::string_view name);

}  // namespace npullm::genai::jinja
