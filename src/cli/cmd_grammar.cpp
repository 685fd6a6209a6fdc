// npullm grammar: is a document in the language of a JSON Schema, a GBNF grammar or a regular
// expression? No model needed. Exit 0: yes; 1: no (where it fails is printed); 2: the schema,
// grammar or expression is refused (the reason, naming the keyword or the place, is printed).
#include <cstdio>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"
#include "genai/grammar/compile.h"
#include "genai/grammar/matcher.h"

namespace npullm::cli {

namespace {

struct GrammarOptions {
  StructuredOptions so;
  std::string check;
  bool print = false;
};

int run(const GrammarOptions& o) {
  const StructuredOutput s = o.so.resolve();
  if (s.kind == StructuredOutput::Kind::None) fail("grammar: give one of --json-schema, --grammar, --regex or --json-object");
  std::shared_ptr<const genai::grammar::Grammar> g;
  try {
    g = genai::grammar::compile(s);
  } catch (const genai::grammar::GrammarError& e) {
    fmt::print(stderr, "npullm: refused: {}\n", e.what());
    return 2;
  }
  if (o.print) fmt::print("{}", g->describe());
  if (o.check.empty()) return 0;
  std::string doc;
  if (o.check == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    doc = ss.str();
  } else {
    std::ifstream in(o.check, std::ios::binary);
    if (!in) fail("grammar: cannot read '{}'", o.check);
    std::stringstream ss;
    ss << in.rdbuf();
    doc = ss.str();
  }
  genai::grammar::Matcher m(g);
  for (size_t i = 0; i < doc.size(); ++i) {
    if (!m.accept(std::string_view(doc).substr(i, 1))) {
      fmt::print("no: byte {} ({}) cannot follow '{}'\n", i, nlohmann::json(doc.substr(i, 1)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                 doc.substr(i >= 40 ? i - 40 : 0, i >= 40 ? 40 : i));
      return 1;
    }
  }
  if (!m.is_complete()) {
    fmt::print("no: the document ends too early (after {} bytes)\n", doc.size());
    return 1;
  }
  fmt::print("yes\n");
  return 0;
}

}  // namespace

void add_grammar(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<GrammarOptions>();
  CLI::App* cmd = app.add_subcommand(
      "grammar",
      "check a document against a JSON Schema, a GBNF grammar or a regular expression (the structured-output engine, "
      "no model): exit 0 in the language, 1 not, 2 the schema/grammar refused");
  o->so.add_to(cmd, /*with_trigger=*/false);
  cmd->add_option("--check", o->check, "the document to check (a file; - reads stdin)");
  cmd->add_flag("--print", o->print, "print the compiled grammar's rules");
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? run(*o) : -1; });
}

}  // namespace npullm::cli
