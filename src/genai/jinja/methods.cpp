// Methods templates call on values: Python's str methods (strip, split, startswith, replace,
// format, ...), dict.items/keys/values/get and list.index/count. Mutating methods are refused as
// the immutable sandbox HF renders with refuses them: the attribute is an Undefined that fails
// when called ("access to attribute 'append' of 'list' object is unsafe.").
#include <algorithm>

#include <fmt/format.h>

#include "genai/jinja/builtins.h"
#include "genai/jinja/interpreter.h"
#include "genai/jinja/text.h"

namespace npullm::genai::jinja {

namespace {

bool cased(char32_t c) { return py_islower(c) || py_isupper(c); }

// Python's index normalisation for the optional start / end of find, count, startswith...
void clamp_range(const ArgBinder& a, size_t first, size_t n, size_t& lo, size_t& hi) {
  auto norm = [n](int64_t i) {
    if (i < 0) i += static_cast<int64_t>(n);
    return static_cast<size_t>(std::clamp<int64_t>(i, 0, static_cast<int64_t>(n)));
  };
  lo = a.has(first) && !a[first].is_none() ? norm(arg_int(a[first], "slice index")) : 0;
  hi = a.has(first + 1) && !a[first + 1].is_none() ? norm(arg_int(a[first + 1], "slice index")) : n;
}

size_t find_u32(const std::u32string& hay, const std::u32string& needle, size_t lo, size_t hi, bool reverse) {
  if (hi < lo || needle.size() > hi - lo) return std::u32string::npos;
  const std::u32string_view window = std::u32string_view(hay).substr(lo, hi - lo);
  const size_t r = reverse ? window.rfind(needle) : window.find(needle);
  return r == std::u32string_view::npos ? r : r + lo;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

std::vector<std::string> splitlines(const std::string& s, bool keepends) {
  const std::u32string cps = utf8_decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    size_t end = i + 1;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    lines.push_back(utf8_encode(std::u32string_view(cps).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) lines.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  return lines;
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

std::string str_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    utf8_append(out, prev_cased ? py_tolower(c) : py_toupper(c));
    prev_cased = cased(c);
  }
  return out;
}

std::string str_capitalize(const std::string& s) {
  std::u32string cps = utf8_decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? py_toupper(cps[i]) : py_tolower(cps[i]);
  return utf8_encode(cps);
}

// str.replace(old, new, count): an empty `old` inserts `new` between characters, as in Python.
std::string str_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    const std::u32string cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        ValueBudget::check_fits(out.size() + to.size());
        out += to;
        ++done;
      }
      if (i < cps.size()) utf8_append(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    ValueBudget::check_fits(out.size() + (hit - pos) + to.size());
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// All characters satisfy `pred` and there is at least one.
template <typename P>
bool all_chars(const std::string& s, P pred) {
  const std::u32string cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

std::string justify(const std::string& s, int64_t width, const Value& fill_arg, char mode) {
  char32_t fill = ' ';
  if (!fill_arg.is_undefined()) {
    const std::u32string f = utf8_decode(arg_str(fill_arg, "fill character"));
    if (f.size() != 1) throw TemplateError("The fill character must be exactly one character long");
    fill = f[0];
  }
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return s;
  const auto total = static_cast<size_t>(width - len);
  ValueBudget::check_fits(s.size() + total);  // (before the loop: a width of 10**12 is refused at once)
  // CPython's center: the odd fill character goes left only when margin and width are both odd.
  size_t left = mode == 'l' ? 0 : mode == 'r' ? total : total / 2 + (total & static_cast<size_t>(width) & 1);
  std::string l, r;
  for (size_t i = 0; i < left; ++i) utf8_append(l, fill);
  for (size_t i = left; i < total; ++i) utf8_append(r, fill);
  return l + s + r;
}

std::optional<Value> string_method(const Value& self, const std::string& name) {
  const std::string s = self.as_string();
  auto method = [&](auto fn) {
    return Value::function(name, [s, name, fn](Interpreter& in, Args& args) -> Value { return fn(in, s, name, args); });
  };
  using A = Args&;
  using I = Interpreter&;
  using S = const std::string&;
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"chars"});
      return Value::string(str_strip(s, a[0], n != "rstrip", n != "lstrip"));
    });
  if (name == "split" || name == "rsplit")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"sep", "maxsplit"});
      const int64_t maxsplit = a.has(1) ? arg_int(a[1], "maxsplit") : -1;
      if (n == "split") return string_list(str_split(s, a[0], maxsplit));
      // rsplit: split the reversed problem by hand, keeping Python's results.
      std::vector<std::string> all = str_split(s, a[0], -1);
      if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= all.size()) return string_list(all);
      if (a[0].is_none() || a[0].is_undefined()) {
        // Whitespace rsplit: the head keeps its inner whitespace, leading whitespace is dropped.
        const std::u32string cps = utf8_decode(s);
        std::vector<std::string> parts;
        size_t end = cps.size();
        while (static_cast<int64_t>(parts.size()) < maxsplit) {
          while (end > 0 && py_isspace(cps[end - 1])) --end;
          if (end == 0) break;
          size_t start = end;
          while (start > 0 && !py_isspace(cps[start - 1])) --start;
          parts.insert(parts.begin(), utf8_encode(std::u32string_view(cps).substr(start, end - start)));
          end = start;
        }
        // The rest keeps its leading whitespace, as CPython's rsplit does.
        while (end > 0 && py_isspace(cps[end - 1])) --end;
        if (end > 0) parts.insert(parts.begin(), utf8_encode(std::u32string_view(cps).substr(0, end)));
        return string_list(parts);
      }
      const std::string& sep = a[0].as_string();
      const size_t keep = all.size() - static_cast<size_t>(maxsplit);
      std::string head = all[0];
      for (size_t i = 1; i < keep; ++i) head += sep + all[i];
      std::vector<std::string> parts{head};
      parts.insert(parts.end(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end());
      return string_list(parts);
    });
  if (name == "splitlines")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"keepends"});
      return string_list(splitlines(s, a[0].truthy()));
    });
  if (name == "startswith" || name == "endswith")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"prefix", "start", "end"}, 1);
      const std::u32string cps = utf8_decode(s);
      size_t lo, hi;
      clamp_range(a, 1, cps.size(), lo, hi);
      std::vector<Value> options = a[0].kind() == Value::Kind::Tuple ? a[0].items() : std::vector<Value>{a[0]};
      for (const Value& o : options) {
        if (!o.is_string())
          throw TemplateError(fmt::format("{} first arg must be str or a tuple of str, not {}", n, o.type_name()));
        const std::u32string p = utf8_decode(o.as_string());
        if (hi < lo || p.size() > hi - lo) continue;
        const size_t at = n == "startswith" ? lo : hi - p.size();
        if (cps.compare(at, p.size(), p) == 0) return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" || name == "casefold")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {});
      if (n == "upper") return Value::string(str_upper(s));
      if (n == "lower" || n == "casefold") return Value::string(str_lower(s));
      if (n == "title") return Value::string(str_title(s));
      if (n == "capitalize") return Value::string(str_capitalize(s));
      std::string out;
      for (char32_t c : utf8_decode(s)) utf8_append(out, py_isupper(c) ? py_tolower(c) : py_toupper(c));
      return Value::string(out);
    });
  if (name == "replace")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"old", "new", "count"}, 2);
      return Value::string(str_replace(s, arg_str(a[0], "replace() argument 1"), arg_str(a[1], "replace() argument 2"),
                                       a.has(2) ? arg_int(a[2], "count") : -1));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"sub", "start", "end"}, 1);
      const std::u32string cps = utf8_decode(s);
      const std::u32string sub = utf8_decode(arg_str(a[0], fmt::format("{}() argument 1", n)));
      size_t lo, hi;
      clamp_range(a, 1, cps.size(), lo, hi);
      if (n == "count") {
        if (hi < lo) return Value::integer(0);
        if (sub.empty()) return Value::integer(static_cast<int64_t>(hi - lo + 1));
        int64_t c = 0;
        for (size_t at = find_u32(cps, sub, lo, hi, false); at != std::u32string::npos; at = find_u32(cps, sub, at + sub.size(), hi, false)) ++c;
        return Value::integer(c);
      }
      const size_t at = find_u32(cps, sub, lo, hi, n[0] == 'r');
      if (at == std::u32string::npos) {
        if (n == "index" || n == "rindex") throw TemplateError("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(at));
    });
  if (name == "join")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"iterable"}, 1);
      std::string out;
      size_t i = 0;
      for (const Value& v : iterate(a[0])) {
        if (!v.is_string())
          throw TemplateError(fmt::format("sequence item {}: expected str instance, {} found", i, v.type_name()));
        if (i++) out += s;
        out += v.as_string();
      }
      return Value::string(out);
    });
  if (name == "format")
    return method([](I in, S s, S, A args) { return Value::string(str_format(in, s, args)); });
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "islower" || name == "isupper" || name == "istitle")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {});
      bool r;
      if (n == "isalpha") r = all_chars(s, py_isalpha);
      else if (n == "isalnum") r = all_chars(s, py_isalnum);
      else if (n == "isspace") r = all_chars(s, py_isspace);
      else if (n == "islower" || n == "isupper") {
        // Python: at least one cased character, and no cased character of the other case.
        const std::u32string cps = utf8_decode(s);
        const bool want_lower = n == "islower";
        bool any = false;
        r = true;
        for (char32_t c : cps) {
          if (want_lower ? py_isupper(c) : py_islower(c)) r = false;
          if (cased(c)) any = true;
        }
        r = r && any;
      } else if (n == "istitle") {
        r = !s.empty() && str_title(s) == s && all_chars(s, [](char32_t) { return true; });
        bool any = false;
        for (char32_t c : utf8_decode(s)) any = any || cased(c);
        r = r && any;
      } else {
        r = all_chars(s, py_isdigit);
      }
      return Value::boolean(r);
    });
  if (name == "zfill")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"width"}, 1);
      const int64_t width = arg_int(a[0], "width");
      const auto len = static_cast<int64_t>(utf8_length(s));
      if (width <= len) return Value::string(s);
      ValueBudget::check_fits(static_cast<size_t>(width));
      const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
      return Value::string(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
    });
  if (name == "center" || name == "ljust" || name == "rjust")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"width", "fillchar"}, 1);
      return Value::string(justify(s, arg_int(a[0], "width"), a[1], n == "center" ? 'c' : n == "ljust" ? 'l' : 'r'));
    });
  if (name == "removeprefix" || name == "removesuffix")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"affix"}, 1);
      const std::string& x = arg_str(a[0], fmt::format("{}() argument", n));
      if (n == "removeprefix") return Value::string(s.rfind(x, 0) == 0 ? s.substr(x.size()) : s);
      const bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      return Value::string(ends ? s.substr(0, s.size() - x.size()) : s);
    });
  if (name == "partition" || name == "rpartition")
    return method([](I, S s, S n, A args) {
      ArgBinder a(n, args, {"sep"}, 1);
      const std::string& sep = arg_str(a[0], "separator");
      if (sep.empty()) throw TemplateError("empty separator");
      const size_t at = n == "partition" ? s.find(sep) : s.rfind(sep);
      if (at == std::string::npos)
        return n == "partition" ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                                : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
      return Value::tuple({Value::string(s.substr(0, at)), Value::string(sep), Value::string(s.substr(at + sep.size()))});
    });
  return std::nullopt;
}

std::optional<Value> sequence_method(const Value& self, const std::string& name) {
  static constexpr std::string_view mutating[] = {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"};
  if (self.is_list() && std::find(std::begin(mutating), std::end(mutating), name) != std::end(mutating))
    return Value::undefined(fmt::format("access to attribute '{}' of 'list' object is unsafe.", name), true);
  if (name == "index" || name == "count")
    return Value::function(name, [self, name](Interpreter&, Args& args) {
      ArgBinder a(name, args, {"value"}, 1);
      int64_t i = 0, c = 0;
      for (const Value& v : self.items()) {
        if (equals(v, a[0])) {
          if (name == "index") return Value::integer(i);
          ++c;
        }
        ++i;
      }
      if (name == "index") throw TemplateError(fmt::format("{} is not in list", a[0].repr()));
      return Value::integer(c);
    });
  if (name == "copy" && self.is_list())
    return Value::function(name, [self](Interpreter&, Args& args) {
      ArgBinder a("copy", args, {});
      return Value::list(self.items());
    });
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& self, const std::string& name) {
  static constexpr std::string_view mutating[] = {"clear", "pop", "popitem", "setdefault", "update"};
  if (std::find(std::begin(mutating), std::end(mutating), name) != std::end(mutating))
    return Value::undefined(fmt::format("access to attribute '{}' of 'dict' object is unsafe.", name), true);
  if (name == "items" || name == "keys" || name == "values" || name == "copy")
    return Value::function(name, [self, name](Interpreter&, Args& args) {
      ArgBinder a(name, args, {});
      if (name == "copy") return Value::dict(std::make_shared<DictData>(self.dict()));
      std::vector<Value> out;
      for (const auto& [k, v] : self.dict().items) {
        if (name == "items") out.push_back(Value::tuple({k, v}));
        else out.push_back(name == "keys" ? k : v);
      }
      return Value::dict_view(name == "items" ? "dict_items" : name == "keys" ? "dict_keys" : "dict_values", std::move(out));
    });
  if (name == "get")
    return Value::function(name, [self](Interpreter&, Args& args) {
      ArgBinder a("get", args, {"key", "default"}, 1);
      const Value* v = self.dict().find(a[0]);
      return v ? *v : a.get(1, Value::none());
    });
  return std::nullopt;
}

}  // namespace

std::optional<Value> get_method(const Value& self, const std::string& name) {
  switch (self.kind()) {
    case Value::Kind::String:
      return string_method(self, name);
    case Value::Kind::List:
    case Value::Kind::Tuple:
      return sequence_method(self, name);
    case Value::Kind::Dict:
      return dict_method(self, name);
    default:
      return std::nullopt;
  }
}

std::vector<std::string> str_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    // Runs of whitespace separate; leading / trailing whitespace gives no empty parts.
    const std::u32string cps = utf8_decode(s);
    size_t i = 0;
    const size_t n = cps.size();
    while (true) {
      while (i < n && py_isspace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(utf8_encode(std::u32string_view(cps).substr(i)));  // the rest, trailing space kept
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(cps[j])) ++j;
      parts.push_back(utf8_encode(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  const std::string& d = arg_str(sep, "separator");
  if (d.empty()) throw TemplateError("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

std::string str_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string cps = utf8_decode(s);
  std::u32string set;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) set = utf8_decode(arg_str(chars, "strip arg"));
  auto strip_me = [&](char32_t c) { return whitespace ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_me(cps[b])) ++b;
  if (right)
    while (e > b && strip_me(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

}  // namespace npullm::genai::jinja
