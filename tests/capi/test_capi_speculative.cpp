// Speculative decoding through the C API (npullm_model_open_speculative, npullm_session_set_speculative,
// npullm_speculative_check, npullm_session_last_spec_metrics), called as a C program would, on
// stories260K: greedy ids are those of decoding token by token with prompt lookup at every K (fixed
// and adaptive), with the model as its own draft model (every guess right) and with a prediction of
// the reply (accepted), in completions and chat turns; the setting lasts until changed; refusals are
// NPULLM_ERR_INVALID_ARGUMENT (IO, MODEL for files) with a message saying what to do, leaving the
// session's setting as it was. The ABI number stays 1: the additions are functions and a new struct.
#include <gtest/gtest.h>

#include <npullm/npullm.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kModel = "models/llama2c/stories260K.gguf";
constexpr const char* kPrompt = "Once upon a time";
constexpr int64_t kTokens = 120;

using npullm::test::TempDir;

std::string model_path() { return npullm::test::shared_path(kModel); }

// One generation's ids, text and speculation counters.
struct Reply {
  std::vector<int32_t> ids;
  std::string text;
  npullm_finish_reason finish = NPULLM_FINISH_LENGTH;
  npullm_spec_metrics spec{};
};

// A model opened with npullm_model_open_speculative (spec_max_k 0: as npullm_model_open) and a
// session of it; the blob cache in a temp dir.
struct Opened {
  TempDir dir;
  std::string cache;
  npullm_model* model = nullptr;
  npullm_session* session = nullptr;
  explicit Opened(int64_t spec_max_k, const char* draft_model = nullptr, const char* chat_template = nullptr) {
    npullm_model_params p = npullm_model_default_params();
    cache = (dir.path / "cache").string();
    p.cache_dir = cache.c_str();
    p.threads = 2;
    p.chat_template = chat_template;
    EXPECT_EQ(npullm_model_open_speculative(model_path().c_str(), &p, spec_max_k, draft_model, &model), NPULLM_OK)
        << npullm_last_error();
    if (model) {
      EXPECT_EQ(npullm_session_create(model, &session), NPULLM_OK) << npullm_last_error();
    }
  }
  ~Opened() {
    npullm_session_free(session);
    npullm_model_free(model);
  }

  // Greedy, EOS ignored unless asked for, so that every run is kTokens long (more text for lookup
  // to find).
  Reply run(const char* text, bool chat = false, bool ignore_eos = true) {
    npullm_sampling s = npullm_sampling_default();
    s.max_new_tokens = kTokens;
    s.ignore_eos = ignore_eos ? 1 : 0;
    npullm_result r;
    const npullm_status st = chat ? npullm_chat(session, text, &s, nullptr, nullptr, &r)
                                  : npullm_generate(session, text, &s, nullptr, nullptr, &r);
    EXPECT_EQ(st, NPULLM_OK) << npullm_last_error();
    Reply out;
    if (r.ids) out.ids.assign(r.ids, r.ids + r.n_ids);
    if (r.text) out.text.assign(r.text, r.text_len);
    out.finish = r.finish;
    npullm_result_free(&r);
    EXPECT_EQ(npullm_session_last_spec_metrics(session, &out.spec), NPULLM_OK) << npullm_last_error();
    return out;
  }
};

void expect_same(const Reply& off, const Reply& on, const std::string& what) {
  EXPECT_EQ(on.ids, off.ids) << what;
  EXPECT_EQ(on.text, off.text) << what;
  EXPECT_EQ(on.finish, off.finish) << what;
  EXPECT_GT(on.spec.spec_verify_steps, 0) << what << ": it did speculate";
  EXPECT_LE(on.spec.spec_accepted, on.spec.spec_drafted) << what;
}

// The error message of the last failed call contains `part`.
::testing::AssertionResult last_error_says(const std::string& part) {
  const std::string e = npullm_last_error();
  if (e.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "last error \"" << e << "\" does not say \"" << part << "\"";
}

TEST(CapiSpeculative, GreedyIdsAreThoseWithoutForEveryKAndSource) {
  NPULLM_REQUIRE_SHARED(kModel);
  Opened plain(0);
  ASSERT_NE(plain.session, nullptr);
  const Reply off = plain.run(kPrompt);
  ASSERT_EQ(off.ids.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(off.spec.spec_verify_steps, 0);

  // The model is its own draft model: same vocabulary, and every greedy guess is right.
  const std::string self = model_path();
  Opened spec(15, self.c_str());
  ASSERT_NE(spec.session, nullptr);
  for (int64_t k : {1, 3, 7, 15}) {
    const std::string K = ", K " + std::to_string(k);
    for (int adaptive : {1, 0}) {
      ASSERT_EQ(npullm_session_set_speculative(spec.session, NPULLM_SPEC_LOOKUP, k, adaptive, nullptr), NPULLM_OK)
          << npullm_last_error();
      expect_same(off, spec.run(kPrompt), (adaptive ? "lookup" : "lookup, fixed") + K);
    }
    ASSERT_EQ(npullm_session_set_speculative(spec.session, NPULLM_SPEC_DRAFT, k, 1, nullptr), NPULLM_OK) << npullm_last_error();
    const Reply d = spec.run(kPrompt);
    expect_same(off, d, "draft model" + K);
    EXPECT_EQ(d.spec.spec_accepted, d.spec.spec_drafted) << "the model as its own draft is always right" << K;
    EXPECT_GT(d.spec.spec_accepted, 0) << K;
  }
  // Off again: no verify step, zero counters, the same ids.
  ASSERT_EQ(npullm_session_set_speculative(spec.session, NPULLM_SPEC_OFF, 0, 0, nullptr), NPULLM_OK) << npullm_last_error();
  const Reply again = spec.run(kPrompt);
  EXPECT_EQ(again.ids, off.ids);
  EXPECT_EQ(again.spec.spec_verify_steps, 0);
  EXPECT_EQ(again.spec.spec_drafted, 0);
}

TEST(CapiSpeculative, APredictionOfTheReplyIsAcceptedAndChangesNothing) {
  NPULLM_REQUIRE_SHARED(kModel);
  Opened o(7);
  ASSERT_NE(o.session, nullptr);
  const Reply off = o.run(kPrompt);
  // The reply itself as the prediction, with no guesses of the session's own (mode off) and with lookup.
  for (npullm_spec_mode mode : {NPULLM_SPEC_OFF, NPULLM_SPEC_LOOKUP}) {
    ASSERT_EQ(npullm_session_set_speculative(o.session, mode, 7, 1, off.text.c_str()), NPULLM_OK) << npullm_last_error();
    const Reply p = o.run(kPrompt);
    expect_same(off, p, "prediction, mode " + std::to_string(mode));
    EXPECT_GT(p.spec.prediction_accepted, 0);
    EXPECT_LE(p.spec.prediction_accepted, p.spec.spec_accepted);
    EXPECT_GE(p.spec.prediction_accepted, 4 * p.spec.prediction_rejected) << "the exact reply predicted";
  }
  // A prediction that is wrong from the start still leaves the output alone.
  ASSERT_EQ(npullm_session_set_speculative(o.session, NPULLM_SPEC_OFF, 3, 1, "Zebras zoomed zig zag."), NPULLM_OK);
  const Reply wrong = o.run(kPrompt);
  EXPECT_EQ(wrong.ids, off.ids);
  EXPECT_EQ(wrong.text, off.text);
}

TEST(CapiSpeculative, ChatTurnsAndTokenIdsSpeculateToTheSameReplies) {
  NPULLM_REQUIRE_SHARED(kModel);
  Opened off(0, nullptr, "chatml"), on(7, nullptr, "chatml");
  ASSERT_NE(off.session, nullptr);
  ASSERT_NE(on.session, nullptr);
  ASSERT_EQ(npullm_session_set_speculative(on.session, NPULLM_SPEC_LOOKUP, 7, 1, nullptr), NPULLM_OK) << npullm_last_error();
  ASSERT_EQ(npullm_chat_start(off.session, "Tell a story."), NPULLM_OK);
  ASSERT_EQ(npullm_chat_start(on.session, "Tell a story."), NPULLM_OK);
  int64_t verify_steps = 0;
  for (const char* user : {"Once upon a time there was a cat.", "The cat saw a dog.", "Then they played."}) {
    const Reply a = off.run(user, true), b = on.run(user, true);
    EXPECT_EQ(b.ids, a.ids) << user;
    EXPECT_EQ(b.text, a.text) << user;
    verify_steps += b.spec.spec_verify_steps;
  }
  EXPECT_GT(verify_steps, 0);
  int32_t *ids_a = nullptr, *ids_b = nullptr;
  size_t n_a = 0, n_b = 0;
  ASSERT_EQ(npullm_session_conversation_ids(off.session, &ids_a, &n_a), NPULLM_OK);
  ASSERT_EQ(npullm_session_conversation_ids(on.session, &ids_b, &n_b), NPULLM_OK);
  EXPECT_EQ(std::vector<int32_t>(ids_b, ids_b + n_b), std::vector<int32_t>(ids_a, ids_a + n_a));
  npullm_free(ids_a);
  npullm_free(ids_b);

  // npullm_generate_tokens takes the setting too.
  int32_t* prompt = nullptr;
  size_t n_prompt = 0;
  ASSERT_EQ(npullm_tokenize(on.model, kPrompt, 1, 0, &prompt, &n_prompt), NPULLM_OK);
  npullm_sampling s = npullm_sampling_default();
  s.max_new_tokens = kTokens;
  npullm_result a, b;
  ASSERT_EQ(npullm_generate_tokens(off.session, prompt, n_prompt, &s, nullptr, nullptr, &a), NPULLM_OK) << npullm_last_error();
  ASSERT_EQ(npullm_generate_tokens(on.session, prompt, n_prompt, &s, nullptr, nullptr, &b), NPULLM_OK) << npullm_last_error();
  EXPECT_EQ(std::vector<int32_t>(b.ids, b.ids + b.n_ids), std::vector<int32_t>(a.ids, a.ids + a.n_ids));
  npullm_spec_metrics m{};
  ASSERT_EQ(npullm_session_last_spec_metrics(on.session, &m), NPULLM_OK);
  EXPECT_GT(m.spec_verify_steps, 0);
  npullm_result_free(&a);
  npullm_result_free(&b);
  npullm_free(prompt);
}

TEST(CapiSpeculative, OpeningRefusesWhatCannotRun) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  const std::string cache = (dir.path / "cache").string(), path = model_path();
  npullm_model_params p = npullm_model_default_params();
  p.cache_dir = cache.c_str();
  p.threads = 2;
  npullm_model* model = nullptr;
  EXPECT_EQ(npullm_model_open_speculative(path.c_str(), &p, 64, nullptr, &model), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("spec_max_k must be between 0 and 63"));
  EXPECT_EQ(npullm_model_open_speculative(path.c_str(), &p, -1, nullptr, &model), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_model_open_speculative(path.c_str(), &p, 0, path.c_str(), &model), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("a draft model needs verify blobs"));
  const std::string missing = (dir.path / "no-such-draft.gguf").string();
  EXPECT_EQ(npullm_model_open_speculative(path.c_str(), &p, 3, missing.c_str(), &model), NPULLM_ERR_IO);
  EXPECT_TRUE(last_error_says(missing));
  EXPECT_EQ(npullm_model_open_speculative(nullptr, &p, 3, nullptr, &model), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(model, nullptr);  // written only on success
  // A draft model of another vocabulary is refused at the open, not at the first session.
  const std::string other = npullm::test::shared_path("golden/qwen2-gpt2.Q4_0.gguf");
  if (fs::exists(other)) {
    EXPECT_EQ(npullm_model_open_speculative(path.c_str(), &p, 3, other.c_str(), &model), NPULLM_ERR_MODEL);
    EXPECT_TRUE(last_error_says("share the vocabulary"));
    EXPECT_EQ(model, nullptr);
  }
  // "" is no draft model; spec_max_k 0 is npullm_model_open.
  ASSERT_EQ(npullm_model_open_speculative(path.c_str(), &p, 0, "", &model), NPULLM_OK) << npullm_last_error();
  npullm_model_free(model);
}

TEST(CapiSpeculative, RefusalsSayWhatToDoAndKeepTheSetting) {
  // Without a model or a session.
  EXPECT_EQ(npullm_session_set_speculative(nullptr, NPULLM_SPEC_OFF, 0, 0, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_speculative_check(nullptr, NPULLM_SPEC_LOOKUP, 3, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_spec_metrics m{};
  EXPECT_EQ(npullm_session_last_spec_metrics(nullptr, &m), NPULLM_ERR_INVALID_ARGUMENT);

  NPULLM_REQUIRE_SHARED(kModel);
  // A model opened without verify blobs takes no speculation, a prediction alone included.
  Opened plain(0);
  ASSERT_NE(plain.session, nullptr);
  EXPECT_EQ(npullm_session_last_spec_metrics(plain.session, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(npullm_session_last_spec_metrics(plain.session, &m), NPULLM_OK);
  EXPECT_EQ(m.spec_drafted + m.spec_accepted + m.spec_verify_steps + m.prediction_accepted + m.prediction_rejected, 0)
      << "zeros before the first generation";
  EXPECT_EQ(npullm_session_set_speculative(plain.session, NPULLM_SPEC_LOOKUP, 7, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("npullm_model_open_speculative and spec_max_k > 0"));
  EXPECT_EQ(npullm_session_set_speculative(plain.session, NPULLM_SPEC_OFF, 7, 1, "a prediction"), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_speculative_check(plain.model, NPULLM_SPEC_LOOKUP, 7, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_speculative_check(plain.model, NPULLM_SPEC_OFF, 0, 0, ""), NPULLM_OK) << "off is always fine";
  EXPECT_EQ(plain.run(kPrompt).spec.spec_verify_steps, 0);

  Opened o(7);
  ASSERT_NE(o.session, nullptr);
  const Reply off = o.run(kPrompt);
  ASSERT_EQ(npullm_session_set_speculative(o.session, NPULLM_SPEC_LOOKUP, 3, 1, nullptr), NPULLM_OK) << npullm_last_error();
  EXPECT_EQ(npullm_session_set_speculative(o.session, NPULLM_SPEC_LOOKUP, 0, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("max_k must be at least 1 (got 0)"));
  EXPECT_EQ(npullm_session_set_speculative(o.session, NPULLM_SPEC_DRAFT, 3, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("NPULLM_SPEC_DRAFT needs a draft model"));
  EXPECT_EQ(npullm_session_set_speculative(o.session, static_cast<npullm_spec_mode>(9), 3, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("npullm_spec_mode"));
  EXPECT_EQ(npullm_speculative_check(o.model, NPULLM_SPEC_LOOKUP, 3, 1, nullptr), NPULLM_OK);
  EXPECT_EQ(npullm_speculative_check(o.model, NPULLM_SPEC_LOOKUP, -2, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_speculative_check(o.model, NPULLM_SPEC_DRAFT, 3, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  // Structured output and speculation exclude each other, whichever is set first.
  EXPECT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_REGEX, "[0-9]{3}", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("turn speculation off first"));
  // None of the refused calls changed the setting: lookup at K 3, free text.
  const Reply kept = o.run(kPrompt);
  expect_same(off, kept, "after the refusals");

  ASSERT_EQ(npullm_session_set_speculative(o.session, NPULLM_SPEC_OFF, 0, 0, nullptr), NPULLM_OK) << npullm_last_error();
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_REGEX, "[0-9]{3}", nullptr), NPULLM_OK) << npullm_last_error();
  EXPECT_EQ(npullm_session_set_speculative(o.session, NPULLM_SPEC_LOOKUP, 3, 1, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_says("set NPULLM_STRUCTURED_NONE first"));
  EXPECT_EQ(npullm_session_set_speculative(o.session, NPULLM_SPEC_OFF, 3, 1, off.text.c_str()), NPULLM_ERR_INVALID_ARGUMENT)
      << "a prediction is speculation too";
  const Reply digits = o.run(kPrompt, false, /*ignore_eos=*/false);  // the grammar ends the reply with EOS
  EXPECT_EQ(digits.text.size(), 3u) << digits.text;
  EXPECT_EQ(digits.spec.spec_verify_steps, 0);
  EXPECT_EQ(NPULLM_ABI_VERSION, 1);
}

}  // namespace
