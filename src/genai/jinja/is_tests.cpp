// Jinja2's built-in tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...). Type tests
// follow Python's isinstance, with Jinja's exceptions: `integer` excludes booleans, and Undefined
// counts as iterable and as a sequence (it iterates as empty).
#include <fmt/format.h>

#include "genai/jinja/builtins.h"
#include "genai/jinja/interpreter.h"

namespace npullm::genai::jinja {

namespace {

bool no_args(const char* name, Args& args) {
  ArgBinder a(name, args, {});
  return true;
}

bool t_defined(Interpreter&, const Value& v, Args& a) { return no_args("defined", a) && !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, Args& a) { return no_args("undefined", a) && v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, Args& a) { return no_args("none", a) && v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, Args& a) { return no_args("boolean", a) && v.is_bool(); }
bool t_true(Interpreter&, const Value& v, Args& a) { return no_args("true", a) && v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, Args& a) { return no_args("false", a) && v.is_bool() && !v.as_bool(); }
// Jinja's integer test excludes bools, though bool is an int in Python; number includes them.
bool t_integer(Interpreter&, const Value& v, Args& a) { return no_args("integer", a) && v.kind() == Value::Kind::Int; }
bool t_float(Interpreter&, const Value& v, Args& a) { return no_args("float", a) && v.is_float(); }
bool t_number(Interpreter&, const Value& v, Args& a) { return no_args("number", a) && v.is_number(); }
bool t_string(Interpreter&, const Value& v, Args& a) { return no_args("string", a) && v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, Args& a) { return no_args("mapping", a) && v.is_dict(); }
// Undefined iterates (as empty) and has a length in Jinja, so it is iterable and a sequence.
bool t_iterable(Interpreter&, const Value& v, Args& a) {
  return no_args("iterable", a) && (v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() ||
                                    (v.is_object() && v.object().type_name() == "LoopContext"));
}
bool t_sequence(Interpreter&, const Value& v, Args& a) {
  return no_args("sequence", a) && (v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict());
}
bool t_callable(Interpreter&, const Value& v, Args& a) {
  return no_args("callable", a) && (v.is_function() || v.is_undefined() || (v.is_object() && v.object().type_name() == "LoopContext"));
}
bool t_escaped(Interpreter&, const Value&, Args& a) {  // nothing is Markup here: autoescape is off
  no_args("escaped", a);
  return false;
}

bool t_lower(Interpreter& in, const Value& v, Args& a) {
  no_args("lower", a);
  Args none;
  return in.call(*get_method(Value::string(v.str()), "islower"), none).truthy();
}
bool t_upper(Interpreter& in, const Value& v, Args& a) {
  no_args("upper", a);
  Args none;
  return in.call(*get_method(Value::string(v.str()), "isupper"), none).truthy();
}

bool t_even(Interpreter&, const Value& v, Args& a) {
  no_args("even", a);
  return binary_op("%", v, Value::integer(2)).truthy() == false;
}
bool t_odd(Interpreter&, const Value& v, Args& a) {
  no_args("odd", a);
  return binary_op("%", v, Value::integer(2)).truthy();
}
bool t_divisibleby(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("divisibleby", args, {"num"}, 1);
  return !binary_op("%", v, a[0]).truthy();
}

bool t_sameas(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("sameas", args, {"other"}, 1);
  const Value& o = a[0];
  if (v.identity() || o.identity()) return v.identity() == o.identity();
  // Plain values: None, booleans, and equal small ints / strings are the same object in CPython.
  return v.kind() == o.kind() && equals(v, o);
}

template <int Op>
bool t_compare(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("compare", args, {"other"}, 1);
  switch (Op) {
    case 0: return equals(v, a[0]);
    case 1: return !equals(v, a[0]);
    case 2: return compare(v, a[0], "<") < 0;
    case 3: return compare(v, a[0], "<=") <= 0;
    case 4: return compare(v, a[0], ">") > 0;
    default: return compare(v, a[0], ">=") >= 0;
  }
}

bool t_in(Interpreter&, const Value& v, Args& args) {
  ArgBinder a("in", args, {"seq"}, 1);
  return contains(a[0], v);
}

bool t_filter(Interpreter&, const Value& v, Args& a) {
  return no_args("filter", a) && v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, Args& a) {
  return no_args("test", a) && v.is_string() && find_test(v.as_string()) != nullptr;
}

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr NamedTest kTests[] = {
    {"!=", t_compare<1>},     {"<", t_compare<2>},        {"<=", t_compare<3>},      {"==", t_compare<0>},
    {">", t_compare<4>},      {">=", t_compare<5>},       {"boolean", t_boolean},    {"callable", t_callable},
    {"defined", t_defined},   {"divisibleby", t_divisibleby}, {"eq", t_compare<0>},  {"equalto", t_compare<0>},
    {"escaped", t_escaped},   {"even", t_even},           {"false", t_false},        {"filter", t_filter},
    {"float", t_float},       {"ge", t_compare<5>},       {"greaterthan", t_compare<4>}, {"gt", t_compare<4>},
    {"in", t_in},             {"integer", t_integer},     {"iterable", t_iterable},  {"le", t_compare<3>},
    {"lessthan", t_compare<2>}, {"lower", t_lower},       {"lt", t_compare<2>},      {"mapping", t_mapping},
    {"ne", t_compare<1>},     {"none", t_none},           {"number", t_number},      {"odd", t_odd},
    {"sameas", t_sameas},     {"sequence", t_sequence},   {"string", t_string},      {"test", t_test},
    {"true", t_true},         {"undefined", t_undefined}, {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace npullm::genai::jinja
