// The values a template computes with: Python's None / bool / int / float / str / list / tuple / dict,
// plus Jinja's Undefined, namespace-like objects (namespace(), loop) and callables.
//
// Semantics follow Python, because chat templates are written against Jinja2 running on Python:
// `1 == 1.0` and `True == 1` hold, `str(None)` is "None", an empty list is falsy, dicts keep insertion
// order. Lists and dicts are shared by pointer (as Python objects are) and never mutated after they
// are built: HF renders templates in an ImmutableSandboxedEnvironment, where list.append and
// dict.update are refused, so sharing is safe.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace npullm::genai::jinja {

class Value;
class Interpreter;

// An error raised while parsing or rendering. `line` is 0 while unknown: the interpreter fills in
// the line of the innermost node being evaluated, and Template turns it into an npullm::Error.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message, int line = 0) : std::runtime_error(message), line(line) {}
  int line;
};

// Arguments of a call: positional, then keyword (in source order).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

using NativeFn = std::function<Value(Interpreter&, Args&)>;

struct ListData {
  std::vector<Value> items;
  const char* view = nullptr;  // "dict_items" etc.: what dict.items() / keys() / values() print as
};

// An insertion-ordered dict. Lookups are linear: template dicts (messages, tool schemas) are small,
// and Python key equality (1 == 1.0 == True) is easiest to honour this way.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);  // replaces an equal key in place, else appends
};

struct FunctionData {
  std::string name;
  NativeFn fn;
};

// Objects with attributes but no items: namespace(), the loop variable, cycler.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;          // Python class name, for messages
  virtual std::optional<Value> get_attr(std::string_view name) const = 0;
  virtual bool set_attr(const std::string& name, Value v);  // false: read-only (only namespace() allows it)
  virtual std::string repr() const;
  // Drops the values this object holds. Called when a render ends, to break reference cycles
  // (a namespace holding a macro whose scope holds the namespace).
  virtual void clear() {}
};

// Why a value is undefined, so that using it fails with Jinja2's message ("'x' is undefined",
// "'dict object' has no attribute 'y'"). `unsafe`: the sandbox refused an attribute (list.append).
struct UndefinedData {
  std::string message;
  bool unsafe = false;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Object, Function };

  Value() = default;  // Undefined with a generic message
  static Value undefined(std::string message, bool unsafe = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value dict_view(const char* view, std::vector<Value> items);  // a list printing as dict_items([...])
  static Value dict(std::shared_ptr<DictData> d);
  static Value object(std::shared_ptr<Object> o);
  static Value function(std::string name, NativeFn fn);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // Python: bool is an int
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }  // list or tuple
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;   // bool or int
  double as_double() const; // any number
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const std::vector<Value>& items() const { return std::get<std::shared_ptr<ListData>>(v_)->items; }
  const DictData& dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  const FunctionData& function() const { return *std::get<std::shared_ptr<FunctionData>>(v_); }
  const void* identity() const;  // the shared object, for `is sameas` (nullptr for plain values)

  bool truthy() const;
  std::string str() const;   // Python str(); Undefined prints as ""
  std::string repr() const;  // Python repr()
  std::string type_name() const;  // Python type name: 'str', 'int', 'NoneType', ...
  // Jinja's object_type_repr, used in undefined messages: "dict object", "None", ...
  std::string object_type_repr() const;
  // Throws the TemplateError saying why this value is undefined.
  [[noreturn]] void fail_undefined() const;

 private:
  using Storage = std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<ListData>,
                               std::shared_ptr<DictData>, std::shared_ptr<Object>, std::shared_ptr<FunctionData>,
                               std::shared_ptr<UndefinedData>>;
  Kind kind_ = Kind::Undefined;
  Storage v_;
};

// The values one render builds, against RenderLimits::max_value_bytes and max_value_elements
// (template.h). While a ValueBudget is alive on a thread, every string, list, tuple and dict made on
// that thread is charged to it as it is built: a string its bytes; a list, tuple or dict its
// elements, and the bytes of the strings copied into it (a Value holds its string, so a list of
// copies holds the bytes again); a loop's copy of what it walks its elements. Going past a limit
// is a TemplateError naming it. Values made with no budget alive (the render's variables, read
// from JSON before it starts) are not counted. Budgets nest: the innermost one counts.
class ValueBudget {
 public:
  ValueBudget(size_t max_bytes, int64_t max_elements);
  ~ValueBudget();
  ValueBudget(const ValueBudget&) = delete;
  ValueBudget& operator=(const ValueBudget&) = delete;

  // Charges the budget of this thread, if any. `bytes`: string bytes; `elements`: container items.
  static void charge(size_t bytes, size_t elements = 0);
  // Refuses, before anything is allocated, a result that would not fit.
  static void check_fits(size_t bytes, size_t elements = 0);

  size_t bytes() const { return bytes_; }
  int64_t elements() const { return elements_; }

 private:
  size_t max_bytes_;
  int64_t max_elements_;
  size_t bytes_ = 0;
  int64_t elements_ = 0;
  ValueBudget* outer_;
};

// Python ==.
bool equals(const Value& a, const Value& b);
// Python ordering for <, <=, >, >=: negative / zero / positive. Throws TypeError's message
// ("'<' not supported between instances of 'int' and 'str'") naming `op` for unorderable pairs.
int compare(const Value& a, const Value& b, std::string_view op);
// Python len(); throws for values without a length.
int64_t length(const Value& v);
// Python iter() materialised: list/tuple items, dict keys, string characters; Undefined gives nothing.
std::vector<Value> iterate(const Value& v);

// json.dumps as HF's `tojson` filter calls it (ensure_ascii=False by default).
struct JsonOptions {
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json_text(const Value& v, const JsonOptions& opts);

}  // namespace npullm::genai::jinja
