// Structured output through the C API (npullm_session_set_structured, npullm_structured_check), called
// as a C program would: a JSON Schema reply on stories260K parses and meets the schema (checked by
// hand, not by the grammar engine), GBNF / regex / json_object / a trigger work, the setting lasts
// until changed, and refusals are NPULLM_ERR_INVALID_ARGUMENT with a message naming the keyword,
// leaving the session's setting as it was. The ABI number stays 1: the additions are functions.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <npullm/npullm.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <unistd.h>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kModel = "models/llama2c/stories260K.gguf";

constexpr const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":8},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["red","green"]},"maxItems":3}},
  "required":["name","age"],"additionalProperties":false})";

// The schema above, checked with nlohmann::json by hand.
void expect_person(const std::string& text) {
  SCOPED_TRACE(text);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text));
  ASSERT_TRUE(j.is_object());
  for (auto it = j.begin(); it != j.end(); ++it) EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "tags") << it.key();
  ASSERT_TRUE(j.contains("name") && j["name"].is_string());
  const size_t n = j["name"].get<std::string>().size();  // 1..8 code points: 1..32 bytes
  EXPECT_TRUE(n >= 1 && n <= 32);
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer());
  EXPECT_TRUE(j["age"].get<int64_t>() >= 0 && j["age"].get<int64_t>() <= 120);
  if (j.contains("tags")) {
    ASSERT_TRUE(j["tags"].is_array());
    EXPECT_LE(j["tags"].size(), 3u);
    for (const auto& t : j["tags"]) EXPECT_TRUE(t == "red" || t == "green") << t.dump();
  }
}

using npullm::test::TempDir;

struct Opened {
  TempDir dir;
  std::string cache;
  npullm_model* model = nullptr;
  npullm_session* session = nullptr;
  explicit Opened(const char* chat_template = nullptr) {
    npullm_model_params p = npullm_model_default_params();
    cache = (dir.path / "cache").string();
    p.cache_dir = cache.c_str();
    p.threads = 2;
    p.chat_template = chat_template;
    EXPECT_EQ(npullm_model_open(npullm::test::shared_path(kModel).c_str(), &p, &model), NPULLM_OK) << npullm_last_error();
    if (model) {
      EXPECT_EQ(npullm_session_create(model, &session), NPULLM_OK) << npullm_last_error();
    }
  }
  ~Opened() {
    npullm_session_free(session);
    npullm_model_free(model);
  }
  // Greedy (or seeded) text of one generation; "" with a test failure on an error.
  std::string generate(const char* prompt, int64_t n = 700, float temperature = 0, uint64_t seed = 0,
                       npullm_finish_reason* finish = nullptr) {
    npullm_sampling s = npullm_sampling_default();
    s.max_new_tokens = n;
    s.temperature = temperature;
    s.seed = seed;
    npullm_result r;
    EXPECT_EQ(npullm_generate(session, prompt, &s, nullptr, nullptr, &r), NPULLM_OK) << npullm_last_error();
    std::string text = r.text ? std::string(r.text, r.text_len) : "";
    if (finish) *finish = r.finish;
    npullm_result_free(&r);
    return text;
  }
};

TEST(CapiStructured, JsonSchemaReplyParsesAndValidates) {
  NPULLM_REQUIRE_SHARED(kModel);
  Opened o;
  ASSERT_NE(o.session, nullptr);
  const std::string free_text = o.generate("Once upon a time", 30);
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_JSON_SCHEMA, kPersonSchema, nullptr), NPULLM_OK)
      << npullm_last_error();
  npullm_finish_reason finish = NPULLM_FINISH_LENGTH;
  expect_person(o.generate("Once upon a time", 700, 0, 0, &finish));
  EXPECT_EQ(finish, NPULLM_FINISH_EOS);  // ended as soon as the object closed
  // The setting lasts: sampled replies and the next calls are constrained too.
  for (uint64_t seed : {1, 2, 3}) expect_person(o.generate("Lily", 700, 1.0f, seed));
  // Streaming sees the same text.
  std::string streamed;
  npullm_sampling s = npullm_sampling_default();
  s.max_new_tokens = 700;
  npullm_result r;
  ASSERT_EQ(npullm_generate(
                o.session, "Once upon a time", &s,
                [](const char* piece, size_t len, void* ud) {
                  static_cast<std::string*>(ud)->append(piece, len);
                  return 1;
                },
                &streamed, &r),
            NPULLM_OK);
  EXPECT_EQ(streamed, std::string(r.text, r.text_len));
  npullm_result_free(&r);
  expect_person(streamed);
  // NONE: free text again, as before.
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_NONE, nullptr, ""), NPULLM_OK);
  EXPECT_EQ(o.generate("Once upon a time", 30), free_text);
}

TEST(CapiStructured, GrammarRegexJsonObjectTriggerAndChat) {
  NPULLM_REQUIRE_SHARED(kModel);
  Opened o("chatml");
  ASSERT_NE(o.session, nullptr);
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_GRAMMAR, "root ::= [0-9]{4} \"-\" [0-9]{2}\n", nullptr), NPULLM_OK);
  const std::string g = o.generate("Tom");
  EXPECT_TRUE(std::regex_match(g, std::regex("[0-9]{4}-[0-9]{2}"))) << g;
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_REGEX, "(yes|no), [a-z ]{3,12}\\.", ""), NPULLM_OK);
  const std::string re = o.generate("Tom");
  EXPECT_TRUE(std::regex_match(re, std::regex("(yes|no), [a-z ]{3,12}\\."))) << re;
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_JSON_OBJECT, nullptr, nullptr), NPULLM_OK);
  const std::string obj = o.generate("Tom");
  EXPECT_NO_THROW(EXPECT_TRUE(nlohmann::json::parse(obj).is_object())) << obj;

  // A trigger: free text up to it (the free reply's start), the expression after it.
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_NONE, nullptr, nullptr), NPULLM_OK);
  const std::string free_text = o.generate("Once upon a time", 30);
  const std::string trigger = free_text.substr(0, std::min<size_t>(12, free_text.size()));
  ASSERT_FALSE(trigger.empty());
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_REGEX, " [0-9]{2}!", trigger.c_str()), NPULLM_OK);
  const std::string lazy = o.generate("Once upon a time", 40);
  ASSERT_GE(lazy.size(), trigger.size());
  EXPECT_EQ(lazy.substr(0, trigger.size()), trigger);
  EXPECT_TRUE(std::regex_match(lazy.substr(trigger.size()), std::regex(" [0-9]{2}!"))) << lazy;

  // A chat turn under a schema.
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_JSON_SCHEMA, kPersonSchema, nullptr), NPULLM_OK);
  npullm_sampling s = npullm_sampling_default();
  s.max_new_tokens = 700;
  npullm_result r;
  ASSERT_EQ(npullm_chat(o.session, "A person, please.", &s, nullptr, nullptr, &r), NPULLM_OK) << npullm_last_error();
  expect_person(std::string(r.text, r.text_len));
  npullm_result_free(&r);
}

TEST(CapiStructured, RefusalsNameTheKeywordAndKeepTheSetting) {
  // Without a model.
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_JSON_SCHEMA, kPersonSchema, nullptr), NPULLM_OK) << npullm_last_error();
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_JSON_SCHEMA, R"({"type":"object","properties":{"a":{"not":{}}}})", nullptr),
            NPULLM_ERR_INVALID_ARGUMENT);
  const std::string why = npullm_last_error();
  EXPECT_NE(why.find("keyword 'not'"), std::string::npos) << why;
  EXPECT_NE(why.find("#/properties/a"), std::string::npos) << why;
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_JSON_SCHEMA, R"({"type":"integer","multipleOf":2})", nullptr),
            NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("'multipleOf'"), std::string::npos) << npullm_last_error();
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_JSON_SCHEMA, "{not json", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_GRAMMAR, "root ::= undefined\n", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("undefined"), std::string::npos) << npullm_last_error();
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_REGEX, "(a", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  // Arguments that do not fit the kind.
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_JSON_SCHEMA, nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_REGEX, "", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_JSON_OBJECT, "{}", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_structured_check(NPULLM_STRUCTURED_NONE, nullptr, "<tool_call>"), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_structured_check(static_cast<npullm_structured_kind>(9), "x", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("npullm_structured_kind"), std::string::npos);
  EXPECT_EQ(npullm_session_set_structured(nullptr, NPULLM_STRUCTURED_NONE, nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);

  NPULLM_REQUIRE_SHARED(kModel);
  Opened o;
  ASSERT_NE(o.session, nullptr);
  ASSERT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_REGEX, "[0-9]{3}", nullptr), NPULLM_OK);
  EXPECT_EQ(npullm_session_set_structured(o.session, NPULLM_STRUCTURED_JSON_SCHEMA, R"({"if":{}})", nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("keyword 'if'"), std::string::npos) << npullm_last_error();
  // The refused call changed nothing: the session still writes three digits.
  const std::string kept = o.generate("Tom", 20);
  EXPECT_TRUE(std::regex_match(kept, std::regex("[0-9]{3}"))) << kept;
  EXPECT_EQ(NPULLM_ABI_VERSION, 1);
  EXPECT_EQ(npullm_abi_version(), 1);
}

}  // namespace
