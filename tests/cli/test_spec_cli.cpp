// npullm run / bench with speculative decoding (issue 47): --spec lookup and --prediction give the
// text of --temp 0 without them, report their counts in --json, and bench --spec reports the
// "spec" object the issue names.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace npullm {
namespace {

using test::Proc;

TEST(SpecCli, RunWithLookupOrAPredictionGivesTheGreedyTextAndCountsItsGuesses) {
  NPULLM_REQUIRE_SHARED(test::kStoriesModel);
  const std::string base = "run -m " + test::shared_path(test::kStoriesModel) + " -p 'Once upon a time' -n 120 --temp 0 --json --no-cache -t 2";
  const Proc off = test::run_npullm(base);
  ASSERT_EQ(off.rc, 0) << off.err;
  const nlohmann::json a = nlohmann::json::parse(off.out);
  const Proc on = test::run_npullm(base + " --spec lookup --spec-k 5");
  ASSERT_EQ(on.rc, 0) << on.err;
  const nlohmann::json b = nlohmann::json::parse(on.out);
  EXPECT_EQ(b["ids"], a["ids"]);
  EXPECT_EQ(b["text"], a["text"]);
  EXPECT_GT(b["metrics"]["spec_verify_steps"].get<int64_t>(), 0);
  EXPECT_LE(b["metrics"]["spec_accepted"].get<int64_t>(), b["metrics"]["spec_drafted"].get<int64_t>());
  EXPECT_EQ(b["metrics"]["kv_bytes_copied"].get<int64_t>(), 0);
  // The reply itself as the prediction: most guesses come from it and are right.
  const std::string pred = (test::scratch_dir() / "prediction.txt").string();
  std::ofstream(pred) << a["text"].get<std::string>();
  const Proc p = test::run_npullm(base + " --prediction " + pred);
  ASSERT_EQ(p.rc, 0) << p.err;
  const nlohmann::json c = nlohmann::json::parse(p.out);
  EXPECT_EQ(c["text"], a["text"]);
  EXPECT_GT(c["metrics"]["prediction_accepted"].get<int64_t>(), 4 * c["metrics"]["prediction_rejected"].get<int64_t>());
  // A draft model is needed for --spec draft.
  const Proc bad = test::run_npullm(base + " --spec draft");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--draft-model"), std::string::npos) << bad.err;
  // serve's --spec-k without --spec lookup would change nothing: refused before the model loads.
  const Proc serve_k = test::run_npullm("serve -m " + test::shared_path(test::kStoriesModel) + " --port 0 --spec-k 3");
  EXPECT_EQ(serve_k.rc, 1);
  EXPECT_NE(serve_k.err.find("--spec-k needs --spec lookup"), std::string::npos) << serve_k.err;
}

TEST(SpecCli, BenchSpecReportsVerifyCostAcceptanceAndSpeed) {
  NPULLM_REQUIRE_SHARED(test::kStoriesModel);
  const Proc r = test::run_npullm("bench -m " + test::shared_path(test::kStoriesModel) +
                                  " --spec oracle --spec-oracle 0,1 --spec-k 3 -n 24 -r 1 --variants 64,128 --no-cache -t 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out)["spec"];
  for (const char* key : {"k", "verify_cost_ratio", "accepted_per_verify", "acceptance", "tg_tps", "tg_tps_off"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["k"].get<int64_t>(), 3);
  EXPECT_GT(j["verify_cost_ratio"].get<double>(), 0.0);
  ASSERT_EQ(j["oracle"].size(), 2u);
  EXPECT_EQ(j["oracle"][0]["acceptance"].get<double>(), 0.0);  // alpha 0: every guess wrong
  EXPECT_EQ(j["oracle"][1]["acceptance"].get<double>(), 1.0);  // alpha 1: every guess right
  EXPECT_EQ(j["verify_cost_ratio_by_capacity"].size(), 2u);
  // r again at the runs' own mean depth (the prompt and half of the 24 tokens), which the
  // predictions use; the formula's prediction at a = 1 is (K + 1) / r(K).
  const nlohmann::json& run = j["verify_cost_ratio_run"];
  EXPECT_GE(run["depth"].get<int64_t>(), 12);
  EXPECT_LT(run["depth"].get<int64_t>(), 64);
  EXPECT_GT(run["r"].get<double>(), 0.0);
  EXPECT_NEAR(j["oracle"][1]["predicted_speedup"].get<double>(), 4.0 / run["r"].get<double>(), 1e-9);
}

}  // namespace
}  // namespace npullm
