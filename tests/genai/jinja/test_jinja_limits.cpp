// The Jinja engine's bounds on one render (RenderLimits, template.h) and on template nesting
// (kMaxTemplateNesting): a template that would loop, recurse or write without end stops with an
// npullm::Error naming the limit. The golden chat templates (test_chat_template.cpp) render inside
// the defaults.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "genai/jinja/template.h"

namespace npullm::genai::jinja {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& src, const RenderLimits& limits = {}) {
  RenderOptions opt;
  opt.now = std::tm{};
  opt.limits = limits;
  return Template(src).render(ordered_json::object(), opt);
}

std::string error_of(const std::string& src, const RenderLimits& limits = {}) {
  try {
    render(src, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaLimits, LoopIterationsAreCountedOverTheWholeRender) {
  RenderLimits l;
  l.max_loop_iterations = 10;
  EXPECT_EQ(render("{% for i in range(10) %}{{ i }}{% endfor %}", l), "0123456789");
  EXPECT_NE(error_of("{% for i in range(11) %}{% endfor %}", l).find("more than 10 loop iterations"), std::string::npos);
  // Two loops of 6 are 12 iterations; nested loops count every inner iteration.
  EXPECT_NE(error_of("{% for i in range(6) %}{% endfor %}{% for i in range(6) %}{% endfor %}", l), "");
  EXPECT_NE(error_of("{% for i in range(4) %}{% for j in range(3) %}{% endfor %}{% endfor %}", l), "");
  // Items tested by an inline `if` count too, kept or not.
  EXPECT_NE(error_of("{% for i in range(11) if false %}{% endfor %}", l), "");
}

TEST(JinjaLimits, DefaultLoopLimitStopsARunawayTemplate) {
  const std::string err = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_NE(err.find("more than 100000 loop iterations"), std::string::npos) << err;
  EXPECT_NE(err.find("line 1"), std::string::npos) << err;
}

TEST(JinjaLimits, CallDepthBoundsMacroRecursion) {
  const std::string recurse = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
  const std::string err = error_of(recurse);
  EXPECT_NE(err.find("maximum recursion depth exceeded (more than 256"), std::string::npos) << err;
  RenderLimits l;
  const std::string four = "{% macro f(n) %}{% if n < 3 %}{{ n }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}";
  l.max_call_depth = 4;
  EXPECT_EQ(render(four, l), "012");  // f(0) f(1) f(2) f(3): 4 nested calls
  l.max_call_depth = 3;
  EXPECT_NE(error_of(four, l).find("more than 3 nested"), std::string::npos);
  // Recursive loops and caller() count as calls.
  const std::string tree = R"({% for x in [[[[1]]]] recursive %}[{% if x is iterable %}{{ loop(x) }}{% endif %}]{% endfor %})";
  EXPECT_EQ(render(tree), "[[[[]]]]");
  l.max_call_depth = 2;
  EXPECT_NE(error_of(tree, l).find("maximum recursion depth"), std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}{{ caller() }}{% endmacro %}{% macro r(n) %}{% call m() %}{{ r(n + 1) }}{% endcall %}{% endmacro %}{{ r(0) }}")
                .find("maximum recursion depth"),
            std::string::npos);
}

TEST(JinjaLimits, NestingDepthIsRefusedByTheParser) {
  EXPECT_EQ(render("{{ " + repeat("(", 100) + "1" + repeat(")", 100) + " }}"), "1");  // a parenthesis is 2 levels
  EXPECT_NE(error_of("{{ " + repeat("(", 300) + "1" + repeat(")", 300) + " }}").find("nested too deeply (more than 256"),
            std::string::npos);
  EXPECT_NE(error_of(repeat("{% if true %}", 300) + repeat("{% endif %}", 300)).find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ " + repeat("[", 300) + repeat("]", 300) + " }}").find("nested too deeply"), std::string::npos);
}

// Depth 256 times 250 nested blocks per call is more than a thread's stack holds: the render stops
// before the stack does (this crashed with a stack overflow before the interpreter watched it).
TEST(JinjaLimits, MacroRecursionThroughNestedBlocksStopsBeforeTheStackOverflows) {
  const std::string src = "{% macro f(n) %}" + repeat("{% if true %}", 250) + "{{ f(n + 1) }}" +
                          repeat("{% endif %}", 250) + "{% endmacro %}{{ f(0) }}";
  const std::string err = error_of(src);
  EXPECT_TRUE(err.find("nested too deeply") != std::string::npos || err.find("maximum recursion depth") != std::string::npos)
      << err;
}

TEST(JinjaLimits, OutputSizeIsBoundedCapturesIncluded) {
  RenderLimits l;
  l.max_output_bytes = 10;
  EXPECT_EQ(render("0123456789", l), "0123456789");
  EXPECT_NE(error_of("0123456789{{ 'x' }}", l).find("writes more than 10 bytes"), std::string::npos);
  // 8 bytes captured by the set block, then 8 printed: 16 written.
  EXPECT_NE(error_of("{% set x %}{{ 'a' * 8 }}{% endset %}{{ x }}", l), "");
  EXPECT_NE(error_of("{% macro m() %}aaaaaa{% endmacro %}{{ m() }}", l), "");
  const std::string err = error_of("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}");
  EXPECT_NE(err.find("writes more than 4194304 bytes"), std::string::npos) << err;
}

// The issue's two runaway templates: a list and a string doubled in a loop. Each operation stays
// under its own cap, but their sum grew to gigabytes (a list doubled 24 times took 2.4 s and 1.6 GB,
// 30 times never finished; a string doubled 29 times took 6 s and 1.8 GB). The render's budget of
// values refuses both as soon as what they built passes it.
TEST(JinjaLimits, ValuesBuiltInALoopAreBoundedInTotal) {
  const std::string list = "{% set ns = namespace(l=[1]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}"
                           "{% endfor %}{{ ns.l | length }}";
  std::string err = error_of(list);
  EXPECT_NE(err.find("builds more than 2097152 list, tuple and dict elements"), std::string::npos) << err;
  EXPECT_NE(err.find("line 1"), std::string::npos) << err;
  for (const char* op : {"+", "~"}) {
    const std::string str = std::string("{% set ns = namespace(s='x') %}{% for i in range(29) %}{% set ns.s = ns.s ") + op +
                            " ns.s %}{% endfor %}{{ ns.s | length }}";
    err = error_of(str);
    EXPECT_NE(err.find("builds more than 67108864 bytes of strings"), std::string::npos) << op << ": " << err;
  }
  // Doubled fewer times, both fit.
  EXPECT_EQ(render("{% set ns = namespace(l=[1]) %}{% for i in range(16) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"
                   "{{ ns.l | length }}"),
            "65536");
}

TEST(JinjaLimits, ValueBudgetCountsStringsListsDictsAndLoopCopies) {
  RenderLimits l;
  l.max_value_bytes = 1000;
  EXPECT_EQ(render("{{ ('x' * 100) | length }}", l), "100");
  // Refused before the string is made, not after.
  EXPECT_NE(error_of("{{ 'x' * 1001 }}", l).find("more than 1000 bytes of strings"), std::string::npos);
  EXPECT_NE(error_of("{{ 'ab'.replace('a', 'y' * 600) | length }}{{ 'x'.center(2000) }}", l), "");
  EXPECT_NE(error_of("{{ 'x'.center(10 ** 12) }}", l).find("more than 1000 bytes"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x'.zfill(10 ** 12) }}", l).find("more than 1000 bytes"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a\nb' | indent(10 ** 12) }}", l).find("more than 1000 bytes"), std::string::npos);
  EXPECT_NE(error_of("{{ '%9999s' % 'x' }}", l).find("more than 1000 bytes"), std::string::npos);
  // A list of copies holds each copy's bytes (strings past the short-string size live apart).
  EXPECT_NE(error_of("{% set s = 'x' * 100 %}{{ ([s] * 20) | length }}", l), "");
  l = {};
  l.max_value_elements = 100;
  EXPECT_EQ(render("{{ ([1] * 99) | length }}", l), "99");  // [1], then 99
  EXPECT_NE(error_of("{{ ([1] * 101) | length }}", l).find("more than 100 list, tuple and dict elements"), std::string::npos);
  EXPECT_NE(error_of("{% set a = [1] * 60 %}{% set b = a + a %}", l), "");  // refused before the copy
  l.max_value_elements = 2;
  EXPECT_NE(error_of("{{ dict(a=1, b=2, c=3) | length }}", l).find("more than 2 list"), std::string::npos);
  l.max_value_elements = 100;
  // A loop walks a copy of its list: 60 built, then 60 walked.
  EXPECT_NE(error_of("{% set a = [1] * 60 %}{% for x in a %}{% endfor %}", l), "");
  // The budget is one render's: a second render of the same template starts afresh.
  const Template t("{{ ([1] * 60) | length }}");
  RenderOptions opt;
  opt.limits = l;
  EXPECT_EQ(t.render(ordered_json::object(), opt), "60");
  EXPECT_EQ(t.render(ordered_json::object(), opt), "60");
}

// The render's variables are read before it starts and are not charged: a conversation larger than
// the budget still renders when the template only prints it.
TEST(JinjaLimits, VariablesAreNotChargedToTheBudget) {
  RenderLimits l;
  l.max_value_bytes = 1000;
  l.max_value_elements = 10;
  RenderOptions opt;
  opt.now = std::tm{};
  opt.limits = l;
  ordered_json vars = {{"big", std::string(5000, 'x')}, {"items", ordered_json::array()}};
  for (int i = 0; i < 50; ++i) vars["items"].push_back(i);
  EXPECT_EQ(Template("{{ big | length }} {{ items | length }} {{ items[-1] }}").render(vars, opt), "5000 50 49");
}

}  // namespace
}  // namespace npullm::genai::jinja
