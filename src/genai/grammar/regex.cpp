#include "genai/grammar/regex.h"

#include <fmt/format.h>

#include "genai/utf8.h"

namespace npullm::genai::grammar {

Expr json_string_chars(const CodepointSet& s) {
  CodepointSet raw = s.intersect(CodepointSet::of(0x20, 0x10FFFF));
  raw = raw.minus(CodepointSet{{{'"', '"'}, {'\\', '\\'}}});
  std::vector<Expr> alts;
  if (!raw.empty()) alts.push_back(Expr::codepoints(raw));
  if (s.contains('"')) alts.push_back(Expr::lit("\\\""));
  if (s.contains('\\')) alts.push_back(Expr::lit("\\\\"));
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!s.contains(c)) continue;
    switch (c) {
      case '\b': alts.push_back(Expr::lit("\\b")); break;
      case '\f': alts.push_back(Expr::lit("\\f")); break;
      case '\n': alts.push_back(Expr::lit("\\n")); break;
      case '\r': alts.push_back(Expr::lit("\\r")); break;
      case '\t': alts.push_back(Expr::lit("\\t")); break;
      default: alts.push_back(Expr::lit(fmt::format("\\u{:04x}", c)));
    }
  }
  return Expr::alt(std::move(alts));
}

namespace {

CodepointSet digit_set() { return CodepointSet::of('0', '9'); }
CodepointSet word_set() { return CodepointSet{{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}}; }
CodepointSet space_set() {
  // ECMAScript's WhiteSpace and LineTerminator.
  CodepointSet s{{{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                  {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}}};
  return s;
}

class RegexParser {
 public:
  RegexParser(std::string_view s, const CharEmitter& emit) : s_(s), emit_(emit) {}

  struct Branch {
    Expr e;
    bool start = false, end = false;
  };

  std::vector<Branch> top() {
    std::vector<Branch> out;
    for (;;) {
      Branch br;
      if (peek('^')) { ++i_; br.start = true; }
      br.e = sequence(&br.end);
      out.push_back(std::move(br));
      if (i_ >= s_.size()) break;
      if (s_[i_] == '|') { ++i_; continue; }
      error("unbalanced ')'");
    }
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw GrammarError(fmt::format("regular expression /{}/ at offset {}: {}", s_, i_, what));
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }

  Expr alternation() {
    std::vector<Expr> alts;
    for (;;) {
      alts.push_back(sequence(nullptr));
      if (peek('|')) { ++i_; continue; }
      break;
    }
    return Expr::alt(std::move(alts));
  }

  // end_anchor: where a trailing $ may appear (top-level branches); null inside groups.
  Expr sequence(bool* end_anchor) {
    std::vector<Expr> items;
    while (i_ < s_.size() && s_[i_] != '|' && s_[i_] != ')') {
      if (s_[i_] == '$') {
        ++i_;
        if (end_anchor && (i_ == s_.size() || s_[i_] == '|')) { *end_anchor = true; break; }
        --i_;
        error("'$' is supported only at the end of the expression (or of a top-level branch)");
      }
      if (s_[i_] == '^') error("'^' is supported only at the start of the expression (or of a top-level branch)");
      Expr a = atom();
      items.push_back(quantified(std::move(a)));
    }
    return Expr::seq(std::move(items));
  }

  int64_t number() {
    if (i_ >= s_.size() || !isdigit(static_cast<unsigned char>(s_[i_]))) error("expected a number in {m,n}");
    int64_t v = 0;
    while (i_ < s_.size() && isdigit(static_cast<unsigned char>(s_[i_]))) {
      v = v * 10 + (s_[i_++] - '0');
      if (v > 100000) error("repetition count too large (at most 100000)");
    }
    return v;
  }

  Expr quantified(Expr a) {
    for (;;) {
      if (i_ >= s_.size()) return a;
      int64_t mn, mx;
      const char c = s_[i_];
      if (c == '*') { mn = 0; mx = -1; ++i_; }
      else if (c == '+') { mn = 1; mx = -1; ++i_; }
      else if (c == '?') { mn = 0; mx = 1; ++i_; }
      else if (c == '{') {
        // "{" that does not start a well-formed quantifier is a literal in ECMAScript (Annex B).
        const size_t save = i_;
        ++i_;
        if (i_ >= s_.size() || !isdigit(static_cast<unsigned char>(s_[i_]))) { i_ = save; return a; }
        mn = number();
        mx = mn;
        if (peek(',')) {
          ++i_;
          mx = peek('}') ? -1 : number();
        }
        if (!peek('}')) error("expected '}' to close the repetition");
        ++i_;
        if (mx >= 0 && mx < mn) error(fmt::format("repetition {{{},{}}} has its maximum below its minimum", mn, mx));
      } else {
        return a;
      }
      if (peek('?')) ++i_;  // lazy: the same language
      else if (peek('+')) error("possessive quantifiers are not supported");
      a = Expr::repeat(std::move(a), mn, mx);
    }
  }

  uint32_t next_cp() {
    size_t p = i_;
    const int32_t cp = detail::utf8_next(s_, p);
    if (cp < 0) error("not valid UTF-8");
    i_ = p;
    return static_cast<uint32_t>(cp);
  }

  uint32_t hex(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (i_ >= s_.size() || !isxdigit(static_cast<unsigned char>(s_[i_]))) error(fmt::format("expected {} hex digits", n));
      const char c = s_[i_++];
      v = v * 16 + static_cast<uint32_t>(isdigit(static_cast<unsigned char>(c)) ? c - '0' : (tolower(c) - 'a' + 10));
    }
    return v;
  }

  // After a backslash: a class escape (\d ...) into `set`, else a single code point.
  // Returns true when it was a class.
  bool escape(CodepointSet& set, uint32_t& cp, bool in_class) {
    if (i_ >= s_.size()) error("'\\' at the end of the expression");
    const char c = s_[i_++];
    switch (c) {
      case 'd': set = digit_set(); return true;
      case 'D': set = digit_set().complement(); return true;
      case 'w': set = word_set(); return true;
      case 'W': set = word_set().complement(); return true;
      case 's': set = space_set(); return true;
      case 'S': set = space_set().complement(); return true;
      case 'n': cp = '\n'; return false;
      case 't': cp = '\t'; return false;
      case 'r': cp = '\r'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = hex(2); return false;
      case 'u':
        if (peek('{')) {
          ++i_;
          cp = 0;
          size_t n = 0;
          while (i_ < s_.size() && s_[i_] != '}') { cp = cp * 16 + hex(1); if (++n > 6) error("\\u{...} too long"); }
          if (!peek('}') || n == 0) error("expected \\u{hex}");
          ++i_;
        } else {
          cp = hex(4);
        }
        if (cp > 0x10FFFF) error("code point above U+10FFFF");
        return false;
      case 'b':
        if (in_class) { cp = '\b'; return false; }
        --i_; error("word boundaries (\\b) are not supported");
      case 'B': --i_; error("word boundaries (\\B) are not supported");
      case 'p': case 'P': --i_; error("Unicode property classes (\\p{...}) are not supported");
      case 'c': --i_; error("control escapes (\\cX) are not supported");
      case 'k': --i_; error("named backreferences (\\k<...>) are not supported");
      default:
        if (c >= '1' && c <= '9') { --i_; error("backreferences are not supported"); }
        if (isalnum(static_cast<unsigned char>(c))) { --i_; error(fmt::format("unknown escape '\\{}'", c)); }
        --i_;
        cp = next_cp();  // escaped punctuation (or any other character) stands for itself
        return false;
    }
  }

  CodepointSet char_class() {
    ++i_;  // '['
    bool negate = false;
    if (peek('^')) { negate = true; ++i_; }
    CodepointSet set;
    bool first = true;
    while (true) {
      if (i_ >= s_.size()) error("unterminated character class");
      if (s_[i_] == ']' && !first) { ++i_; break; }
      if (s_[i_] == ']' && first) {  // ECMAScript: [] matches nothing, [^] everything
        ++i_;
        return negate ? CodepointSet::all() : CodepointSet{};
      }
      first = false;
      uint32_t lo;
      CodepointSet cls;
      bool is_class = false;
      if (s_[i_] == '\\') { ++i_; is_class = escape(cls, lo, true); }
      else if (s_[i_] == '[' && i_ + 1 < s_.size() && (s_[i_ + 1] == ':' || s_[i_ + 1] == '=' || s_[i_ + 1] == '.'))
        error("POSIX classes ([:alpha:]) are not supported");
      else lo = next_cp();
      if (is_class) { set.add(cls); continue; }
      if (peek('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        if (s_[i_] == '\\') {
          ++i_;
          if (escape(cls, hi, true)) error("a class escape cannot end a range");
        } else {
          hi = next_cp();
        }
        if (hi < lo) error("range out of order in character class");
        set.add(lo, hi);
      } else {
        set.add(lo, lo);
      }
    }
    return negate ? set.complement() : set;
  }

  Expr atom() {
    const char c = s_[i_];
    if (c == '(') {
      ++i_;
      if (peek('?')) {
        ++i_;
        if (peek(':')) ++i_;
        else if (peek('<') && i_ + 1 < s_.size() && s_[i_ + 1] != '=' && s_[i_ + 1] != '!') {
          while (i_ < s_.size() && s_[i_] != '>') ++i_;  // a named group: the name does not matter here
          if (!peek('>')) error("unterminated group name");
          ++i_;
        } else {
          --i_;
          error("lookaround and inline flags ((?=, (?!, (?<=, (?i)...) are not supported");
        }
      }
      Expr e = alternation();
      if (!peek(')')) error("missing ')'");
      ++i_;
      return e;
    }
    if (c == '[') return emit_(char_class());
    if (c == '.') {
      ++i_;
      return emit_(CodepointSet{{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}}.complement());
    }
    if (c == '*' || c == '+' || c == '?') error(fmt::format("nothing to repeat before '{}'", c));
    if (c == '\\') {
      ++i_;
      CodepointSet set;
      uint32_t cp;
      if (escape(set, cp, false)) return emit_(set);
      return emit_(CodepointSet::of(cp, cp));
    }
    const uint32_t cp = next_cp();
    return emit_(CodepointSet::of(cp, cp));
  }

  std::string_view s_;
  size_t i_ = 0;
  const CharEmitter& emit_;
};

}  // namespace

Expr regex_full(std::string_view re, GrammarBuilder&, const CharEmitter& emit) {
  RegexParser p(re, emit);
  std::vector<Expr> alts;
  for (auto& br : p.top()) alts.push_back(std::move(br.e));
  return Expr::alt(std::move(alts));
}

Expr regex_search(std::string_view re, GrammarBuilder& b, const CharEmitter& emit) {
  RegexParser p(re, emit);
  auto branches = p.top();
  const int32_t any = b.rule_of("pattern-any", Expr::star(emit(CodepointSet::all())));
  std::vector<Expr> alts;
  for (auto& br : branches) {
    std::vector<Expr> s;
    if (!br.start) s.push_back(Expr::ref(any));
    s.push_back(std::move(br.e));
    if (!br.end) s.push_back(Expr::ref(any));
    alts.push_back(Expr::seq(std::move(s)));
  }
  return Expr::alt(std::move(alts));
}

std::shared_ptr<const Grammar> compile_regex(std::string_view re) {
  GrammarBuilder b;
  const int32_t root = b.add_rule("root");
  b.define(root, regex_full(re, b, [](const CodepointSet& s) { return Expr::codepoints(s); }));
  return b.build(root);
}

}  // namespace npullm::genai::grammar
