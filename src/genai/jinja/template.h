// Jinja chat templates: a Jinja2 engine faithful to the subset chat templates use, configured the
// way HF transformers renders them (trim_blocks, lstrip_blocks, loop controls, an immutable
// sandbox, `raise_exception` and `strftime_now` globals, `tojson` keeping non-ASCII text).
//
//   jinja::Template t(source, "qwen3");
//   std::string prompt = t.render({{"messages", msgs}, {"add_generation_prompt", true}});
//
// or, for the usual chat-template call, render_chat_template(). Values follow Python semantics
// (see value.h); undefined variables behave like Jinja2's default Undefined: they print as "",
// are falsy and iterate as empty, but using them further (undefined.attr, undefined + 1) is an
// error, as it is under Jinja2.
#pragma once
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace npullm::genai::jinja {

struct RenderOptions {
  // The time strftime_now() formats; unset: the local time when rendering starts.
  std::optional<std::tm> now;
};

class Template {
 public:
  // Parses `source`; `name` prefixes error messages ("NAME, line 3: ..."). Throws npullm::Error
  // on a syntax error.
  explicit Template(std::string_view source, std::string name = "template");

  // Renders with the members of `variables` (a JSON object; null means none) as the template's
  // variables. Throws npullm::Error naming the line when the template fails, including the
  // message a template passes to raise_exception().
  std::string render(const nlohmann::ordered_json& variables, const RenderOptions& options = {}) const;

  const std::string& name() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;  // immutable once parsed: copies share it, renders may run concurrently
};

// Renders a chat template as HF's apply_chat_template does: variables `messages`,
// `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and `documents` (None unless given),
// and every member of `extra` (an object; e.g. tools, enable_thinking), which may override the
// token strings.
std::string render_chat_template(const std::string& source, const nlohmann::ordered_json& messages,
                                 bool add_generation_prompt, const std::string& bos, const std::string& eos,
                                 const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                                 const RenderOptions& options = {});

}  // namespace npullm::genai::jinja
