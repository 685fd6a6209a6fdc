#include "genai/grammar/json_schema.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "genai/grammar/matcher.h"
#include "genai/grammar/regex.h"
#include "genai/utf8.h"

namespace npullm::genai::grammar {

namespace {

using json = nlohmann::ordered_json;

// Type bits; "number" is integer | fraction, so "integer" is a subset of it.
enum : int { tNull = 1, tBool = 2, tObject = 4, tArray = 8, tString = 16, tInt = 32, tFrac = 64, tAll = 127 };

const std::set<std::string> kAnnotations = {"title", "description", "$schema", "$id", "examples", "default",
                                            "$comment", "readOnly", "writeOnly", "deprecated", "definitions", "$defs"};
const std::set<std::string> kSupported = {
    "type", "nullable", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref"};
const std::set<std::string> kFormats = {"date", "time", "date-time", "uuid", "email", "ipv4"};

// Paths are JSON pointers into the document, written as URI fragments.
std::string shown(const std::string& path) { return path.empty() || path[0] != '#' ? "#" + path : path; }

[[noreturn]] void unsupported(const std::string& kw, const std::string& path, const std::string& why) {
  throw UnsupportedKeyword(kw, fmt::format("JSON Schema at '{}': keyword '{}' {}", shown(path), kw, why));
}
[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw GrammarError(fmt::format("JSON Schema at '{}': {}", shown(path), why));
}

int type_bits(const std::string& t, const std::string& path) {
  if (t == "null") return tNull;
  if (t == "boolean") return tBool;
  if (t == "object") return tObject;
  if (t == "array") return tArray;
  if (t == "string") return tString;
  if (t == "integer") return tInt;
  if (t == "number") return tInt | tFrac;
  bad(path, fmt::format("unknown type '{}'", t));
}

int type_mask(const json& s, const std::string& path) {
  int mask = tAll;
  if (s.contains("type")) {
    const json& t = s["type"];
    mask = 0;
    if (t.is_string()) mask = type_bits(t.get<std::string>(), path + "/type");
    else if (t.is_array()) for (const json& x : t) {
      if (!x.is_string()) bad(path + "/type", "type names must be strings");
      mask |= type_bits(x.get<std::string>(), path + "/type");
    }
    else bad(path + "/type", "type must be a string or a list of strings");
    if (s.contains("nullable") && s["nullable"] == true) mask |= tNull;
  }
  return mask;
}

// The type bits a JSON value has.
int value_bits(const json& v) {
  if (v.is_null()) return tNull;
  if (v.is_boolean()) return tBool;
  if (v.is_object()) return tObject;
  if (v.is_array()) return tArray;
  if (v.is_string()) return tString;
  if (v.is_number_integer()) return tInt;
  const double d = v.get<double>();
  return std::floor(d) == d ? tInt : tFrac;
}

// How nlohmann::json::dump() writes the value (object keys sorted, compact).
std::string canonical(const json& v) { return nlohmann::json::parse(v.dump()).dump(); }

std::string int_text(int64_t v) { return std::to_string(v); }

// ---------------------------------------------------------------------------------------------
// integer ranges as digit strings

ByteSet digits(char lo, char hi) {
  ByteSet s;
  for (char c = lo; c <= hi; ++c) s.set(static_cast<unsigned char>(c));
  return s;
}

// Decimal strings of equal length n in [lo, hi] (leading zeros allowed: callers fix the first digit).
Expr same_len(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return Expr::empty();
  if (lo == hi) return Expr::lit(lo);
  const size_t n = lo.size();
  if (lo[0] == hi[0]) return Expr::seq({Expr::lit(std::string(1, lo[0])), same_len(lo.substr(1), hi.substr(1))});
  const bool lo_full = lo.substr(1) == std::string(n - 1, '0');
  const bool hi_full = hi.substr(1) == std::string(n - 1, '9');
  std::vector<Expr> alts;
  char mid_lo = static_cast<char>(lo[0] + 1), mid_hi = static_cast<char>(hi[0] - 1);
  if (lo_full) mid_lo = lo[0];
  else alts.push_back(Expr::seq({Expr::lit(std::string(1, lo[0])), same_len(lo.substr(1), std::string(n - 1, '9'))}));
  if (hi_full) mid_hi = hi[0];
  if (mid_lo <= mid_hi)
    alts.push_back(Expr::seq({Expr::byte_set(digits(mid_lo, mid_hi)), Expr::repeat(Expr::byte_set(digits('0', '9')), static_cast<int64_t>(n - 1), static_cast<int64_t>(n - 1))}));
  if (!hi_full) alts.push_back(Expr::seq({Expr::lit(std::string(1, hi[0])), same_len(std::string(n - 1, '0'), hi.substr(1))}));
  return Expr::alt(std::move(alts));
}

// Positive integers (no leading zero) in [a, b]; b empty: no upper bound. a >= 1.
Expr positive_range(int64_t a, std::optional<int64_t> b) {
  if (b && *b < a) return Expr::nothing();
  const std::string as = int_text(a);
  std::vector<Expr> alts;
  const size_t top_len = b ? int_text(*b).size() : as.size();
  for (size_t len = as.size(); len <= top_len; ++len) {
    const std::string lo = len == as.size() ? as : "1" + std::string(len - 1, '0');
    const std::string hi = b && len == top_len ? int_text(*b) : std::string(len, '9');
    alts.push_back(same_len(lo, hi));
  }
  if (!b)  // every longer number
    alts.push_back(Expr::seq({Expr::byte_set(digits('1', '9')), Expr::repeat(Expr::byte_set(digits('0', '9')), static_cast<int64_t>(as.size()), -1)}));
  return Expr::alt(std::move(alts));
}

// Integers in [lo, hi] as JSON writes them ("-0" never); either side may be open.
Expr int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return Expr::nothing();
  std::vector<Expr> alts;
  // negatives: -v for v in [max(1, -hi), -lo]
  if (!lo || *lo < 0) {
    const int64_t a = hi ? std::max<int64_t>(1, -*hi) : 1;
    std::optional<int64_t> b;
    if (lo) b = -*lo;
    if (!b || *b >= a) alts.push_back(Expr::seq({Expr::lit("-"), positive_range(a, b)}));
  }
  if ((!lo || *lo <= 0) && (!hi || *hi >= 0)) alts.push_back(Expr::lit("0"));
  if (!hi || *hi > 0) alts.push_back(positive_range(lo ? std::max<int64_t>(1, *lo) : 1, hi));
  return Expr::alt(std::move(alts));
}

// ---------------------------------------------------------------------------------------------
// formats (ASCII, one spelling each; see json_schema.h)

Expr cls(const char* spec) {  // "0-9a-f" style
  ByteSet s;
  for (const char* p = spec; *p; ++p) {
    if (p[1] == '-' && p[2]) { for (int c = static_cast<unsigned char>(p[0]); c <= static_cast<unsigned char>(p[2]); ++c) s.set(static_cast<size_t>(c)); p += 2; }
    else s.set(static_cast<unsigned char>(*p));
  }
  return Expr::byte_set(s);
}
Expr rep(Expr e, int64_t n) { return Expr::repeat(std::move(e), n, n); }

Expr format_date() {
  const Expr year = rep(cls("0-9"), 4);
  const Expr d28 = Expr::alt({Expr::seq({cls("0"), cls("1-9")}), Expr::seq({cls("1"), cls("0-9")}), Expr::seq({cls("2"), cls("0-8")})});
  const Expr d30 = Expr::alt({d28, Expr::lit("29"), Expr::lit("30")});
  const Expr d31 = Expr::alt({d30, Expr::lit("31")});
  const Expr md = Expr::alt({
      Expr::seq({Expr::alt({Expr::lit("01"), Expr::lit("03"), Expr::lit("05"), Expr::lit("07"), Expr::lit("08"), Expr::lit("10"), Expr::lit("12")}), Expr::lit("-"), d31}),
      Expr::seq({Expr::alt({Expr::lit("04"), Expr::lit("06"), Expr::lit("09"), Expr::lit("11")}), Expr::lit("-"), d30}),
      Expr::seq({Expr::lit("02-"), d28})});
  // Leap years: the last two digits a multiple of 4 but not 00, or a century divisible by 400.
  const Expr mult4 = Expr::alt({Expr::seq({cls("02468"), cls("48")}), Expr::seq({cls("13579"), cls("26")}), Expr::seq({cls("2468"), cls("0")})});
  const Expr mult4_or_00 = Expr::alt({Expr::seq({cls("02468"), cls("048")}), Expr::seq({cls("13579"), cls("26")})});
  const Expr leap = Expr::alt({Expr::seq({rep(cls("0-9"), 2), mult4}), Expr::seq({mult4_or_00, Expr::lit("00")})});
  return Expr::alt({Expr::seq({year, Expr::lit("-"), md}), Expr::seq({leap, Expr::lit("-02-29")})});
}

Expr format_time() {
  const Expr hh = Expr::alt({Expr::seq({cls("01"), cls("0-9")}), Expr::seq({cls("2"), cls("0-3")})});
  const Expr mm = Expr::seq({cls("0-5"), cls("0-9")});
  const Expr frac = Expr::opt(Expr::seq({Expr::lit("."), Expr::repeat(cls("0-9"), 1, 9)}));
  const Expr offset = Expr::alt({Expr::lit("Z"), Expr::seq({cls("+-"), hh, Expr::lit(":"), mm})});
  return Expr::seq({hh, Expr::lit(":"), mm, Expr::lit(":"), mm, frac, offset});  // no leap second
}

Expr format_uuid() {
  const Expr h = cls("0-9a-fA-F");
  return Expr::seq({rep(h, 8), Expr::lit("-"), rep(h, 4), Expr::lit("-"), rep(h, 4), Expr::lit("-"), rep(h, 4), Expr::lit("-"), rep(h, 12)});
}

Expr format_email() {
  const Expr atext = cls("A-Za-z0-9!#$%&'*+/=?^_`{|}~-");
  const Expr local = Expr::seq({Expr::plus(atext), Expr::star(Expr::seq({Expr::lit("."), Expr::plus(atext)}))});
  const Expr label = Expr::seq({cls("A-Za-z0-9"), Expr::opt(Expr::seq({Expr::repeat(cls("A-Za-z0-9-"), 0, 61), cls("A-Za-z0-9")}))});
  return Expr::seq({local, Expr::lit("@"), label, Expr::star(Expr::seq({Expr::lit("."), label}))});
}

Expr format_ipv4() {
  const Expr octet = Expr::alt({cls("0-9"), Expr::seq({cls("1-9"), cls("0-9")}), Expr::seq({cls("1"), cls("0-9"), cls("0-9")}),
                                Expr::seq({cls("2"), cls("0-4"), cls("0-9")}), Expr::seq({Expr::lit("25"), cls("0-5")})});
  return Expr::seq({octet, Expr::lit("."), octet, Expr::lit("."), octet, Expr::lit("."), octet});
}

// ---------------------------------------------------------------------------------------------

struct Bound {
  double v;
  bool exclusive;
};

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root), b_(own_) {}
  // Rules added to `b`, beside others (compile_prefixed_json_schemas: one document per prefix).
  SchemaCompiler(const json& root, GrammarBuilder& b) : root_(root), b_(b) {}

  std::shared_ptr<const Grammar> build(const json& s, const std::string& path) {
    const int32_t r = compile(s, path, 0);
    return b_.build(r);
  }
  // The rule of the document's root schema (ws is not included around it).
  int32_t root_rule() { return compile(root_, "", 0); }
  std::shared_ptr<const Grammar> build_object() { return b_.build(object_any()); }

 private:
  // ---- shared rules -------------------------------------------------------------------------
  int32_t ws() {
    // Nothing, one space, or one newline and an indentation: enough for compact and pretty-printed
    // JSON, and a model cannot wander off into white space.
    if (ws_ < 0) ws_ = b_.rule_of("ws", Expr::opt(Expr::alt({Expr::lit(" "), Expr::seq({Expr::lit("\n"), Expr::repeat(cls(" \t"), 0, kMaxWhitespace)})})));
    return ws_;
  }
  Expr W() { return Expr::ref(ws()); }
  Expr sep() { return Expr::seq({W(), Expr::lit(","), W()}); }
  int32_t jchar() {
    // Any character of a string: raw (not " \ or a control character) or an escape; \u escapes of
    // surrogates are left out so that every jchar is exactly one code point (minLength/maxLength).
    if (jchar_ < 0) {
      CodepointSet raw = CodepointSet::of(0x20, 0x10FFFF).minus(CodepointSet{{{'"', '"'}, {'\\', '\\'}}});
      const Expr h = cls("0-9a-fA-F");
      const Expr hex4 = Expr::alt({Expr::seq({cls("0-9a-cA-Ce-fE-F"), h, h, h}), Expr::seq({cls("dD"), cls("0-7"), h, h})});
      jchar_ = b_.rule_of("char", Expr::alt({Expr::codepoints(raw), Expr::seq({Expr::lit("\\"), Expr::alt({cls("\"\\/bfnrt"), Expr::seq({Expr::lit("u"), hex4})})})}));
    }
    return jchar_;
  }
  int32_t string_any() {
    if (string_ < 0) string_ = b_.rule_of("string", Expr::seq({Expr::lit("\""), Expr::star(Expr::ref(jchar())), Expr::lit("\"")}));
    return string_;
  }
  Expr int_digits() { return Expr::alt({Expr::lit("0"), Expr::seq({cls("1-9"), Expr::star(cls("0-9"))})}); }
  int32_t integer_any() {
    if (integer_ < 0) integer_ = b_.rule_of("integer", Expr::seq({Expr::opt(Expr::lit("-")), int_digits()}));
    return integer_;
  }
  int32_t number_any() {
    if (number_ < 0)
      number_ = b_.rule_of("number", Expr::seq({Expr::opt(Expr::lit("-")), int_digits(), Expr::opt(Expr::seq({Expr::lit("."), Expr::plus(cls("0-9"))})),
                                                Expr::opt(Expr::seq({cls("eE"), Expr::opt(cls("+-")), Expr::plus(cls("0-9"))}))}));
    return number_;
  }
  int32_t value_any() {
    if (value_ < 0) {
      value_ = b_.add_rule("value");
      const int32_t obj = object_any();
      const int32_t arr = b_.add_rule("array");
      b_.define(arr, Expr::seq({Expr::lit("["), W(), Expr::opt(Expr::seq({Expr::ref(value_), Expr::star(Expr::seq({sep(), Expr::ref(value_)}))})), W(), Expr::lit("]")}));
      b_.define(value_, Expr::alt({Expr::ref(obj), Expr::ref(arr), Expr::ref(string_any()), Expr::ref(number_any()), Expr::lit("true"), Expr::lit("false"), Expr::lit("null")}));
    }
    return value_;
  }
  int32_t object_any() {
    if (object_ < 0) {
      object_ = b_.add_rule("object");
      const int32_t v = value_any();
      const Expr member = Expr::seq({Expr::ref(string_any()), W(), Expr::lit(":"), W(), Expr::ref(v)});
      b_.define(object_, Expr::seq({Expr::lit("{"), W(), Expr::opt(Expr::seq({member, Expr::star(Expr::seq({sep(), member}))})), W(), Expr::lit("}")}));
    }
    return object_;
  }
  int32_t nothing() {
    if (nothing_ < 0) nothing_ = b_.rule_of("nothing", Expr::nothing());
    return nothing_;
  }

  // ---- keywords -------------------------------------------------------------------------------
  void check(const json& s, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (k == "$id" && !path.empty() && path != "#") unsupported(k, path, "inside a subschema is not supported (it would change what $ref means)");
      if (kAnnotations.count(k) || kSupported.count(k)) continue;
      unsupported(k, path, "is not supported");
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] != false) unsupported("uniqueItems", path, "true is not supported");
    if (s.contains("format")) {
      if (!s["format"].is_string()) bad(path + "/format", "format must be a string");
      if (!kFormats.count(s["format"].get<std::string>()))
        unsupported("format", path, fmt::format("'{}' is not supported (date, time, date-time, uuid, email, ipv4 are)", s["format"].get<std::string>()));
    }
    for (const char* k : {"exclusiveMinimum", "exclusiveMaximum", "minimum", "maximum"})
      if (s.contains(k) && !s[k].is_number()) bad(path + "/" + k, "must be a number (draft 4's boolean form is not supported)");
  }

  const json& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#')
      unsupported("$ref", path, fmt::format("'{}': only references inside the document (#...) are supported", ref));
    std::string ptr;
    for (size_t i = 1; i < ref.size(); ++i) {  // percent-decoding (URI fragment)
      if (ref[i] == '%' && i + 2 < ref.size() && isxdigit(static_cast<unsigned char>(ref[i + 1])) && isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
        ptr.push_back(static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16)));
        i += 2;
      } else {
        ptr.push_back(ref[i]);
      }
    }
    if (!ptr.empty() && ptr[0] != '/') unsupported("$ref", path, fmt::format("'{}': only JSON pointers (#/...) are supported, not anchors", ref));
    try {
      return root_.at(json::json_pointer(ptr));
    } catch (const std::exception&) {
      bad(path, fmt::format("$ref '{}' points to nothing in the document", ref));
    }
  }

  int32_t ref_rule(const json& ref, const std::string& path) {
    if (!ref.is_string()) bad(path + "/$ref", "$ref must be a string");
    const std::string r = ref.get<std::string>();
    auto it = refs_.find(r);
    if (it != refs_.end()) return it->second;
    const json& target = resolve(r, path);
    const int32_t rule = b_.add_rule("ref " + r);
    refs_[r] = rule;
    b_.define(rule, Expr::ref(compile(target, r, 0)));
    return rule;
  }

  json deref(json s, const std::string& path) {
    for (int depth = 0; s.is_object() && s.contains("$ref"); ++depth) {
      if (depth > 32) unsupported("$ref", path, "chains of more than 32 references are not supported");
      if (!s["$ref"].is_string()) bad(path + "/$ref", "$ref must be a string");
      s = resolve(s["$ref"].get<std::string>(), path);
    }
    return s;
  }

  // The conjunction of two schemas as one (allOf, and a schema's keywords beside anyOf/oneOf).
  json merge(json a, const json& b0, const std::string& path) {
    const json b = deref(b0, path);
    if (b.is_boolean()) return b.get<bool>() ? a : json(false);
    if (a.is_boolean()) return a.get<bool>() ? b : json(false);
    if (!b.is_object()) bad(path, "a schema must be an object or a boolean");
    check(b, path);
    // additionalProperties (or additionalItems) speaks about the properties its own schema lists:
    // merged with properties from elsewhere it would mean something else.
    auto guard = [&](const json& x, const json& y) {
      if (x.contains("additionalProperties") && x["additionalProperties"] != true && y.contains("properties"))
        for (auto it = y["properties"].begin(); it != y["properties"].end(); ++it)
          if (!x.contains("properties") || !x["properties"].contains(it.key()))
            unsupported("additionalProperties", path, "combined (allOf/anyOf/oneOf) with properties listed elsewhere is not supported");
      for (const char* k : {"items", "additionalItems", "prefixItems"})
        if (x.contains(k) && (y.contains("items") || y.contains("additionalItems") || y.contains("prefixItems")) && !(y.contains(k) && y[k] == x[k]))
          unsupported(k, path, "in more than one of the combined schemas is not supported");
    };
    guard(a, b);
    guard(b, a);
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string& k = it.key();
      const json& v = it.value();
      if (kAnnotations.count(k)) continue;
      if (!a.contains(k)) { a[k] = v; continue; }
      if (a[k] == v) continue;
      if (k == "type") {
        const int m = type_mask(a, path) & type_mask(b, path);
        json t = json::array();
        for (const auto& [name, bit] : std::vector<std::pair<const char*, int>>{{"null", tNull}, {"boolean", tBool}, {"object", tObject}, {"array", tArray}, {"string", tString}})
          if (m & bit) t.push_back(name);
        if ((m & (tInt | tFrac)) == (tInt | tFrac)) t.push_back("number");
        else if (m & tInt) t.push_back("integer");
        else if (m & tFrac) unsupported("type", path, "intersections that leave only non-integer numbers are not supported");
        a.erase("nullable");
        a["type"] = t;
      } else if (k == "required") {
        for (const json& r : v) if (std::find(a[k].begin(), a[k].end(), r) == a[k].end()) a[k].push_back(r);
      } else if (k == "properties") {
        for (auto p = v.begin(); p != v.end(); ++p) {
          if (a[k].contains(p.key())) a[k][p.key()] = json{{"allOf", json::array({a[k][p.key()], p.value()})}};
          else a[k][p.key()] = p.value();
        }
      } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
        if (v > a[k]) a[k] = v;
      } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
        if (v < a[k]) a[k] = v;
      } else if (k == "allOf") {
        for (const json& x : v) a[k].push_back(x);
      } else if (k == "enum") {
        json keep = json::array();
        for (const json& x : a[k]) if (std::find(v.begin(), v.end(), x) != v.end()) keep.push_back(x);
        a[k] = keep;
      } else {
        unsupported(k, path, "set differently in more than one of the combined schemas (allOf/anyOf/oneOf) is not supported");
      }
    }
    return a;
  }

  // ---- oneOf: only branches that cannot both match ---------------------------------------------
  struct Sig {
    int mask = tAll;
    std::optional<std::vector<json>> values;
    std::map<std::string, std::vector<json>> tags;  // required properties with enum/const values
  };
  static std::optional<std::vector<json>> values_of(const json& s) {
    std::optional<std::vector<json>> v;
    if (s.contains("const")) v = std::vector<json>{s["const"]};
    if (s.contains("enum") && s["enum"].is_array()) {
      std::vector<json> e(s["enum"].begin(), s["enum"].end());
      if (v) { std::vector<json> k; for (auto& x : *v) if (std::find(e.begin(), e.end(), x) != e.end()) k.push_back(x); v = k; }
      else v = e;
    }
    return v;
  }
  Sig signature(const json& s0, const std::string& path) {
    const json s = deref(s0, path);
    Sig g;
    if (s.is_boolean()) { g.mask = s.get<bool>() ? tAll : 0; return g; }
    g.mask = type_mask(s, path);
    g.values = values_of(s);
    if (g.values) { int m = 0; for (auto& x : *g.values) m |= value_bits(x); g.mask &= m; }
    if (s.contains("required") && s.contains("properties"))
      for (const json& r : s["required"])
        if (r.is_string() && s["properties"].contains(r.get<std::string>())) {
          const json p = deref(s["properties"][r.get<std::string>()], path);
          if (p.is_object()) if (auto v = values_of(p)) g.tags[r.get<std::string>()] = *v;
        }
    return g;
  }
  static bool disjoint_values(const std::vector<json>& a, const std::vector<json>& b) {
    for (const json& x : a) for (const json& y : b) if (x == y) return false;
    return true;
  }
  static bool disjoint(const Sig& a, const Sig& b) {
    if ((a.mask & b.mask) == 0) return true;
    if (a.values && b.values && disjoint_values(*a.values, *b.values)) return true;
    if ((a.mask & b.mask) == tObject)
      for (const auto& [k, v] : a.tags) if (auto it = b.tags.find(k); it != b.tags.end() && disjoint_values(v, it->second)) return true;
    return false;
  }

  // ---- the schema ---------------------------------------------------------------------------------
  int32_t compile(const json& s, const std::string& path, int depth) {
    if (depth > 64) unsupported("allOf", path, "nesting deeper than 64 combined schemas is not supported");
    if (s.is_boolean()) return s.get<bool>() ? value_any() : nothing();
    if (!s.is_object()) bad(path, "a schema must be an object or a boolean");
    check(s, path);
    if (s.contains("$ref")) return ref_rule(s["$ref"], path);  // draft 7: siblings of $ref are ignored
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) bad(path + "/allOf", "allOf must be a non-empty list");
      json m = s;
      m.erase("allOf");
      for (size_t i = 0; i < s["allOf"].size(); ++i) m = merge(m, s["allOf"][i], fmt::format("{}/allOf/{}", path, i));
      return compile(m, path, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& branches = s[key];
      if (!branches.is_array() || branches.empty()) bad(fmt::format("{}/{}", path, key), fmt::format("{} must be a non-empty list", key));
      json rest = s;
      rest.erase(key);
      std::vector<json> merged;
      for (size_t i = 0; i < branches.size(); ++i) merged.push_back(merge(rest, branches[i], fmt::format("{}/{}/{}", path, key, i)));
      if (std::string(key) == "oneOf") {
        std::vector<Sig> sigs;
        for (size_t i = 0; i < merged.size(); ++i) sigs.push_back(signature(merged[i], fmt::format("{}/oneOf/{}", path, i)));
        for (size_t i = 0; i < sigs.size(); ++i)
          for (size_t j = i + 1; j < sigs.size(); ++j)
            if (!disjoint(sigs[i], sigs[j]))
              unsupported("oneOf", path, fmt::format("with branches {} and {} that may both match is not supported (only branches told apart by type, const/enum or a required property's const)", i, j));
      }
      std::vector<Expr> alts;
      for (size_t i = 0; i < merged.size(); ++i) alts.push_back(Expr::ref(compile(merged[i], fmt::format("{}/{}/{}", path, key, i), depth + 1)));
      return b_.rule_of(path + "/" + key, Expr::alt(std::move(alts)));
    }
    if (s.contains("enum") || s.contains("const")) return enumeration(s, path);
    const int mask = type_mask(s, path);
    std::vector<Expr> alts;
    if (mask & tNull) alts.push_back(Expr::lit("null"));
    if (mask & tBool) alts.push_back(Expr::alt({Expr::lit("true"), Expr::lit("false")}));
    if (mask & tObject) alts.push_back(Expr::ref(object(s, path)));
    if (mask & tArray) alts.push_back(Expr::ref(array(s, path)));
    if (mask & tString) alts.push_back(string(s, path));
    if (mask & (tInt | tFrac)) alts.push_back(number(s, path, (mask & tFrac) == 0));
    return b_.rule_of(path.empty() ? "root" : path, Expr::alt(std::move(alts)));
  }

  int32_t enumeration(const json& s, const std::string& path) {
    if (s.contains("enum") && !s["enum"].is_array()) bad(path + "/enum", "enum must be a list");
    std::vector<json> values = *values_of(s);
    // The other keywords still apply: keep the values that the rest of the schema accepts, checked
    // with the grammar of that rest (which accepts only valid documents).
    json rest = s;
    rest.erase("enum");
    rest.erase("const");
    bool constrains = false;
    for (auto it = rest.begin(); it != rest.end(); ++it) if (!kAnnotations.count(it.key())) constrains = true;
    if (constrains) {
      SchemaCompiler sub(root_);
      const std::shared_ptr<const Grammar> g = sub.build(rest, path);
      std::vector<json> keep;
      for (const json& v : values) {
        Matcher m(g);
        if (m.accept(canonical(v)) && m.is_complete()) keep.push_back(v);
      }
      values = std::move(keep);
    }
    std::vector<Expr> alts;
    for (const json& v : values) {
      const std::string t = canonical(v);
      alts.push_back(Expr::lit(t));
      // 1 and 1.0 are the same number: accept the other spelling too.
      if (v.is_number_integer()) alts.push_back(Expr::lit(t + ".0"));
      else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 1e15)
        alts.push_back(Expr::lit(int_text(static_cast<int64_t>(v.get<double>()))));
    }
    return b_.rule_of(path + "/enum", Expr::alt(std::move(alts)));
  }

  // A non-negative integer keyword.
  std::optional<int64_t> count(const json& s, const char* k, const std::string& path) {
    if (!s.contains(k)) return std::nullopt;
    const json& v = s[k];
    if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>()) bad(path + "/" + k, fmt::format("{} must be a non-negative integer", k));
    return static_cast<int64_t>(std::min(v.get<double>(), 1e15));
  }

  // Object keys other than the declared ones: a trie of the declared keys' code points; at each
  // node any character leads off it (then anything may follow), a child's character goes down,
  // and the closing quote is allowed unless the node ends a declared key. Keys are spelled
  // canonically here, so a declared key cannot sneak in under another spelling.
  Expr other_key(const std::vector<std::string>& keys) {
    struct TNode { std::map<uint32_t, int> kids; bool end = false; };
    std::vector<TNode> t(1);
    for (const std::string& k : keys) {
      int n = 0;
      for (size_t p = 0; p < k.size();) {
        const int32_t cp = detail::utf8_next(k, p);
        const uint32_t c = cp < 0 ? 0xFFFD : static_cast<uint32_t>(cp);
        auto it = t[static_cast<size_t>(n)].kids.find(c);
        if (it == t[static_cast<size_t>(n)].kids.end()) {
          t.push_back({});
          t[static_cast<size_t>(n)].kids[c] = static_cast<int>(t.size() - 1);
          n = static_cast<int>(t.size() - 1);
        } else {
          n = it->second;
        }
      }
      t[static_cast<size_t>(n)].end = true;
    }
    const int32_t free_rest = b_.rule_of("key-rest", Expr::seq({Expr::star(json_string_chars(CodepointSet::all())), Expr::lit("\"")}));
    std::vector<int32_t> rules(t.size());
    for (size_t i = 0; i < t.size(); ++i) rules[i] = b_.add_rule("other-key");
    for (size_t i = 0; i < t.size(); ++i) {
      std::vector<Expr> alts;
      CodepointSet kids;
      for (const auto& [c, n] : t[i].kids) {
        kids.add(c, c);
        alts.push_back(Expr::seq({json_string_chars(CodepointSet::of(c, c)), Expr::ref(rules[static_cast<size_t>(n)])}));
      }
      const CodepointSet others = kids.complement();
      if (!others.empty()) alts.push_back(Expr::seq({json_string_chars(others), Expr::ref(free_rest)}));
      if (!t[i].end) alts.push_back(Expr::lit("\""));
      b_.define(rules[i], Expr::alt(std::move(alts)));
    }
    return Expr::seq({Expr::lit("\""), Expr::ref(rules[0])});
  }

  int32_t object(const json& s, const std::string& path) {
    std::vector<std::string> keys;
    std::vector<json> schemas;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) bad(path + "/required", "required must be a list of names");
      for (const json& r : s["required"]) {
        if (!r.is_string()) bad(path + "/required", "required must be a list of names");
        required.insert(r.get<std::string>());
      }
    }
    const json additional = s.contains("additionalProperties") ? s["additionalProperties"] : json(true);
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) bad(path + "/properties", "properties must be an object");
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
        keys.push_back(it.key());
        schemas.push_back(it.value());
      }
    }
    for (const std::string& r : required)
      if (std::find(keys.begin(), keys.end(), r) == keys.end()) {
        keys.push_back(r);
        schemas.push_back(additional);
      }
    if (keys.empty() && additional == true) return object_any();

    const size_t n = keys.size();
    std::vector<int32_t> kv(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string sub = path + "/properties/" + keys[i];
      const int32_t value = compile(schemas[i], sub, 0);
      kv[i] = b_.rule_of(sub, Expr::seq({Expr::lit(nlohmann::json(keys[i]).dump()), W(), Expr::lit(":"), W(), Expr::ref(value)}));
    }
    int32_t other = -1;
    if (additional != false) {
      const int32_t value = compile(additional, path + "/additionalProperties", 0);
      other = b_.rule_of(path + "/additionalProperties", Expr::seq({other_key(keys), W(), Expr::lit(":"), W(), Expr::ref(value)}));
    }
    auto is_req = [&](size_t i) { return required.count(keys[i]) > 0; };
    const int32_t obj = b_.add_rule(path + "/object");
    const Expr close = Expr::seq({W(), Expr::lit("}")});

    if (n <= static_cast<size_t>(kMaxFreeOrderProperties)) {
      // Any order, each declared property at most once: one rule per set of properties already given.
      uint32_t req_mask = 0;
      for (size_t i = 0; i < n; ++i) if (is_req(i)) req_mask |= 1u << i;
      std::vector<int32_t> after(size_t{1} << n);
      for (auto& r : after) r = b_.add_rule(path + "/object-rest");
      for (uint32_t m = 0; m < after.size(); ++m) {
        std::vector<Expr> alts;
        for (size_t i = 0; i < n; ++i)
          if (!(m & (1u << i))) alts.push_back(Expr::seq({sep(), Expr::ref(kv[i]), Expr::ref(after[m | (1u << i)])}));
        if (other >= 0) alts.push_back(Expr::seq({sep(), Expr::ref(other), Expr::ref(after[m])}));
        if ((m & req_mask) == req_mask) alts.push_back(close);
        b_.define(after[m], Expr::alt(std::move(alts)));
      }
      std::vector<Expr> first;
      if (req_mask == 0) first.push_back(Expr::lit("}"));
      for (size_t i = 0; i < n; ++i) first.push_back(Expr::seq({Expr::ref(kv[i]), Expr::ref(after[1u << i])}));
      if (other >= 0) first.push_back(Expr::seq({Expr::ref(other), Expr::ref(after[0])}));
      b_.define(obj, Expr::seq({Expr::lit("{"), W(), Expr::alt(std::move(first))}));
      return obj;
    }
    // Schema order: at(i, first) is "properties from i on", first = nothing written yet.
    // Properties not declared may follow the declared ones.
    const int32_t more = b_.add_rule(path + "/object-more");
    b_.define(more, other >= 0 ? Expr::alt({Expr::seq({sep(), Expr::ref(other), Expr::ref(more)}), close}) : close);
    std::vector<std::array<int32_t, 2>> at(n + 1);
    for (auto& r : at) r = {b_.add_rule(path + "/object-at"), b_.add_rule(path + "/object-at")};
    for (int f = 0; f < 2; ++f)
      b_.define(at[n][static_cast<size_t>(f)], f ? (other >= 0 ? Expr::alt({Expr::lit("}"), Expr::seq({Expr::ref(other), Expr::ref(more)})}) : Expr::lit("}")) : Expr::ref(more));
    for (size_t i = n; i-- > 0;)
      for (int f = 0; f < 2; ++f) {
        std::vector<Expr> alts{Expr::seq({f ? Expr::empty() : sep(), Expr::ref(kv[i]), Expr::ref(at[i + 1][0])})};
        if (!is_req(i)) alts.push_back(Expr::ref(at[i + 1][static_cast<size_t>(f)]));
        b_.define(at[i][static_cast<size_t>(f)], Expr::alt(std::move(alts)));
      }
    b_.define(obj, Expr::seq({Expr::lit("{"), W(), Expr::ref(at[0][1])}));
    return obj;
  }

  int32_t array(const json& s, const std::string& path) {
    std::vector<int32_t> tuple;
    int32_t rest = -1;
    auto item_rule = [&](const json& x, const std::string& p) { return x == false ? -1 : compile(x, p, 0); };
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) bad(path + "/prefixItems", "prefixItems must be a list of schemas");
      if (s.contains("items") && s["items"].is_array()) unsupported("items", path, "as a list beside prefixItems is not supported");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) tuple.push_back(compile(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", path, i), 0));
      rest = item_rule(s.contains("items") ? s["items"] : json(true), path + "/items");
    } else if (s.contains("items") && s["items"].is_array()) {
      for (size_t i = 0; i < s["items"].size(); ++i) tuple.push_back(compile(s["items"][i], fmt::format("{}/items/{}", path, i), 0));
      rest = item_rule(s.contains("additionalItems") ? s["additionalItems"] : json(true), path + "/additionalItems");
    } else {
      rest = item_rule(s.contains("items") ? s["items"] : json(true), path + "/items");
    }
    const int64_t mn = count(s, "minItems", path).value_or(0);
    const int64_t mx = count(s, "maxItems", path).value_or(-1);
    if (mn > 100000 || (mx > 100000)) unsupported(mn > 100000 ? "minItems" : "maxItems", path, "above 100000 is not supported");
    const auto k = static_cast<int64_t>(tuple.size());
    // tail(i): what may follow after i items.
    std::function<Expr(int64_t)> tail = [&](int64_t i) -> Expr {
      if (mx >= 0 && i >= mx) return i >= mn ? Expr::empty() : Expr::nothing();
      const Expr sp = i == 0 ? Expr::empty() : sep();
      if (i < k) {
        Expr cont = Expr::seq({sp, Expr::ref(tuple[static_cast<size_t>(i)]), tail(i + 1)});
        return i >= mn ? Expr::alt({Expr::empty(), std::move(cont)}) : cont;
      }
      if (rest < 0) return i >= mn ? Expr::empty() : Expr::nothing();
      const int64_t lo = std::max<int64_t>(0, mn - i), hi = mx < 0 ? -1 : mx - i;
      if (i > 0) return Expr::repeat(Expr::seq({sep(), Expr::ref(rest)}), lo, hi);
      Expr first = Expr::seq({Expr::ref(rest), Expr::repeat(Expr::seq({sep(), Expr::ref(rest)}), std::max<int64_t>(0, lo - 1), hi < 0 ? -1 : hi - 1)});
      return lo == 0 ? Expr::alt({Expr::empty(), std::move(first)}) : first;
    };
    return b_.rule_of(path + "/array", Expr::seq({Expr::lit("["), W(), tail(0), W(), Expr::lit("]")}));
  }

  Expr string(const json& s, const std::string& path) {
    const auto mn = count(s, "minLength", path), mx = count(s, "maxLength", path);
    const bool pattern = s.contains("pattern"), format = s.contains("format");
    const Expr q = Expr::lit("\"");
    if (pattern) {
      if (mn || mx || format) unsupported("pattern", path, "together with minLength, maxLength or format is not supported");
      if (!s["pattern"].is_string()) bad(path + "/pattern", "pattern must be a string");
      try {
        return Expr::seq({q, regex_search(s["pattern"].get<std::string>(), b_, json_string_chars), q});
      } catch (const UnsupportedKeyword&) {
        throw;
      } catch (const GrammarError& e) {
        unsupported("pattern", path, e.what());
      }
    }
    if (format) {
      if (mn || mx) unsupported("format", path, "together with minLength or maxLength is not supported");
      const std::string f = s["format"].get<std::string>();
      Expr body = f == "date" ? format_date() : f == "time" ? format_time() : f == "uuid" ? format_uuid() : f == "email" ? format_email()
                : f == "ipv4" ? format_ipv4() : Expr::seq({format_date(), Expr::lit("T"), format_time()});
      return Expr::seq({q, std::move(body), q});
    }
    if (!mn && !mx) return Expr::ref(string_any());
    const int64_t lo = mn.value_or(0), hi = mx ? *mx : -1;
    if (hi >= 0 && hi - lo > 100000) unsupported("maxLength", path, "more than 100000 above minLength is not supported");
    if (lo > 100000) unsupported("minLength", path, "above 100000 is not supported");
    return Expr::seq({q, Expr::repeat(Expr::ref(jchar()), lo, hi), q});
  }

  // The tighter of `inclusive` and `exclusive` on one side (lower when `lower`).
  std::optional<Bound> bound(const json& s, const char* inclusive, const char* exclusive, bool lower, const std::string& path) {
    std::optional<Bound> b;
    auto consider = [&](const char* k, bool excl) {
      if (!s.contains(k)) return;
      const double v = s[k].get<double>();
      if (!(std::fabs(v) < 1e15)) unsupported(k, path, "with a magnitude of 1e15 or more is not supported");
      if (!b || (lower ? (v > b->v || (v == b->v && excl)) : (v < b->v || (v == b->v && excl)))) b = Bound{v, excl};
    };
    consider(inclusive, false);
    consider(exclusive, true);
    return b;
  }

  Expr number(const json& s, const std::string& path, bool integer_only) {
    const auto lo = bound(s, "minimum", "exclusiveMinimum", true, path);
    const auto hi = bound(s, "maximum", "exclusiveMaximum", false, path);
    if (!lo && !hi) return Expr::ref(integer_only ? integer_any() : number_any());
    // Integer values: exact.
    std::optional<int64_t> ilo, ihi;
    if (lo) ilo = static_cast<int64_t>(lo->exclusive ? std::floor(lo->v) + 1 : std::ceil(lo->v));
    if (hi) ihi = static_cast<int64_t>(hi->exclusive ? std::ceil(hi->v) - 1 : std::floor(hi->v));
    std::vector<Expr> alts{int_range(ilo, ihi)};
    if (!integer_only) {
      // An integer value may be written with a zero fraction (3.0 is 3).
      alts[0] = Expr::seq({std::move(alts[0]), Expr::opt(Expr::seq({Expr::lit("."), Expr::plus(Expr::lit("0"))}))});
      const Expr frac = Expr::seq({Expr::lit("."), Expr::plus(cls("0-9"))});
      // k.f (k >= 0) lies in [k, k+1): needs k >= lo (k > lo when exclusive) and k + 1 <= hi.
      std::optional<int64_t> kl = int64_t{0}, kh;
      if (lo) kl = std::max<int64_t>(0, static_cast<int64_t>(lo->exclusive ? std::floor(lo->v) + 1 : std::ceil(lo->v)));
      if (hi) kh = static_cast<int64_t>(std::floor(hi->v)) - 1;
      if (!kh || *kh >= *kl) alts.push_back(Expr::seq({int_range(kl, kh), frac}));
      // -k.f lies in (-(k+1), -k]: needs -(k+1) >= lo and -k <= hi (-k < hi when exclusive).
      std::optional<int64_t> nl = int64_t{0}, nh;
      if (hi) nl = std::max<int64_t>(0, static_cast<int64_t>(hi->exclusive ? std::floor(-hi->v) + 1 : std::ceil(-hi->v)));
      if (lo) nh = static_cast<int64_t>(std::floor(-lo->v)) - 1;
      if (!nh || *nh >= *nl) alts.push_back(Expr::seq({Expr::lit("-"), int_range(nl, nh), frac}));
    }
    return Expr::alt(std::move(alts));
  }

  const json& root_;
  GrammarBuilder own_;
  GrammarBuilder& b_;
  std::map<std::string, int32_t> refs_;
  int32_t ws_ = -1, jchar_ = -1, string_ = -1, integer_ = -1, number_ = -1, value_ = -1, object_ = -1, nothing_ = -1;
};

}  // namespace

namespace {
json parse_source(std::string_view text, const char* what) {
  try {
    return json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw GrammarError(fmt::format("{}: not valid JSON: {}", what, e.what()));
  }
}
}  // namespace

std::shared_ptr<const Grammar> compile_json_schema(std::string_view schema_json) {
  const json root = parse_source(schema_json, "JSON Schema");
  SchemaCompiler c(root);
  return c.build(root, "");
}

std::shared_ptr<const Grammar> compile_prefixed_json_schemas(std::string_view alternatives_json) {
  const json alts = parse_source(alternatives_json, "prefixed JSON schemas");
  if (!alts.is_array() || alts.empty())
    throw GrammarError("prefixed JSON schemas: expected a non-empty array of {\"prefix\": text, \"schema\": schema}");
  GrammarBuilder b;
  std::vector<Expr> options;
  std::vector<json> schemas;  // kept alive while their compilers read them
  schemas.reserve(alts.size());
  for (size_t i = 0; i < alts.size(); ++i) {
    const json& a = alts[i];
    if (!a.is_object() || !a.contains("prefix") || !a["prefix"].is_string() || !a.contains("schema") || a.size() != 2)
      throw GrammarError(fmt::format("prefixed JSON schemas: item {} is not {{\"prefix\": text, \"schema\": schema}}", i));
    schemas.push_back(a["schema"]);
    SchemaCompiler c(schemas.back(), b);
    options.push_back(Expr::seq({Expr::lit(a["prefix"].get<std::string>()), Expr::ref(c.root_rule())}));
  }
  return b.build(b.rule_of("root", Expr::alt(std::move(options))));
}

std::shared_ptr<const Grammar> compile_json_object() {
  static const json empty = json::object();
  SchemaCompiler c(empty);
  return c.build_object();
}

}  // namespace npullm::genai::grammar
