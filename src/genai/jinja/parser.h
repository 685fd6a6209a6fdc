// Tokens -> syntax tree, following Jinja2's grammar and operator precedence:
//   conditional (a if c else b) < or < and < not < comparisons / in < + - < ~ < * / // % < **
//   < unary - + < postfix (.attr, [index], [a:b:c], call) and filters / tests (| f, is t).
// Statements: if/elif/else, for (tuple targets, `if` filter, else, recursive), set (plain, tuple,
// ns.attr, block), macro, call, filter, with, break/continue (loopcontrols), raw, and HF's
// generation block.
#pragma once
#include <string_view>

#include "genai/jinja/ast.h"

namespace npullm::genai::jinja {

// Throws TemplateError (with the line) on a syntax error.
Body parse_template(std::string_view source);

}  // namespace npullm::genai::jinja
