// Operators with Python semantics (int/float promotion, floor division and modulo that follow the
// divisor's sign, str and list concatenation / repetition, `in`, slicing), and Python's two string
// formatting mini-languages: `fmt % args` and str.format().
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "genai/jinja/builtins.h"
#include "genai/jinja/interpreter.h"
#include "genai/jinja/text.h"

namespace npullm::genai::jinja {

namespace {

// Repetition and concatenation results beyond this are refused instead of exhausting memory.
constexpr size_t kMaxResultBytes = size_t{256} << 20;

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw TemplateError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

// Python ints never overflow; past int64 we refuse rather than wrap.
int64_t add_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw TemplateError("integer overflow");
  return r;
}
int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) throw TemplateError("integer overflow");
  return r;
}
int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw TemplateError("integer overflow");
  return r;
}

Value repeat(const Value& seq, int64_t count) {
  if (count <= 0) return seq.is_string() ? Value::string("") : seq.is_list() ? Value::list({}) : Value::tuple({});
  const auto n = static_cast<size_t>(count);
  if (seq.is_string()) {
    if (seq.as_string().size() * n > kMaxResultBytes) throw TemplateError("repeated string is too large");
    ValueBudget::check_fits(seq.as_string().size() * n);
    std::string out;
    out.reserve(seq.as_string().size() * n);
    for (size_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  if (seq.items().size() * n > kMaxResultBytes / sizeof(Value)) throw TemplateError("repeated list is too large");
  ValueBudget::check_fits(0, seq.items().size() * n);
  std::vector<Value> out;
  for (size_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

// Python's float divmod: the remainder takes the divisor's sign.
void float_divmod(double x, double y, double& div, double& mod) {
  mod = std::fmod(x, y);
  div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  if (div != 0.0) {
    const double f = std::floor(div);
    div = (div - f > 0.5) ? f + 1.0 : f;
  } else {
    div = std::copysign(0.0, x / y);
  }
}

Value plus(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return Value::integer(add_checked(a.as_int(), b.as_int()));
    return Value::floating(a.as_double() + b.as_double());
  }
  if (a.is_string() && b.is_string()) {
    if (a.as_string().size() + b.as_string().size() > kMaxResultBytes) throw TemplateError("string is too large");
    ValueBudget::check_fits(a.as_string().size() + b.as_string().size());
    return Value::string(a.as_string() + b.as_string());
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    ValueBudget::check_fits(0, a.items().size() + b.items().size());
    std::vector<Value> out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return a.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
  }
  if (a.is_string() || a.is_sequence())
    throw TemplateError(fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name()));
  unsupported("+", a, b);
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  // str % x formats even when x is Undefined (it prints as ""), as Python's str.__mod__ does.
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.as_string(), b));
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (op == "+") return plus(a, b);
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && b.is_int()) return repeat(a, b.as_int());
    if (a.is_int() && (b.is_string() || b.is_sequence())) return repeat(b, a.as_int());
  }
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  const bool ints = a.is_int() && b.is_int();
  if (op == "-") {
    if (ints) return Value::integer(sub_checked(a.as_int(), b.as_int()));
    return Value::floating(a.as_double() - b.as_double());
  }
  if (op == "*") {
    if (ints) return Value::integer(mul_checked(a.as_int(), b.as_int()));
    return Value::floating(a.as_double() * b.as_double());
  }
  if (op == "/") {
    if (b.as_double() == 0.0) throw TemplateError("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) throw TemplateError("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (b.as_double() == 0.0) throw TemplateError(op == "//" ? "float floor division by zero" : "float modulo");
    double div, mod;
    float_divmod(a.as_double(), b.as_double(), div, mod);
    return Value::floating(op == "//" ? div : mod);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {  // square-and-multiply with overflow checks
        if (e & 1) r = mul_checked(r, base);
        e >>= 1;
        if (e) base = mul_checked(base, base);
      }
      return Value::integer(r);
    }
    if (a.as_double() == 0.0 && b.as_double() < 0) throw TemplateError("0.0 cannot be raised to a negative power");
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  throw TemplateError(fmt::format("unknown operator '{}'", op));
}

Value unary_op(std::string_view op, const Value& a) {
  if (a.is_undefined()) a.fail_undefined();
  if (!a.is_number()) throw TemplateError(fmt::format("bad operand type for unary {}: '{}'", op, a.type_name()));
  if (op == "+") return a.is_float() ? a : Value::integer(a.as_int());
  if (a.is_float()) return Value::floating(-a.as_double());
  if (a.as_int() == std::numeric_limits<int64_t>::min()) throw TemplateError("integer overflow");
  return Value::integer(-a.as_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined:
      return false;  // Undefined iterates as empty
    case Value::Kind::String:
      if (!item.is_string())
        throw TemplateError(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const auto& x : container.items())
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::Dict:
      return container.dict().find(item) != nullptr;
    default:
      throw TemplateError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

Value slice_value(const Value& v, const Value& start, const Value& stop, const Value& step) {
  for (const Value* p : {&start, &stop, &step})
    if (!p->is_none() && !p->is_int())
      throw TemplateError("slice indices must be integers or None or have an __index__ method");
  if (!v.is_string() && !v.is_sequence())
    return Value::undefined(fmt::format("{} has no element slice({}, {}, {})", v.object_type_repr(), start.repr(), stop.repr(), step.repr()));
  const int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) throw TemplateError("slice step cannot be zero");
  std::u32string chars;
  if (v.is_string()) chars = utf8_decode(v.as_string());
  const int64_t n = v.is_string() ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(v.items().size());
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](const Value& x, int64_t dflt) {
    if (x.is_none()) return dflt;
    int64_t i = x.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t lo = adjust(start, st < 0 ? n - 1 : 0);
  const int64_t hi = adjust(stop, st < 0 ? -1 : n);
  std::vector<int64_t> idx;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) idx.push_back(i);
  if (v.is_string()) {
    std::string out;
    for (int64_t i : idx) utf8_append(out, chars[static_cast<size_t>(i)]);
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(v.items()[static_cast<size_t>(i)]);
  return v.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

// ---- printf-style formatting ----------------------------------------------------------------

namespace {

std::string pad(std::string s, size_t width, bool left_align, char fill = ' ') {
  const size_t len = utf8_length(s);
  if (len >= width) return s;
  ValueBudget::check_fits(s.size() + (width - len));
  const std::string padding(width - len, fill);
  return left_align ? s + padding : padding + s;
}

double to_real(const Value& v, char conv) {
  if (v.is_number()) return v.as_double();
  throw TemplateError(fmt::format("%{} format: a real number is required, not {}", conv, v.type_name()));
}

int64_t to_integer(const Value& v, char conv) {
  if (v.is_int()) return v.as_int();
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) throw TemplateError("cannot convert float to integer");
    return static_cast<int64_t>(v.as_double());
  }
  throw TemplateError(fmt::format("%{} format: a real number is required, not {}", conv, v.type_name()));
}

}  // namespace

std::string percent_format(const std::string& f, const Value& args) {
  std::vector<Value> values;
  const bool tuple_args = args.kind() == Value::Kind::Tuple;
  if (tuple_args) values = args.items();
  else values.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  auto take = [&]() -> const Value& {
    if (next >= values.size()) throw TemplateError("not enough arguments for format string");
    return values[next++];
  };
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) throw TemplateError("incomplete format");
    const Value* arg = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos) throw TemplateError("incomplete format key");
      if (!args.is_dict()) throw TemplateError("format requires a mapping");
      const Value* v = args.dict().find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!v) throw TemplateError(fmt::format("KeyError: '{}'", f.substr(i + 1, close - i - 1)));
      arg = v;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) flags.push_back(f[i++]);
    auto number = [&]() -> int {
      if (i < f.size() && f[i] == '*') {
        ++i;
        return static_cast<int>(to_integer(take(), '*'));
      }
      int n = 0;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') n = n * 10 + (f[i++] - '0');
      return n;
    };
    const int width = number();
    int precision = -1;
    if (i < f.size() && f[i] == '.') {
      ++i;
      precision = number();
    }
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) throw TemplateError("incomplete format");
    const char conv = f[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    const Value& v = arg ? *arg : take();
    const bool left = flags.find('-') != std::string::npos;
    std::string piece;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        piece = conv == 's' ? v.str() : v.repr();
        if (precision >= 0) {
          const std::u32string cps = utf8_decode(piece);
          if (cps.size() > static_cast<size_t>(precision)) piece = utf8_encode(cps.substr(0, static_cast<size_t>(precision)));
        }
        out += pad(piece, static_cast<size_t>(width), left);
        continue;
      }
      case 'c': {
        if (v.is_string() && utf8_length(v.as_string()) == 1) piece = v.as_string();
        else if (v.is_int()) utf8_append(piece, static_cast<char32_t>(v.as_int()));
        else throw TemplateError("%c requires int or char");
        out += pad(piece, static_cast<size_t>(width), left);
        continue;
      }
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        const char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        std::string spec = "%" + flags + std::to_string(width);
        if (precision >= 0) spec += "." + std::to_string(precision);
        spec += "ll";
        spec.push_back(c);
        char buf[128];
        std::snprintf(buf, sizeof buf, spec.c_str(), static_cast<long long>(to_integer(v, conv)));
        piece = buf;
        if (conv == 'o' && flags.find('#') != std::string::npos) {  // Python writes 0o, C writes 0
          const size_t z = piece.find('0');
          if (z != std::string::npos) piece.insert(z + 1, "o");
        }
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        std::string spec = "%" + flags + std::to_string(width);
        if (precision >= 0) spec += "." + std::to_string(precision);
        spec.push_back(conv);
        char buf[512];
        std::snprintf(buf, sizeof buf, spec.c_str(), to_real(v, conv));
        piece = buf;
        break;
      }
      default:
        throw TemplateError(fmt::format("unsupported format character '{}'", conv));
    }
    out += piece;
  }
  if (!used_mapping && !args.is_dict() && next < values.size())
    throw TemplateError("not all arguments converted during string formatting");
  return out;
}

// ---- str.format -----------------------------------------------------------------------------

namespace {

struct FormatSpec {
  char fill = ' ';
  char align = 0;  // < > ^ =
  char sign = '-';
  bool alt = false;
  size_t width = 0;
  char grouping = 0;
  int precision = -1;
  char type = 0;
};

FormatSpec parse_spec(const std::string& s) {
  FormatSpec f;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  // The fill may be any one character (as UTF-8 we accept one byte, which covers ASCII fills).
  if (s.size() >= 2 && is_align(s[1])) {
    f.fill = s[0];
    f.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    f.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    f.alt = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    if (!f.align) {
      f.fill = '0';
      f.align = '=';
    }
    ++i;
  }
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') f.width = f.width * 10 + static_cast<size_t>(s[i++] - '0');
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) f.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    f.precision = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') f.precision = f.precision * 10 + (s[i++] - '0');
  }
  if (i < s.size()) f.type = s[i++];
  if (i != s.size()) throw TemplateError("Invalid format specifier");
  return f;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i && (n - i) % 3 == 0) out.push_back(sep);
    out.push_back(digits[i]);
  }
  return out;
}

// Pads `body` (without sign) to the spec's width; '=' puts the padding between sign and digits.
std::string align_field(const FormatSpec& f, const std::string& sign, const std::string& body, char default_align) {
  const char align = f.align ? f.align : default_align;
  const size_t len = utf8_length(sign) + utf8_length(body);
  if (len >= f.width) return sign + body;
  const size_t padn = f.width - len;
  const std::string fill(padn, f.fill);
  switch (align) {
    case '<': return sign + body + fill;
    case '^': return std::string(padn / 2, f.fill) + sign + body + std::string(padn - padn / 2, f.fill);
    case '=': return sign + fill + body;
    default: return fill + sign + body;
  }
}

std::string format_value(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return v.str();
  const FormatSpec f = parse_spec(spec_text);
  if (v.is_string()) {
    if (f.type && f.type != 's') throw TemplateError(fmt::format("Unknown format code '{}' for object of type 'str'", f.type));
    std::string body = v.as_string();
    if (f.precision >= 0) {
      const std::u32string cps = utf8_decode(body);
      if (cps.size() > static_cast<size_t>(f.precision)) body = utf8_encode(cps.substr(0, static_cast<size_t>(f.precision)));
    }
    return align_field(f, "", body, '<');
  }
  if (v.is_int() && std::string_view("bcdoxXn").find(f.type ? f.type : 'd') != std::string_view::npos) {
    const int64_t x = v.as_int();
    const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    std::string digits;
    switch (f.type) {
      case 'b': for (uint64_t m = mag; ; m >>= 1) { digits.insert(digits.begin(), static_cast<char>('0' + (m & 1))); if (m <= 1) break; } break;
      case 'o': digits = fmt::format("{:o}", mag); break;
      case 'x': digits = fmt::format("{:x}", mag); break;
      case 'X': digits = fmt::format("{:X}", mag); break;
      case 'c': {
        std::string c;
        utf8_append(c, static_cast<char32_t>(x));
        return align_field(f, "", c, '<');
      }
      default: digits = std::to_string(mag);
    }
    if (f.grouping) digits = group_digits(digits, f.grouping);
    if (f.alt && (f.type == 'b' || f.type == 'o' || f.type == 'x' || f.type == 'X'))
      digits = std::string("0") + static_cast<char>(f.type == 'X' ? 'X' : f.type) + digits;
    const std::string sign = x < 0 ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
    return align_field(f, sign, digits, '>');
  }
  if (v.is_number()) {
    const double d = v.as_double();
    char type = f.type;
    int precision = f.precision;
    std::string body;
    const double mag = std::fabs(d);
    if (!type && precision < 0) {
      body = py_float_repr(mag);
    } else {
      if (!type) type = 'g';
      if (precision < 0) precision = 6;
      const bool percent = type == '%';
      char buf[512];
      const std::string cspec = fmt::format("%{}.{}{}", f.alt ? "#" : "", precision, percent ? 'f' : type == 'n' ? 'g' : type);
      std::snprintf(buf, sizeof buf, cspec.c_str(), percent ? mag * 100 : mag);
      body = buf;
      if (percent) body += "%";
    }
    if (f.grouping) {
      const size_t dot = body.find_first_not_of("0123456789");
      body = group_digits(body.substr(0, dot), f.grouping) + (dot == std::string::npos ? "" : body.substr(dot));
    }
    const std::string sign = std::signbit(d) ? "-" : f.sign == '+' ? "+" : f.sign == ' ' ? " " : "";
    return align_field(f, sign, body, '>');
  }
  throw TemplateError(fmt::format("unsupported format string passed to {}.__format__", v.type_name()));
}

}  // namespace

std::string str_format(Interpreter& in, const std::string& f, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      throw TemplateError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    // Find the matching '}' (the spec may hold one level of nested {fields}).
    size_t depth = 1, j = i + 1;
    for (; j < f.size() && depth; ++j) {
      if (f[j] == '{') ++depth;
      else if (f[j] == '}') --depth;
    }
    if (depth) throw TemplateError("expected '}' before end of string");
    const std::string field = f.substr(i + 1, j - i - 2);
    i = j - 1;
    // field = name ('.' attr | '[' key ']')* ['!' conv] [':' spec]
    size_t k = 0;
    while (k < field.size() && field[k] != '.' && field[k] != '[' && field[k] != '!' && field[k] != ':') ++k;
    const std::string name = field.substr(0, k);
    Value v;
    if (name.empty()) {
      if (manual) throw TemplateError("cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      if (auto_index >= args.pos.size()) throw TemplateError(fmt::format("Replacement index {} out of range for positional args tuple", auto_index));
      v = args.pos[auto_index++];
    } else if (name.find_first_not_of("0123456789") == std::string::npos) {
      if (automatic) throw TemplateError("cannot switch from automatic field numbering to manual field specification");
      manual = true;
      const size_t idx = std::stoul(name);
      if (idx >= args.pos.size()) throw TemplateError(fmt::format("Replacement index {} out of range for positional args tuple", idx));
      v = args.pos[idx];
    } else {
      const Value* found = nullptr;
      for (const auto& [key, val] : args.kw)
        if (key == name) found = &val;
      if (!found) throw TemplateError(fmt::format("KeyError: '{}'", name));
      v = *found;
    }
    while (k < field.size() && (field[k] == '.' || field[k] == '[')) {
      if (field[k] == '.') {
        size_t e = k + 1;
        while (e < field.size() && field[e] != '.' && field[e] != '[' && field[e] != '!' && field[e] != ':') ++e;
        v = in.get_attr(v, field.substr(k + 1, e - k - 1));
        k = e;
      } else {
        const size_t e = field.find(']', k);
        if (e == std::string::npos) throw TemplateError("Missing ']' in format string");
        const std::string key = field.substr(k + 1, e - k - 1);
        const bool numeric = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        v = in.get_item(v, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        k = e + 1;
      }
    }
    if (k < field.size() && field[k] == '!') {
      if (k + 1 >= field.size()) throw TemplateError("end of string while looking for conversion specifier");
      const char conv = field[k + 1];
      if (conv == 'r' || conv == 'a') v = Value::string(v.repr());
      else if (conv == 's') v = Value::string(v.str());
      else throw TemplateError(fmt::format("Unknown conversion specifier {}", conv));
      k += 2;
    }
    std::string spec;
    if (k < field.size() && field[k] == ':') spec = field.substr(k + 1);
    if (spec.find('{') != std::string::npos) spec = str_format(in, spec, args);
    if (v.is_undefined()) v.fail_undefined();
    out += format_value(v, spec);
  }
  return out;
}

}  // namespace npullm::genai::jinja
