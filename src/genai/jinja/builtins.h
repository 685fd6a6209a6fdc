// The engine's built-in library, shared between the interpreter and the filter / method files:
// filters, tests, methods of str / list / dict, operators, globals, and argument binding.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "genai/jinja/value.h"

namespace npullm::genai::jinja {

class Interpreter;
struct Scope;

// Binds call arguments to a Python-style signature `fn(name0, name1, ...)`, where the first
// `required` names must be given. Errors read like Python's ("upper() got an unexpected keyword
// argument 'x'").
class ArgBinder {
 public:
  ArgBinder(std::string_view fn, const Args& args, std::initializer_list<std::string_view> names, size_t required = 0);
  bool has(size_t i) const { return bound_[i] != nullptr; }
  const Value& operator[](size_t i) const;  // an Undefined when not given
  Value get(size_t i, Value fallback) const { return has(i) ? *bound_[i] : std::move(fallback); }

 private:
  std::vector<const Value*> bound_;
};

// Integer / string argument checks with Python-like TypeErrors.
int64_t arg_int(const Value& v, std::string_view what);
const std::string& arg_str(const Value& v, std::string_view what);

using FilterFn = Value (*)(Interpreter&, const Value&, Args&);
using TestFn = bool (*)(Interpreter&, const Value&, Args&);
FilterFn find_filter(std::string_view name);  // nullptr when unknown
TestFn find_test(std::string_view name);

// A bound method of a str / list / tuple / dict value; an "unsafe" Undefined for the mutating
// methods the immutable sandbox refuses (list.append, dict.update, ...); nullopt when there is no
// such attribute.
std::optional<Value> get_method(const Value& self, const std::string& name);

// Operators with Python semantics: + - * / // % ** (binary), - + (unary), `in`.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value unary_op(std::string_view op, const Value& a);
bool contains(const Value& container, const Value& item);

// Python's printf-style `fmt % args` and str.format(*args, **kwargs).
std::string percent_format(const std::string& fmt, const Value& args);
std::string str_format(Interpreter& in, const std::string& fmt, const Args& args);

// Python-style slicing of a list / tuple / string (None bounds allowed).
Value slice_value(const Value& v, const Value& start, const Value& stop, const Value& step);

// Python str.split(sep=None, maxsplit=-1) on a string.
std::vector<std::string> str_split(const std::string& s, const Value& sep, int64_t maxsplit);
// Python str.strip / lstrip / rstrip; `chars` None or Undefined strips whitespace.
std::string str_strip(const std::string& s, const Value& chars, bool left, bool right);

// Puts range, namespace, dict, cycler, joiner, raise_exception and strftime_now into `globals`.
void install_globals(Scope& globals);

}  // namespace npullm::genai::jinja
