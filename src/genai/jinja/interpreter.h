// The render-time state (variable scopes, the clock strftime_now sees) and the operations whose
// Jinja semantics every node shares: attribute / item lookup, calls, filters, tests.
//
// Scoping follows Jinja2: the template's top level and `if` blocks share one scope; every `for`
// iteration, macro call, call block and `with` block gets a child scope whose assignments vanish
// with it (so `set` inside a loop does not leak out; namespace() objects are how templates carry
// state out of loops). Lookups walk outwards; macros see their defining scope at call time.
#pragma once
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "genai/jinja/ast.h"
#include "genai/jinja/template.h"
#include "genai/jinja/value.h"

namespace npullm::genai::jinja {

struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent(std::move(parent)) {}
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Interpreter {
 public:
  // `globals` holds the template's globals and render variables; `now` is what strftime_now formats;
  // `limits` bounds the render (see RenderLimits in template.h).
  Interpreter(std::shared_ptr<Scope> globals, const std::tm& now, const RenderLimits& limits = {});
  // Values may form cycles through scopes (a macro lives in the scope it closes over) and objects
  // (namespaces); every scope and object made during the render is tracked and unlinked here.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  void track(const std::shared_ptr<Scope>& s);
  void track(const std::shared_ptr<Object>& o);

  // ---- variables ----
  Value lookup(const std::string& name) const;  // Undefined ("'x' is undefined") when absent
  void assign(const std::string& name, Value v) { scope_->vars[name] = std::move(v); }
  void assign(const Target& target, const Value& v);
  const std::shared_ptr<Scope>& scope() const { return scope_; }

  // Makes a child of `parent` (default: the current scope) current until destroyed.
  class ScopeGuard {
   public:
    explicit ScopeGuard(Interpreter& in, std::shared_ptr<Scope> parent = nullptr)
        : in_(in), saved_(in.scope_) {
      in.scope_ = std::make_shared<Scope>(parent ? std::move(parent) : saved_);
      in.track(in.scope_);
    }
    ~ScopeGuard() { in_.scope_ = std::move(saved_); }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;

   private:
    Interpreter& in_;
    std::shared_ptr<Scope> saved_;
  };

  // ---- operations with Jinja2 (sandboxed) semantics ----
  // obj.name: a method of str/list/dict, else a dict key / object attribute, else Undefined.
  Value get_attr(const Value& obj, const std::string& name);
  // obj[key]: a dict key / sequence index, else (for a string key) an attribute, else Undefined.
  Value get_item(const Value& obj, const Value& key);
  Value call(const Value& callee, Args& args);
  Value filter(const std::string& name, const Value& v, Args& args);
  bool test(const std::string& name, const Value& v, Args& args);

  // Runs statements until one asks the enclosing loop to break or continue.
  Flow exec(const Body& body, std::string& out);
  // Renders `body` into a fresh string (block set, filter blocks, macro bodies).
  std::string capture(const Body& body);
  // Appends rendered text to `out` (the output or a capture), within max_output_bytes in total.
  void emit(std::string& out, std::string_view text);
  // Counts one iteration of a for loop (or one item its `if` filter tests), within
  // max_loop_iterations in total.
  void count_iteration();

  const std::tm& now() const { return now_; }

  // Throws "nested too deeply" when this thread's stack is nearly used up. Statements and
  // expressions call it as they nest: max_call_depth bounds macro calls, the parser bounds the
  // nesting inside one template, but a macro of deeply nested blocks calling itself multiplies
  // the two, and only the stack itself can say when that is too much.
  void check_stack() const {
    if (reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) < stack_floor_) stack_exhausted();
  }

  // Macro recursion is bounded (max_call_depth) so that a runaway template fails instead of
  // overflowing the stack.
  class CallDepth {
   public:
    explicit CallDepth(Interpreter& in);
    ~CallDepth() { --in_.call_depth_; }

   private:
    Interpreter& in_;
  };

 private:
  std::shared_ptr<Scope> scope_;
  std::tm now_;
  RenderLimits limits_;
  ValueBudget budget_;  // counts the values built while this interpreter lives (this thread's)
  int call_depth_ = 0;
  int64_t iterations_ = 0;  // loop iterations so far
  size_t emitted_ = 0;      // bytes written so far (output and captures)
  uintptr_t stack_floor_ = 0;  // check_stack() refuses to nest below this address
  [[noreturn]] void stack_exhausted() const;
  std::vector<std::weak_ptr<Scope>> scopes_;
  std::vector<std::weak_ptr<Object>> objects_;
  size_t prune_at_ = 1024;  // when the lists reach this size, expired entries are dropped
  void prune();
};

}  // namespace npullm::genai::jinja
