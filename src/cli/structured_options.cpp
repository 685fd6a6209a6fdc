// --json-schema FILE | --grammar FILE | --regex RE | --json-object [--grammar-trigger TEXT]: the
// options that fill GenerationConfig::structured (npullm run, npullm grammar).
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"

namespace npullm::cli {

namespace {
std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read '{}'", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

void StructuredOptions::add_to(CLI::App* cmd, bool with_trigger) {
  auto* js = cmd->add_option("--json-schema", json_schema_file, "constrain the output to JSON valid under this JSON Schema (a file)")
                 ->check(CLI::ExistingFile);
  auto* gb = cmd->add_option("--grammar", grammar_file, "constrain the output to this llama.cpp GBNF grammar (a file; starts at 'root')")
                 ->check(CLI::ExistingFile);
  auto* re = cmd->add_option("--regex", regex, "constrain the output to match this regular expression as a whole");
  auto* jo = cmd->add_flag("--json-object", json_object, "constrain the output to a JSON object");
  js->excludes(gb)->excludes(re)->excludes(jo);
  gb->excludes(re)->excludes(jo);
  re->excludes(jo);
  if (with_trigger)
    cmd->add_option("--grammar-trigger", trigger, "leave the output free until this text appears; constrain what follows it");
}

StructuredOutput StructuredOptions::resolve() const {
  StructuredOutput s;
  if (!json_schema_file.empty()) {
    s.kind = StructuredOutput::Kind::JsonSchema;
    s.source = read_text(json_schema_file, "--json-schema");
  } else if (!grammar_file.empty()) {
    s.kind = StructuredOutput::Kind::Gbnf;
    s.source = read_text(grammar_file, "--grammar");
  } else if (!regex.empty()) {
    s.kind = StructuredOutput::Kind::Regex;
    s.source = regex;
  } else if (json_object) {
    s.kind = StructuredOutput::Kind::JsonObject;
  }
  s.trigger = trigger;
  return s;
}

}  // namespace npullm::cli
