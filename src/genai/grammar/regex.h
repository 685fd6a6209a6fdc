// Regular expressions, a practical subset of ECMAScript's (what JSON Schema's `pattern` means):
// literals, escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..} and escaped punctuation), classes
// ([a-z], [^...], \d \D \w \W \s \S), `.`, groups ((...), (?:...), (?<name>...)), alternation and
// the quantifiers * + ? {n} {n,} {n,m} (a lazy `?` after them changes nothing for matching).
// Refused, with the construct and its offset named: backreferences, lookaround, word boundaries,
// anchors anywhere but at the start or end of a top-level branch, possessive quantifiers, flags.
#pragma once
#include <functional>
#include <string_view>

#include "genai/grammar/grammar.h"

namespace npullm::genai::grammar {

// How a set of code points is spelled in the output: as UTF-8 (plain), or as the characters of a
// JSON string's contents (json_string_chars).
using CharEmitter = std::function<Expr(const CodepointSet&)>;

// The canonical JSON spelling of each code point in `s` (what nlohmann::json::dump() writes): raw
// UTF-8, except `"` `\` and control characters, which are escaped (\" \\ \b \f \n \r \t \u00XX).
// One spelling per code point, so a string's text and its value correspond one to one.
Expr json_string_chars(const CodepointSet& s);

// The whole text is a match of `re` (anchors implicit; a ^ at the start or $ at the end is allowed).
Expr regex_full(std::string_view re, GrammarBuilder& b, const CharEmitter& emit);
// JSON Schema's `pattern`: the text CONTAINS a match (unless a branch is anchored by ^ / $).
Expr regex_search(std::string_view re, GrammarBuilder& b, const CharEmitter& emit);

// The Regex kind of StructuredOutput: the generated text matches `re` as a whole.
std::shared_ptr<const Grammar> compile_regex(std::string_view re);

}  // namespace npullm::genai::grammar
