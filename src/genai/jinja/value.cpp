// Value: Python semantics for the types templates use. See value.h.
#include "genai/jinja/value.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "genai/jinja/text.h"

namespace npullm::genai::jinja {

// ---- DictData -------------------------------------------------------------------------------

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(const Value& key, Value v) {
  for (auto& [k, old] : items)
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

std::string Object::repr() const { return "<" + type_name() + " object>"; }

bool Object::set_attr(const std::string&, Value) { return false; }

// ---- construction ---------------------------------------------------------------------------

Value Value::undefined(std::string message, bool unsafe) {
  Value v;
  v.kind_ = Kind::Undefined;
  v.v_ = std::make_shared<UndefinedData>(UndefinedData{std::move(message), unsafe});
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.v_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.v_ = i;
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.v_ = d;
  return v;
}

// ---- the budget of one render's values ---------------------------------------------------------

namespace {
thread_local ValueBudget* current_budget = nullptr;

// The string bytes a list of `items` holds of its own (short strings live inside the Value).
size_t string_bytes(const std::vector<Value>& items) {
  size_t n = 0;
  for (const Value& v : items)
    if (v.is_string()) n += v.as_string().size();
  return n;
}
}  // namespace

ValueBudget::ValueBudget(size_t max_bytes, int64_t max_elements)
    : max_bytes_(max_bytes), max_elements_(max_elements), outer_(current_budget) {
  current_budget = this;
}

ValueBudget::~ValueBudget() { current_budget = outer_; }

namespace {
[[noreturn]] void over_bytes(size_t max) {
  throw TemplateError(fmt::format("the template builds more than {} bytes of strings, the limit of one render's values", max));
}
[[noreturn]] void over_elements(int64_t max) {
  throw TemplateError(
      fmt::format("the template builds more than {} list, tuple and dict elements, the limit of one render's values", max));
}
}  // namespace

void ValueBudget::charge(size_t bytes, size_t elements) {
  ValueBudget* b = current_budget;
  if (!b) return;
  check_fits(bytes, elements);
  b->bytes_ += bytes;
  b->elements_ += static_cast<int64_t>(elements);
}

void ValueBudget::check_fits(size_t bytes, size_t elements) {
  const ValueBudget* b = current_budget;
  if (!b) return;
  if (bytes > b->max_bytes_ - std::min(b->bytes_, b->max_bytes_)) over_bytes(b->max_bytes_);
  if (elements > static_cast<size_t>(b->max_elements_ - std::min(b->elements_, b->max_elements_))) over_elements(b->max_elements_);
}

// ---- constructors ---------------------------------------------------------------------------------

Value Value::string(std::string s) {
  ValueBudget::charge(s.size());
  Value v;
  v.kind_ = Kind::String;
  v.v_ = std::move(s);
  return v;
}

Value Value::list(std::vector<Value> items) {
  if (current_budget) ValueBudget::charge(string_bytes(items), items.size());
  Value v;
  v.kind_ = Kind::List;
  v.v_ = std::make_shared<ListData>(ListData{std::move(items)});
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::dict_view(const char* view, std::vector<Value> items) {
  if (current_budget) ValueBudget::charge(string_bytes(items), items.size());
  Value v;
  v.kind_ = Kind::List;
  v.v_ = std::make_shared<ListData>(ListData{std::move(items), view});
  return v;
}

Value Value::dict(std::shared_ptr<DictData> d) {
  if (current_budget) {
    size_t bytes = 0;
    for (const auto& [k, e] : d->items) bytes += (k.is_string() ? k.as_string().size() : 0) + (e.is_string() ? e.as_string().size() : 0);
    ValueBudget::charge(bytes, d->items.size());
  }
  Value v;
  v.kind_ = Kind::Dict;
  v.v_ = std::move(d);
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Object;
  v.v_ = std::move(o);
  return v;
}

Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.v_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return none();
    case T::boolean:
      return boolean(j.get<bool>());
    case T::number_integer:
      return integer(j.get<int64_t>());
    case T::number_unsigned: {
      const auto u = j.get<uint64_t>();
      // Python ints are unbounded; past int64 a double is the closest we hold.
      return u > static_cast<uint64_t>(INT64_MAX) ? floating(static_cast<double>(u)) : integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return floating(j.get<double>());
    case T::string:
      return string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<DictData>();
      d->items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d->items.emplace_back(string(k), from_json(e));
      return dict(std::move(d));
    }
    default:
      throw TemplateError("binary JSON values cannot be passed to a template");
  }
}

// ---- accessors ------------------------------------------------------------------------------

int64_t Value::as_int() const {
  if (kind_ == Kind::Bool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (kind_ == Kind::Float) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::List:
    case Kind::Tuple:
      return std::get<std::shared_ptr<ListData>>(v_).get();
    case Kind::Dict:
      return std::get<std::shared_ptr<DictData>>(v_).get();
    case Kind::Object:
      return std::get<std::shared_ptr<Object>>(v_).get();
    case Kind::Function:
      return std::get<std::shared_ptr<FunctionData>>(v_).get();
    default:
      return nullptr;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return as_bool();
    case Kind::Int:
      return as_int() != 0;
    case Kind::Float:
      return as_double() != 0.0;
    case Kind::String:
      return !as_string().empty();
    case Kind::List:
    case Kind::Tuple:
      return !items().empty();
    case Kind::Dict:
      return !dict().items.empty();
    default:
      return true;
  }
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return as_bool() ? "True" : "False";
    case Kind::Int:
      return std::to_string(as_int());
    case Kind::Float:
      return py_float_repr(as_double());
    case Kind::String:
      return py_str_repr(as_string());
    case Kind::List:
    case Kind::Tuple: {
      const bool tuple = kind_ == Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      const auto& xs = items();
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) out += ", ";
        out += xs[i].repr();
      }
      if (tuple && xs.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      if (const char* view = std::get<std::shared_ptr<ListData>>(v_)->view) return std::string(view) + "(" + out + ")";
      return out;
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict().items) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::Object:
      return object().repr();
    case Kind::Function:
      return "<function " + function().name + ">";
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Object: return object().type_name();
    case Kind::Function: return "function";
  }
  return "object";
}

std::string Value::object_type_repr() const {
  if (kind_ == Kind::None) return "None";
  return type_name() + " object";
}

void Value::fail_undefined() const {
  if (kind_ == Kind::Undefined)
    if (const auto* p = std::get_if<std::shared_ptr<UndefinedData>>(&v_))
      throw TemplateError((*p)->message);
  throw TemplateError("value is undefined");
}

// ---- comparisons ----------------------------------------------------------------------------

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None:
      return true;  // Jinja: any two Undefined compare equal
    case K::String:
      return a.as_string() == b.as_string();
    case K::List:
    case K::Tuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const auto& x = a.dict().items;
      if (x.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.dict().find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code-point order, which is what Python compares.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw TemplateError(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(), b.type_name()));
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return static_cast<int64_t>(utf8_length(v.as_string()));
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      throw TemplateError(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (current_budget) ValueBudget::charge(string_bytes(v.items()), v.items().size());
      return v.items();
    case Value::Kind::Dict: {
      if (current_budget) ValueBudget::charge(0, v.dict().items.size());
      std::vector<Value> keys;
      keys.reserve(v.dict().items.size());
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.as_string())) {
        std::string s;
        utf8_append(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default:
      throw TemplateError(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

// ---- tojson ---------------------------------------------------------------------------------

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        const bool escape = c < 0x20 || (ensure_ascii && c > 0x7E);
        if (!escape) {
          utf8_append(out, c);
        } else if (c < 0x10000) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {  // ensure_ascii writes astral characters as a UTF-16 surrogate pair
          const unsigned v = static_cast<unsigned>(c) - 0x10000;
          out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        }
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

// json.dumps converts non-string keys: True -> "true", None -> "null", numbers by repr.
std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.as_string();
    case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
    case Value::Kind::None: return "null";
    case Value::Kind::Int: return std::to_string(k.as_int());
    case Value::Kind::Float: return json_float(k.as_double());
    default:
      throw TemplateError(fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
  }
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  auto newline = [&](int lvl) {
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: out += json_float(v.as_double()); return;
    case Value::Kind::String: json_string(out, v.as_string(), o.ensure_ascii); return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      const auto& xs = v.items();
      if (xs.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent) newline(level + 1);
        json_value(out, xs[i], o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::Dict: {
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, e] : v.dict().items) entries.emplace_back(json_key(k), &e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent) newline(level + 1);
        json_string(out, entries[i].first, o.ensure_ascii);
        out += o.key_sep;
        json_value(out, *entries[i].second, o, level + 1);
      }
      if (o.indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      throw TemplateError(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string to_json_text(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_value(out, v, opts, 0);
  return out;
}

}  // namespace npullm::genai::jinja
