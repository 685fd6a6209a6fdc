// Parser: recursive descent over the token list, one function per precedence level (see parser.h).
#include "genai/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>

#include "genai/jinja/lexer.h"
#include "genai/jinja/template.h"

namespace npullm::genai::jinja {

namespace {

// Deep nesting would overflow the C++ stack; Jinja (Python) would hit its recursion limit.
constexpr int kMaxNesting = kMaxTemplateNesting;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_all() {
    Body body = parse_body({});
    return body;
  }

 private:
  // ---- token stream -------------------------------------------------------------------------

  const Token& cur() const { return toks_[pos_]; }
  const Token& look(size_t ahead = 1) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& advance() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::Operator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const std::string& msg) const { throw TemplateError(msg, cur().line); }
  [[noreturn]] void fail_unexpected() const { fail(fmt::format("unexpected '{}'", describe(cur()))); }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected token '{}', got '{}'", op, describe(cur())));
  }
  const Token& expect(TokenType type, std::string_view what) {
    if (cur().type != type) fail(fmt::format("expected token '{}', got '{}'", what, describe(cur())));
    return advance();
  }
  std::string expect_name() { return expect(TokenType::Name, "name").text; }
  void expect_block_end() { expect(TokenType::BlockEnd, "end of statement block"); }

  // ---- statements ---------------------------------------------------------------------------

  // Parses template text and tags until a block tag named in `end_tags` (left as the current
  // token, just after its `{%`) or, when `end_tags` is empty, the end of the template.
  Body parse_body(std::initializer_list<std::string_view> end_tags) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::Data:
          body.push_back(std::make_unique<TextStmt>(t.line, t.text));
          advance();
          break;
        case TokenType::VarBegin: {
          advance();
          const int line = cur().line;
          ExprPtr e = parse_tuple(true, false, {});
          expect(TokenType::VarEnd, "end of print statement");
          body.push_back(std::make_unique<PrintStmt>(line, std::move(e)));
          break;
        }
        case TokenType::BlockBegin: {
          advance();
          if (cur().type != TokenType::Name) fail("tag name expected");
          if (std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end()) return body;
          body.push_back(parse_statement());
          break;
        }
        case TokenType::Eof:
          if (end_tags.size() != 0)
            fail(fmt::format("Unexpected end of template. Jinja was looking for the following tags: {}. "
                             "The innermost block that needs to be closed is '{}'.",
                             quoted_list(end_tags), blocks_.back()));
          return body;
        default:
          fail_unexpected();
      }
    }
  }

  static std::string quoted_list(std::initializer_list<std::string_view> names) {
    std::string out;
    for (auto n : names) {
      if (!out.empty()) out += " or ";
      out += fmt::format("'{}'", n);
    }
    return out;
  }

  // Parses the body of a block statement up to one of `end_tags`; returns the tag that closed it.
  std::string parse_block_body(const char* block, std::initializer_list<std::string_view> end_tags, Body& body) {
    blocks_.push_back(block);
    ends_.push_back(quoted_list(end_tags));
    body = parse_body(end_tags);
    blocks_.pop_back();
    ends_.pop_back();
    return advance().text;
  }

  StmtPtr parse_statement() {
    const Token& tag = cur();
    const int line = tag.line;
    const std::string name = tag.text;
    if (++nesting_ > kMaxNesting) fail(fmt::format("template nested too deeply (more than {} levels of blocks and expressions)", kMaxNesting));
    StmtPtr s;
    advance();
    if (name == "if") s = parse_if(line);
    else if (name == "for") s = parse_for(line);
    else if (name == "set") s = parse_set(line);
    else if (name == "macro") s = parse_macro(line);
    else if (name == "call") s = parse_call_block(line);
    else if (name == "filter") s = parse_filter_block(line);
    else if (name == "with") s = parse_with(line);
    else if (name == "generation") s = parse_generation(line);
    else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) throw TemplateError(fmt::format("'{}' outside loop", name), line);
      expect_block_end();
      s = std::make_unique<LoopControlStmt>(line, name == "break" ? Flow::Break : Flow::Continue);
    } else {
      std::string msg = fmt::format("Encountered unknown tag '{}'.", name);
      if (!blocks_.empty())
        msg += fmt::format(" Jinja was looking for the following tags: {}. The innermost block that needs to be closed is '{}'.",
                           ends_.back(), blocks_.back());
      throw TemplateError(msg, line);
    }
    --nesting_;
    return s;
  }

  StmtPtr parse_if(int line) {
    auto node = std::make_unique<IfStmt>(line);
    while (true) {
      ExprPtr cond = parse_tuple(false, false, {});
      expect_block_end();
      Body body;
      const std::string end = parse_block_body("if", {"elif", "else", "endif"}, body);
      node->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        parse_block_body("if", {"endif"}, node->else_body);
      }
      break;
    }
    expect_block_end();
    return node;
  }

  StmtPtr parse_for(int line) {
    auto node = std::make_unique<ForStmt>(line);
    node->target = parse_target(false, {"in"});
    if (!skip_name("in")) fail(fmt::format("expected token 'in', got '{}'", describe(cur())));
    node->iter = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) node->filter = parse_expression(true);
    node->recursive = skip_name("recursive");
    expect_block_end();
    ++loop_depth_;
    const std::string end = parse_block_body("for", {"endfor", "else"}, node->body);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      parse_block_body("for", {"endfor"}, node->else_body);
    }
    expect_block_end();
    return node;
  }

  StmtPtr parse_set(int line) {
    Target target = parse_target(true, {});
    if (skip_op("=")) {
      auto node = std::make_unique<SetStmt>(line);
      node->target = std::move(target);
      node->value = parse_tuple(true, false, {});
      expect_block_end();
      return node;
    }
    auto node = std::make_unique<SetBlockStmt>(line);
    node->target = std::move(target);
    while (skip_op("|")) node->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    parse_block_body("set", {"endset"}, node->body);
    expect_block_end();
    return node;
  }

  std::vector<MacroParam> parse_signature() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      else if (!params.empty() && params.back().default_value) fail("non-default argument follows default argument");
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  // Macro and call bodies are functions: a `break` inside them cannot reach an enclosing loop.
  template <typename F>
  void in_function(MacroUses& uses, F&& f) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    macro_uses_.push_back(&uses);
    f();
    macro_uses_.pop_back();
    loop_depth_ = saved;
  }

  StmtPtr parse_macro(int line) {
    auto node = std::make_unique<MacroStmt>(line);
    node->name = expect_name();
    node->params = parse_signature();
    expect_block_end();
    in_function(node->uses, [&] { parse_block_body("macro", {"endmacro"}, node->body); });
    expect_block_end();
    return node;
  }

  StmtPtr parse_call_block(int line) {
    auto node = std::make_unique<CallBlockStmt>(line);
    if (is_op("(")) node->caller_params = parse_signature();
    ExprPtr e = parse_expression(true);
    auto* call = dynamic_cast<CallExpr*>(e.get());
    if (!call) fail("expected call");
    e.release();
    node->call.reset(call);
    expect_block_end();
    in_function(node->uses, [&] { parse_block_body("call", {"endcall"}, node->body); });
    expect_block_end();
    return node;
  }

  StmtPtr parse_filter_block(int line) {
    auto node = std::make_unique<FilterBlockStmt>(line);
    do {
      node->filters.push_back(parse_filter(nullptr));
    } while (skip_op("|"));
    expect_block_end();
    parse_block_body("filter", {"endfilter"}, node->body);
    expect_block_end();
    return node;
  }

  StmtPtr parse_with(int line) {
    auto node = std::make_unique<WithStmt>(line);
    while (cur().type != TokenType::BlockEnd) {
      if (!node->assignments.empty()) expect_op(",");
      Target t = parse_target(false, {});
      expect_op("=");
      node->assignments.emplace_back(std::move(t), parse_expression(true));
    }
    expect_block_end();
    parse_block_body("with", {"endwith"}, node->body);
    expect_block_end();
    return node;
  }

  StmtPtr parse_generation(int line) {
    auto node = std::make_unique<PassthroughStmt>(line);
    expect_block_end();
    parse_block_body("generation", {"endgeneration"}, node->body);
    expect_block_end();
    return node;
  }

  // An assignment target: `name`, `a, b`, `(a, b)`, and with `allow_ns` also `ns.attr`.
  Target parse_target(bool allow_ns, std::initializer_list<std::string_view> end_names) {
    if (allow_ns && cur().type == TokenType::Name && look().type == TokenType::Operator && look().text == ".") {
      Target t;
      t.kind = Target::Kind::Attr;
      t.name = expect_name();
      advance();  // .
      t.attr = expect_name();
      return t;
    }
    Target tuple;
    tuple.kind = Target::Kind::Tuple;
    bool is_tuple = false;
    while (true) {
      if (!tuple.items.empty()) expect_op(",");
      if (cur().type == TokenType::BlockEnd || is_op("=") || is_op(")") ||
          (cur().type == TokenType::Name && std::find(end_names.begin(), end_names.end(), cur().text) != end_names.end()))
        break;
      tuple.items.push_back(parse_target_primary());
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (tuple.items.empty()) fail(fmt::format("can't assign to '{}'", describe(cur())));
    if (!is_tuple) return std::move(tuple.items.front());
    return tuple;
  }

  Target parse_target_primary() {
    if (skip_op("(")) {  // `(a, b)`; `(a)` is just `a`
      Target t = parse_target(false, {});
      expect_op(")");
      return t;
    }
    if (cur().type != TokenType::Name) fail(fmt::format("can't assign to '{}'", describe(cur())));
    static constexpr std::string_view reserved[] = {"true", "false", "none", "True", "False", "None"};
    if (std::find(std::begin(reserved), std::end(reserved), cur().text) != std::end(reserved))
      fail(fmt::format("can't assign to constant '{}'", cur().text));
    Target t;
    t.name = advance().text;
    return t;
  }

  // ---- expressions --------------------------------------------------------------------------

  struct Depth {  // guards recursion depth while parsing nested expressions
    explicit Depth(Parser& p) : p(p) {
      if (++p.nesting_ > kMaxNesting) p.fail(fmt::format("expression nested too deeply (more than {} levels of blocks and expressions)", kMaxNesting));
    }
    ~Depth() { --p.nesting_; }
    Parser& p;
  };

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd || t.type == TokenType::Eof) return true;
    if (t.type == TokenType::Operator && t.text == ")") return true;
    return t.type == TokenType::Name && std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
  }

  // Comma-separated expressions: one without a comma is itself, otherwise a tuple.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, std::initializer_list<std::string_view> extra_end) {
    const int line = cur().line;
    auto tuple = std::make_unique<ListExpr>(line, true);
    bool is_tuple = false;
    while (true) {
      if (!tuple->items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      tuple->items.push_back(parse_expression(with_condexpr));
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!tuple->items.empty()) return std::move(tuple->items.front());
      if (!explicit_parens) fail(fmt::format("Expected an expression, got '{}'", describe(cur())));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Depth d(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      advance();
      auto c = std::make_unique<CondExpr>(line);
      c->then = std::move(e);
      c->cond = parse_or();
      if (skip_name("else")) c->otherwise = parse_expression(true);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = advance().line;
      left = std::make_unique<BinaryExpr>(line, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = advance().line;
      left = std::make_unique<BinaryExpr>(line, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth d(*this);
      const int line = advance().line;
      return std::make_unique<UnaryExpr>(line, "not", parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      std::string op;
      const Token& t = cur();
      if (t.type == TokenType::Operator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && look().type == TokenType::Name && look().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = std::make_unique<CompareExpr>(line);
        cmp->first = std::move(first);
      }
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return first;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = advance();
      const int line = t.line;
      std::string op = t.text;
      left = std::make_unique<BinaryExpr>(line, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = advance().line;
      left = std::make_unique<BinaryExpr>(line, "~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = advance();
      const int line = t.line;
      std::string op = t.text;
      left = std::make_unique<BinaryExpr>(line, op, std::move(left), parse_pow());
    }
    return left;
  }

  // Jinja's ** is left-associative: 2 ** 3 ** 2 == 64.
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = advance().line;
      left = std::make_unique<BinaryExpr>(line, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  // Unary minus binds tighter than filters: `-x|abs` is abs(-x), `-xs|length` negates the list.
  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = advance();
      const int line = t.line;
      std::string op = t.text;
      node = std::make_unique<UnaryExpr>(line, op, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case TokenType::Name: {
        const std::string n = advance().text;
        if (n == "true" || n == "True") return std::make_unique<ConstExpr>(line, Value::boolean(true));
        if (n == "false" || n == "False") return std::make_unique<ConstExpr>(line, Value::boolean(false));
        if (n == "none" || n == "None") return std::make_unique<ConstExpr>(line, Value::none());
        if (!macro_uses_.empty()) {  // note what the innermost macro body reads of its implicit variables
          if (n == "varargs") macro_uses_.back()->varargs = true;
          if (n == "kwargs") macro_uses_.back()->kwargs = true;
          if (n == "caller") macro_uses_.back()->caller = true;
        }
        return std::make_unique<NameExpr>(line, n);
      }
      case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) s += advance().text;  // 'a' 'b' == 'ab'
        return std::make_unique<ConstExpr>(line, Value::string(std::move(s)));
      }
      case TokenType::Integer:
        return std::make_unique<ConstExpr>(line, Value::integer(advance().int_value));
      case TokenType::Float:
        return std::make_unique<ConstExpr>(line, Value::floating(advance().float_value));
      case TokenType::Operator:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, true, {});
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail_unexpected();
  }

  ExprPtr parse_list() {
    auto node = std::make_unique<ListExpr>(cur().line, false);
    expect_op("[");
    while (!is_op("]")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op("]")) break;
      node->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return node;
  }

  ExprPtr parse_dict() {
    auto node = std::make_unique<DictExpr>(cur().line);
    expect_op("{");
    while (!is_op("}")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      node->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return node;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        advance();
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = advance();
    const int line = t.line;
    if (t.text == ".") {
      const Token& attr = cur();
      if (attr.type == TokenType::Name) {
        std::string name = advance().text;
        return std::make_unique<AttrExpr>(line, std::move(node), std::move(name));
      }
      if (attr.type == TokenType::Integer) {
        auto idx = std::make_unique<ConstExpr>(line, Value::integer(advance().int_value));
        return std::make_unique<ItemExpr>(line, std::move(node), std::move(idx));
      }
      fail("expected name or number");
    }
    // '[': one index or slice; several comma-separated indices form a tuple key.
    std::vector<ExprPtr> parts;
    std::unique_ptr<SliceExpr> slice;
    while (!is_op("]")) {
      if (!parts.empty() || slice) expect_op(",");
      if (is_op("]")) break;
      ExprPtr start;
      if (!is_op(":")) {
        start = parse_expression(true);
        if (!is_op(":")) {
          parts.push_back(std::move(start));
          continue;
        }
      }
      advance();  // ':'
      if (slice || !parts.empty()) fail("slices inside a multi-index subscript are not supported");
      slice = std::make_unique<SliceExpr>(line);
      slice->start = std::move(start);
      if (!is_op("]") && !is_op(",") && !is_op(":")) slice->stop = parse_expression(true);
      if (skip_op(":") && !is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    }
    expect_op("]");
    if (slice) {
      if (!parts.empty()) fail("slices inside a multi-index subscript are not supported");
      slice->obj = std::move(node);
      return slice;
    }
    if (parts.empty()) fail("expected an index");
    ExprPtr index;
    if (parts.size() == 1) {
      index = std::move(parts.front());
    } else {
      auto tuple = std::make_unique<ListExpr>(line, true);
      tuple->items = std::move(parts);
      index = std::move(tuple);
    }
    return std::make_unique<ItemExpr>(line, std::move(node), std::move(index));
  }

  CallArgs parse_call_args() {
    CallArgs args;
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        args.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        args.star_kwargs = parse_expression(true);
      } else if (cur().type == TokenType::Name && look().type == TokenType::Operator && look().text == "=") {
        std::string key = advance().text;
        advance();  // '='
        args.kw.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.kw.empty() || args.star_kwargs) fail("positional argument follows keyword argument");
        args.pos.push_back(parse_expression(true));
      }
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto node = std::make_unique<CallExpr>(cur().line);
    node->callee = std::move(callee);
    node->args = parse_call_args();
    return node;
  }

  // After '|': name(.name)* [(args)].
  std::unique_ptr<FilterExpr> parse_filter(ExprPtr subject) {
    auto node = std::make_unique<FilterExpr>(cur().line);
    node->subject = std::move(subject);
    node->name = expect_name();
    while (is_op(".")) {
      advance();
      node->name += "." + expect_name();
    }
    if (is_op("(")) node->args = parse_call_args();
    return node;
  }

  // `is [not] name`, with arguments in parentheses or one bare argument (`is divisibleby 3`).
  ExprPtr parse_test(ExprPtr subject) {
    auto node = std::make_unique<TestExpr>(cur().line);
    advance();  // is
    node->subject = std::move(subject);
    node->negated = skip_name("not");
    node->name = expect_name();
    while (is_op(".")) {
      advance();
      node->name += "." + expect_name();
    }
    const Token& t = cur();
    const bool bare_arg = (t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Integer ||
                           t.type == TokenType::Float || (t.type == TokenType::Operator && (t.text == "[" || t.text == "{"))) &&
                          !(t.type == TokenType::Name && (t.text == "else" || t.text == "or" || t.text == "and"));
    if (is_op("(")) {
      node->args = parse_call_args();
    } else if (bare_arg) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      node->args.pos.push_back(parse_postfix(parse_primary()));
    }
    return node;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;  // for break/continue checks
  int nesting_ = 0;
  std::vector<MacroUses*> macro_uses_;  // macros being parsed, innermost last
  std::vector<const char*> blocks_;  // open block statements, for "needs to be closed" messages
  std::vector<std::string> ends_;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse_all(); }

}  // namespace npullm::genai::jinja
