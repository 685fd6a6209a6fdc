// The request layer of the server, without a socket: valid bodies become the GenerationConfig the
// scheduler gets (OpenAI's defaults where a field is absent), invalid ones the error object with
// the status OpenAI's API gives, naming the parameter at fault. The same cases through HTTP, and
// many more, are in tests/server/bad_requests.mjs.
#include <gtest/gtest.h>

#include <variant>

#include "server/metrics.h"
#include "server/openai_request.h"

namespace npullm::server {
namespace {

const RequestLimits kLimits{1000000, 512};

ApiRequest ok(const std::string& body, bool chat = true) {
  auto r = parse_request(body, chat, kLimits);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << ": " << e->message;
  return std::holds_alternative<ApiRequest>(r) ? std::get<ApiRequest>(r) : ApiRequest{};
}

ApiError bad(const std::string& body, bool chat = true) {
  auto r = parse_request(body, chat, kLimits);
  if (std::holds_alternative<ApiRequest>(r)) {
    ADD_FAILURE() << body << " was accepted";
    return {};
  }
  return std::get<ApiError>(r);
}

TEST(OpenAiRequest, ValidBodiesBecomeGenerationSettings) {
  const ApiRequest r = ok(R"({"model":"m","messages":[{"role":"developer","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]}],
      "temperature":0,"top_p":0.5,"max_completion_tokens":7,"stop":["a","b"],"seed":-3,"stream":true,
      "stream_options":{"include_usage":true},"presence_penalty":-2,"frequency_penalty":1.5,"user":"ignored"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.gen.temperature, 0.0f);
  EXPECT_EQ(r.gen.top_p, 0.5f);
  EXPECT_TRUE(r.has_max_tokens);
  EXPECT_EQ(r.gen.max_new_tokens, 7);
  EXPECT_EQ(r.gen.stop_strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.has_seed);
  EXPECT_EQ(r.gen.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.gen.presence_penalty, -2.0f);
  const auto& msgs = std::get<ChatRequest>(r.body).messages;
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].role, "system");
  EXPECT_EQ(msgs[1].content, "Hi there");

  const ApiRequest d = ok(R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(d.gen.temperature, 1.0f);  // OpenAI's default, not greedy
  EXPECT_FALSE(d.has_max_tokens);
  EXPECT_FALSE(d.stream);

  const ApiRequest c = ok(R"({"prompt":[1,2,3],"max_tokens":2})", false);
  EXPECT_EQ(std::get<CompletionRequest>(c.body).prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(std::get<CompletionRequest>(ok(R"({"prompt":["once"]})", false).body).prompt, "once");
}

TEST(OpenAiRequest, InvalidBodiesGetTheRightStatusAndParameter) {
  struct Case {
    const char* body;
    const char* param;
  };
  const Case chat_cases[] = {
      {"{", ""},
      {"[1]", ""},
      {"{}", "messages"},
      {R"({"messages":{}})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type"},
      {R"({"messages":[{"role":"system","content":"x"}]})", "messages"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":2.5})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":1.01})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1000000000000})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":18446744073709551615})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":""})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":2})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"seed":"1"})", "seed"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":3})", "presence_penalty"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})", "logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})", "tools[0].function"},
      {R"({"messages":[{"role":"user","content":"x"}],"model":7})", "model"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", ""},
  };
  for (const Case& c : chat_cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = bad(c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_FALSE(e.message.empty());
    const auto j = e.body();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"].is_null(), std::string(c.param).empty());
  }
  for (const char* body : {"{}", R"({"prompt":""})", R"({"prompt":7})", R"({"prompt":[1,600]})", R"({"prompt":[1,"a"]})",
                           R"({"prompt":"x","echo":true})", R"({"prompt":"x","best_of":3})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(bad(body, false).status, 400);
  }
}

TEST(OpenAiRequest, MetricsAreInPrometheusTextFormat) {
  genai::SchedulerStatus st;
  st.ttft_ms = genai::Histogram({10, 100});
  st.ttft_ms.add(5);
  st.ttft_ms.add(50);
  st.ttft_ms.add(5000);
  st.generated_tokens = 42;
  st.parallel = 8;
  st.slot_capacity = 1152;
  const std::string text = prometheus_text(st, {{{"/health", 200}, 3}}, "stories260K");
  EXPECT_NE(text.find("# TYPE npullm_time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("npullm_time_to_first_token_seconds_bucket{le=\"0.01\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("npullm_time_to_first_token_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("npullm_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("npullm_time_to_first_token_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("npullm_http_requests_total{route=\"/health\",status=\"200\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("npullm_generated_tokens_total 42\n"), std::string::npos);
  EXPECT_NE(text.find("npullm_kv_rows_capacity 9216\n"), std::string::npos);
}

}  // namespace
}  // namespace npullm::server
