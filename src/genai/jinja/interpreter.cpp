// Evaluation of expressions and execution of statements (the eval/exec bodies of ast.h), plus the
// Interpreter's shared operations. See interpreter.h for the scoping rules.
#include "genai/jinja/interpreter.h"

#include <pthread.h>

#include <algorithm>

#include <fmt/format.h>

#include "genai/jinja/builtins.h"

namespace npullm::genai::jinja {

namespace {

Value undefined_attr(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", obj.object_type_repr(), name));
}

Value undefined_item(const Value& obj, const Value& key) {
  if (key.is_string()) return undefined_attr(obj, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", obj.object_type_repr(), key.repr()));
}

// The `loop` variable of a for loop. One object per loop, updated in place each iteration, as in
// Jinja (so `{% set outer = loop %}` sees the outer loop advance).
class LoopContext : public Object, public std::enable_shared_from_this<LoopContext> {
 public:
  LoopContext(std::vector<Value> items, int depth, const ForStmt* stmt, std::shared_ptr<Scope> scope)
      : items_(std::move(items)), depth_(depth), stmt_(stmt), scope_(std::move(scope)) {}

  std::string type_name() const override { return "LoopContext"; }
  void clear() override {
    items_.clear();
    scope_.reset();
    last_changed_ = Value();
  }
  std::string repr() const override { return fmt::format("<LoopContext {}/{}>", index0_ + 1, items_.size()); }
  void set_index(size_t i) { index0_ = i; }

  std::optional<Value> get_attr(std::string_view name) const override {
    const auto n = static_cast<int64_t>(items_.size());
    const auto i = static_cast<int64_t>(index0_);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(depth_ + 1);
    if (name == "depth0") return Value::integer(depth_);
    if (name == "previtem")
      return i > 0 && i <= n ? items_[index0_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? items_[index0_ + 1] : Value::undefined("there is no next item");
    auto self = std::const_pointer_cast<LoopContext>(shared_from_this());
    if (name == "cycle")
      return Value::function("cycle", [self](Interpreter&, Args& args) {
        if (args.pos.empty()) throw TemplateError("no items for cycling given");
        return args.pos[self->index0_ % args.pos.size()];
      });
    if (name == "changed")
      return Value::function("changed", [self](Interpreter&, Args& args) {
        Value now = Value::tuple(args.pos);
        if (self->has_last_ && equals(self->last_changed_, now)) return Value::boolean(false);
        self->last_changed_ = now;
        self->has_last_ = true;
        return Value::boolean(true);
      });
    return std::nullopt;
  }

  // `loop(children)` in a recursive loop renders the loop body over `children`, one level deeper.
  Value call_recursive(Interpreter& in, Args& args) const {
    if (!stmt_ || !stmt_->recursive)
      throw TemplateError("Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
    if (args.pos.size() != 1) throw TemplateError("loop() takes exactly one argument");
    Interpreter::CallDepth guard(in);
    std::string out;
    Interpreter::ScopeGuard scope(in, scope_);
    stmt_->run(in, args.pos[0], depth_ + 1, out);
    return Value::string(std::move(out));
  }

 private:
  std::vector<Value> items_;
  size_t index0_ = 0;
  int depth_;
  const ForStmt* stmt_;
  std::shared_ptr<Scope> scope_;  // where the loop statement runs (for recursive calls)
  Value last_changed_;
  bool has_last_ = false;
};

// Binds a macro's (or caller's) parameters in the current scope: positional, then by name, then
// defaults (evaluated in the macro's scope, so they may use earlier parameters); a missing one is
// Undefined, as in Jinja. Extra arguments land in `varargs` / `kwargs`.
void bind_params(Interpreter& in, const std::string& fn, const std::vector<MacroParam>& params, const MacroUses& uses,
                 Args& args) {
  if (args.pos.size() > params.size() && !uses.varargs)
    throw TemplateError(fmt::format("macro '{}' takes not more than {} argument(s)", fn, params.size()));
  std::vector<std::pair<std::string, Value>> kw = std::move(args.kw);
  for (size_t i = 0; i < params.size(); ++i) {
    const MacroParam& p = params[i];
    Value v;
    bool found = false;
    if (i < args.pos.size()) {
      v = args.pos[i];
      found = true;
    }
    for (auto it = kw.begin(); it != kw.end(); ++it)
      if (it->first == p.name) {
        if (found) throw TemplateError(fmt::format("macro '{}' got multiple values for argument '{}'", fn, p.name));
        v = std::move(it->second);
        kw.erase(it);
        found = true;
        break;
      }
    if (!found) v = p.default_value ? p.default_value->evaluate(in) : Value::undefined(fmt::format("parameter '{}' was not provided", p.name));
    in.assign(p.name, std::move(v));
  }
  std::vector<Value> extra;
  for (size_t i = params.size(); i < args.pos.size(); ++i) extra.push_back(args.pos[i]);
  in.assign("varargs", Value::tuple(std::move(extra)));
  auto kwargs = std::make_shared<DictData>();
  for (auto& [k, v] : kw) {
    if (k == "caller") in.assign("caller", v);
    else if (!uses.kwargs) throw TemplateError(fmt::format("macro '{}' takes no keyword argument '{}'", fn, k));
    else kwargs->set(Value::string(k), v);
  }
  in.assign("kwargs", Value::dict(std::move(kwargs)));
}

// A callable that renders `body` with `params` bound, in a child of `closure`.
Value make_macro(const std::string& name, const std::vector<MacroParam>* params, const MacroUses* uses, const Body* body,
                 std::shared_ptr<Scope> closure) {
  return Value::function(name, [name, params, uses, body, closure](Interpreter& in, Args& args) {
    Interpreter::CallDepth guard(in);
    Interpreter::ScopeGuard scope(in, closure);
    bind_params(in, name, *params, *uses, args);
    return Value::string(in.capture(*body));
  });
}

Value apply_filters(Interpreter& in, const std::vector<std::unique_ptr<FilterExpr>>& filters, Value v) {
  for (const auto& f : filters) v = f->apply(in, v);
  return v;
}

}  // namespace

// ---- Interpreter ----------------------------------------------------------------------------

Interpreter::CallDepth::CallDepth(Interpreter& in) : in_(in) {
  if (++in.call_depth_ > in.limits_.max_call_depth) {
    --in.call_depth_;
    throw TemplateError(fmt::format("maximum recursion depth exceeded (more than {} nested macro, caller or loop calls)",
                                    in.limits_.max_call_depth));
  }
}

namespace {

// The lowest address the render may nest down to: the bottom of this thread's stack (stacks grow
// down on every target npullm builds for) plus a reserve for throwing the error and unwinding
// (formatting the message, ASan's own frames). Unknown stack: 1 MiB below here.
// The thread's stack is looked up once per thread (for the main thread glibc reads
// /proc/self/maps, too slow to do at every render).
uintptr_t stack_floor() {
  constexpr uintptr_t kReserve = uintptr_t{256} << 10;
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  thread_local const uintptr_t stack_low = [] {
    pthread_attr_t attr;
    uintptr_t low = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) low = reinterpret_cast<uintptr_t>(addr);
      pthread_attr_destroy(&attr);
    }
    return low;
  }();
  const uintptr_t low = stack_low != 0 && stack_low < here ? stack_low : (here > (uintptr_t{1} << 20) ? here - (uintptr_t{1} << 20) : 0);
  return here - low > 2 * kReserve ? low + kReserve : here - (here - low) / 2;
}

}  // namespace

void Interpreter::stack_exhausted() const {
  throw TemplateError("template nested too deeply: the nesting of macro calls and blocks would overflow the stack");
}

Interpreter::Interpreter(std::shared_ptr<Scope> globals, const std::tm& now, const RenderLimits& limits)
    : scope_(std::move(globals)),
      now_(now),
      limits_(limits),
      budget_(limits.max_value_bytes, limits.max_value_elements),
      stack_floor_(stack_floor()) {
  for (auto s = scope_; s; s = s->parent) track(s);
}

Interpreter::~Interpreter() {
  for (auto& w : objects_)
    if (auto o = w.lock()) o->clear();
  for (auto& w : scopes_)
    if (auto s = w.lock()) {
      s->vars.clear();
      s->parent.reset();
    }
}

// Long loops make many short-lived scopes; dropping expired entries now and then keeps the
// tracking lists proportional to what is alive.
void Interpreter::prune() {
  if (scopes_.size() + objects_.size() < prune_at_) return;
  std::erase_if(scopes_, [](const auto& w) { return w.expired(); });
  std::erase_if(objects_, [](const auto& w) { return w.expired(); });
  prune_at_ = std::max<size_t>(1024, 2 * (scopes_.size() + objects_.size()));
}

void Interpreter::track(const std::shared_ptr<Scope>& s) {
  prune();
  scopes_.push_back(s);
}

void Interpreter::track(const std::shared_ptr<Object>& o) {
  prune();
  objects_.push_back(o);
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

void Interpreter::assign(const Target& target, const Value& v) {
  switch (target.kind) {
    case Target::Kind::Name:
      assign(target.name, v);
      return;
    case Target::Kind::Attr: {
      Value ns = lookup(target.name);
      if (!ns.is_object() || !ns.object().set_attr(target.attr, v))
        throw TemplateError("cannot assign attribute on non-namespace object");
      return;
    }
    case Target::Kind::Tuple: {
      if (v.is_undefined()) v.fail_undefined();
      std::vector<Value> items = iterate(v);
      const size_t n = target.items.size();
      if (items.size() > n) throw TemplateError(fmt::format("too many values to unpack (expected {})", n));
      if (items.size() < n)
        throw TemplateError(fmt::format("not enough values to unpack (expected {}, got {})", n, items.size()));
      for (size_t i = 0; i < n; ++i) assign(target.items[i], items[i]);
      return;
    }
  }
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      obj.fail_undefined();
    case Value::Kind::Dict:
      // Python finds dict methods before keys: {'items': 1}.items is the method.
      if (auto m = get_method(obj, name)) return *m;
      if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
      return undefined_attr(obj, name);
    case Value::Kind::Object:
      if (auto v = obj.object().get_attr(name)) return *v;
      return undefined_attr(obj, name);
    default:
      if (auto m = get_method(obj, name)) return *m;
      return undefined_attr(obj, name);
  }
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined:
      obj.fail_undefined();
    case Value::Kind::Dict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::String:
      if (key.is_int()) {
        const int64_t n = length(obj);
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undefined_item(obj, key);
        if (obj.is_string()) return slice_value(obj, Value::integer(i), Value::integer(i + 1), Value::none());
        return obj.items()[static_cast<size_t>(i)];
      }
      break;
    case Value::Kind::Object:
      if (key.is_string())
        if (auto v = obj.object().get_attr(key.as_string())) return *v;
      return undefined_item(obj, key);
    default:
      break;
  }
  // Jinja falls back to attribute lookup for string keys: x['upper'] is x.upper.
  if (key.is_string())
    if (auto m = get_method(obj, key.as_string())) return *m;
  return undefined_item(obj, key);
}

Value Interpreter::call(const Value& callee, Args& args) {
  switch (callee.kind()) {
    case Value::Kind::Function:
      return callee.function().fn(*this, args);
    case Value::Kind::Undefined:
      callee.fail_undefined();
    case Value::Kind::Object:
      if (auto* loop = dynamic_cast<LoopContext*>(&callee.object())) return loop->call_recursive(*this, args);
      [[fallthrough]];
    default:
      throw TemplateError(fmt::format("'{}' object is not callable", callee.type_name()));
  }
}

Value Interpreter::filter(const std::string& name, const Value& v, Args& args) {
  FilterFn f = find_filter(name);
  if (!f) throw TemplateError(fmt::format("No filter named '{}'.", name));
  return f(*this, v, args);
}

bool Interpreter::test(const std::string& name, const Value& v, Args& args) {
  TestFn t = find_test(name);
  if (!t) throw TemplateError(fmt::format("No test named '{}'.", name));
  return t(*this, v, args);
}

Flow Interpreter::exec(const Body& body, std::string& out) {
  for (const auto& s : body)
    if (Flow f = s->execute(*this, out); f != Flow::Normal) return f;
  return Flow::Normal;
}

std::string Interpreter::capture(const Body& body) {
  std::string out;
  exec(body, out);
  return out;
}

void Interpreter::emit(std::string& out, std::string_view text) {
  if (text.size() > limits_.max_output_bytes - emitted_)
    throw TemplateError(fmt::format("the template writes more than {} bytes, the limit of its output (captured "
                                    "blocks and macro bodies included)", limits_.max_output_bytes));
  emitted_ += text.size();
  out += text;
}

void Interpreter::count_iteration() {
  if (++iterations_ > limits_.max_loop_iterations)
    throw TemplateError(fmt::format("the template runs more than {} loop iterations, the limit of one render",
                                    limits_.max_loop_iterations));
}

// ---- expressions ----------------------------------------------------------------------------

Value Expr::evaluate(Interpreter& in) const {
  in.check_stack();
  try {
    return eval(in);
  } catch (TemplateError& e) {
    if (!e.line) e.line = line;
    throw;
  }
}

Args CallArgs::evaluate(Interpreter& in) const {
  Args a;
  for (const auto& e : pos) a.pos.push_back(e->evaluate(in));
  if (star_args)
    for (auto& v : iterate(star_args->evaluate(in))) a.pos.push_back(std::move(v));
  for (const auto& [k, e] : kw) a.kw.emplace_back(k, e->evaluate(in));
  if (star_kwargs) {
    const Value d = star_kwargs->evaluate(in);
    if (!d.is_dict()) throw TemplateError("argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict().items) a.kw.emplace_back(k.str(), v);
  }
  return a;
}

Value ConstExpr::eval(Interpreter&) const { return value; }

Value NameExpr::eval(Interpreter& in) const { return in.lookup(name); }

Value ListExpr::eval(Interpreter& in) const {
  std::vector<Value> v;
  v.reserve(items.size());
  for (const auto& e : items) v.push_back(e->evaluate(in));
  return tuple ? Value::tuple(std::move(v)) : Value::list(std::move(v));
}

Value DictExpr::eval(Interpreter& in) const {
  auto d = std::make_shared<DictData>();
  for (const auto& [k, v] : items) {
    Value key = k->evaluate(in);
    if (key.is_list()) throw TemplateError("unhashable type: 'list'");
    d->set(key, v->evaluate(in));
  }
  return Value::dict(std::move(d));
}

Value AttrExpr::eval(Interpreter& in) const { return in.get_attr(obj->evaluate(in), name); }

Value ItemExpr::eval(Interpreter& in) const {
  Value o = obj->evaluate(in);
  return in.get_item(o, index->evaluate(in));
}

Value SliceExpr::eval(Interpreter& in) const {
  Value o = obj->evaluate(in);
  auto part = [&](const ExprPtr& e) { return e ? e->evaluate(in) : Value::none(); };
  Value a = part(start), b = part(stop), c = part(step);
  if (o.is_undefined()) o.fail_undefined();
  return slice_value(o, a, b, c);
}

Value CallExpr::eval(Interpreter& in) const {
  Value f = callee->evaluate(in);
  Args a = args.evaluate(in);
  return in.call(f, a);
}

Value FilterExpr::apply(Interpreter& in, const Value& subject_value) const {
  Args a = args.evaluate(in);
  return in.filter(name, subject_value, a);
}

Value FilterExpr::eval(Interpreter& in) const { return apply(in, subject->evaluate(in)); }

Value TestExpr::eval(Interpreter& in) const {
  Value v = subject->evaluate(in);
  Args a = args.evaluate(in);
  return Value::boolean(in.test(name, v, a) != negated);
}

Value UnaryExpr::eval(Interpreter& in) const {
  Value v = operand->evaluate(in);
  if (op == "not") return Value::boolean(!v.truthy());
  return unary_op(op, v);
}

Value BinaryExpr::eval(Interpreter& in) const {
  // and / or return an operand, as in Python: `x or 'default'`.
  if (op == "and") {
    Value l = left->evaluate(in);
    return l.truthy() ? right->evaluate(in) : l;
  }
  if (op == "or") {
    Value l = left->evaluate(in);
    return l.truthy() ? l : right->evaluate(in);
  }
  Value l = left->evaluate(in);
  Value r = right->evaluate(in);
  if (op == "~") {  // str() of Undefined is "": no error
    // Strings are read where they are and the result is built once, at its size, after the budget
    // has seen it: a template doubling a string copies each byte once, not three times.
    std::string la, rb;
    const std::string& a = l.is_string() ? l.as_string() : (la = l.str());
    const std::string& b = r.is_string() ? r.as_string() : (rb = r.str());
    ValueBudget::check_fits(a.size() + b.size());
    std::string s;
    s.reserve(a.size() + b.size());
    s.append(a).append(b);
    return Value::string(std::move(s));
  }
  return binary_op(op, l, r);
}

Value CompareExpr::eval(Interpreter& in) const {
  Value l = first->evaluate(in);
  for (const auto& [op, e] : rest) {
    Value r = e->evaluate(in);
    bool ok;
    if (op == "==") ok = equals(l, r);
    else if (op == "!=") ok = !equals(l, r);
    else if (op == "in") ok = contains(r, l);
    else if (op == "notin") ok = !contains(r, l);
    else {
      const int c = compare(l, r, op);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::boolean(false);
    l = std::move(r);
  }
  return Value::boolean(true);
}

Value CondExpr::eval(Interpreter& in) const {
  if (cond->evaluate(in).truthy()) return then->evaluate(in);
  if (otherwise) return otherwise->evaluate(in);
  return Value::undefined(fmt::format(
      "the inline if-expression on line {} evaluated to false and no else section was defined.", line));
}

// ---- statements -----------------------------------------------------------------------------

Flow Stmt::execute(Interpreter& in, std::string& out) const {
  in.check_stack();
  try {
    return exec(in, out);
  } catch (TemplateError& e) {
    if (!e.line) e.line = line;
    throw;
  }
}

Flow TextStmt::exec(Interpreter& in, std::string& out) const {
  in.emit(out, text);
  return Flow::Normal;
}

Flow PrintStmt::exec(Interpreter& in, std::string& out) const {
  in.emit(out, expr->evaluate(in).str());
  return Flow::Normal;
}

Flow IfStmt::exec(Interpreter& in, std::string& out) const {
  for (const auto& [cond, body] : branches)
    if (cond->evaluate(in).truthy()) return in.exec(body, out);
  return in.exec(else_body, out);
}

Flow ForStmt::exec(Interpreter& in, std::string& out) const {
  return run(in, iter->evaluate(in), 0, out);
}

Flow ForStmt::run(Interpreter& in, const Value& iterable, int depth, std::string& out) const {
  std::vector<Value> items = iterate(iterable);
  // The `if` filter runs before the loop, so loop.length / loop.last count only kept items.
  if (filter) {
    std::vector<Value> kept;
    for (auto& item : items) {
      in.count_iteration();
      Interpreter::ScopeGuard scope(in);
      in.assign(target, item);
      if (filter->evaluate(in).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  // `else` runs when nothing was iterated; a break / continue in it belongs to an enclosing loop.
  if (items.empty()) return in.exec(else_body, out);
  auto loop = std::make_shared<LoopContext>(items, depth, this, in.scope());
  in.track(loop);
  const Value loop_value = Value::object(loop);
  for (size_t i = 0; i < items.size(); ++i) {
    in.count_iteration();
    Interpreter::ScopeGuard scope(in);  // each iteration starts from a fresh scope
    loop->set_index(i);
    in.assign(target, items[i]);
    in.assign("loop", loop_value);
    if (in.exec(body, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

Flow SetStmt::exec(Interpreter& in, std::string&) const {
  in.assign(target, value->evaluate(in));
  return Flow::Normal;
}

Flow SetBlockStmt::exec(Interpreter& in, std::string&) const {
  Value v = Value::string(in.capture(body));
  in.assign(target, apply_filters(in, filters, std::move(v)));
  return Flow::Normal;
}

Flow MacroStmt::exec(Interpreter& in, std::string&) const {
  in.assign(name, make_macro(name, &params, &uses, &body, in.scope()));
  return Flow::Normal;
}

Flow CallBlockStmt::exec(Interpreter& in, std::string& out) const {
  Value callee = call->callee->evaluate(in);
  Args a = call->args.evaluate(in);
  a.kw.emplace_back("caller", make_macro("caller", &caller_params, &uses, &body, in.scope()));
  in.emit(out, in.call(callee, a).str());
  return Flow::Normal;
}

Flow FilterBlockStmt::exec(Interpreter& in, std::string& out) const {
  in.emit(out, apply_filters(in, filters, Value::string(in.capture(body))).str());
  return Flow::Normal;
}

Flow WithStmt::exec(Interpreter& in, std::string& out) const {
  std::vector<Value> values;  // evaluated in the outer scope, before any is bound
  for (const auto& a : assignments) values.push_back(a.second->evaluate(in));
  Interpreter::ScopeGuard scope(in);
  for (size_t i = 0; i < values.size(); ++i) in.assign(assignments[i].first, values[i]);
  return in.exec(body, out);
}

Flow PassthroughStmt::exec(Interpreter& in, std::string& out) const { return in.exec(body, out); }

}  // namespace npullm::genai::jinja
