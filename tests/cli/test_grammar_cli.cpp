// `npullm grammar --check` (exit 0 in the language, 1 not, 2 refused with the reason) and
// `npullm run` under --json-schema / --regex / --grammar.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "test_util.h"

namespace npullm {
namespace {

namespace fs = std::filesystem;
constexpr const char* kModel = "models/llama2c/stories260K.gguf";

std::string write(const std::string& name, const std::string& text) {
  const fs::path dir = test::scratch_dir() / "grammar-cli";
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

TEST(GrammarCli, CheckExitCodes) {
  const std::string schema = write("s.json", R"({"type":"object","properties":{"id":{"type":"integer","minimum":1}},"required":["id"]})");
  const std::string good = write("good.json", R"({"id":3,"extra":[true]})");
  const std::string bad = write("bad.json", R"({"id":0})");
  test::Proc yes = test::run_npullm("grammar --json-schema " + schema + " --check " + good);
  EXPECT_EQ(yes.rc, 0) << yes.out << yes.err;
  test::Proc no = test::run_npullm("grammar --json-schema " + schema + " --check " + bad);
  EXPECT_EQ(no.rc, 1) << no.out << no.err;
  EXPECT_NE(no.out.find("byte 6"), std::string::npos) << no.out;
  const std::string refused = write("r.json", R"({"type":"object","propertyNames":{"maxLength":3}})");
  test::Proc r = test::run_npullm("grammar --json-schema " + refused + " --check " + good);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("propertyNames"), std::string::npos) << r.err;

  const std::string gbnf = write("g.gbnf", "root ::= \"a\" [0-9]+\n");
  EXPECT_EQ(test::run_npullm("grammar --grammar " + gbnf + " --check " + write("a1.txt", "a12")).rc, 0);
  EXPECT_EQ(test::run_npullm("grammar --grammar " + gbnf + " --check " + write("a.txt", "a")).rc, 1);
  EXPECT_EQ(test::run_npullm("grammar --regex '[a-c]+x' --check " + write("abx.txt", "abcx")).rc, 0);
  EXPECT_EQ(test::run_npullm("grammar --regex '(a' --check " + write("abx.txt", "abcx")).rc, 2);
}

TEST(GrammarCli, RunUnderASchemaPrintsValidJson) {
  NPULLM_REQUIRE_SHARED(kModel);
  const std::string schema = write("run.json", R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","maximum":99}},
                                                   "required":["ok","n"],"additionalProperties":false})");
  test::Proc r = test::run_npullm("run -m " + test::shared_path(kModel) + " -p 'Once' -n 200 --no-cache --json --json-schema " + schema);
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["finish_reason"], "eos");
  const nlohmann::json doc = nlohmann::json::parse(out["text"].get<std::string>());
  EXPECT_TRUE(doc["ok"].is_boolean());
  EXPECT_TRUE(doc["n"].is_number_integer() && doc["n"].get<int>() <= 99);
  EXPECT_EQ(doc.size(), 2u);
  test::Proc re = test::run_npullm("run -m " + test::shared_path(kModel) + " -p 'Once' -n 40 --no-cache --json --regex '[A-Z][a-z]{2,6}!'");
  ASSERT_EQ(re.rc, 0) << re.err;
  const std::string text = nlohmann::json::parse(re.out)["text"];
  EXPECT_TRUE(std::regex_match(text, std::regex("[A-Z][a-z]{2,6}!"))) << text;
  test::Proc refused = test::run_npullm("run -m " + test::shared_path(kModel) + " -p 'Once' -n 4 --no-cache --regex '\\bx'");
  EXPECT_EQ(refused.rc, 1);
  EXPECT_NE(refused.err.find("word boundaries"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace npullm
