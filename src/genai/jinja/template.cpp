// Template: parse once, render many times; and the HF-style chat-template entry point.
#include "genai/jinja/template.h"

#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "common/error.h"
#include "genai/jinja/builtins.h"
#include "genai/jinja/interpreter.h"
#include "genai/jinja/parser.h"

namespace npullm::genai::jinja {

struct Template::Impl {
  std::string name;
  Body body;
};

namespace {

[[noreturn]] void rethrow(const std::string& name, const TemplateError& e) {
  if (e.line > 0) throw Error(fmt::format("{}, line {}: {}", name, e.line, e.what()));
  throw Error(fmt::format("{}: {}", name, e.what()));
}

}  // namespace

Template::Template(std::string_view source, std::string name) {
  auto impl = std::make_shared<Impl>();
  impl->name = std::move(name);
  try {
    impl->body = parse_template(source);
  } catch (const TemplateError& e) {
    rethrow(impl->name, e);
  }
  impl_ = std::move(impl);
}

const std::string& Template::name() const { return impl_->name; }

std::string Template::render(const nlohmann::ordered_json& variables, const RenderOptions& options) const {
  if (!variables.is_null() && !variables.is_object())
    throw Error(fmt::format("{}: template variables must be a JSON object, not {}", impl_->name, variables.type_name()));
  std::tm now{};
  if (options.now) {
    now = *options.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  // Globals sit below the render variables, so a variable named like a global shadows it.
  auto globals = std::make_shared<Scope>();
  install_globals(*globals);
  auto context = std::make_shared<Scope>(globals);
  try {
    if (variables.is_object())
      for (const auto& [k, v] : variables.items()) context->vars[k] = Value::from_json(v);
    Interpreter in(context, now, options.limits);
    std::string out;
    in.exec(impl_->body, out);  // break / continue cannot reach here: the parser rejects them outside loops
    return out;
  } catch (const TemplateError& e) {
    rethrow(impl_->name, e);
  } catch (const std::bad_alloc&) {
    // Every value the render made is freed by now (the interpreter and its scopes are gone).
    throw Error(fmt::format("{}: out of memory while rendering (an allocation failed; the process's memory "
                            "is limited below what the template builds)", impl_->name));
  } catch (const std::length_error& e) {
    throw Error(fmt::format("{}: a value grew past what this machine can hold ({})", impl_->name, e.what()));
  }
}

std::string render_chat_template(const std::string& source, const nlohmann::ordered_json& messages,
                                 bool add_generation_prompt, const std::string& bos, const std::string& eos,
                                 const nlohmann::ordered_json& extra, const RenderOptions& options) {
  if (!extra.is_null() && !extra.is_object())
    throw Error(fmt::format("chat template: extra variables must be a JSON object, not {}", extra.type_name()));
  // The order of HF's render(): special tokens, then caller kwargs (which may override them),
  // with messages / tools / documents / add_generation_prompt as named arguments.
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["bos_token"] = bos;
  vars["eos_token"] = eos;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) vars[k] = v;
  vars["messages"] = messages;
  vars["add_generation_prompt"] = add_generation_prompt;
  return Template(source, "chat template").render(vars, options);
}

}  // namespace npullm::genai::jinja
