// Syntax tree of a parsed template. Expressions evaluate to a Value; statements write text.
// The node classes only hold structure; their eval/exec bodies live in interpreter.cpp.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "genai/jinja/value.h"

namespace npullm::genai::jinja {

class Interpreter;

// ---- expressions ----------------------------------------------------------------------------

struct Expr {
  explicit Expr(int line) : line(line) {}
  virtual ~Expr() = default;
  // Evaluates, and stamps this node's line on a TemplateError that does not have one yet.
  Value evaluate(Interpreter& in) const;
  int line;

 protected:
  virtual Value eval(Interpreter& in) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

// Call arguments as written: positional, name=value, *args, **kwargs.
struct CallArgs {
  std::vector<ExprPtr> pos;
  std::vector<std::pair<std::string, ExprPtr>> kw;
  ExprPtr star_args, star_kwargs;
  Args evaluate(Interpreter& in) const;
};

struct ConstExpr : Expr {
  ConstExpr(int line, Value v) : Expr(line), value(std::move(v)) {}
  Value value;
  Value eval(Interpreter& in) const override;
};

struct NameExpr : Expr {
  NameExpr(int line, std::string n) : Expr(line), name(std::move(n)) {}
  std::string name;
  Value eval(Interpreter& in) const override;
};

struct ListExpr : Expr {  // [a, b] or (a, b)
  ListExpr(int line, bool tuple) : Expr(line), tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool tuple;
  Value eval(Interpreter& in) const override;
};

struct DictExpr : Expr {
  using Expr::Expr;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Interpreter& in) const override;
};

struct AttrExpr : Expr {  // obj.name
  AttrExpr(int line, ExprPtr o, std::string n) : Expr(line), obj(std::move(o)), name(std::move(n)) {}
  ExprPtr obj;
  std::string name;
  Value eval(Interpreter& in) const override;
};

struct ItemExpr : Expr {  // obj[index]
  ItemExpr(int line, ExprPtr o, ExprPtr i) : Expr(line), obj(std::move(o)), index(std::move(i)) {}
  ExprPtr obj, index;
  Value eval(Interpreter& in) const override;
};

struct SliceExpr : Expr {  // obj[start:stop:step], each part optional
  using Expr::Expr;
  ExprPtr obj, start, stop, step;
  Value eval(Interpreter& in) const override;
};

struct CallExpr : Expr {
  using Expr::Expr;
  ExprPtr callee;
  CallArgs args;
  Value eval(Interpreter& in) const override;
};

struct FilterExpr : Expr {  // subject | name(args)
  using Expr::Expr;
  ExprPtr subject;  // null in `{% filter %}` and `{% set x | f %}`, where the block text is the subject
  std::string name;
  CallArgs args;
  Value apply(Interpreter& in, const Value& subject_value) const;
  Value eval(Interpreter& in) const override;
};

struct TestExpr : Expr {  // subject is [not] name(args)
  using Expr::Expr;
  ExprPtr subject;
  std::string name;
  CallArgs args;
  bool negated = false;
  Value eval(Interpreter& in) const override;
};

struct UnaryExpr : Expr {  // -x, +x, not x
  UnaryExpr(int line, std::string o, ExprPtr x) : Expr(line), op(std::move(o)), operand(std::move(x)) {}
  std::string op;
  ExprPtr operand;
  Value eval(Interpreter& in) const override;
};

struct BinaryExpr : Expr {  // + - * / // % ** ~ and or
  BinaryExpr(int line, std::string o, ExprPtr l, ExprPtr r) : Expr(line), op(std::move(o)), left(std::move(l)), right(std::move(r)) {}
  std::string op;
  ExprPtr left, right;
  Value eval(Interpreter& in) const override;
};

struct CompareExpr : Expr {  // a < b <= c: chained as in Python; ops == != < <= > >= in notin
  using Expr::Expr;
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;
  Value eval(Interpreter& in) const override;
};

struct CondExpr : Expr {  // then if cond else otherwise
  using Expr::Expr;
  ExprPtr cond, then, otherwise;  // otherwise may be null: the result is then undefined
  Value eval(Interpreter& in) const override;
};

// ---- statements -----------------------------------------------------------------------------

// What a statement asks of the enclosing loop.
enum class Flow { Normal, Break, Continue };

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  explicit Stmt(int line) : line(line) {}
  virtual ~Stmt() = default;
  Flow execute(Interpreter& in, std::string& out) const;  // stamps the line on errors
  int line;

 protected:
  virtual Flow exec(Interpreter& in, std::string& out) const = 0;
};

// Where `set`, `for` and `with` store values: a name, ns.attr, or a tuple to unpack into.
struct Target {
  enum class Kind { Name, Attr, Tuple } kind = Kind::Name;
  std::string name;            // Name / Attr: the variable
  std::string attr;            // Attr: the attribute of the namespace
  std::vector<Target> items;   // Tuple
};

struct TextStmt : Stmt {
  TextStmt(int line, std::string t) : Stmt(line), text(std::move(t)) {}
  std::string text;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct PrintStmt : Stmt {
  PrintStmt(int line, ExprPtr e) : Stmt(line), expr(std::move(e)) {}
  ExprPtr expr;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct IfStmt : Stmt {
  using Stmt::Stmt;
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct ForStmt : Stmt {
  using Stmt::Stmt;
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in xs if cond`; may be null
  Body body, else_body;
  bool recursive = false;
  Flow exec(Interpreter& in, std::string& out) const override;
  // Runs the loop over `iterable` (also what `loop(children)` does in a recursive loop); returns
  // the flow of the `else` body, the only part whose break / continue reaches an outer loop.
  Flow run(Interpreter& in, const Value& iterable, int depth, std::string& out) const;
};

struct SetStmt : Stmt {
  using Stmt::Stmt;
  Target target;
  ExprPtr value;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct SetBlockStmt : Stmt {  // {% set x | filters %}body{% endset %}
  using Stmt::Stmt;
  Target target;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

// What a macro body reads of the implicit variables: Jinja only accepts extra positional / keyword
// arguments when the body uses `varargs` / `kwargs`.
struct MacroUses {
  bool varargs = false, kwargs = false, caller = false;
};

struct MacroStmt : Stmt {
  using Stmt::Stmt;
  std::string name;
  std::vector<MacroParam> params;
  MacroUses uses;
  Body body;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct CallBlockStmt : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  using Stmt::Stmt;
  std::unique_ptr<CallExpr> call;
  std::vector<MacroParam> caller_params;
  MacroUses uses;
  Body body;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct FilterBlockStmt : Stmt {  // {% filter f | g %}body{% endfilter %}
  using Stmt::Stmt;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct WithStmt : Stmt {
  using Stmt::Stmt;
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
  Flow exec(Interpreter& in, std::string& out) const override;
};

struct LoopControlStmt : Stmt {  // break / continue
  LoopControlStmt(int line, Flow f) : Stmt(line), flow(f) {}
  Flow flow;
  Flow exec(Interpreter& in, std::string& out) const override { return flow; }
};

// A block rendered as is: HF's `{% generation %}` marks assistant text for masks and prints it.
struct PassthroughStmt : Stmt {
  using Stmt::Stmt;
  Body body;
  Flow exec(Interpreter& in, std::string& out) const override;
};

}  // namespace npullm::genai::jinja
