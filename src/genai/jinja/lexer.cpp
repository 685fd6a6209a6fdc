// Lexer: see lexer.h for the whitespace rules it reproduces.
#include "genai/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "genai/jinja/text.h"
#include "genai/jinja/value.h"

namespace npullm::genai::jinja {

namespace {

// Decodes the code point at s[i] (1..4 bytes); `len` receives its length.
char32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    len = 1;
    return b;
  }
  size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
  n = std::min(n, s.size() - i);
  const std::u32string cp = utf8_decode(s.substr(i, n));
  len = n;
  if (cp.size() != 1) {  // malformed: treat the lead byte alone
    len = 1;
    return 0xDC00 + b;
  }
  return cp[0];
}

// Position of the first character of the whitespace run ending `s` (Python's str.rstrip()).
size_t rstrip_pos(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    if (!py_isspace(decode_at(s, start, len)) || start + len != end) break;
    end = start;
  }
  return end;
}

// Position after the whitespace run starting at `pos` (the regex `\s*`).
size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t len = 0;
    if (!py_isspace(decode_at(s, pos, len))) break;
    pos += len;
  }
  return pos;
}

bool starts_with(std::string_view s, size_t pos, std::string_view what) { return s.substr(pos, what.size()) == what; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines become "\n" (Jinja's newline_sequence) and one trailing newline is dropped
    // (keep_trailing_newline=False), before anything else looks at the text.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    const std::string_view s = src_;
    while (pos_ < s.size()) {
      const size_t tag = find_tag_start(pos_);
      if (tag == std::string_view::npos) {
        emit_data(pos_, s.substr(pos_));
        pos_ = s.size();
        break;
      }
      const char kind = s[tag + 1];
      const char sign = (tag + 2 < s.size() && (s[tag + 2] == '-' || s[tag + 2] == '+')) ? s[tag + 2] : 0;
      size_t raw_body = 0;
      const bool raw = kind == '%' && match_raw_begin(tag, raw_body);
      emit_data(pos_, strip_before(s.substr(pos_, tag - pos_), sign, kind != '{'));
      const int tag_line = line_at(tag);
      if (raw) {
        lex_raw(raw_body);
      } else if (kind == '#') {
        lex_comment(tag + 2 + (sign ? 1 : 0), tag_line);
      } else {
        lex_tag(kind, tag + 2 + (sign ? 1 : 0), tag_line);
      }
    }
    out_.push_back(Token{TokenType::Eof, "", line_at(s.size())});
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg, size_t at) const { throw TemplateError(msg, line_at(at)); }

  // Line number of byte offset `at`, counted incrementally (offsets only move forward).
  int line_at(size_t at) const {
    while (line_pos_ < at && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // The text before a tag loses whitespace by the tag's sign: `-` strips it all; otherwise, for
  // block and comment tags, lstrip_blocks removes the spaces/tabs that begin the tag's line.
  std::string_view strip_before(std::string_view text, char sign, bool lstrip_applies) const {
    if (sign == '-') return text.substr(0, rstrip_pos(text));
    if (sign == '+' || !lstrip_applies) return text;
    const size_t nl = text.rfind('\n');
    const size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
    // A tag that follows another tag on the same line is not at a line start.
    if (line_start == 0 && !line_starting_) return text;
    for (size_t i = line_start; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return text;
    return text.substr(0, line_start);
  }

  void emit_data(size_t at, std::string_view text) {
    if (!text.empty()) out_.push_back(Token{TokenType::Data, std::string(text), line_at(at)});
  }

  // `{%(-|+|)\s*raw\s*(-%}\s*|%})` at `tag`; on success `body` is where the raw text starts.
  bool match_raw_begin(size_t tag, size_t& body) const {
    const std::string_view s = src_;
    size_t p = tag + 2;
    if (p < s.size() && (s[p] == '-' || s[p] == '+')) ++p;
    p = skip_space(s, p);
    if (!starts_with(s, p, "raw")) return false;
    p = skip_space(s, p + 3);
    if (starts_with(s, p, "-%}")) {
      body = skip_space(s, p + 3);
      return true;
    }
    if (starts_with(s, p, "%}")) {
      body = p + 2;
      return true;
    }
    return false;
  }

  void lex_raw(size_t body) {
    const std::string_view s = src_;
    for (size_t i = s.find("{%", body); i != std::string_view::npos; i = s.find("{%", i + 1)) {
      size_t p = i + 2;
      const char sign = (p < s.size() && (s[p] == '-' || s[p] == '+')) ? s[p] : 0;
      if (sign) ++p;
      p = skip_space(s, p);
      if (!starts_with(s, p, "endraw")) continue;
      p = skip_space(s, p + 6);
      size_t end;
      if (starts_with(s, p, "+%}")) end = p + 3;
      else if (starts_with(s, p, "-%}")) end = skip_space(s, p + 3);
      else if (starts_with(s, p, "%}")) end = (p + 2 < s.size() && s[p + 2] == '\n') ? p + 3 : p + 2;
      else continue;
      line_starting_ = false;  // the raw-begin tag matched last
      emit_data(body, strip_before(s.substr(body, i - body), sign, true));
      pos_ = end;
      line_starting_ = s[end - 1] == '\n';
      return;
    }
    fail("Missing end of raw directive", body);
  }

  void lex_comment(size_t p, int tag_line) {
    const std::string_view s = src_;
    for (; p < s.size(); ++p) {
      size_t end = 0;
      if (starts_with(s, p, "+#}")) end = p + 3;
      else if (starts_with(s, p, "-#}")) end = skip_space(s, p + 3);
      else if (starts_with(s, p, "#}")) end = (p + 2 < s.size() && s[p + 2] == '\n') ? p + 3 : p + 2;
      if (end) {
        pos_ = end;
        line_starting_ = s[end - 1] == '\n';
        return;
      }
    }
    throw TemplateError("Missing end of comment tag", tag_line);
  }

  // Expression tokens up to the closing `}}` / `%}`. Closing delimiters only count while
  // brackets are balanced, so `{{ {'a': {'b': 1}} }}` works as in Jinja.
  void lex_tag(char kind, size_t p, int tag_line) {
    const std::string_view s = src_;
    const bool block = kind == '%';
    out_.push_back(Token{block ? TokenType::BlockBegin : TokenType::VarBegin, block ? "{%" : "{{", tag_line});
    std::vector<char> balance;
    while (true) {
      if (p >= s.size())
        fail(fmt::format("unexpected end of template, expected '{}'.", block ? "end of statement block" : "end of print statement"), p);
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (starts_with(s, p, "+%}")) end = p + 3;
          else if (starts_with(s, p, "-%}")) end = skip_space(s, p + 3);
          else if (starts_with(s, p, "%}")) end = (p + 2 < s.size() && s[p + 2] == '\n') ? p + 3 : p + 2;  // trim_blocks
        } else {
          if (starts_with(s, p, "-}}")) end = skip_space(s, p + 3);
          else if (starts_with(s, p, "}}")) end = p + 2;
        }
        if (end) {
          out_.push_back(Token{block ? TokenType::BlockEnd : TokenType::VarEnd, block ? "%}" : "}}", line_at(p)});
          pos_ = end;
          line_starting_ = s[end - 1] == '\n';
          return;
        }
      }
      const char c = s[p];
      size_t len = 0;
      if (py_isspace(decode_at(s, p, len))) {
        p += len;
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < s.size() && is_name_char(s[e])) ++e;
        out_.push_back(Token{TokenType::Name, std::string(s.substr(p, e - p)), line_at(p)});
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, balance);
      }
    }
  }

  size_t lex_number(size_t p) {
    const std::string_view s = src_;
    const int line = line_at(p);
    auto digits = [&](size_t q, auto pred) {  // digits with single underscores between them
      while (q < s.size() && (pred(s[q]) || (s[q] == '_' && q + 1 < s.size() && pred(s[q + 1])))) ++q;
      return q;
    };
    auto strip_underscores = [](std::string_view t) {
      std::string r;
      for (char ch : t)
        if (ch != '_') r.push_back(ch);
      return r;
    };
    // 0x / 0o / 0b integers.
    if (s[p] == '0' && p + 2 < s.size()) {
      const char k = static_cast<char>(s[p + 1] | 0x20);
      int base = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
      if (base) {
        auto pred = [base](char ch) {
          const char l = static_cast<char>(ch | 0x20);
          if (base == 16) return is_digit(ch) || (l >= 'a' && l <= 'f');
          return ch >= '0' && ch < static_cast<char>('0' + base);
        };
        size_t q = p + 2;
        if (s[q] == '_') ++q;
        const size_t e = digits(q, pred);
        if (e > q) {
          const std::string t = strip_underscores(s.substr(p + 2, e - p - 2));
          out_.push_back(Token{TokenType::Integer, std::string(s.substr(p, e - p)), line, std::strtoll(t.c_str(), nullptr, base)});
          return e;
        }
      }
    }
    size_t e = digits(p, is_digit);
    bool is_float = false;
    // A float may not follow a '.', so that `foo.0.1` is foo[0][1] as in Jinja.
    const bool after_dot = p > 0 && s[p - 1] == '.';
    if (!after_dot && e + 1 < s.size() && s[e] == '.' && is_digit(s[e + 1])) {
      e = digits(e + 1, is_digit);
      is_float = true;
    }
    if (!after_dot && e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
      size_t q = e + 1;
      if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
      if (q < s.size() && is_digit(s[q])) {
        e = digits(q, is_digit);
        is_float = true;
      }
    }
    const std::string text = strip_underscores(s.substr(p, e - p));
    Token t{is_float ? TokenType::Float : TokenType::Integer, std::string(s.substr(p, e - p)), line};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(fmt::format("integer literal {} is too large", text), p);
    }
    out_.push_back(std::move(t));
    return e;
  }

  // A quoted string with Python escapes (\n, \t, \xhh, \uhhhh, \Uhhhhhhhh, octal, line continuation);
  // unknown escapes keep their backslash, as Python's unicode-escape codec does.
  size_t lex_string(size_t p) {
    const std::string_view s = src_;
    const char quote = s[p];
    const int line = line_at(p);
    std::string value;
    size_t q = p + 1;
    // An unterminated string is, to Jinja, a quote that starts no token.
    auto unterminated = [&]() { throw TemplateError(fmt::format("unexpected char {} at {}", py_str_repr(std::string(1, quote)), p), line); };
    auto hex = [&](size_t at, size_t n) -> char32_t {
      if (at + n > s.size()) fail("truncated escape in string literal", at);
      char32_t v = 0;
      for (size_t k = 0; k < n; ++k) {
        const char ch = s[at + k];
        const char l = static_cast<char>(ch | 0x20);
        if (!is_digit(ch) && !(l >= 'a' && l <= 'f')) fail("truncated escape in string literal", at);
        v = v * 16 + static_cast<char32_t>(is_digit(ch) ? ch - '0' : l - 'a' + 10);
      }
      return v;
    };
    while (true) {
      if (q >= s.size()) unterminated();
      const char c = s[q];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++q;
        continue;
      }
      if (q + 1 >= s.size()) unterminated();
      const char e = s[q + 1];
      q += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x': utf8_append(value, hex(q, 2)); q += 2; break;
        case 'u': utf8_append(value, hex(q, 4)); q += 4; break;
        case 'U': {
          const char32_t cp = hex(q, 8);
          if (cp > 0x10FFFF) fail("illegal Unicode character in string literal", q);
          utf8_append(value, cp);
          q += 8;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && q < s.size() && s[q] >= '0' && s[q] <= '7'; ++k, ++q) v = v * 8 + static_cast<char32_t>(s[q] - '0');
            utf8_append(value, v);
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    out_.push_back(Token{TokenType::String, std::move(value), line});
    return q + 1;
  }

  size_t lex_operator(size_t p, std::vector<char>& balance) {
    const std::string_view s = src_;
    static constexpr std::string_view two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : two)
      if (starts_with(s, p, op)) {
        out_.push_back(Token{TokenType::Operator, std::string(op), line_at(p)});
        return p + 2;
      }
    const char c = s[p];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      size_t len = 0;
      decode_at(s, p, len);
      fail(fmt::format("unexpected char {} at {}", py_str_repr(s.substr(p, len)), p), p);
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(fmt::format("unexpected '{}'", c), p);
      if (balance.back() != c) fail(fmt::format("unexpected '{}', expected '{}'", c, balance.back()), p);
      balance.pop_back();
    }
    out_.push_back(Token{TokenType::Operator, std::string(1, c), line_at(p)});
    return p + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  mutable size_t line_pos_ = 0;
  mutable int line_ = 1;
  bool line_starting_ = true;  // the last tag ended with a newline (or nothing was read yet)
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::Data: return "template data";
    case TokenType::VarBegin: return "begin of print statement";
    case TokenType::VarEnd: return "end of print statement";
    case TokenType::BlockBegin: return "begin of statement block";
    case TokenType::BlockEnd: return "end of statement block";
    case TokenType::Name: return t.text;
    case TokenType::String: return "string";
    case TokenType::Integer: return "integer";
    case TokenType::Float: return "float";
    case TokenType::Operator: return t.text;
    case TokenType::Eof: return "end of template";
  }
  return "token";
}

}  // namespace npullm::genai::jinja
