// The Jinja chat-template engine: every golden case of ../shared/golden/chat (rendered by Jinja2
// 3.1 the way HF transformers configures it) byte for byte, the built-in templates against those
// references, and unit tests of the engine's features (whitespace control, loops, slicing,
// filters, namespaces, undefined values, errors).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "genai/jinja/builtin_templates.h"
#include "formats/gguf.h"
#include "genai/chat_format.h"
#include "genai/jinja/template.h"
#include "genai/tokenizer/tokenizer.h"
#include "test_util.h"

namespace npullm::genai::jinja {
namespace {

using json = nlohmann::ordered_json;

// EXPECT that `text` contains `part` (plain gtest: the suite does not link gmock).
#define EXPECT_CONTAINS(text, part)                                                      \
  do {                                                                                   \
    const std::string text_ = (text), part_ = (part);                                    \
    EXPECT_NE(text_.find(part_), std::string::npos) << "\"" << text_ << "\" lacks \"" << part_ << "\""; \
  } while (0)

constexpr const char* kCases = "golden/chat/cases.json";
// Jinja2's renderings made in this repository for templates ../shared does not hold (each file says
// which tool in tests/tools made it): cases.json's format, plus per-case `variables` (the extra
// arguments of apply_chat_template: reasoning_effort, tools, ...). The template is NAME.jinja beside.
constexpr const char* kRepoCases[] = {"chat/harmony_cases.json"};

json repo_cases() {
  json all = json::array();
  for (const char* f : kRepoCases) {
    const json doc = json::parse(test::read_file(test::repo_data_path(f)));
    for (const json& c : doc.at("cases")) all.push_back(c);
  }
  return all;
}

// The date the references were rendered with (strftime_now).
RenderOptions fixed_date() {
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 10;
  t.tm_mday = 29;
  t.tm_wday = 0;  // a Sunday
  t.tm_yday = 332;
  return RenderOptions{t};
}

// Renders `src` with `vars` (JSON text) at the fixed date.
std::string render(const std::string& src, const std::string& vars = "{}") {
  return Template(src).render(json::parse(vars), fixed_date());
}

// The message of the npullm::Error that rendering throws ("" if it does not throw).
std::string render_error(const std::string& src, const std::string& vars = "{}") {
  try {
    render(src, vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- golden cases ---------------------------------------------------------------------------

TEST(ChatTemplateGolden, EveryCaseRendersLikeJinja2) {
  NPULLM_REQUIRE_SHARED(kCases);
  const json doc = json::parse(test::read_file(test::shared_path(kCases)));
  const json& cases = doc.at("cases");
  ASSERT_GT(cases.size(), 0u);
  size_t passed = 0;
  for (const json& c : cases) {
    const std::string name = c.at("template").get<std::string>();
    const std::string where = "template '" + name + "', conversation '" + c.at("conversation").get<std::string>() +
                              "', add_generation_prompt=" + (c.at("add_generation_prompt").get<bool>() ? "true" : "false");
    const std::string source = test::read_file(test::shared_path("golden/chat/templates/" + name + ".jinja"));
    ASSERT_FALSE(source.empty()) << where << ": template file missing";
    std::string got, error;
    try {
      got = render_chat_template(source, c.at("messages"), c.at("add_generation_prompt").get<bool>(),
                                 c.at("bos_token").get<std::string>(), c.at("eos_token").get<std::string>(), json::object(),
                                 fixed_date());
    } catch (const Error& e) {
      error = e.what();
    }
    if (c.contains("expected_error")) {
      const std::string want = c.at("expected_error").get<std::string>();
      if (error.empty()) ADD_FAILURE() << where << ": expected an error containing \"" << want << "\", rendered:\n" << got;
      else if (error.find(want) == std::string::npos) ADD_FAILURE() << where << ": error \"" << error << "\" lacks \"" << want << "\"";
      else ++passed;
    } else {
      const std::string want = c.at("expected").get<std::string>();
      if (!error.empty()) ADD_FAILURE() << where << ": unexpected error: " << error;
      else if (got != want) ADD_FAILURE() << where << ":\n--- expected ---\n" << want << "\n--- got ---\n" << got << "\n---";
      else ++passed;
    }
  }
  EXPECT_EQ(passed, cases.size());
  std::printf("[ chat ] %zu / %zu golden chat-template cases identical to Jinja2\n", passed, cases.size());
}

TEST(ChatTemplateGolden, BuiltinTemplatesMatchReferences) {
  NPULLM_REQUIRE_SHARED(kCases);
  size_t checked = 0;
  for (const BuiltinTemplate& t : builtin_templates()) {
    const std::string path = "golden/chat/templates/" + std::string(t.name) + ".jinja";
    if (!std::filesystem::exists(test::shared_path(path))) continue;
    EXPECT_EQ(std::string(t.source), test::read_file(test::shared_path(path))) << t.name;
    const json tokens = json::parse(test::read_file(test::shared_path("golden/chat/templates/" + std::string(t.name) + ".tokens.json")));
    auto token = [&](const char* key) { return tokens.at(key).is_string() ? tokens.at(key).get<std::string>() : std::string(); };
    EXPECT_EQ(std::string(t.bos_token), token("bos_token")) << t.name;
    EXPECT_EQ(std::string(t.eos_token), token("eos_token")) << t.name;
    ++checked;
  }
  // Those whose reference copy is in tests/data (harmony).
  for (const BuiltinTemplate& t : builtin_templates()) {
    const std::string path = test::repo_data_path("chat/" + std::string(t.name) + ".jinja");
    if (!std::filesystem::exists(path)) continue;
    EXPECT_EQ(std::string(t.source), test::read_file(path)) << t.name;
    ++checked;
  }
  EXPECT_GE(checked, 11u);
  EXPECT_NE(find_builtin_template("harmony"), nullptr);
  EXPECT_NE(find_builtin_template("llama3"), nullptr);
  EXPECT_EQ(find_builtin_template("no-such-family"), nullptr);
}

// Each built-in template, rendered from its own source with its own bos/eos tokens, gives Jinja2's
// text for every conversation of the golden cases made for its family (cases.json: 12 each, with and
// without the generation prompt; mistral's system-message cases are Jinja2's raise_exception),
// byte for byte. A built-in without golden cases fails, naming it.
TEST(ChatTemplateGolden, BuiltinTemplatesRenderJinja2sText) {
  NPULLM_REQUIRE_SHARED(kCases);
  json cases = json::parse(test::read_file(test::shared_path(kCases))).at("cases");
  for (const json& c : repo_cases()) cases.push_back(c);
  for (const BuiltinTemplate& t : builtin_templates()) {
    size_t n = 0;
    for (const json& c : cases) {
      if (c.at("template").get<std::string>() != t.name) continue;
      ++n;
      const bool gen = c.at("add_generation_prompt").get<bool>();
      const std::string where = std::string(t.name) + ", conversation '" + c.at("conversation").get<std::string>() +
                                "', add_generation_prompt=" + (gen ? "true" : "false");
      std::string got, error;
      try {
        got = render_chat_template(std::string(t.source), c.at("messages"), gen, std::string(t.bos_token),
                                   std::string(t.eos_token), c.value("variables", json::object()), fixed_date());
      } catch (const Error& e) {
        error = e.what();
      }
      if (c.contains("expected_error")) {
        EXPECT_NE(error.find(c.at("expected_error").get<std::string>()), std::string::npos) << where << ": " << error << got;
      } else {
        EXPECT_EQ(error, "") << where;
        EXPECT_EQ(got, c.at("expected").get<std::string>()) << where;
      }
    }
    EXPECT_GE(n, 12u) << "built-in template " << t.name << " has no Jinja2 reference cases in " << kCases << " or tests/data";
  }
}

// gpt-oss's own chat template (tests/data/chat/harmony.jinja) against Jinja2's renderings of it
// (tests/tools/make-harmony-golden.py): system / developer / user / assistant turns in
// <|start|>role<|message|>...<|end|> framing, the analysis channel kept only on a last assistant turn
// without a generation prompt, reasoning_effort, the model identity line, strftime_now's date, tools
// as a TypeScript namespace, tool calls and results, built-in tools, and the template's own refusals.
TEST(ChatTemplateGolden, HarmonyRendersLikeJinja2) {
  const std::string source = test::read_file(test::repo_data_path("chat/harmony.jinja"));
  ASSERT_FALSE(source.empty());
  size_t passed = 0, n = 0, refused = 0;
  for (const json& c : repo_cases()) {
    if (c.at("template").get<std::string>() != "harmony") continue;
    ++n;
    const bool gen = c.at("add_generation_prompt").get<bool>();
    const std::string where = "conversation '" + c.at("conversation").get<std::string>() + "', add_generation_prompt=" + (gen ? "true" : "false");
    std::string got, error;
    try {
      got = render_chat_template(source, c.at("messages"), gen, c.at("bos_token").get<std::string>(), c.at("eos_token").get<std::string>(),
                                 c.value("variables", json::object()), fixed_date());
    } catch (const Error& e) {
      error = e.what();
    }
    if (c.contains("expected_error")) {
      ++refused;
      const std::string want = c.at("expected_error").get<std::string>();
      EXPECT_NE(error.find(want), std::string::npos) << where << ": error [" << error << "], rendered:\n" << got;
      passed += error.find(want) != std::string::npos;
    } else {
      EXPECT_EQ(error, "") << where;
      EXPECT_EQ(got, c.at("expected").get<std::string>()) << where;
      passed += error.empty() && got == c.at("expected").get<std::string>();
    }
  }
  EXPECT_GE(n, 24u);
  EXPECT_GE(refused, 2u);
  EXPECT_EQ(passed, n);
  std::printf("[ chat ] %zu / %zu harmony (gpt-oss) cases identical to Jinja2\n", passed, n);
  // The parts the format rests on, spelled out.
  const std::string one = render_chat_template(source, json::parse(R"([{"role":"user","content":"Hi"}])"), true, "", "",
                                               json::parse(R"({"reasoning_effort":"high"})"), fixed_date());
  EXPECT_CONTAINS(one, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n");
  EXPECT_CONTAINS(one, "Current date: 2026-11-29\n");
  EXPECT_CONTAINS(one, "Reasoning: high\n");
  EXPECT_CONTAINS(one, "<|start|>user<|message|>Hi<|end|><|start|>assistant");
}

// ---- whitespace control ---------------------------------------------------------------------

TEST(ChatTemplateEngine, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(render("{# note #}\nx"), "x");
  EXPECT_EQ(render("{% if true +%}\nyes{% endif %}"), "\nyes");  // +%} keeps it
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");                      // print tags are not trimmed
}

TEST(ChatTemplateEngine, LstripBlocksDropsIndentationBeforeABlockTag) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n"), "  x\n");
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");  // not at a line start
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");   // {%+ keeps it
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");                    // print tags are not lstripped
  EXPECT_EQ(render("{#- comment -#}   x  {# c #}\n   {% if true %}\n   y\n   {% endif %}\n   z\n"), "x     y\n   z");
}

TEST(ChatTemplateEngine, MinusStripsAllWhitespaceIncludingUnicode) {
  EXPECT_EQ(render("a \n\t {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(render("a\u3000{%- if true -%}\u00a0b{% endif %}"), "ab");
  EXPECT_EQ(render("x\n{%- for i in [1, 2] %}\n  {{- i }}\n{%- endfor %}\n"), "x12");
}

TEST(ChatTemplateEngine, NewlinesAreNormalisedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(render("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(render("a\n\n"), "a\n");
}

TEST(ChatTemplateEngine, RawBlocksAreText) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
}

// ---- expressions ----------------------------------------------------------------------------

TEST(ChatTemplateEngine, LiteralsAndPythonStyleOutput) {
  EXPECT_EQ(render(R"({{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.00001 }} {{ [1,'a',"it's",none,1.5] }} {{ (1,) }} {{ {'b': 1, 'a': 2} }})"),
            R"(None True 1.0 1e+20 1e-05 [1, 'a', "it's", None, 1.5] (1,) {'b': 1, 'a': 2})");
  EXPECT_EQ(render(R"({{ "a\tb\n\x41\u00e9\d" }})"), "a\tb\nA\u00e9\\d");
  EXPECT_EQ(render("{{ 'a' 'b' }}{{ 0x1f }}{{ 1_000 }}"), "ab311000");
}

TEST(ChatTemplateEngine, ArithmeticFollowsPython) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 4 / 2 }}"), "3 -4 2 3.5 1024 0.5 2.0");
  EXPECT_EQ(render("{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 + 2 * 3 }} {{ 'ab' * 2 }} {{ [1] + [2] }}"), "64 4 7 abab [1, 2]");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ nothing }}"), "a1None");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ true == 1 }} {{ (1, 2) == [1, 2] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "True True False True False");
  EXPECT_CONTAINS(render_error("{{ 'a' + 1 }}"), "can only concatenate str (not \"int\") to str");
  EXPECT_CONTAINS(render_error("{{ 1 / 0 }}"), "division by zero");
}

TEST(ChatTemplateEngine, LogicReturnsOperandsAndConditionalsNest) {
  EXPECT_EQ(render("{{ none or 'dflt' }}|{{ 'x' and 'y' }}|{{ not 1 == 2 }}|{{ 1 if 0 else 2 if 0 else 3 }}|{{ 'x' if false }}"),
            "dflt|y|True|3|");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 'x' not in ['x'] }} {{ 'k' in {'k': 1} }} {{ 1 in nothing }}"), "True False True False");
}

TEST(ChatTemplateEngine, SlicingAndIndexing) {
  const std::string vars = R"({"xs": [1, 2, 3], "s": "Hello World", "u": "héllo"})";
  EXPECT_EQ(render("{{ s[::-1] }} {{ xs[::-1] }} {{ s[1:3] }} {{ xs[-2:] }} {{ xs[::-2] }} {{ s[-100:2] }} {{ xs[5:] }}", vars),
            "dlroW olleH [3, 2, 1] el [2, 3] [3, 1] He []");
  EXPECT_EQ(render("{{ u[1] }} {{ u[::-1] }} {{ u|length }} {{ xs.0 }} {{ xs[-1] }}", vars), "é olléh 5 1 3");
  EXPECT_CONTAINS(render_error("{{ xs[::0] }}", vars), "slice step cannot be zero");
}

TEST(ChatTemplateEngine, AttributeAndItemAccess) {
  const std::string vars = R"({"m": {"role": "user", "items": 7}, "xs": [1]})";
  EXPECT_EQ(render("{{ m.role }} {{ m['role'] }} {{ m.get('x', 'd') }} {{ m.get('x') }} {{ m['items'] }} {{ m.items()|list|length }}", vars),
            "user user d None 7 2");
  EXPECT_EQ(render("{{ m.missing }}|{{ xs[9] }}|{{ m.missing is defined }}|{{ 'abc'['upper']() }}", vars), "||False|ABC");
}

// ---- undefined ------------------------------------------------------------------------------

TEST(ChatTemplateEngine, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(render("[{{ x }}]{% if x %}t{% else %}f{% endif %}{% for i in x %}i{% endfor %}{{ x|length }}{{ x|default('d') }}"), "[]f0d");
  EXPECT_EQ(render("{{ x is defined }} {{ x is undefined }} {{ x is none }} {{ x is iterable }} {{ x == y }}"), "False True False True True");
  EXPECT_CONTAINS(render_error("{{ x.attr }}"), "'x' is undefined");
  EXPECT_CONTAINS(render_error("{{ x + 1 }}"), "'x' is undefined");
  EXPECT_CONTAINS(render_error(R"({{ m.a.b }})", R"({"m": {}})"), "'dict object' has no attribute 'a'");
  EXPECT_CONTAINS(render_error(R"({{ xs[3].a }})", R"({"xs": []})"), "list object has no element 3");
}

// ---- statements -----------------------------------------------------------------------------

TEST(ChatTemplateEngine, LoopVariables) {
  EXPECT_EQ(render("{% for a in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }},{% endfor %}"),
            "10321032,"
            "212100313,"
            "32100132,");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %}{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}"),
            "aba12");
}

TEST(ChatTemplateEngine, LoopFilterElseUnpackingAndControl) {
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1, 2, 3] if x > 1 %}{{ loop.index }}/{{ loop.length }} {% endfor %}"),
            "empty|1/2 2/2 ");
  EXPECT_EQ(render(R"({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for (a, b) in [[1, 2]] %}{{ a + b }}{% endfor %}{% for c in 'hé' %}{{ c }}.{% endfor %})",
                   R"({"d": {"b": 1, "a": 2}})"),
            "b=1;a=2;3h.é.");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "13");
  EXPECT_EQ(render("{% for x in [[1, [2]], [3]] recursive %}{{ loop.depth }}:{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %};{% endfor %}"),
            "1:2:1;2:3:2;;;1:2:3;;");
}

TEST(ChatTemplateEngine, SetScopingAndNamespace) {
  // Assignments inside a loop body stay there; namespace() attributes carry state out.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"), "12121");
  EXPECT_EQ(render("{% set ns = namespace(a=1, b='q') %}{% for x in [1, 2, 3] %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }} {{ ns }}"),
            "7 <Namespace {'a': 7, 'b': 'q'}>");
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set x %}  block {{ 1 }} {% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}"),
            "12[  block 1 ]ABC");
  EXPECT_CONTAINS(render_error("{% set x = 1 %}{% set x.y = 2 %}"), "cannot assign attribute on non-namespace object");
}

TEST(ChatTemplateEngine, MacrosCallBlocksFilterBlocksAndWith) {
  EXPECT_EQ(render("{% macro f(a, b='B') %}<{{ a }}{{ b }}{{ varargs }}{{ kwargs }}>{% endmacro %}{{ f(1) }}{{ f(1, 2, 3, z=4) }}{{ f(b=0, a=9) }}"),
            "<1B(){}><12(3,){'z': 4}><90(){}>");
  EXPECT_EQ(render("{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"), "2");
  EXPECT_EQ(render("{% macro dump(x) %}[{{ caller(x) }}]{% endmacro %}{% call(v) dump(5) %}v={{ v }}{% endcall %}"), "[v=5]");
  EXPECT_EQ(render("{% filter upper %}hello {{ 'x' }}{% endfilter %}"), "HELLO X");
  EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"), "3[]");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
  EXPECT_CONTAINS(render_error("{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}"), "maximum recursion depth");
}

// ---- filters, tests, methods ----------------------------------------------------------------

TEST(ChatTemplateEngine, StringFilters) {
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'é'|upper }}|{{ 'ÀB'|lower }}|{{ 'hello-world foo'|title }}|"
                   "{{ 'hELLO wORLD'|capitalize }}|{{ 'aXa'|replace('a', 'b') }}|{{ 'abc'|reverse }}|{{ 'abc'|center(7) }}|{{ 'a b c'|wordcount }}"),
            "x|a|É|àb|Hello-World Foo|Hello world|bXb|cba|  abc  |3");
  EXPECT_EQ(render("{{ 'a\nb'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(1, blank=true) }}"), "a\n  b|  a\n  b|a\n \n b");
  EXPECT_EQ(render("{{ 'hello world'|truncate(8) }}|{{ 'hello big world'|truncate(9, leeway=0) }}|{{ '%s=%d'|format('x', 3) }}|{{ '<&>'|e }}"),
            "hello world|hello...|x=3|&lt;&amp;&gt;");
}

TEST(ChatTemplateEngine, NumberAndConversionFilters) {
  EXPECT_EQ(render("{{ 3.7|int }} {{ '42.3'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int(base=16) }} {{ '3'|float }} {{ -3|abs }} {{ 1|string ~ 2 }}"),
            "3 42 0 7 26 3.0 3 12");
  EXPECT_EQ(render("{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 5|round }} {{ 2.5|round(0, 'floor') }} {{ 2.1|round(0, 'ceil') }}"),
            "2.0 4.0 3.14 5 2.0 3.0");
}

TEST(ChatTemplateEngine, SequenceFilters) {
  const std::string vars = R"({"xs": [3, 1, 2], "people": [{"n": "b", "age": 3}, {"n": "a", "age": 1}, {"n": "c"}]})";
  EXPECT_EQ(render("{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ xs|max }} {{ xs|min }} {{ xs|sum }} {{ xs|first }} {{ xs|last }} {{ xs|length }} {{ xs|count }}", vars),
            "[1, 2, 3] [3, 2, 1] 3 1 6 3 2 3 3");
  EXPECT_EQ(render("{{ people|map(attribute='n')|join(',') }} {{ people|selectattr('age')|map(attribute='n')|list }} "
                   "{{ people|rejectattr('age', 'defined')|map(attribute='n')|first }} {{ people|map(attribute='age', default=0)|list }}", vars),
            "b,a,c ['b', 'a'] c [3, 1, 0]");
  EXPECT_EQ(render("{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ xs|map('string')|join('-') }} {{ [1, 2, 2, 1]|unique|list }} {{ 'abc'|list }}", vars),
            "[3, 1] [2] 3-1-2 [1, 2] ['a', 'b', 'c']");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1}|items|list }} {{ [1, 2, 3]|batch(2)|list }} {{ [1, 2, 3]|slice(2)|list }} {{ people|sort(attribute='n')|map(attribute='n')|join }}", vars),
            "[('a', 2), ('b', 1)] [('b', 1)] [[1, 2], [3]] [[1, 2], [3]] abc");
  EXPECT_EQ(render("{{ []|first }}|{{ []|max }}|{{ x|list }}|{{ none|default('n') }}|{{ none|default('n', true) }}"), "||[]|None|n");
}

TEST(ChatTemplateEngine, ToJsonKeepsNonAsciiAndOrder) {
  EXPECT_EQ(render(R"({{ {'a': 1.0, 'b': 1e100, 'c': -0.0, 'd': 'é\n"', 'e': [none, true]}|tojson }})"),
            R"({"a": 1.0, "b": 1e+100, "c": -0.0, "d": "é\n\"", "e": [null, true]})");
  EXPECT_EQ(render("{{ [1, [2, {}], []]|tojson(indent=2) }}"), "[\n  1,\n  [\n    2,\n    {}\n  ],\n  []\n]");
  EXPECT_EQ(render("{{ {'a': 1}|tojson(separators=(',', ':')) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'é'|tojson(ensure_ascii=true) }}"),
            R"({"a":1} {"a": 2, "b": 1} "\u00e9")");
  // Object key order from the caller's JSON is kept (ordered_json).
  EXPECT_EQ(render("{{ tool|tojson }}", R"({"tool": {"type": "function", "function": {"name": "f", "arguments": {}}}})"),
            R"({"type": "function", "function": {"name": "f", "arguments": {}}})");
  EXPECT_CONTAINS(render_error("{{ x|tojson }}"), "not JSON serializable");
}

TEST(ChatTemplateEngine, Tests) {
  EXPECT_EQ(render("{{ 'a' is string }} {{ 1 is integer }} {{ true is integer }} {{ true is number }} {{ 1.0 is float }} {{ 4 is divisibleby 2 }} "
                   "{{ 3 is odd }} {{ 1 is eq 1 }} {{ 2 is in [1, 2] }} {{ {} is mapping }} {{ [] is sequence }} {{ none is none }} "
                   "{{ false is false }} {{ 1 is not none }} {{ 5 is gt(3) }} {{ 'upper' is filter }}"),
            "True True False True True True True True True True True True True True True True");
}

TEST(ChatTemplateEngine, StringMethods) {
  EXPECT_EQ(render("{{ 'a b  c '.split() }} {{ 'a,b,,c'.split(',', 1) }} {{ 'a b c'.rsplit(none, 1) }} {{ '\n x \n'.strip('\n') }}|"
                   "{{ 'xxaxx'.lstrip('x') }} {{ 'xxaxx'.rstrip('x') }} {{ 'ab'.startswith(('x', 'a')) }} {{ 'ab'.endswith('b') }} "
                   "{{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abcabc'.count('bc') }} {{ 'aaa'.replace('a', 'b', 2) }} "
                   "{{ 'they are'.title() }} {{ '-'.join(['a', 'b']) }} {{ '{} {x}'.format(1, x='y') }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"),
            "['a', 'b', 'c'] ['a', 'b,,c'] ['a b', 'c']  x |axx xxa True True 2 5 2 bba They Are a-b 1 y ABab");
  EXPECT_EQ(render("{{ '%s-%s' % (1, 2) }} {{ '%(a)s' % {'a': 5} }} {{ '%.3f|%5d|%-3s|' % (3.14159, 42, 'ab') }}"), "1-2 5 3.142|   42|ab |");
}

TEST(ChatTemplateEngine, GlobalsAndInjectableDate) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1, b=2) }} {{ strftime_now('%Y-%m-%d %A %d %b') }}"),
            "[0, 1, 2] [1, 3, 5] {'a': 1, 'b': 2} 2026-11-29 Sunday 29 Nov");
  EXPECT_EQ(render("{% set j = joiner('+') %}{% for x in [1, 2] %}{{ j() }}{{ x }}{% endfor %}"), "1+2");
}

// ---- errors ---------------------------------------------------------------------------------

TEST(ChatTemplateEngine, RaiseExceptionNamesTheLineAndMessage) {
  const std::string e = render_error("line one\n{{ raise_exception('boom: bad roles') }}");
  EXPECT_CONTAINS(e, "line 2");
  EXPECT_CONTAINS(e, "boom: bad roles");
}

TEST(ChatTemplateEngine, SyntaxErrorsNameTheLine) {
  EXPECT_CONTAINS(render_error("ok\n{% if x %}"), "line 2");
  EXPECT_CONTAINS(render_error("ok\n{% if x %}"), "looking for the following tags: 'elif' or 'else' or 'endif'");
  EXPECT_CONTAINS(render_error("{% for x in y %}{% endif %}"), "Encountered unknown tag 'endif'");
  EXPECT_CONTAINS(render_error("\n\n{{ 1 + }}"), "line 3");
  EXPECT_CONTAINS(render_error("\n\n{{ 1 + }}"), "unexpected 'end of print statement'");
  EXPECT_CONTAINS(render_error("{{ x"), "unexpected end of template");
  EXPECT_CONTAINS(render_error("{{ (1 }}"), "unexpected '}', expected ')'");
  EXPECT_CONTAINS(render_error("{% break %}"), "'break' outside loop");
  EXPECT_CONTAINS(render_error("{# open"), "Missing end of comment tag");
  EXPECT_CONTAINS(render_error("{{ 'abc }}"), "unexpected char");
  EXPECT_CONTAINS(render_error("{% foo %}"), "unknown tag 'foo'");
  EXPECT_CONTAINS(render_error("{{ x|nosuchfilter }}"), "No filter named 'nosuchfilter'");
  EXPECT_EQ(render_error("{% if false %}{{ x|nosuchfilter }}{% endif %}"), "");  // only when used, as in Jinja2 3
}

TEST(ChatTemplateEngine, SandboxRefusesMutation) {
  EXPECT_CONTAINS(render_error("{% set xs = [1] %}{{ xs.append(2) }}"), "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_CONTAINS(render_error("{% set d = {} %}{{ d.update({'a': 1}) }}"), "unsafe");
}

TEST(ChatTemplateEngine, TemplateLikeContentIsNotInterpreted) {
  EXPECT_EQ(render("{{ m }}", R"({"m": "{{ x }} {% if y %}"})"), "{{ x }} {% if y %}");
}

TEST(ChatTemplateEngine, ChatTemplateVariables) {
  const json msgs = json::parse(R"([{"role": "user", "content": "hi"}])");
  const std::string src = "{{ bos_token }}{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ messages|length }}{{ enable_thinking }}{{ eos_token }}";
  EXPECT_EQ(render_chat_template(src, msgs, true, "<s>", "</s>"), "<s>TrueTrueTrue1</s>");
  EXPECT_EQ(render_chat_template(src, msgs, false, "<s>", "</s>", json::parse(R"({"enable_thinking": false, "tools": [], "eos_token": "E"})")),
            "<s>FalseTrueFalse1FalseE");
}

// ---- npullm chat-template ------------------------------------------------------------------

#ifdef NPULLM_BINARY
using CliResult = test::Proc;

CliResult run_cli(const std::string& args) { return test::run_npullm("chat-template " + args); }

std::string write_temp(const std::string& name, const std::string& text) {
  const std::filesystem::path p = test::scratch_dir() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

// The CLI prints exactly the golden rendering (no newline added), by built-in name and by file.
TEST(ChatTemplateCli, PrintsTheGoldenRendering) {
  NPULLM_REQUIRE_SHARED(kCases);
  const json doc = json::parse(test::read_file(test::shared_path(kCases)));
  size_t checked = 0;
  for (const json& c : doc.at("cases")) {
    if (!c.contains("expected") || c.at("conversation") != "system_five_turns") continue;
    const std::string name = c.at("template").get<std::string>();
    const std::string msgs = write_temp(name + ".json", c.at("messages").dump());
    const std::string flag = c.at("add_generation_prompt").get<bool>() ? " --add-generation-prompt" : "";
    const CliResult by_name = run_cli("--template " + name + " --messages " + msgs + flag);
    EXPECT_EQ(by_name.rc, 0) << name << ": " << by_name.err;
    EXPECT_EQ(by_name.out, c.at("expected").get<std::string>()) << name;
    const CliResult by_file = run_cli("--template " + test::shared_path("golden/chat/templates/" + name + ".jinja") + " --messages " + msgs + flag);
    EXPECT_EQ(by_file.out, c.at("expected").get<std::string>()) << name << " (file): " << by_file.err;
    ++checked;
  }
  EXPECT_GE(checked, 8u);
}

TEST(ChatTemplateCli, TemplateErrorsExitWithOne) {
  const std::string msgs = write_temp("sys.json", R"([{"role":"system","content":"s"},{"role":"user","content":"u"}])");
  const CliResult r = run_cli("--template mistral --messages " + msgs);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_CONTAINS(r.err, "npullm: error: ");
  EXPECT_CONTAINS(r.err, "Conversation roles must alternate user/assistant/user/assistant/...");
  const CliResult unknown = run_cli("--template no-such-template --messages " + msgs);
  EXPECT_EQ(unknown.rc, 1);
  EXPECT_CONTAINS(unknown.err, "neither a built-in template");
}

TEST(ChatTemplateCli, TokenOverridesVariablesAndDate) {
  const std::string msgs = write_temp("vars.json", R"({"messages":[{"role":"user","content":"hi"}],"who":"npullm"})");
  const std::string tpl = write_temp("t.jinja", "{{ bos_token }}{{ who }} {{ strftime_now('%Y-%m-%d') }}{{ eos_token }}");
  const CliResult r = run_cli("--template " + tpl + " --messages " + msgs + " --bos-token '<B>' --eos-token '<E>' --date 2026-11-29");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "<B>npullm 2026-11-29<E>");
}
#endif

}  // namespace
}  // namespace npullm::genai::jinja

namespace npullm {
namespace {

// The chat templates that ship inside the newer vocabularies' GGUF files (Llama 3, Qwen2/3,
// Qwen3.5, Gemma 4) render a conversation through the Jinja engine: every message's text appears,
// in order, and the generation prompt follows the last one.
TEST(ChatTemplateGguf, NewerVocabulariesRenderTheirOwnTemplates) {
  int with_template = 0;
  for (const char* vocab : {"llama-bpe", "qwen2", "qwen35", "gemma-4"}) {
    SCOPED_TRACE(vocab);
    const std::string rel = std::string("models/vocab/ggml-vocab-") + vocab + ".gguf";
    NPULLM_REQUIRE_SHARED(rel);
    auto f = GgufFile::open(test::shared_path(rel));
    const genai::Tokenizer tok(genai::Vocab::from_gguf(*f));
    if (tok.vocab().chat_template.empty()) {  // not every vocab file carries one
      std::printf("[ template ] %s: no tokenizer.chat_template in the file\n", vocab);
      continue;
    }
    ++with_template;
    const genai::ChatFormat fmt("", tok);
    const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hello there"}, {"assistant", "Hi! How can I help?"},
                                           {"user", "Tell me a joke"}};
    std::string text;
    ASSERT_EQ(test::error_of([&] { text = fmt.render(msgs, true); }), "");
    size_t at = 0;
    for (const auto& m : msgs) {
      const size_t found = text.find(m.content, at);
      ASSERT_NE(found, std::string::npos) << "'" << m.content << "' missing or out of order in:\n" << text;
      at = found + m.content.size();
    }
    const std::string closed = fmt.render(msgs, false);
    EXPECT_GT(text.size(), closed.size()) << "the generation prompt adds nothing";
    EXPECT_EQ(text.compare(0, closed.size(), closed), 0) << "the generation prompt is not appended at the end";
    std::printf("[ template ] %s: its own template renders %zu bytes\n", vocab, text.size());
  }
  EXPECT_GE(with_template, 1);
}

}  // namespace
}  // namespace npullm

namespace npullm {
namespace {

// A harmony template (gpt-oss) is recognised by its channel markup, and its replies end at
// <|return|>, <|call|> or <|endoftext|> as well as EOS; no other built-in template is harmony.
TEST(ChatFormatHarmony, RecognisedByItsMarkupWithItsEndTokens) {
  genai::Vocab v;
  v.model = "gpt2";
  v.tokens = {"a", "<|return|>", "<|call|>", "<|endoftext|>", "<|end|>"};
  v.types = {genai::TokenType::Normal, genai::TokenType::Control, genai::TokenType::Control,
             genai::TokenType::Control, genai::TokenType::Control};
  v.bos = -1;
  v.eos = 1;
  v.add_bos = false;
  v.add_space_prefix = false;
  v.pre = "gpt-4o";
  const genai::Tokenizer tok(v);
  const genai::ChatFormat harmony("harmony", tok);
  EXPECT_TRUE(harmony.harmony());
  EXPECT_EQ(harmony.reply_end_ids(tok), (std::vector<int32_t>{1, 2, 3}));
  for (const auto& b : genai::jinja::builtin_templates()) {
    if (b.name == "harmony") continue;
    const genai::ChatFormat other(std::string(b.name), tok);
    EXPECT_FALSE(other.harmony()) << b.name;
    EXPECT_TRUE(other.reply_end_ids(tok).empty()) << b.name;
  }
}

}  // namespace
}  // namespace npullm
