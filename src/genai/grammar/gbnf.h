// llama.cpp's GBNF grammars (grammars/README.md there), so users' existing grammars work:
//
//   name ::= alternatives        rules; `root` is where the output starts; names: letters, digits, - _
//   a b | c                      sequence, alternation; ( ... ) grouping
//   "text"  [a-z0-9]  [^"\\]  .  literals, code point classes (negated with ^), any code point
//   x*  x+  x?  x{m}  x{m,}  x{m,n}
//   # comment                    to the end of the line
//   escapes in literals and classes: \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH
//
// A newline ends a rule, except inside parentheses or after `|`. Refused with the line and column:
// syntax errors, undefined or twice-defined rules, a missing root, left recursion, token
// references (<[id]>, <|token|>).
#pragma once
#include <memory>
#include <string_view>

#include "genai/grammar/grammar.h"

namespace npullm::genai::grammar {

std::shared_ptr<const Grammar> compile_gbnf(std::string_view text);

}  // namespace npullm::genai::grammar
