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

// Bounds on one render. A chat template comes from a stranger (a GGUF's tokenizer.chat_template, a
// file, a request), so no template may hang the process or exhaust its memory: going past a bound
// is an npullm::Error naming it ("... exceeds the limit of N ..."). The defaults are far above what
// any real chat template needs (every template of the test suite renders well inside them):
struct RenderLimits {
  // Iterations of all `for` loops of the render together (items an inline `if` filter tests
  // count too). A chat template loops over the messages a few times; the largest context npullm
  // runs (128k tokens) holds at most ~32k messages of 4 tokens, so 100k leaves room for 3 passes
  // and still stops a runaway template within a second. (range() alone is capped at 100k items,
  // as in Jinja2's sandbox.)
  int64_t max_loop_iterations = 100000;
  // Nested calls of macros, caller() and recursive loops. Python, which Jinja2 runs on, stops at
  // 1000 frames, but one template call there is several frames; real templates nest 2 or 3.
  int max_call_depth = 256;
  // Bytes the render writes in total: the output and every block it captures (macro bodies,
  // `set` and `filter` blocks), so a loop cannot build huge intermediate strings either. 4 MiB is
  // 8 times the text of a full 128k-token context (~4 bytes a token), leaving room for macros
  // whose text is counted when captured and again when printed.
  size_t max_output_bytes = size_t{4} << 20;
  // What the render's values hold, counted as each is built (jinja::ValueBudget, value.h): bytes of
  // strings, and elements of lists, tuples and dicts (with the bytes of the strings copied into
  // them) and of the copies loops walk. Every operation was capped on its own, but a template that
  // doubles a list or a string in a loop stayed under each cap while its values grew to gigabytes;
  // the sum is bounded here. Counted as built, not as alive, so the memory a render holds at any
  // time is below these (an element is a 48-byte Value: 2M of them 96 MB); a template stopped by
  // them fails within a fraction of a second. A real chat template builds a few times its output
  // (each `+` copies the string so far): 64 MiB is 16 times max_output_bytes, and 2M elements are
  // 60 passes over the 32k messages of a full 128k-token context.
  size_t max_value_bytes = size_t{64} << 20;
  int64_t max_value_elements = int64_t{2} << 20;
};

// How deeply statements and expressions may nest in a template's source (the parser refuses more,
// before anything could overflow the stack).
inline constexpr int kMaxTemplateNesting = 256;

struct RenderOptions {
  // The time strftime_now() formats; unset: the local time when rendering starts.
  std::optional<std::tm> now;
  RenderLimits limits;
};

class Template {
 public:
  // Parses `source`; `name` prefixes error messages ("NAME, line 3: ..."). Throws npullm::Error
  // on a syntax error.
  explicit Template(std::string_view source, std::string name = "template");

  // Renders with the members of `variables` (a JSON object; null means none) as the template's
  // variables. Throws npullm::Error naming the line when the template fails, including the
  // message a template passes to raise_exception(), and when memory runs out during the render
  // (an allocation that fails is an error of this render, never the process's end).
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
