// Template source -> tokens, with the whitespace rules HF's chat-template environment uses.
//
// HF transformers renders chat templates with Jinja2 configured as trim_blocks=True and
// lstrip_blocks=True, so the lexer applies, exactly as Jinja2 3.1 does:
//  - `{%-` / `{{-` / `{#-` strip all whitespace before the tag; `-%}` / `-}}` / `-#}` strip all after it;
//  - trim_blocks: the first newline after a block or comment tag (`%}`, `#}`) is dropped, unless
//    the tag ends with `+%}`;
//  - lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag are
//    dropped, unless the tag starts with `{%+` (print tags `{{` are never lstripped);
//  - newlines are normalised to "\n" and one trailing newline of the template is dropped
//    (keep_trailing_newline=False).
// `{% raw %}...{% endraw %}` is turned into plain text here; comments disappear.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace npullm::genai::jinja {

enum class TokenType {
  Data,        // literal template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // text holds the decoded value
  Integer,     // int_value
  Float,       // float_value
  Operator,    // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
  Eof,
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Throws TemplateError (with the line) on malformed input: unterminated tags, comments or strings,
// unbalanced brackets, characters that are not part of the expression language.
std::vector<Token> tokenize(std::string_view source);

// Human-readable token description for syntax errors ("end of print statement", "'if'").
std::string describe(const Token& t);

}  // namespace npullm::genai::jinja
