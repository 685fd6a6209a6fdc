// Global functions a template can call: Jinja's range / namespace / dict / cycler / joiner, and
// the two HF adds for chat templates, raise_exception(msg) and strftime_now(fmt).
#include <fmt/format.h>

#include "genai/jinja/builtins.h"
#include "genai/jinja/interpreter.h"

namespace npullm::genai::jinja {

namespace {

// The sandbox refuses ranges longer than this (Jinja's MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

// namespace(): the one object whose attributes a template may assign (`{% set ns.x = 1 %}`),
// which is how state leaves a loop body.
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  void clear() override { attrs_.items.clear(); }
  std::optional<Value> get_attr(std::string_view name) const override {
    if (const Value* v = attrs_.find(name)) return *v;
    return std::nullopt;
  }
  bool set_attr(const std::string& name, Value v) override {
    attrs_.set(Value::string(name), std::move(v));
    return true;
  }
  std::string repr() const override {
    std::string out = "<Namespace {";
    for (size_t i = 0; i < attrs_.items.size(); ++i) {
      if (i) out += ", ";
      out += attrs_.items[i].first.repr() + ": " + attrs_.items[i].second.repr();
    }
    return out + "}>";
  }

 private:
  DictData attrs_;
};

class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  void clear() override { items_.assign(1, Value()); }
  std::optional<Value> get_attr(std::string_view name) const override {
    auto self = std::const_pointer_cast<Cycler>(shared_from_this());
    if (name == "current") return items_[pos_];
    if (name == "next")
      return Value::function("next", [self](Interpreter&, Args&) {
        Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      });
    if (name == "reset")
      return Value::function("reset", [self](Interpreter&, Args&) {
        self->pos_ = 0;
        return Value::none();
      });
    return std::nullopt;
  }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

// Merges dict positional arguments and keyword arguments, as dict() and namespace() do.
void merge_into(const std::string& fn, Args& args, const std::function<void(const Value&, const Value&)>& put) {
  if (args.pos.size() > 1) throw TemplateError(fmt::format("{} expected at most 1 argument, got {}", fn, args.pos.size()));
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().items) put(k, v);
    } else {
      for (const Value& pair : iterate(src)) {  // an iterable of (key, value) pairs
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) throw TemplateError(fmt::format("{} update sequence element has length {}; 2 is required", fn, kv.size()));
        put(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.kw) put(Value::string(k), v);
}

Value g_range(Interpreter&, Args& args) {
  if (!args.kw.empty()) throw TemplateError("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3)
    throw TemplateError(fmt::format("range expected at most 3 arguments, got {}", args.pos.size()));
  int64_t start = 0, stop, step = 1;
  if (args.pos.size() == 1) {
    stop = arg_int(args.pos[0], "range() argument");
  } else {
    start = arg_int(args.pos[0], "range() argument");
    stop = arg_int(args.pos[1], "range() argument");
    if (args.pos.size() == 3) step = arg_int(args.pos[2], "range() argument");
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange)
      throw TemplateError(fmt::format("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange));
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

Value g_namespace(Interpreter& in, Args& args) {
  auto ns = std::make_shared<Namespace>();
  in.track(ns);
  merge_into("namespace", args, [&](const Value& k, const Value& v) { ns->set_attr(k.str(), v); });
  return Value::object(std::move(ns));
}

Value g_dict(Interpreter&, Args& args) {
  auto d = std::make_shared<DictData>();
  merge_into("dict", args, [&](const Value& k, const Value& v) { d->set(k, v); });
  return Value::dict(std::move(d));
}

Value g_cycler(Interpreter& in, Args& args) {
  if (args.pos.empty()) throw TemplateError("at least one item has to be provided");
  auto c = std::make_shared<Cycler>(args.pos);
  in.track(c);
  return Value::object(std::move(c));
}

Value g_joiner(Interpreter&, Args& args) {
  ArgBinder a("joiner", args, {"sep"});
  const std::string sep = a.has(0) ? a[0].str() : ", ";
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Interpreter&, Args&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

// HF: raise TemplateError(message). The message is what the user sees.
Value g_raise_exception(Interpreter&, Args& args) {
  ArgBinder a("raise_exception", args, {"message"}, 1);
  throw TemplateError(a[0].str());
}

// HF: datetime.now().strftime(fmt); the time comes from the Interpreter so tests can fix it.
Value g_strftime_now(Interpreter& in, Args& args) {
  ArgBinder a("strftime_now", args, {"format"}, 1);
  const std::string& f = arg_str(a[0], "strftime_now() argument");
  if (f.empty()) return Value::string("");
  std::string buf(64 + f.size() * 4, '\0');
  for (int attempt = 0; attempt < 8; ++attempt) {
    const size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &in.now());
    if (n > 0) return Value::string(buf.substr(0, n));
    buf.resize(buf.size() * 4);  // 0 means "did not fit" (or an empty result, e.g. "%p" in some locales)
  }
  return Value::string("");
}

}  // namespace

void install_globals(Scope& globals) {
  globals.vars["range"] = Value::function("range", g_range);
  globals.vars["namespace"] = Value::function("namespace", g_namespace);
  globals.vars["dict"] = Value::function("dict", g_dict);
  globals.vars["cycler"] = Value::function("cycler", g_cycler);
  globals.vars["joiner"] = Value::function("joiner", g_joiner);
  globals.vars["raise_exception"] = Value::function("raise_exception", g_raise_exception);
  globals.vars["strftime_now"] = Value::function("strftime_now", g_strftime_now);
}

}  // namespace npullm::genai::jinja
