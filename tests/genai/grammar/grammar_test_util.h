// Helpers for the grammar tests: whether a text is in a grammar's language, and the keyword a
// refusal names.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "genai/grammar/json_schema.h"
#include "genai/grammar/matcher.h"

namespace npullm::test {

// The whole of `text` is a sentence of `g`.
inline bool in_language(const std::shared_ptr<const genai::grammar::Grammar>& g, std::string_view text) {
  genai::grammar::Matcher m(g);
  return m.accept(text) && m.is_complete();
}

// "" when `f` compiles; the refused keyword (UnsupportedKeyword), or "error: ..." for another refusal.
template <typename F>
std::string refusal_of(F&& f) {
  try {
    f();
  } catch (const genai::grammar::UnsupportedKeyword& e) {
    return e.keyword();
  } catch (const genai::grammar::GrammarError& e) {
    return std::string("error: ") + e.what();
  }
  return "";
}

}  // namespace npullm::test
