// Jinja2's built-in filters (the ones chat templates use), with HF's `tojson`
// (json.dumps with ensure_ascii=False, so non-ASCII text stays as is). Argument names and order
// follow Jinja2 3.1 so keyword calls (`map(attribute='name')`, `tojson(indent=2)`) bind the same.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "genai/jinja/builtins.h"
#include "genai/jinja/interpreter.h"
#include "genai/jinja/text.h"

namespace npullm::genai::jinja {

// ---- argument binding -----------------------------------------------------------------------

ArgBinder::ArgBinder(std::string_view fn, const Args& args, std::initializer_list<std::string_view> names, size_t required)
    : bound_(names.size(), nullptr) {
  if (args.pos.size() > names.size())
    throw TemplateError(fmt::format("{}() takes at most {} argument{} ({} given)", fn, names.size(), names.size() == 1 ? "" : "s", args.pos.size()));
  for (size_t i = 0; i < args.pos.size(); ++i) bound_[i] = &args.pos[i];
  for (const auto& [key, v] : args.kw) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) throw TemplateError(fmt::format("{}() got an unexpected keyword argument '{}'", fn, key));
    const auto i = static_cast<size_t>(it - names.begin());
    if (bound_[i]) throw TemplateError(fmt::format("{}() got multiple values for argument '{}'", fn, key));
    bound_[i] = &v;
  }
  for (size_t i = 0; i < required; ++i)
    if (!bound_[i]) throw TemplateError(fmt::format("{}() missing required argument '{}'", fn, *(names.begin() + i)));
}

const Value& ArgBinder::operator[](size_t i) const {
  static const Value missing;
  return bound_[i] ? *bound_[i] : missing;
}

int64_t arg_int(const Value& v, std::string_view what) {
  if (!v.is_int()) throw TemplateError(fmt::format("{} must be an integer, not '{}'", what, v.type_name()));
  return v.as_int();
}

const std::string& arg_str(const Value& v, std::string_view what) {
  if (!v.is_string()) throw TemplateError(fmt::format("{} must be str, not {}", what, v.type_name()));
  return v.as_string();
}

namespace {

// ---- helpers --------------------------------------------------------------------------------

// Jinja's make_attrgetter: "a.b.0" looks up item a, then b, then 0 (digits become integers).
Value get_path(Interpreter& in, const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = in.get_item(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Sort / unique / min / max compare strings case-insensitively unless asked not to.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(str_lower(v.as_string()));
  return v;
}

// The key function of sort/unique/min/max: attribute path(s), then case folding.
std::vector<Value> keys_for(Interpreter& in, const std::vector<Value>& items, const Value& attribute, bool case_sensitive) {
  std::vector<std::string> paths;
  if (!attribute.is_undefined() && !attribute.is_none()) {
    const std::string a = attribute.is_int() ? std::to_string(attribute.as_int()) : arg_str(attribute, "attribute");
    for (size_t s = 0;;) {  // sort() accepts "a,b" for several keys
      const size_t c = a.find(',', s);
      paths.push_back(a.substr(s, c == std::string::npos ? std::string::npos : c - s));
      if (c == std::string::npos) break;
      s = c + 1;
    }
  }
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    if (paths.empty()) {
      keys.push_back(sort_key(item, case_sensitive));
    } else if (paths.size() == 1) {
      keys.push_back(sort_key(get_path(in, item, paths[0]), case_sensitive));
    } else {
      std::vector<Value> parts;
      for (const auto& p : paths) parts.push_back(sort_key(get_path(in, item, p), case_sensitive));
      keys.push_back(Value::list(std::move(parts)));
    }
  }
  return keys;
}

std::vector<size_t> sorted_order(const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? compare(keys[b], keys[a], "<") < 0 : compare(keys[a], keys[b], "<") < 0;
  });
  return order;
}

// Python float(): accepts surrounding whitespace, underscores between digits, inf / nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = str_strip(text, Value::none(), true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    clean.push_back(s[i]);
  }
  if (clean.empty() || clean.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // no hex floats
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

// Python int(str, base): optional sign, optional 0x/0o/0b prefix (base 0 or matching base).
std::optional<int64_t> parse_int(const std::string& text, int64_t base) {
  std::string s = str_strip(text, Value::none(), true, true);
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    const int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb && (base == 0 || base == pb)) {
      base = pb;
      i += 2;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36) return std::nullopt;
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits.push_back(s[i]);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
  if (end != digits.c_str() + digits.size() || errno == ERANGE || digits[0] == '+' || digits[0] == '-') return std::nullopt;
  return neg ? -v : v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// ---- filters --------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("abs", args, {});
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  if (v.is_int()) return unary_op(v.as_int() < 0 ? "-" : "+", v);
  throw TemplateError(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_attr(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("attr", args, {"name"}, 1);
  return in.get_attr(v, arg_str(a[0], "attribute name"));
}

Value f_batch(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"}, 1);
  const int64_t n = arg_int(a[0], "linecount");
  std::vector<Value> out, cur;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (a.has(1) && !a[1].is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(a[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

Value f_capitalize(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("capitalize", args, {});
  Args none;
  return in.call(*get_method(Value::string(v.str()), "capitalize"), none);
}

Value f_center(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("center", args, {"width"});
  Args call;
  call.pos.push_back(a.get(0, Value::integer(80)));
  return in.call(*get_method(Value::string(v.str()), "center"), call);
}

Value f_length(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("length", args, {});
  return Value::integer(length(v));
}

Value f_default(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (a[1].truthy() && !v.truthy())) return a.get(0, Value::string(""));
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw TemplateError("You can only sort by either 'key' or 'value'");
  const std::string by = a.has(1) ? arg_str(a[1], "by") : "key";
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either 'key' or 'value'");
  const auto& items = v.dict().items;
  std::vector<Value> keys;
  for (const auto& kv : items) keys.push_back(sort_key(by == "key" ? kv.first : kv.second, a[0].truthy()));
  std::vector<Value> out;
  for (size_t i : sorted_order(keys, a[2].truthy())) out.push_back(Value::tuple({items[i].first, items[i].second}));
  return Value::list(std::move(out));
}

Value f_escape(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("escape", args, {});
  return Value::string(html_escape(v.str()));
}

Value f_first(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("first", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_float(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("float", args, {"default"});
  const Value dflt = a.get(0, Value::floating(0.0));
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value::floating(*d);
  return dflt;
}

Value f_format(Interpreter&, const Value& v, Args& args) {
  if (!args.pos.empty() && !args.kw.empty())
    throw TemplateError("can't handle positional and keyword arguments at the same time");
  if (!args.kw.empty()) {
    auto d = std::make_shared<DictData>();
    for (const auto& [k, x] : args.kw) d->set(Value::string(k), x);
    return Value::string(percent_format(v.str(), Value::dict(std::move(d))));
  }
  return Value::string(percent_format(v.str(), Value::tuple(args.pos)));
}

Value f_indent(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  std::string indention;
  if (a.has(0) && a[0].is_string()) indention = a[0].as_string();
  else {
    const auto width = static_cast<size_t>(std::max<int64_t>(0, a.has(0) ? arg_int(a[0], "width") : 4));
    ValueBudget::check_fits(width);
    indention = std::string(width, ' ');
  }
  // Jinja appends a newline before splitlines() so that a trailing newline survives; lines are
  // split at every boundary Python's str.splitlines() knows.
  const std::u32string cps = utf8_decode(v.str() + "\n");
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    lines.push_back(utf8_encode(std::u32string_view(cps).substr(start, i - start)));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  std::string rv;
  size_t text = 0;
  for (const std::string& l : lines) text += l.size() + 1;
  ValueBudget::check_fits(text + lines.size() * indention.size());
  if (a[2].truthy()) {  // blank=True indents empty lines too
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i];
    }
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  if (a[1].truthy()) rv = indention + rv;
  return Value::string(rv);
}

Value f_int(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("int", args, {"default", "base"});
  const Value dflt = a.get(0, Value::integer(0));
  const int64_t base = a.has(1) ? arg_int(a[1], "base") : 10;
  if (v.is_int()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) return dflt;
    return Value::integer(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value::integer(*i);
    // Jinja's fallback: "42.23"|int is 42.
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d)) return Value::integer(static_cast<int64_t>(*d));
  }
  return dflt;
}

Value f_items(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("items", args, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().items) out.push_back(Value::tuple({k, x}));
  return Value::list(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  const std::string sep = a.has(0) ? a[0].str() : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (a.has(1) && !a[1].is_none() ? get_path(in, item, a[1].str()) : item).str();
  }
  return Value::string(std::move(out));
}

Value f_last(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("last", args, {});
  if (v.is_undefined()) throw TemplateError("'Undefined' object is not reversible");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_list(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("list", args, {});
  return Value::list(iterate(v));
}

Value f_lower(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("lower", args, {});
  return Value::string(str_lower(v.str()));
}

Value f_upper(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("upper", args, {});
  return Value::string(str_upper(v.str()));
}

Value f_map(Interpreter& in, const Value& v, Args& args) {
  std::vector<Value> out;
  if (args.pos.empty()) {  // map(attribute='x', default=...)
    ArgBinder a("map", args, {"attribute", "default"}, 1);
    const std::string path = a[0].is_int() ? std::to_string(a[0].as_int()) : arg_str(a[0], "attribute");
    for (const Value& item : iterate(v)) {
      Value x = get_path(in, item, path);
      out.push_back(x.is_undefined() && a.has(1) ? a[1] : x);
    }
    return Value::list(std::move(out));
  }
  const std::string name = arg_str(args.pos[0], "filter name");
  Args rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const Value& item : iterate(v)) {
    Args call = rest;
    out.push_back(in.filter(name, item, call));
  }
  return Value::list(std::move(out));
}

Value aggregate(Interpreter& in, const Value& v, Args& args, const char* name, bool want_max) {
  ArgBinder a(name, args, {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const std::vector<Value> keys = keys_for(in, items, a[1], a[0].truthy());
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare(keys[i], keys[best], want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_max(Interpreter& in, const Value& v, Args& args) { return aggregate(in, v, args, "max", true); }
Value f_min(Interpreter& in, const Value& v, Args& args) { return aggregate(in, v, args, "min", false); }

// select / reject / selectattr / rejectattr share Jinja's prepare_select_or_reject.
Value select_impl(Interpreter& in, const Value& v, Args& args, bool attr, bool keep_if) {
  size_t i = 0;
  std::string path;
  if (attr) {
    if (args.pos.empty()) throw TemplateError("Missing parameter for attribute name");
    path = args.pos[0].is_int() ? std::to_string(args.pos[0].as_int()) : arg_str(args.pos[0], "attribute");
    i = 1;
  }
  std::string test;
  Args test_args;
  if (i < args.pos.size()) {
    test = arg_str(args.pos[i], "test name");
    test_args.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.pos.end());
    test_args.kw = args.kw;
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value subject = attr ? get_path(in, item, path) : item;
    bool ok;
    if (test.empty()) {
      ok = subject.truthy();
    } else {
      Args call = test_args;
      ok = in.test(test, subject, call);
    }
    if (ok == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, Args& args) { return select_impl(in, v, args, false, true); }
Value f_reject(Interpreter& in, const Value& v, Args& args) { return select_impl(in, v, args, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& args) { return select_impl(in, v, args, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& args) { return select_impl(in, v, args, true, false); }

Value f_replace(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("replace", args, {"old", "new", "count"}, 2);
  Args call;
  call.pos = {a[0], a[1]};
  if (a.has(2) && !a[2].is_none()) call.pos.push_back(a[2]);
  return in.call(*get_method(Value::string(v.str()), "replace"), call);
}

Value f_reverse(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("reverse", args, {});
  if (v.is_string()) return slice_value(v, Value::none(), Value::none(), Value::integer(-1));
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

// round(): 'common' rounds half to even on the exact binary value (Python's round), which is what
// printf's correctly rounded "%.*f" gives.
Value f_round(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("round", args, {"precision", "method"});
  const int64_t precision = a.has(0) ? arg_int(a[0], "precision") : 0;
  const std::string method = a.has(1) ? arg_str(a[1], "method") : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw TemplateError("method must be 'common', 'ceil' or 'floor'");
  if (!v.is_number()) throw TemplateError(fmt::format("type {} doesn't define __round__ method", v.type_name()));
  if (method == "common" && v.is_int() && precision >= 0) return Value::integer(v.as_int());
  const double x = v.as_double();
  if (method != "common") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double r = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    return Value::floating(r / scale);
  }
  if (!std::isfinite(x)) return Value::floating(x);
  if (precision >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
    const Value r = Value::floating(std::strtod(buf, nullptr));
    return v.is_int() ? Value::integer(static_cast<int64_t>(r.as_double())) : r;
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  const double r = std::nearbyint(x / scale) * scale;
  return v.is_int() ? Value::integer(static_cast<int64_t>(r)) : Value::floating(r);
}

Value f_safe(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("safe", args, {});
  return Value::string(v.str());
}

Value f_slice(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("slice", args, {"slices", "fill_with"}, 1);
  const int64_t slices = arg_int(a[0], "slices");
  if (slices <= 0) throw TemplateError("slice() slices must be positive");
  const std::vector<Value> seq = iterate(v);
  const auto n = static_cast<int64_t>(seq.size());
  const int64_t per = n / slices, extra = n % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (a.has(1) && !a[1].is_none() && k >= extra) part.push_back(a[1]);
    out.push_back(Value::list(std::move(part)));
  }
  return Value::list(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  const std::vector<Value> keys = keys_for(in, items, a[2], a[1].truthy());
  std::vector<Value> out;
  for (size_t i : sorted_order(keys, a[0].truthy())) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_string(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("string", args, {});
  return Value::string(v.str());
}

Value f_sum(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  Value total = a.get(1, Value::integer(0));
  for (const Value& item : iterate(v))
    total = binary_op("+", total, a.has(0) && !a[0].is_none() ? get_path(in, item, a[0].str()) : item);
  return total;
}

// Jinja's title filter (not str.title): a letter starts a word after '-', whitespace, or an
// opening bracket of ( { [ <.
Value f_title(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("title", args, {});
  std::string out;
  bool word_start = true;
  for (char32_t c : utf8_decode(v.str())) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    utf8_append(out, sep ? c : word_start ? py_toupper(c) : py_tolower(c));
    word_start = sep;
  }
  return Value::string(std::move(out));
}

// HF's override: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a[0].truthy();
  o.sort_keys = a[3].truthy();
  if (a.has(1) && !a[1].is_none()) {
    if (a[1].is_string()) o.indent = a[1].as_string();
    else o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, arg_int(a[1], "indent"))), ' ');
    o.item_sep = ",";
  }
  if (a.has(2) && !a[2].is_none()) {
    if (!a[2].is_sequence() || a[2].items().size() != 2) throw TemplateError("separators must be a (item, key) pair");
    o.item_sep = arg_str(a[2].items()[0], "item separator");
    o.key_sep = arg_str(a[2].items()[1], "key separator");
  }
  return Value::string(to_json_text(v, o));
}

Value f_trim(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("trim", args, {"chars"});
  return Value::string(str_strip(v.str(), a[0], true, true));
}

Value f_truncate(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  const int64_t len = a.has(0) ? arg_int(a[0], "length") : 255;
  const std::string end = a.has(2) ? arg_str(a[2], "end") : "...";
  const int64_t leeway = a.has(3) && !a[3].is_none() ? arg_int(a[3], "leeway") : 5;
  const std::u32string s = utf8_decode(v.str());
  const auto end_len = static_cast<int64_t>(utf8_length(end));
  if (len < end_len) throw TemplateError("expected length >= len(end)");
  if (static_cast<int64_t>(s.size()) <= len + leeway) return Value::string(utf8_encode(s));
  std::u32string head = s.substr(0, static_cast<size_t>(len - end_len));
  if (!a[1].truthy()) {
    const size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head = head.substr(0, sp);
  }
  return Value::string(utf8_encode(head) + end);
}

Value f_unique(Interpreter& in, const Value& v, Args& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  const std::vector<Value> keys = keys_for(in, items, a[1], a[0].truthy());
  std::vector<Value> out, seen;
  for (size_t i = 0; i < items.size(); ++i) {
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, keys[i]); })) continue;
    seen.push_back(keys[i]);
    out.push_back(items[i]);
  }
  return Value::list(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("wordcount", args, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(v.str())) {
    const bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},         {"batch", f_batch},         {"capitalize", f_capitalize},
    {"center", f_center},     {"count", f_length},      {"d", f_default},           {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},       {"first", f_first},
    {"float", f_float},       {"forceescape", f_escape}, {"format", f_format},      {"indent", f_indent},
    {"int", f_int},           {"items", f_items},       {"join", f_join},           {"last", f_last},
    {"length", f_length},     {"list", f_list},         {"lower", f_lower},         {"map", f_map},
    {"max", f_max},           {"min", f_min},           {"reject", f_reject},       {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse},   {"round", f_round},         {"safe", f_safe},
    {"select", f_select},     {"selectattr", f_selectattr}, {"slice", f_slice},     {"sort", f_sort},
    {"string", f_string},     {"sum", f_sum},           {"title", f_title},         {"tojson", f_tojson},
    {"trim", f_trim},         {"truncate", f_truncate}, {"unique", f_unique},       {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

}  // namespace npullm::genai::jinja
