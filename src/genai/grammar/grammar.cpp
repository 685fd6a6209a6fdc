#include "genai/grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <fmt/format.h>

namespace npullm::genai::grammar {

// ---------------------------------------------------------------------------------------------
// code point sets

void CodepointSet::normalise() {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
    else out.push_back(r);
  }
  ranges = std::move(out);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet c;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) c.ranges.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) c.ranges.push_back({next, 0x10FFFF});
  return c;
}

CodepointSet CodepointSet::intersect(const CodepointSet& o) const {
  CodepointSet c;
  for (const auto& a : ranges)
    for (const auto& b : o.ranges) {
      const uint32_t lo = std::max(a.first, b.first), hi = std::min(a.second, b.second);
      if (lo <= hi) c.ranges.push_back({lo, hi});
    }
  c.normalise();
  return c;
}

bool CodepointSet::contains(uint32_t cp) const {
  for (const auto& [lo, hi] : ranges)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Expr

Expr Expr::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<size_t>(b));
  return byte_set(s);
}

Expr Expr::seq(std::vector<Expr> v) {
  std::vector<Expr> out;
  for (auto& x : v) {
    if (x.kind == Kind::Empty) continue;
    if (x.kind == Kind::Nothing) return nothing();
    if (x.kind == Kind::Seq) for (auto& y : x.items) out.push_back(std::move(y));
    else out.push_back(std::move(x));
  }
  if (out.empty()) return empty();
  if (out.size() == 1) return std::move(out[0]);
  Expr e;
  e.kind = Kind::Seq;
  e.items = std::move(out);
  return e;
}

Expr Expr::alt(std::vector<Expr> v) {
  std::vector<Expr> out;
  for (auto& x : v) {
    if (x.kind == Kind::Nothing) continue;
    if (x.kind == Kind::Alt) for (auto& y : x.items) out.push_back(std::move(y));
    else out.push_back(std::move(x));
  }
  if (out.empty()) return nothing();
  if (out.size() == 1) return std::move(out[0]);
  Expr e;
  e.kind = Kind::Alt;
  e.items = std::move(out);
  return e;
}

Expr Expr::repeat(Expr x, int64_t min, int64_t max) {
  if (max == 0 || x.kind == Kind::Empty) return empty();
  if (x.kind == Kind::Nothing) return min == 0 ? empty() : nothing();
  if (min == 1 && max == 1) return x;
  Expr e;
  e.kind = Kind::Repeat;
  e.items.push_back(std::move(x));
  e.min = min;
  e.max = max;
  return e;
}

namespace {

// Encodes cp as UTF-8 into b; returns the length.
int encode(uint32_t cp, uint8_t* b) {
  if (cp < 0x80) { b[0] = static_cast<uint8_t>(cp); return 1; }
  if (cp < 0x800) { b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6)); b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] (same encoded length) until each piece is a "rectangle": every byte position
// ranges independently of the others, so the piece is one sequence of byte ranges. The standard
// construction (as in RE2 and Rust's utf8-ranges): cut where a lower continuation byte wraps.
void utf8_pieces(uint32_t lo, uint32_t hi, std::vector<Expr>& out) {
  static const uint32_t kLenEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (uint32_t end : kLenEnds) {  // split at encoded-length boundaries first
    if (lo <= end && hi > end) {
      utf8_pieces(lo, end, out);
      utf8_pieces(end + 1, hi, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_pieces(lo, lo | m, out);
        utf8_pieces((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_pieces(lo, (hi & ~m) - 1, out);
        utf8_pieces(hi & ~m, hi, out);
        return;
      }
    }
  }
  encode(hi, b);
  std::vector<Expr> seq;
  for (int i = 0; i < n; ++i) seq.push_back(Expr::byte_range(a[i], b[i]));
  out.push_back(Expr::seq(std::move(seq)));
}

}  // namespace

Expr Expr::codepoints(const CodepointSet& s) {
  const CodepointSet valid = s.minus(CodepointSet::of(0xD800, 0xDFFF));
  std::vector<Expr> alts;
  ByteSet ascii;  // one byte set for all the ASCII ranges
  for (const auto& [lo, hi] : valid.ranges) {
    const uint32_t alo = lo, ahi = std::min<uint32_t>(hi, 0x7F);
    for (uint32_t c = alo; c <= ahi && c < 0x80; ++c) ascii.set(c);
    if (hi >= 0x80) utf8_pieces(std::max<uint32_t>(lo, 0x80), hi, alts);
  }
  if (ascii.any()) alts.insert(alts.begin(), byte_set(ascii));
  return alt(std::move(alts));
}

// ---------------------------------------------------------------------------------------------
// builder

int32_t GrammarBuilder::add_rule(const std::string& name) {
  names_.push_back(name);
  bodies_.emplace_back();
  defined_.push_back(false);
  return static_cast<int32_t>(names_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, Expr body) {
  bodies_.at(static_cast<size_t>(rule)) = std::move(body);
  defined_[static_cast<size_t>(rule)] = true;
}

int32_t GrammarBuilder::set_index(const ByteSet& s) {
  std::string key = s.to_string();
  auto it = set_ids_.find(key);
  if (it != set_ids_.end()) return it->second;
  g_.sets.push_back(s);
  const auto id = static_cast<int32_t>(g_.sets.size() - 1);
  set_ids_.emplace(std::move(key), id);
  return id;
}

int32_t GrammarBuilder::lower(const Expr& e, const std::string& name) {
  const auto r = static_cast<int32_t>(lowered_.size());
  lowered_.emplace_back();
  g_.rule_names.push_back(name);
  std::vector<std::vector<Elem>> alts;
  if (e.kind == Expr::Kind::Nothing) {
    // no alternatives: a rule that matches nothing
  } else if (e.kind == Expr::Kind::Alt) {
    for (const Expr& x : e.items) {
      std::vector<Elem> a;
      lower_alt(x, a, name);
      alts.push_back(std::move(a));
    }
  } else {
    std::vector<Elem> a;
    lower_alt(e, a, name);
    alts.push_back(std::move(a));
  }
  lowered_[static_cast<size_t>(r)] = std::move(alts);
  return r;
}

void GrammarBuilder::lower_alt(const Expr& e, std::vector<Elem>& out, const std::string& name) {
  switch (e.kind) {
    case Expr::Kind::Empty: return;
    case Expr::Kind::Bytes: out.push_back({Elem::Bytes, set_index(e.bytes)}); return;
    case Expr::Kind::Literal:
      for (unsigned char c : e.text) {
        ByteSet s;
        s.set(c);
        out.push_back({Elem::Bytes, set_index(s)});
      }
      return;
    case Expr::Kind::Ref: out.push_back({Elem::Ref, e.rule}); return;  // a user rule: remapped in build()
    case Expr::Kind::Seq:
      for (const Expr& x : e.items) lower_alt(x, out, name);
      return;
    case Expr::Kind::Alt:
    case Expr::Kind::Nothing: out.push_back({Elem::Ref, -2 - lower(e, name)}); return;
    case Expr::Kind::Repeat: {
      const Expr& x = e.items[0];
      // The repeated item as one element: a byte set as is (so that a run of whitespace or digits
      // stays inside one rule, which keeps TokenClasses' contexts wide), a user rule as is,
      // anything else a rule of its own.
      Elem item{Elem::Ref, 0};
      if (x.kind == Expr::Kind::Bytes) item = {Elem::Bytes, set_index(x.bytes)};
      else if (x.kind == Expr::Kind::Ref) item.value = x.rule;
      else item.value = -2 - lower(x, name);
      out.push_back({Elem::Ref, -2 - repeat_rule(item, e.min, e.max, name)});
      return;
    }
  }
}

// Rule refs inside lowering: >= 0 are user rules (builder ids), <= -2 are lowered ids (-2 - id).
// x{m,n}: m copies, then a right-recursive tail: x* as S ::= x S | "", x{0,k} as O_k ::= x O_{k-1} | "".
// Right recursion costs the matcher no stack (a reference at an alternative's end is a tail call).
int32_t GrammarBuilder::repeat_rule(Elem ref, int64_t min, int64_t max, const std::string& name) {
  int32_t tail = -1;  // lowered id of the optional tail
  if (max < 0) {
    tail = static_cast<int32_t>(lowered_.size());
    lowered_.push_back({{ref, {Elem::Ref, -2 - tail}}, {}});
    g_.rule_names.push_back(name + "*");
  } else {
    for (int64_t k = 0; k < max - min; ++k) {
      const auto r = static_cast<int32_t>(lowered_.size());
      std::vector<Elem> first{ref};
      if (tail >= 0) first.push_back({Elem::Ref, -2 - tail});
      lowered_.push_back({first, {}});
      g_.rule_names.push_back(name + "?");
      tail = r;
    }
  }
  const auto r = static_cast<int32_t>(lowered_.size());
  std::vector<Elem> body(static_cast<size_t>(min), ref);
  if (tail >= 0) body.push_back({Elem::Ref, -2 - tail});
  lowered_.push_back({body});
  g_.rule_names.push_back(name);
  return r;
}

std::shared_ptr<const Grammar> GrammarBuilder::build(int32_t root) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (!defined_[i]) throw GrammarError(fmt::format("rule '{}' is used but never defined", names_[i]));
  // User rules first (lowered id = builder id), then everything lowering adds.
  lowered_.clear();
  g_ = Grammar{};
  set_ids_.clear();
  lowered_.resize(names_.size());
  g_.rule_names = names_;
  for (size_t i = 0; i < names_.size(); ++i) {
    // lower() appends; move its result into slot i.
    const int32_t tmp = lower(bodies_[i], names_[i]);
    lowered_[i] = std::move(lowered_[static_cast<size_t>(tmp)]);
    lowered_[static_cast<size_t>(tmp)] = {};  // left as a rule with no alternatives, never referred to
  }
  for (auto& alts : lowered_)
    for (auto& a : alts)
      for (Elem& e : a)
        if (e.kind == Elem::Ref && e.value <= -2) e.value = -2 - e.value;

  // Nullable rules, then "A can begin with B" edges; a cycle is left recursion.
  const size_t n = lowered_.size();
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const auto& a : lowered_[r]) {
        bool all = true;
        for (const Elem& e : a)
          if (e.kind == Elem::Bytes || !nullable[static_cast<size_t>(e.value)]) { all = false; break; }
        if (all) { nullable[r] = 1; changed = true; break; }
      }
    }
  }
  std::vector<std::vector<int32_t>> starts(n);
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : lowered_[r])
      for (const Elem& e : a) {
        if (e.kind == Elem::Bytes) break;
        starts[r].push_back(e.value);
        if (!nullable[static_cast<size_t>(e.value)]) break;
      }
  std::vector<char> state(n, 0);  // 0 new, 1 on the DFS path, 2 done
  std::function<void(int32_t)> visit = [&](int32_t r) {
    state[static_cast<size_t>(r)] = 1;
    for (int32_t s : starts[static_cast<size_t>(r)]) {
      if (state[static_cast<size_t>(s)] == 1)
        throw GrammarError(fmt::format("rule '{}' is left-recursive (it can begin with itself{}); rewrite it with repetition",
                                       g_.rule_names[static_cast<size_t>(s)],
                                       s == r ? "" : fmt::format(" through '{}'", g_.rule_names[static_cast<size_t>(r)])));
      if (state[static_cast<size_t>(s)] == 0) visit(s);
    }
    state[static_cast<size_t>(r)] = 2;
  };
  for (size_t r = 0; r < n; ++r)
    if (state[r] == 0) visit(static_cast<int32_t>(r));

  g_.alts.assign(n, {});
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : lowered_[r]) {
      g_.alts[r].push_back(static_cast<int32_t>(g_.elems.size()));
      g_.elems.insert(g_.elems.end(), a.begin(), a.end());
      g_.elems.push_back({Elem::End, static_cast<int32_t>(r)});
    }
  g_.root = root;
  lowered_.clear();
  return std::make_shared<const Grammar>(std::move(g_));
}

std::string Grammar::describe() const {
  std::string s;
  auto set_text = [&](const ByteSet& b) {
    std::string t = "[";
    for (int c = 0; c < 256; ++c) {
      if (!b.test(static_cast<size_t>(c))) continue;
      int d = c;
      while (d + 1 < 256 && b.test(static_cast<size_t>(d + 1))) ++d;
      auto one = [](int x) { return x >= 0x21 && x < 0x7F && x != ']' && x != '\\' && x != '-' ? std::string(1, static_cast<char>(x)) : fmt::format("\\x{:02X}", x); };
      t += one(c);
      if (d > c) {
        t += '-';
        t += one(d);
      }
      c = d;
    }
    return t + "]";
  };
  for (size_t r = 0; r < alts.size(); ++r) {
    s += fmt::format("{}#{} ::=", rule_names[r], r);
    for (size_t k = 0; k < alts[r].size(); ++k) {
      if (k) s += " |";
      for (int32_t p = alts[r][k]; elems[static_cast<size_t>(p)].kind != Elem::End; ++p) {
        const Elem& e = elems[static_cast<size_t>(p)];
        if (e.kind == Elem::Bytes) s += " " + set_text(sets[static_cast<size_t>(e.value)]);
        else s += fmt::format(" {}#{}", rule_names[static_cast<size_t>(e.value)], e.value);
      }
    }
    s += "\n";
  }
  return s;
}

}  // namespace npullm::genai::grammar
