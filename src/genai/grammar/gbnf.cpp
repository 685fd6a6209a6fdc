#include "genai/grammar/gbnf.h"

#include <map>
#include <fmt/format.h>

#include "genai/utf8.h"

namespace npullm::genai::grammar {

namespace {

bool is_name_char(char c) { return isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view s) : s_(s) {}

  std::shared_ptr<const Grammar> parse() {
    skip_space(true);
    while (i_ < s_.size()) {
      const size_t name_at = i_;
      const std::string name = parse_name();
      skip_space(false);
      if (s_.substr(i_, 3) != "::=") error("expected '::=' after the rule name");
      i_ += 3;
      skip_space(true);
      const int32_t r = rule(name);
      if (defined_.count(name)) { i_ = name_at; error(fmt::format("rule '{}' is defined twice", name)); }
      defined_[name] = name_at;
      b_.define(r, alternatives(false));
      skip_space(false);
      if (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') error("expected the end of the line after the rule");
      skip_space(true);
    }
    for (const auto& [name, at] : used_)
      if (!defined_.count(name)) { i_ = at; error(fmt::format("rule '{}' is used but never defined", name)); }
    if (!defined_.count("root")) throw GrammarError("grammar: no 'root' rule (the output starts at root)");
    return b_.build(ids_.at("root"));
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') { ++line; col = 1; }
      else ++col;
    }
    throw GrammarError(fmt::format("grammar line {} column {}: {}", line, col, what));
  }

  int32_t rule(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t r = b_.add_rule(name);
    ids_[name] = r;
    return r;
  }

  // Spaces and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) ++i_;
      else if (c == '#') while (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') ++i_;
      else break;
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
    if (i_ == start) error("expected a rule name");
    return std::string(s_.substr(start, i_ - start));
  }

  Expr alternatives(bool nested) {
    std::vector<Expr> alts;
    alts.push_back(sequence(nested));
    while (i_ < s_.size() && s_[i_] == '|') {
      ++i_;
      skip_space(true);
      alts.push_back(sequence(nested));
    }
    return Expr::alt(std::move(alts));
  }

  uint32_t hex(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (i_ >= s_.size() || !isxdigit(static_cast<unsigned char>(s_[i_]))) error(fmt::format("expected {} hex digits", n));
      const char c = s_[i_++];
      v = v * 16 + static_cast<uint32_t>(isdigit(static_cast<unsigned char>(c)) ? c - '0' : tolower(c) - 'a' + 10);
    }
    return v;
  }

  uint32_t char_at() {
    if (i_ >= s_.size()) error("unexpected end of the grammar");
    if (s_[i_] == '\\') {
      ++i_;
      if (i_ >= s_.size()) error("'\\' at the end of the grammar");
      const char c = s_[i_++];
      switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': return static_cast<uint32_t>(c);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': {
          const uint32_t v = hex(8);
          if (v > 0x10FFFF) error("code point above U+10FFFF");
          return v;
        }
        default: --i_; error(fmt::format("unknown escape '\\{}'", c));
      }
    }
    size_t p = i_;
    const int32_t cp = detail::utf8_next(s_, p);
    if (cp < 0) error("not valid UTF-8");
    i_ = p;
    return static_cast<uint32_t>(cp);
  }

  int64_t number() {
    if (i_ >= s_.size() || !isdigit(static_cast<unsigned char>(s_[i_]))) error("expected a number");
    int64_t v = 0;
    while (i_ < s_.size() && isdigit(static_cast<unsigned char>(s_[i_]))) {
      v = v * 10 + (s_[i_++] - '0');
      if (v > 100000) error("repetition count too large (at most 100000)");
    }
    return v;
  }

  Expr sequence(bool nested) {
    std::vector<Expr> items;
    for (;;) {
      skip_space(nested);
      if (i_ >= s_.size()) break;
      const char c = s_[i_];
      Expr item;
      if (c == '"') {
        ++i_;
        std::string text;
        while (i_ < s_.size() && s_[i_] != '"') detail::utf8_append(text, char_at());
        if (i_ >= s_.size()) error("unterminated string literal");
        ++i_;
        item = Expr::lit(std::move(text));
      } else if (c == '[') {
        ++i_;
        bool negate = false;
        if (i_ < s_.size() && s_[i_] == '^') { negate = true; ++i_; }
        CodepointSet set;
        while (i_ < s_.size() && s_[i_] != ']') {
          const uint32_t lo = char_at();
          uint32_t hi = lo;
          if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
            ++i_;
            hi = char_at();
            if (hi < lo) error("range out of order in character class");
          }
          set.add(lo, hi);
        }
        if (i_ >= s_.size()) error("unterminated character class");
        ++i_;
        item = Expr::codepoints(negate ? set.complement() : set);
      } else if (c == '.') {
        ++i_;
        item = Expr::codepoints(CodepointSet::all());
      } else if (c == '(') {
        ++i_;
        skip_space(true);
        item = alternatives(true);
        skip_space(true);
        if (i_ >= s_.size() || s_[i_] != ')') error("missing ')'");
        ++i_;
      } else if (c == '<') {
        error("token references (<[id]>, <|token|>) are not supported");
      } else if (is_name_char(c)) {
        const size_t at = i_;
        const std::string name = parse_name();
        // `name ::=` starts the next rule: this sequence ends before it.
        size_t j = i_;
        while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
        if (s_.substr(j, 3) == "::=") { i_ = at; break; }
        used_.emplace(name, at);
        item = Expr::ref(rule(name));
      } else {
        break;
      }
      // Postfix operators.
      for (;;) {
        if (i_ >= s_.size()) break;
        const char q = s_[i_];
        if (q == '*') { ++i_; item = Expr::star(std::move(item)); }
        else if (q == '+') { ++i_; item = Expr::plus(std::move(item)); }
        else if (q == '?') { ++i_; item = Expr::opt(std::move(item)); }
        else if (q == '{') {
          ++i_;
          skip_space(false);
          const int64_t mn = number();
          int64_t mx = mn;
          skip_space(false);
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            skip_space(false);
            mx = i_ < s_.size() && s_[i_] == '}' ? -1 : number();
            skip_space(false);
          }
          if (i_ >= s_.size() || s_[i_] != '}') error("expected '}' to close the repetition");
          ++i_;
          if (mx >= 0 && mx < mn) error("repetition maximum below its minimum");
          item = Expr::repeat(std::move(item), mn, mx);
        } else {
          break;
        }
      }
      items.push_back(std::move(item));
    }
    return Expr::seq(std::move(items));
  }

  std::string_view s_;
  size_t i_ = 0;
  GrammarBuilder b_;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, size_t> defined_;
  std::map<std::string, size_t> used_;
};

}  // namespace

std::shared_ptr<const Grammar> compile_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace npullm::genai::grammar
