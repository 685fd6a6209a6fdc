// JSON Schema (draft 7, with 2020-12's $defs and prefixItems) -> Grammar of the JSON texts that the
// schema accepts.
//
// Supported: type (a name or a list; "nullable": true adds null), properties, required,
// additionalProperties (true / false / a schema), items (a schema, or draft 7's list with
// additionalItems), prefixItems, minItems, maxItems, uniqueItems: false, enum, const, anyOf, oneOf
// (branches that cannot overlap: different types, different consts, or a property that tells them
// apart), allOf (merged into one schema where the branches do not conflict), $ref inside the
// document (#, #/definitions/..., #/$defs/..., any JSON pointer; siblings ignored as draft 7
// says), string minLength / maxLength / pattern / format (date, time, date-time, uuid, email,
// ipv4), minimum / maximum / exclusiveMinimum / exclusiveMaximum, boolean schemas.
// Annotations (title, description, $schema, $id at the root, examples, default, $comment,
// readOnly, writeOnly, deprecated) are accepted. Every other keyword is refused (UnsupportedKeyword,
// naming it and where), never ignored.
//
// The grammar accepts only valid documents; it may reject some valid ones, in these places:
//   - strings are written the way nlohmann::json::dump() writes them when a pattern, an enum, a
//     const or an object key not declared in `properties` is involved (one spelling per string);
//   - numbers: an integer is written without fraction or exponent (1.0 is refused for "integer");
//     a number with bounds is written without exponent, and a decimal k.f is accepted only when all
//     of [k, k+1) (or (-k-1, -k]) lies within the bounds; integer values are exact;
//   - objects with more than kMaxFreeOrderProperties declared properties take them in schema order
//     (up to that many: any order, each at most once, the required ones enforced);
//   - enum and const values are written compactly with keys sorted, as dump() writes them;
//   - white space between tokens is nothing, one space, or a newline and at most kMaxWhitespace
//     spaces or tabs; none before or after the value.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "genai/grammar/grammar.h"

namespace npullm::genai::grammar {

constexpr int kMaxFreeOrderProperties = 8;
constexpr int kMaxWhitespace = 20;

class UnsupportedKeyword : public GrammarError {
 public:
  UnsupportedKeyword(std::string keyword, const std::string& what) : GrammarError(what), keyword_(std::move(keyword)) {}
  const std::string& keyword() const { return keyword_; }

 private:
  std::string keyword_;
};

// One of several literal prefixes, then a JSON value of that prefix's schema: `alternatives_json` is
// a JSON array of {"prefix": text, "schema": schema}, each schema a document of its own (its $refs
// resolve inside it) under the rules above. Throws GrammarError as compile_json_schema does.
std::shared_ptr<const Grammar> compile_prefixed_json_schemas(std::string_view alternatives_json);

std::shared_ptr<const Grammar> compile_json_schema(std::string_view schema_json);
// Any JSON object (response_format json_object).
std::shared_ptr<const Grammar> compile_json_object();

}  // namespace npullm::genai::grammar
