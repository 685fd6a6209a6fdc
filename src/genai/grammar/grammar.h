// The compiled form every structured-output language turns into: a context-free grammar over BYTES.
//
// Front ends (json_schema.cpp, gbnf.cpp, regex.cpp) describe their language with Expr trees and a
// GrammarBuilder; build() lowers them into the flat form the matcher walks, llama.cpp's layout:
//
//   elems   one array; an alternative is a run of elements that ends with an End element.
//           Bytes  matches one byte out of a 256-bit set (sets[value]);
//           Ref    expands rule `value` (one of its alternatives) and then continues after it;
//           End    the alternative is done: return to whoever referred to the rule.
//   alts    per rule, the positions in elems where its alternatives start.
//
// Working on bytes, not code points, means a token that ends inside a UTF-8 character needs no
// special case: code point classes are lowered to byte sequences here (utf8_ranges.h) once.
//
// Rules may recurse, but not on the left (A ::= A x, or through rules that can match the empty
// string): the matcher expands rules depth-first and would never stop. build() refuses such a
// grammar, naming the rule.
#pragma once
#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace npullm::genai::grammar {

// A schema, grammar or expression that is malformed or uses something not implemented. The message
// names the keyword / rule / offset.
class GrammarError : public Error {
 public:
  using Error::Error;
};

using ByteSet = std::bitset<256>;

// A code point set as sorted, disjoint, inclusive ranges.
struct CodepointSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  static CodepointSet of(uint32_t lo, uint32_t hi) { return {{{lo, hi}}}; }
  static CodepointSet all() { return of(0, 0x10FFFF); }
  void add(uint32_t lo, uint32_t hi) { ranges.push_back({lo, hi}); normalise(); }
  void add(const CodepointSet& o) { ranges.insert(ranges.end(), o.ranges.begin(), o.ranges.end()); normalise(); }
  CodepointSet complement() const;  // within [0, 0x10FFFF]
  CodepointSet minus(const CodepointSet& o) const { return intersect(o.complement()); }
  CodepointSet intersect(const CodepointSet& o) const;
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges.empty(); }
  void normalise();  // sorts and merges
};

// A piece of a language, before lowering.
struct Expr {
  enum class Kind { Empty, Bytes, Literal, Ref, Seq, Alt, Repeat, Nothing };
  Kind kind = Kind::Empty;
  ByteSet bytes;                 // Bytes
  std::string text;              // Literal
  int32_t rule = -1;             // Ref
  std::vector<Expr> items;       // Seq, Alt; Repeat: items[0]
  int64_t min = 0, max = -1;     // Repeat; max -1: unbounded

  static Expr empty() { return {}; }
  static Expr nothing() { Expr e; e.kind = Kind::Nothing; return e; }  // matches no string at all
  static Expr byte_set(const ByteSet& s) { Expr e; e.kind = Kind::Bytes; e.bytes = s; return e; }
  static Expr byte_range(uint8_t lo, uint8_t hi);
  static Expr lit(std::string s) { Expr e; e.kind = Kind::Literal; e.text = std::move(s); return e; }
  static Expr ref(int32_t r) { Expr e; e.kind = Kind::Ref; e.rule = r; return e; }
  static Expr seq(std::vector<Expr> v);
  static Expr alt(std::vector<Expr> v);
  static Expr repeat(Expr x, int64_t min, int64_t max);
  static Expr opt(Expr x) { return repeat(std::move(x), 0, 1); }
  static Expr star(Expr x) { return repeat(std::move(x), 0, -1); }
  static Expr plus(Expr x) { return repeat(std::move(x), 1, -1); }
  // UTF-8 encodings of the code points in `s` (surrogates excluded: they are not UTF-8).
  static Expr codepoints(const CodepointSet& s);
};

struct Elem {
  enum Kind : uint8_t { Bytes, Ref, End };
  Kind kind;
  int32_t value;  // Bytes: index into sets; Ref: rule; End: the rule the alternative belongs to
};

struct Grammar {
  std::vector<Elem> elems;
  std::vector<std::vector<int32_t>> alts;  // per rule: start positions of its alternatives
  std::vector<ByteSet> sets;
  std::vector<std::string> rule_names;     // for messages
  int32_t root = 0;
  std::string describe() const;            // readable dump, for tests and debugging
};

class GrammarBuilder {
 public:
  // A new rule without a body yet (define() gives it one). Names need not be unique.
  int32_t add_rule(const std::string& name);
  void define(int32_t rule, Expr body);
  int32_t rule_of(const std::string& name, Expr body) {
    const int32_t r = add_rule(name);
    define(r, std::move(body));
    return r;
  }
  // Checks every rule has a body and none recurses on the left; lowers. `root` is the start rule.
  std::shared_ptr<const Grammar> build(int32_t root);
  size_t rule_count() const { return bodies_.size(); }

 private:
  int32_t lower(const Expr& e, const std::string& name);  // a rule whose body is e
  void lower_alt(const Expr& e, std::vector<Elem>& out, const std::string& name);
  int32_t set_index(const ByteSet& s);
  int32_t repeat_rule(Elem item, int64_t min, int64_t max, const std::string& name);  // item: a byte set or a rule reference

  std::vector<std::string> names_;
  std::vector<Expr> bodies_;
  std::vector<bool> defined_;
  Grammar g_;
  std::map<std::string, int32_t> set_ids_;
  std::vector<std::vector<std::vector<Elem>>> lowered_;  // per rule: alternatives
};

}  // namespace npullm::genai::grammar
