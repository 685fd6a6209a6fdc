// JSON Schema -> grammar, keyword by keyword: what each accepts and rejects, the refusals, and the
// bounds (white space, nothing after the root value). The outside corpus is test_grammar_corpus.cpp.
#include <gtest/gtest.h>

#include "genai/grammar/json_schema.h"
#include "grammar_test_util.h"

namespace npullm::genai::grammar {
namespace {

using test::in_language;

std::shared_ptr<const Grammar> S(const std::string& schema) { return compile_json_schema(schema); }

TEST(GrammarJsonSchema, TypesAndNullable) {
  auto g = S(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(in_language(g, "12"));
  EXPECT_TRUE(in_language(g, "-3"));
  EXPECT_TRUE(in_language(g, "null"));
  EXPECT_FALSE(in_language(g, "1.5"));
  EXPECT_FALSE(in_language(g, "\"1\""));
  EXPECT_FALSE(in_language(g, "012"));
  auto n = S(R"({"type": "string", "nullable": true})");
  EXPECT_TRUE(in_language(n, "null"));
  EXPECT_TRUE(in_language(n, R"("a\u00e9\n")"));
  auto num = S(R"({"type": "number"})");
  for (const char* ok : {"0", "-0.5", "1e10", "2.5E-3", "10"}) EXPECT_TRUE(in_language(num, ok)) << ok;
  for (const char* no : {"01", ".5", "1.", "+1", "1e", "NaN"}) EXPECT_FALSE(in_language(num, no)) << no;
}

TEST(GrammarJsonSchema, PropertiesInAnyOrderEachOnceRequiredEnforced) {
  auto g = S(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
               "required":["a","b"],"additionalProperties":false})");
  EXPECT_TRUE(in_language(g, R"({"a":1,"b":"x"})"));
  EXPECT_TRUE(in_language(g, R"({"b":"x","c":true,"a":1})"));
  EXPECT_TRUE(in_language(g, "{ \"a\" : 1 ,\n  \"b\": \"x\"\n}"));
  EXPECT_FALSE(in_language(g, R"({"a":1})"));                 // b required
  EXPECT_FALSE(in_language(g, R"({"a":1,"b":"x","a":2})"));   // a twice
  EXPECT_FALSE(in_language(g, R"({"a":1,"b":"x","d":0})"));   // no additional properties
  EXPECT_FALSE(in_language(g, R"({"a":"1","b":"x"})"));
}

TEST(GrammarJsonSchema, AdditionalPropertiesSchemaAndOtherKeys) {
  auto g = S(R"({"properties":{"ab":{"type":"integer"}},"additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(in_language(g, R"({"ab":1,"a":"x","abc":"y","":"z"})"));
  EXPECT_FALSE(in_language(g, R"({"ab":"x"})"));  // ab is declared: an integer
  EXPECT_FALSE(in_language(g, R"({"a":1})"));
  EXPECT_TRUE(in_language(g, "[1]"));             // no type: other types are not constrained by object keywords
}

TEST(GrammarJsonSchema, ManyPropertiesKeepSchemaOrder) {
  std::string props, req;
  for (int i = 0; i < 10; ++i) props += (i ? "," : "") + std::string("\"p") + char('0' + i) + "\":{\"type\":\"integer\"}";
  auto g = S(R"({"type":"object","additionalProperties":false,"required":["p3"],"properties":{)" + props + "}}");
  EXPECT_TRUE(in_language(g, R"({"p3":1})"));
  EXPECT_TRUE(in_language(g, R"({"p0":1,"p3":1,"p9":2})"));
  EXPECT_FALSE(in_language(g, R"({"p9":1,"p3":1})"));  // order fixed above kMaxFreeOrderProperties
  EXPECT_FALSE(in_language(g, R"({"p0":1})"));
}

TEST(GrammarJsonSchema, ArraysItemsPrefixItemsAndCounts) {
  auto g = S(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(in_language(g, "[1]"));
  EXPECT_TRUE(in_language(g, "[1,2]"));
  EXPECT_TRUE(in_language(g, "[ 1 , 2 , 3 ]"));
  EXPECT_FALSE(in_language(g, "[1,2,3,4]"));
  auto t = S(R"({"prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false})");
  EXPECT_TRUE(in_language(t, "[]"));
  EXPECT_TRUE(in_language(t, R"(["a",true])"));
  EXPECT_FALSE(in_language(t, R"(["a",true,1])"));
  EXPECT_FALSE(in_language(t, "[true]"));
}

TEST(GrammarJsonSchema, EnumConstAnyOfOneOfAllOfRefs) {
  auto e = S(R"({"enum":["red",1,null,{"b":1,"a":[2]}]})");
  EXPECT_TRUE(in_language(e, "\"red\""));
  EXPECT_TRUE(in_language(e, "1.0"));
  EXPECT_TRUE(in_language(e, R"({"a":[2],"b":1})"));
  EXPECT_FALSE(in_language(e, "\"blue\""));
  auto filtered = S(R"({"type":"string","enum":["a",1]})");
  EXPECT_FALSE(in_language(filtered, "1"));
  auto any = S(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":5}]})");
  EXPECT_TRUE(in_language(any, "\"ab\""));
  EXPECT_TRUE(in_language(any, "7"));
  EXPECT_FALSE(in_language(any, "4"));
  auto one = S(R"({"oneOf":[{"properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind"],"type":"object"},
                             {"properties":{"kind":{"const":"b"}},"required":["kind"],"type":"object"}]})");
  EXPECT_TRUE(in_language(one, R"({"kind":"a","x":1})"));
  EXPECT_FALSE(in_language(one, R"({"kind":"c"})"));
  EXPECT_EQ(test::refusal_of([] { S(R"({"oneOf":[{"type":"integer"},{"minimum":2}]})"); }), "oneOf");
  auto all = S(R"({"allOf":[{"type":"integer"}],"minimum":3})");
  EXPECT_TRUE(in_language(all, "3"));
  EXPECT_FALSE(in_language(all, "2"));
  auto tree = S(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
                                     "required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(in_language(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(in_language(tree, R"({"v":1,"kids":[{"kids":[]}]})"));
}

TEST(GrammarJsonSchema, StringLengthsPatternsAndFormats) {
  auto len = S(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(in_language(len, "\"a\""));
  EXPECT_TRUE(in_language(len, "\"a\\n\""));        // an escape is one character
  EXPECT_TRUE(in_language(len, "\"\xF0\x9F\x98\x80\xC3\xA9\""));  // two code points
  EXPECT_FALSE(in_language(len, "\"abcd\""));
  auto pat = S(R"({"type":"string","pattern":"^[a-z]+-\\d+$"})");
  EXPECT_TRUE(in_language(pat, "\"abc-12\""));
  EXPECT_FALSE(in_language(pat, "\"abc-\""));
  auto date = S(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(in_language(date, "\"2024-02-29\""));
  EXPECT_FALSE(in_language(date, "\"2023-02-29\""));
  EXPECT_FALSE(in_language(date, "\"1900-02-29\""));
  EXPECT_TRUE(in_language(date, "\"2000-02-29\""));
  EXPECT_FALSE(in_language(date, "\"2024-04-31\""));
  auto dt = S(R"({"format":"date-time"})");
  EXPECT_TRUE(in_language(dt, "\"2024-05-01T13:45:00.5+02:00\""));
  EXPECT_FALSE(in_language(dt, "\"2024-05-01T24:00:00Z\""));
  auto uuid = S(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(in_language(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(in_language(uuid, "\"123e4567e89b12d3a456426614174000\""));
  auto email = S(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(in_language(email, "\"a.b+c@example.org\""));
  EXPECT_FALSE(in_language(email, "\"a@\""));
}

TEST(GrammarJsonSchema, IntegerBoundsAreExact) {
  auto g = S(R"({"type":"integer","minimum":-12,"exclusiveMaximum":107})");
  for (int v = -200; v <= 200; ++v) EXPECT_EQ(in_language(g, std::to_string(v)), v >= -12 && v < 107) << v;
  auto open = S(R"({"type":"integer","exclusiveMinimum":95})");
  for (int v = -10; v <= 2000; ++v) EXPECT_EQ(in_language(open, std::to_string(v)), v > 95) << v;
}

TEST(GrammarJsonSchema, NumberBoundsNeverAcceptOutside) {
  auto g = S(R"({"type":"number","minimum":-2.5,"maximum":3.25})");
  for (int i = -400; i <= 400; ++i) {
    const double v = i / 100.0;
    char buf[32];
    snprintf(buf, sizeof buf, "%.2f", v);
    if (in_language(g, buf)) {
      EXPECT_TRUE(v >= -2.5 && v <= 3.25) << buf;
    }
  }
  EXPECT_TRUE(in_language(g, "3"));
  EXPECT_TRUE(in_language(g, "2.999"));
  EXPECT_TRUE(in_language(g, "-1.5"));
  EXPECT_FALSE(in_language(g, "3.5"));
}

TEST(GrammarJsonSchema, WhitespaceIsBoundedAndNothingFollowsTheValue) {
  auto g = S(R"({"type":"array"})");
  EXPECT_TRUE(in_language(g, "[\n" + std::string(kMaxWhitespace, ' ') + "1,\n\t2 ]"));
  EXPECT_FALSE(in_language(g, "[\n" + std::string(kMaxWhitespace + 1, ' ') + "1]"));
  EXPECT_FALSE(in_language(g, "[1,  2]"));
  EXPECT_FALSE(in_language(g, "[1,\n\n2]"));
  EXPECT_FALSE(in_language(g, "[] "));
  EXPECT_FALSE(in_language(g, " []"));
  Matcher m(g);
  ASSERT_TRUE(m.accept("[1]"));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_TRUE(m.next_bytes().none());
}

TEST(GrammarJsonSchema, EveryUnimplementedKeywordIsRefusedByName) {
  for (const char* kw : {"not", "if", "then", "else", "multipleOf", "patternProperties", "propertyNames", "dependencies",
                         "contains", "minProperties", "maxProperties", "unevaluatedProperties", "frobnicate"}) {
    const std::string schema = std::string("{\"") + kw + "\": {}}";
    EXPECT_EQ(test::refusal_of([&] { S(schema); }), kw);
  }
  EXPECT_EQ(test::refusal_of([] { S(R"({"format":"uri"})"); }), "format");
  EXPECT_EQ(test::refusal_of([] { S(R"({"uniqueItems":true})"); }), "uniqueItems");
  EXPECT_EQ(test::refusal_of([] { S(R"({"$ref":"http://example.com/s.json"})"); }), "$ref");
  EXPECT_EQ(test::refusal_of([] { S(R"({"properties":{"a":{"not":{}}}})"); }), "not");
  EXPECT_EQ(test::refusal_of([] { S(R"({"title":"t","description":"d","$schema":"x","examples":[1],"default":1,"$comment":"c"})"); }), "");
  EXPECT_NE(test::refusal_of([] { S("{nope"); }).find("not valid JSON"), std::string::npos);
}

TEST(GrammarJsonSchema, JsonObjectKindIsAnyObject) {
  auto g = compile_json_object();
  EXPECT_TRUE(in_language(g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(in_language(g, "{}"));
  EXPECT_FALSE(in_language(g, "[]"));
  EXPECT_FALSE(in_language(g, R"({"a":1}{})"));
}

// Literal prefixes, each followed by a value of its own schema (gpt-oss's required tool calls):
// each schema is a document of its own ($ref inside it), a value of another prefix's schema is
// refused, and a malformed list or an unsupported keyword is refused with a reason.
TEST(JsonSchema, PrefixedSchemasPairEachPrefixWithItsOwnSchema) {
  const auto g = compile_prefixed_json_schemas(R"([
    {"prefix": "A:", "schema": {"type": "integer", "minimum": 0, "maximum": 9}},
    {"prefix": "B:", "schema": {"$defs": {"s": {"type": "string", "maxLength": 2}}, "type": "array", "items": {"$ref": "#/$defs/s"}}}])");
  EXPECT_TRUE(in_language(g, "A:7"));
  EXPECT_TRUE(in_language(g, R"(B:["x", "yz"])"));
  EXPECT_FALSE(in_language(g, "A:12"));
  EXPECT_FALSE(in_language(g, R"(A:["x"])"));
  EXPECT_FALSE(in_language(g, "B:7"));
  EXPECT_FALSE(in_language(g, R"(B:["xyz"])"));
  EXPECT_FALSE(in_language(g, "C:7"));
  EXPECT_FALSE(in_language(g, "7"));
  for (const char* bad : {"{}", "[]", R"([{"prefix": "A"}])", R"([{"prefix": 1, "schema": {}}])", R"([{"prefix": "A", "schema": {}, "x": 1}])", "not json"})
    EXPECT_THROW(compile_prefixed_json_schemas(bad), GrammarError) << bad;
  try {
    compile_prefixed_json_schemas(R"([{"prefix": "A", "schema": {"type": "number", "multipleOf": 2}}])");
    ADD_FAILURE() << "multipleOf accepted";
  } catch (const UnsupportedKeyword& e) {
    EXPECT_EQ(e.keyword(), "multipleOf");
  }
}

}  // namespace
}  // namespace npullm::genai::grammar
