// The JSON-Schema-Test-Suite (Debian's json-schema-test-suite; scripts/setup-tests.sh installs it),
// draft 7: every schema either compiles or is refused with an UnsupportedKeyword that names a
// keyword the schema really uses. For the compiled ones, each instance serialised compactly
// (nlohmann::json::dump()) must be rejected when the suite says invalid — none may get through —
// and at least 95 % of the valid ones must be accepted. Also optional/format for the formats that
// are implemented. The counts per file and per refused keyword are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "genai/grammar/json_schema.h"
#include "grammar_test_util.h"
#include "test_util.h"

namespace npullm::genai::grammar {
namespace {

std::string suite_dir() {
  if (const char* e = std::getenv("NPULLM_JSON_SCHEMA_TEST_SUITE"); e && *e) return e;
  return "/usr/share/json-schema-test-suite/tests/draft7";
}

struct Counts {
  int schemas = 0, refused = 0, valid = 0, valid_accepted = 0, invalid = 0, invalid_accepted = 0;
  std::map<std::string, int> refused_by_keyword;
  std::vector<std::string> rejected_valid, accepted_invalid, unnamed;
};

// Whether `kw` appears as an object key anywhere in `j`.
bool uses_key(const nlohmann::json& j, const std::string& kw) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() == kw || uses_key(it.value(), kw)) return true;
  } else if (j.is_array()) {
    for (const auto& x : j) if (uses_key(x, kw)) return true;
  }
  return false;
}

void run_file(const std::filesystem::path& file, Counts& c) {
  const nlohmann::json groups = nlohmann::json::parse(test::read_file(file.string()));
  for (const auto& group : groups) {
    ++c.schemas;
    const std::string where = file.filename().string() + " / " + group["description"].get<std::string>();
    std::shared_ptr<const Grammar> g;
    try {
      g = compile_json_schema(group["schema"].dump());
    } catch (const UnsupportedKeyword& e) {
      ++c.refused;
      ++c.refused_by_keyword[e.keyword()];
      if (!uses_key(group["schema"], e.keyword())) c.unnamed.push_back(where + ": " + e.what());
      continue;
    } catch (const GrammarError& e) {
      ++c.refused;
      c.unnamed.push_back(where + ": " + e.what());
      continue;
    }
    for (const auto& t : group["tests"]) {
      const std::string doc = t["data"].dump();
      const bool ok = test::in_language(g, doc);
      const std::string what = where + " / " + t["description"].get<std::string>() + ": " + doc;
      if (t["valid"].get<bool>()) {
        ++c.valid;
        if (ok) ++c.valid_accepted;
        else c.rejected_valid.push_back(what);
      } else {
        ++c.invalid;
        if (ok) {
          ++c.invalid_accepted;
          c.accepted_invalid.push_back(what);
        }
      }
    }
  }
}

void report(const std::string& name, const Counts& c) {
  std::printf("%s: %d schemas, %d compiled, %d refused; valid accepted %d/%d (%.1f %%), invalid accepted %d/%d\n", name.c_str(),
              c.schemas, c.schemas - c.refused, c.refused, c.valid_accepted, c.valid, c.valid ? 100.0 * c.valid_accepted / c.valid : 100.0,
              c.invalid_accepted, c.invalid);
  for (const auto& [kw, n] : c.refused_by_keyword) std::printf("  refused for %-20s %d schemas\n", kw.c_str(), n);
  for (const auto& s : c.rejected_valid) std::printf("  valid but rejected: %s\n", s.c_str());
}

TEST(GrammarCorpus, JsonSchemaTestSuiteDraft7) {
  NPULLM_REQUIRE_FILE(suite_dir(), "(Debian package json-schema-test-suite: scripts/setup-tests.sh)");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(suite_dir()))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GT(files.size(), 30u) << "the draft 7 folder looks incomplete: " << suite_dir();
  Counts all;
  for (const auto& f : files) {
    Counts one;
    run_file(f, one);
    std::printf("  %-28s schemas %2d refused %2d valid %3d/%3d invalid accepted %d/%d\n", f.filename().string().c_str(), one.schemas,
                one.refused, one.valid_accepted, one.valid, one.invalid_accepted, one.invalid);
    all.schemas += one.schemas, all.refused += one.refused, all.valid += one.valid, all.valid_accepted += one.valid_accepted;
    all.invalid += one.invalid, all.invalid_accepted += one.invalid_accepted;
    for (const auto& [k, n] : one.refused_by_keyword) all.refused_by_keyword[k] += n;
    all.rejected_valid.insert(all.rejected_valid.end(), one.rejected_valid.begin(), one.rejected_valid.end());
    all.accepted_invalid.insert(all.accepted_invalid.end(), one.accepted_invalid.begin(), one.accepted_invalid.end());
    all.unnamed.insert(all.unnamed.end(), one.unnamed.begin(), one.unnamed.end());
  }
  report("draft7", all);
  EXPECT_EQ(all.invalid_accepted, 0);
  for (const auto& s : all.accepted_invalid) ADD_FAILURE() << "invalid instance accepted: " << s;
  for (const auto& s : all.unnamed) ADD_FAILURE() << "refused without naming a keyword the schema uses: " << s;
  EXPECT_GT(all.schemas - all.refused, all.schemas / 2) << "most of the suite's schemas use only supported keywords";
  EXPECT_GE(all.valid_accepted * 100, all.valid * 95) << "fewer than 95 % of the valid instances accepted";
}

TEST(GrammarCorpus, JsonSchemaTestSuiteFormats) {
  const std::string dir = suite_dir() + "/optional/format";
  NPULLM_REQUIRE_FILE(dir, "(Debian package json-schema-test-suite: scripts/setup-tests.sh)");
  Counts c;
  for (const char* f : {"date.json", "time.json", "date-time.json", "email.json", "ipv4.json"}) run_file(dir + "/" + f, c);
  report("draft7 optional/format", c);
  EXPECT_EQ(c.refused, 0);
  EXPECT_EQ(c.invalid_accepted, 0);
  for (const auto& s : c.accepted_invalid) ADD_FAILURE() << "invalid instance accepted: " << s;
  EXPECT_GT(c.invalid, 0);
  EXPECT_GE(c.valid_accepted * 100, c.valid * 80);
}

}  // namespace
}  // namespace npullm::genai::grammar
