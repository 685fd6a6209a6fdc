// The C API (include/npullm/npullm.h), called as a C program would: every function, its errors
// (codes + messages, never an exception or an abort), greedy text equal to the C++ pipeline's,
// cancellation within a token, a prompt that cannot fit, chat sessions saved and loaded.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <npullm/llm_pipeline.h>
#include <npullm/npullm.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kModel = "models/llama2c/stories260K.gguf";
// stories260K has no chat template of its own.
constexpr const char* kTemplate = "chatml";

using npullm::test::TempDir;

std::string model_path() { return npullm::test::shared_path(kModel); }

// Model params for the tests: a cache in a temp dir, one thread count for determinism of timing only.
npullm_model_params test_params(const TempDir& dir, const char* chat_template = nullptr) {
  npullm_model_params p = npullm_model_default_params();
  static std::string cache;  // params hold a C string; each test process uses one cache folder
  cache = (dir.path / "cache").string();
  p.cache_dir = cache.c_str();
  p.threads = 2;
  p.chat_template = chat_template;
  return p;
}

// Owns a model and a session for a test body.
struct Opened {
  npullm_model* model = nullptr;
  npullm_session* session = nullptr;
  Opened(const npullm_model_params& p) {
    EXPECT_EQ(npullm_model_open(model_path().c_str(), &p, &model), NPULLM_OK) << npullm_last_error();
    if (model) {
      EXPECT_EQ(npullm_session_create(model, &session), NPULLM_OK) << npullm_last_error();
    }
  }
  ~Opened() {
    npullm_session_free(session);
    npullm_model_free(model);
  }
};

// Collects streamed pieces; cancels after `cancel_after` of them (0 = never).
struct Collector {
  std::vector<std::string> pieces;
  size_t cancel_after = 0;
  static int cb(const char* piece, size_t len, void* ud) {
    auto* c = static_cast<Collector*>(ud);
    EXPECT_EQ(piece[len], '\0');
    c->pieces.emplace_back(piece, len);
    return c->cancel_after == 0 || c->pieces.size() < c->cancel_after;
  }
  std::string text() const {
    std::string s;
    for (const auto& p : pieces) s += p;
    return s;
  }
};

npullm_sampling greedy(int64_t n) {
  npullm_sampling s = npullm_sampling_default();
  s.max_new_tokens = n;
  return s;
}

TEST(CapiBasics, VersionAbiNamesAndFree) {
  EXPECT_STREQ(npullm_version(), "0.1.0");
  EXPECT_EQ(npullm_abi_version(), NPULLM_ABI_VERSION);
  EXPECT_STREQ(npullm_status_name(NPULLM_OK), "ok");
  EXPECT_STREQ(npullm_status_name(NPULLM_ERR_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(npullm_status_name(NPULLM_ERR_IO), "io");
  EXPECT_STREQ(npullm_status_name(NPULLM_ERR_MODEL), "model");
  EXPECT_STREQ(npullm_status_name(NPULLM_ERR_CONTEXT), "context");
  EXPECT_STREQ(npullm_status_name(NPULLM_ERR_OUT_OF_MEMORY), "out_of_memory");
  EXPECT_STREQ(npullm_status_name(NPULLM_ERR_INTERNAL), "internal");
  EXPECT_STREQ(npullm_status_name(static_cast<npullm_status>(7)), "unknown");
  EXPECT_STREQ(npullm_finish_reason_name(NPULLM_FINISH_EOS), "eos");
  EXPECT_STREQ(npullm_finish_reason_name(NPULLM_FINISH_STOP_TOKEN), "stop_token");
  EXPECT_STREQ(npullm_finish_reason_name(NPULLM_FINISH_STOP_STRING), "stop_string");
  EXPECT_STREQ(npullm_finish_reason_name(NPULLM_FINISH_LENGTH), "length");
  EXPECT_STREQ(npullm_finish_reason_name(NPULLM_FINISH_CANCELLED), "cancelled");
  EXPECT_STREQ(npullm_finish_reason_name(static_cast<npullm_finish_reason>(5)), "unknown");
  // Releasing nothing is fine everywhere.
  npullm_free(nullptr);
  npullm_model_free(nullptr);
  npullm_session_free(nullptr);
  npullm_result_free(nullptr);
  npullm_messages_free(nullptr, 3);
  // Defaults mirror the C++ API's.
  const npullm_model_params p = npullm_model_default_params();
  EXPECT_EQ(p.prefill_chunk, 64);
  EXPECT_EQ(p.use_cache, 1);
  EXPECT_EQ(p.kv_type, NPULLM_KV_F16);
  EXPECT_EQ(p.context_policy, NPULLM_CONTEXT_SHIFT);
  EXPECT_EQ(p.n_keep, -1);
  EXPECT_EQ(p.cut_long_prompts, 0);
  const npullm_sampling s = npullm_sampling_default();
  EXPECT_EQ(s.max_new_tokens, 256);
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.penalty_last_n, 64);
}

TEST(CapiErrors, BadModelPathIsAnIoErrorWithTheMessage) {
  npullm_model* m = reinterpret_cast<npullm_model*>(0x1);  // must stay untouched on failure
  EXPECT_EQ(npullm_model_open("/nonexistent/model.gguf", nullptr, &m), NPULLM_ERR_IO);
  EXPECT_EQ(m, reinterpret_cast<npullm_model*>(0x1));
  EXPECT_NE(std::string(npullm_last_error()).find("/nonexistent/model.gguf"), std::string::npos) << npullm_last_error();
}

TEST(CapiErrors, ANonGgufFileIsRefusedAsAModel) {
  TempDir dir;
  const std::string bad = (dir.path / "bad.gguf").string();
  std::ofstream(bad) << "this is not a GGUF file";
  npullm_model* m = nullptr;
  EXPECT_EQ(npullm_model_open(bad.c_str(), nullptr, &m), NPULLM_ERR_MODEL);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(npullm_last_error()).find("bad.gguf"), std::string::npos) << npullm_last_error();
}

TEST(CapiErrors, NullArgumentsAndBadOptionsAreInvalidArguments) {
  npullm_model* m = nullptr;
  EXPECT_EQ(npullm_model_open(nullptr, nullptr, &m), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_model_open("x.gguf", nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_model_params p = npullm_model_default_params();
  p.prefill_chunk = 0;
  EXPECT_EQ(npullm_model_open("x.gguf", &p, &m), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("prefill_chunk"), std::string::npos);
  p = npullm_model_default_params();
  const int bad_kv_type = 7;  // what a C caller may store in the field
  std::memcpy(&p.kv_type, &bad_kv_type, sizeof bad_kv_type);
  EXPECT_EQ(npullm_model_open("x.gguf", &p, &m), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("kv_type"), std::string::npos);
  p = npullm_model_default_params();
  std::memcpy(&p.context_policy, &bad_kv_type, sizeof bad_kv_type);
  EXPECT_EQ(npullm_model_open("x.gguf", &p, &m), NPULLM_ERR_INVALID_ARGUMENT);
  p = npullm_model_default_params();
  p.n_variants = 2;  // variants NULL
  EXPECT_EQ(npullm_model_open("x.gguf", &p, &m), NPULLM_ERR_INVALID_ARGUMENT);

  npullm_model_info info;
  EXPECT_EQ(npullm_model_get_info(nullptr, &info), NPULLM_ERR_INVALID_ARGUMENT);
  int32_t* ids = nullptr;
  size_t n = 0;
  char* text = nullptr;
  EXPECT_EQ(npullm_tokenize(nullptr, "a", 0, 0, &ids, &n), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_detokenize(nullptr, nullptr, 0, &text), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_apply_chat_template(nullptr, nullptr, 0, 1, &text), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_session* s = nullptr;
  EXPECT_EQ(npullm_session_create(nullptr, &s), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_result r;
  std::memset(&r, 0x5a, sizeof r);
  EXPECT_EQ(npullm_generate(nullptr, "a", nullptr, nullptr, nullptr, &r), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r.text, nullptr);  // the result is zeroed first, so npullm_result_free is always safe
  npullm_result_free(&r);
  EXPECT_EQ(npullm_generate_tokens(nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_chat_start(nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_chat(nullptr, "hi", nullptr, nullptr, nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_session_reset(nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_chat_message* msgs = nullptr;
  EXPECT_EQ(npullm_session_history(nullptr, &msgs, &n), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_session_set_history(nullptr, nullptr, 0), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_session_conversation_ids(nullptr, &ids, &n), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_kv_state kv;
  EXPECT_EQ(npullm_session_kv_state(nullptr, &kv), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_metrics met;
  EXPECT_EQ(npullm_session_last_metrics(nullptr, &met), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_session_save(nullptr, "x.json"), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(npullm_session_load(nullptr, "x.json"), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("NULL"), std::string::npos) << npullm_last_error();
}

TEST(CapiErrors, TheLastErrorIsPerThread) {
  npullm_model* m = nullptr;
  ASSERT_EQ(npullm_model_open("/nonexistent/a.gguf", nullptr, &m), NPULLM_ERR_IO);
  std::string other;
  std::thread t([&] {
    npullm_model* m2 = nullptr;
    npullm_model_open("/nonexistent/b.gguf", nullptr, &m2);
    other = npullm_last_error();
  });
  t.join();
  EXPECT_NE(other.find("b.gguf"), std::string::npos);
  EXPECT_NE(std::string(npullm_last_error()).find("a.gguf"), std::string::npos) << npullm_last_error();
}

TEST(CapiModel, InfoTokenizeDetokenizeAndTheChatTemplate) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  const int64_t variants[] = {128, 256, 512};
  npullm_model_params p = test_params(dir);
  p.variants = variants;
  p.n_variants = 3;
  p.prefill_chunk = 16;
  npullm_model* model = nullptr;
  ASSERT_EQ(npullm_model_open(model_path().c_str(), &p, &model), NPULLM_OK) << npullm_last_error();

  npullm_model_info info;
  ASSERT_EQ(npullm_model_get_info(model, &info), NPULLM_OK);
  EXPECT_EQ(info.n_vocab, 512);
  EXPECT_EQ(info.bos_id, 1);
  EXPECT_EQ(info.eos_id, 2);
  EXPECT_EQ(info.capacity, 512);
  ASSERT_EQ(info.n_variants, 3u);
  EXPECT_EQ(info.variants[0], 128);
  EXPECT_EQ(info.variants[2], 512);
  EXPECT_EQ(info.prefill_chunk, 16);
  EXPECT_EQ(info.slots, 1);
  EXPECT_NE(std::string(info.description).find("[128,256,512]"), std::string::npos) << info.description;

  int32_t* ids = nullptr;
  size_t n = 0;
  ASSERT_EQ(npullm_tokenize(model, "Once upon a time", 1, 0, &ids, &n), NPULLM_OK);
  npullm::LLMPipeline ref(model_path(), [] {
    npullm::PipelineConfig c;
    c.use_cache = false;
    return c;
  }());
  EXPECT_EQ(std::vector<int32_t>(ids, ids + n), ref.tokenize("Once upon a time", true));
  ASSERT_GT(n, 1u);
  EXPECT_EQ(ids[0], 1);
  char* text = nullptr;
  ASSERT_EQ(npullm_detokenize(model, ids + 1, n - 1, &text), NPULLM_OK);
  EXPECT_NE(std::string(text).find("Once upon a time"), std::string::npos) << text;
  npullm_free(text);
  npullm_free(ids);
  // An empty text is zero ids (and still a pointer to free).
  ASSERT_EQ(npullm_tokenize(model, "", 0, 0, &ids, &n), NPULLM_OK);
  EXPECT_EQ(n, 0u);
  npullm_free(ids);
  const int32_t bad[] = {5, 100000};
  EXPECT_EQ(npullm_detokenize(model, bad, 2, &text), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("100000"), std::string::npos);

  // No template of its own: a MODEL error that says so.
  const npullm_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(npullm_apply_chat_template(model, msgs, 2, 1, &text), NPULLM_ERR_MODEL);
  EXPECT_NE(std::string(npullm_last_error()).find("chat template"), std::string::npos) << npullm_last_error();
  npullm_model_free(model);

  p.chat_template = kTemplate;
  ASSERT_EQ(npullm_model_open(model_path().c_str(), &p, &model), NPULLM_OK) << npullm_last_error();
  ASSERT_EQ(npullm_apply_chat_template(model, msgs, 2, 1, &text), NPULLM_OK) << npullm_last_error();
  EXPECT_STREQ(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  npullm_free(text);
  const npullm_chat_message null_role[] = {{nullptr, "x"}};
  EXPECT_EQ(npullm_apply_chat_template(model, null_role, 1, 1, &text), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_model_free(model);
}

TEST(CapiGenerate, GreedyTextEqualsTheCppPipelineAndTheStreamedPieces) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  Opened o(test_params(dir));
  ASSERT_NE(o.session, nullptr);

  npullm::PipelineConfig c;
  c.use_cache = false;
  npullm::LLMPipeline ref(model_path(), c);
  npullm::GenerationConfig g;
  g.max_new_tokens = 40;
  const npullm::GenerationResult want = ref.generate("Once upon a time", g);

  Collector col;
  const npullm_sampling s = greedy(40);
  npullm_result r;
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &s, Collector::cb, &col, &r), NPULLM_OK) << npullm_last_error();
  EXPECT_EQ(std::string(r.text, r.text_len), want.text);
  EXPECT_EQ(std::strlen(r.text), r.text_len);
  EXPECT_EQ(col.text(), want.text);
  EXPECT_EQ(std::vector<int32_t>(r.ids, r.ids + r.n_ids), want.ids);
  EXPECT_EQ(r.finish, want.finish == npullm::FinishReason::Eos ? NPULLM_FINISH_EOS : NPULLM_FINISH_LENGTH);
  EXPECT_EQ(r.metrics.generated_tokens, static_cast<int64_t>(r.n_ids));
  EXPECT_EQ(r.metrics.prefill_tokens, static_cast<int64_t>(want.prompt_ids.size()));
  EXPECT_GT(r.metrics.decode_tps, 0);
  EXPECT_GT(r.metrics.last_variant, 0);

  // The K/V state: prompt + generated rows (the last sampled token is not run yet), the variant.
  npullm_kv_state kv;
  ASSERT_EQ(npullm_session_kv_state(o.session, &kv), NPULLM_OK);
  EXPECT_EQ(kv.rows_used, static_cast<int64_t>(want.prompt_ids.size() + want.ids.size()) - 1);
  EXPECT_EQ(kv.capacity, ref.capacity());
  EXPECT_EQ(kv.last_variant, r.metrics.last_variant);
  EXPECT_GE(kv.variant, kv.rows_used + 1);
  EXPECT_EQ(kv.slot, 0);
  EXPECT_EQ(kv.in_chat, 0);
  npullm_metrics m;
  ASSERT_EQ(npullm_session_last_metrics(o.session, &m), NPULLM_OK);
  EXPECT_EQ(m.generated_tokens, r.metrics.generated_tokens);
  EXPECT_EQ(m.prefill_tokens, r.metrics.prefill_tokens);

  int32_t* conv = nullptr;
  size_t n_conv = 0;
  ASSERT_EQ(npullm_session_conversation_ids(o.session, &conv, &n_conv), NPULLM_OK);
  EXPECT_EQ(n_conv, want.prompt_ids.size() + want.ids.size());
  npullm_free(conv);

  // From the prompt's ids: the same continuation. No streaming and no result are fine too.
  npullm_result r2;
  ASSERT_EQ(npullm_generate_tokens(o.session, want.prompt_ids.data(), want.prompt_ids.size(), &s, nullptr, nullptr, &r2), NPULLM_OK);
  EXPECT_EQ(std::string(r2.text), want.text);
  npullm_result_free(&r2);
  EXPECT_EQ(r2.text, nullptr);
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", nullptr, nullptr, nullptr, nullptr), NPULLM_OK);
  ASSERT_EQ(npullm_session_last_metrics(o.session, &m), NPULLM_OK);
  EXPECT_GT(m.generated_tokens, 0);
  const int32_t out_of_vocab[] = {1, 512};
  EXPECT_EQ(npullm_generate_tokens(o.session, out_of_vocab, 2, &s, nullptr, nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  npullm_result_free(&r);
}

TEST(CapiGenerate, ACancelledGenerationEndsWithinOneToken) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  Opened o(test_params(dir));
  ASSERT_NE(o.session, nullptr);
  Collector col;
  col.cancel_after = 3;
  const npullm_sampling s = greedy(200);
  npullm_result r;
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &s, Collector::cb, &col, &r), NPULLM_OK) << npullm_last_error();
  EXPECT_EQ(r.finish, NPULLM_FINISH_CANCELLED);
  EXPECT_EQ(col.pieces.size(), 3u);  // no piece after the callback said stop
  EXPECT_EQ(std::string(r.text), col.text());
  // The token whose piece was refused is the last one: at most one token per piece was sampled.
  EXPECT_LE(r.n_ids, 3u);
  EXPECT_EQ(r.metrics.generated_tokens, static_cast<int64_t>(r.n_ids));
  npullm_result_free(&r);
}

TEST(CapiGenerate, SamplingStopsAndBadSettings) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  Opened o(test_params(dir));
  ASSERT_NE(o.session, nullptr);
  npullm_sampling s = greedy(48);
  s.temperature = 0.9f;
  s.top_k = 40;
  s.top_p = 0.95f;
  s.min_p = 0.01f;
  s.repetition_penalty = 1.1f;
  s.seed = 7;
  npullm_result a, b;
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &s, nullptr, nullptr, &a), NPULLM_OK);
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &s, nullptr, nullptr, &b), NPULLM_OK);
  EXPECT_STREQ(a.text, b.text);  // the same seed, the same text
  npullm_result_free(&a);
  npullm_result_free(&b);

  // A stop string: the text ends before it.
  npullm_result full;
  const npullm_sampling g = greedy(40);
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &g, nullptr, nullptr, &full), NPULLM_OK);
  const std::string text = full.text;
  const size_t at = text.find(' ', 8);
  ASSERT_NE(at, std::string::npos);
  const std::string stop = text.substr(at, 3);
  const char* stops[] = {stop.c_str()};
  npullm_sampling ss = greedy(40);
  ss.stop_strings = stops;
  ss.n_stop_strings = 1;
  npullm_result r;
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &ss, nullptr, nullptr, &r), NPULLM_OK);
  EXPECT_EQ(r.finish, NPULLM_FINISH_STOP_STRING);
  EXPECT_EQ(std::string(r.text), text.substr(0, text.find(stop)));
  npullm_result_free(&r);
  // A stop token: the third generated id.
  ASSERT_GE(full.n_ids, 3u);
  const int32_t stop_id = full.ids[2];
  npullm_sampling st = greedy(40);
  st.stop_token_ids = &stop_id;
  st.n_stop_token_ids = 1;
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &st, nullptr, nullptr, &r), NPULLM_OK);
  EXPECT_EQ(r.finish, NPULLM_FINISH_STOP_TOKEN);
  EXPECT_LE(r.n_ids, 2u);
  npullm_result_free(&r);
  npullm_result_free(&full);

  npullm_sampling bad = greedy(4);
  bad.top_p = 2;
  EXPECT_EQ(npullm_generate(o.session, "Once", &bad, nullptr, nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(npullm_last_error()).find("top_p"), std::string::npos);
  bad = greedy(4);
  bad.n_stop_strings = 1;
  EXPECT_EQ(npullm_generate(o.session, "Once", &bad, nullptr, nullptr, nullptr), NPULLM_ERR_INVALID_ARGUMENT);
}

TEST(CapiContext, APromptThatCannotFitIsAContextErrorAndTheSessionGoesOn) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  Opened o(test_params(dir, kTemplate));
  ASSERT_NE(o.session, nullptr);
  std::string long_prompt;
  for (int i = 0; i < 200; ++i) long_prompt += "Once upon a time there was a cat. ";
  const npullm_sampling s = greedy(8);
  npullm_result r;
  EXPECT_EQ(npullm_generate(o.session, long_prompt.c_str(), &s, nullptr, nullptr, &r), NPULLM_ERR_CONTEXT);
  const std::string msg = npullm_last_error();
  npullm_kv_state kv;
  ASSERT_EQ(npullm_session_kv_state(o.session, &kv), NPULLM_OK);
  EXPECT_NE(msg.find("tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(kv.capacity)), std::string::npos) << msg;
  EXPECT_EQ(r.text, nullptr);
  ASSERT_EQ(npullm_generate(o.session, "Once upon a time", &s, nullptr, nullptr, &r), NPULLM_OK) << npullm_last_error();
  npullm_result_free(&r);

  // In a chat: refused, and the user message is not in the history.
  ASSERT_EQ(npullm_chat_start(o.session, "Tell stories."), NPULLM_OK);
  ASSERT_EQ(npullm_chat(o.session, "Tell me about a dog.", &s, nullptr, nullptr, nullptr), NPULLM_OK);
  EXPECT_EQ(npullm_chat(o.session, long_prompt.c_str(), &s, nullptr, nullptr, nullptr), NPULLM_ERR_CONTEXT);
  npullm_chat_message* h = nullptr;
  size_t n = 0;
  ASSERT_EQ(npullm_session_history(o.session, &h, &n), NPULLM_OK);
  EXPECT_EQ(n, 3u);
  npullm_messages_free(h, n);
  EXPECT_EQ(npullm_chat(o.session, "And then?", &s, nullptr, nullptr, nullptr), NPULLM_OK) << npullm_last_error();

  // cut_long_prompts: cut with a warning instead.
  TempDir dir2;
  npullm_model_params p = test_params(dir2);
  p.cut_long_prompts = 1;
  Opened cut(p);
  ASSERT_NE(cut.session, nullptr);
  ASSERT_EQ(npullm_generate(cut.session, long_prompt.c_str(), &s, nullptr, nullptr, &r), NPULLM_OK) << npullm_last_error();
  EXPECT_GT(r.n_ids, 0u);
  npullm_result_free(&r);
}

TEST(CapiChat, TurnsReuseTheKvStateAndASavedSessionLoads) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  Opened o(test_params(dir, kTemplate));
  ASSERT_NE(o.session, nullptr);
  const npullm_sampling s = greedy(24);
  ASSERT_EQ(npullm_chat_start(o.session, "You tell short stories."), NPULLM_OK) << npullm_last_error();
  npullm_result r1, r2;
  ASSERT_EQ(npullm_chat(o.session, "Tell me about a cat.", &s, nullptr, nullptr, &r1), NPULLM_OK) << npullm_last_error();
  npullm_kv_state kv1;
  ASSERT_EQ(npullm_session_kv_state(o.session, &kv1), NPULLM_OK);
  EXPECT_EQ(kv1.in_chat, 1);
  ASSERT_EQ(npullm_chat(o.session, "What did the cat eat?", &s, nullptr, nullptr, &r2), NPULLM_OK) << npullm_last_error();
  // The second turn prefilled only its own tokens on top of the first turn's rows.
  EXPECT_LT(r2.metrics.prefill_tokens, kv1.rows_used);
  EXPECT_EQ(r2.metrics.reprefills, 0);

  npullm_chat_message* h = nullptr;
  size_t n = 0;
  ASSERT_EQ(npullm_session_history(o.session, &h, &n), NPULLM_OK);
  ASSERT_EQ(n, 5u);
  EXPECT_STREQ(h[0].role, "system");
  EXPECT_STREQ(h[1].content, "Tell me about a cat.");
  EXPECT_STREQ(h[2].role, "assistant");
  EXPECT_STREQ(h[2].content, r1.text);
  EXPECT_STREQ(h[4].content, r2.text);

  // Saved and loaded into a new session: the same history and the K/V rows with it, so the next
  // turn prefills only its own tokens (as the original session's does) and answers as it does.
  const std::string file = (dir.path / "chat.json").string();
  ASSERT_EQ(npullm_session_save(o.session, file.c_str()), NPULLM_OK) << npullm_last_error();
  npullm_session* other = nullptr;
  ASSERT_EQ(npullm_session_create(o.model, &other), NPULLM_OK);
  ASSERT_EQ(npullm_session_load(other, file.c_str()), NPULLM_OK) << npullm_last_error();
  npullm_chat_message* h2 = nullptr;
  size_t n2 = 0;
  ASSERT_EQ(npullm_session_history(other, &h2, &n2), NPULLM_OK);
  ASSERT_EQ(n2, n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_STREQ(h2[i].role, h[i].role);
    EXPECT_STREQ(h2[i].content, h[i].content);
  }
  npullm_messages_free(h2, n2);
  npullm_result a, b;
  ASSERT_EQ(npullm_chat(other, "Where did it sleep?", &s, nullptr, nullptr, &a), NPULLM_OK) << npullm_last_error();
  ASSERT_EQ(npullm_chat(o.session, "Where did it sleep?", &s, nullptr, nullptr, &b), NPULLM_OK);
  EXPECT_STREQ(a.text, b.text);
  EXPECT_EQ(a.metrics.prefill_tokens, b.metrics.prefill_tokens);
  EXPECT_EQ(a.metrics.reprefills, 0);
  npullm_result_free(&a);
  npullm_result_free(&b);

  // set_history replaces the conversation; reset ends the chat and empties the K/V rows.
  ASSERT_EQ(npullm_session_set_history(other, h, 3), NPULLM_OK);
  npullm_messages_free(h, n);
  ASSERT_EQ(npullm_session_history(other, &h2, &n2), NPULLM_OK);
  EXPECT_EQ(n2, 3u);
  npullm_messages_free(h2, n2);
  ASSERT_EQ(npullm_session_reset(other), NPULLM_OK);
  npullm_kv_state kv;
  ASSERT_EQ(npullm_session_kv_state(other, &kv), NPULLM_OK);
  EXPECT_EQ(kv.rows_used, 0);
  EXPECT_EQ(kv.in_chat, 0);
  ASSERT_EQ(npullm_session_history(other, &h2, &n2), NPULLM_OK);
  EXPECT_EQ(n2, 0u);
  npullm_messages_free(h2, n2);
  // A chat turn without chat_start starts one (no system message).
  ASSERT_EQ(npullm_chat(other, "Hi", &s, nullptr, nullptr, nullptr), NPULLM_OK) << npullm_last_error();
  npullm_session_free(other);
  npullm_result_free(&r1);
  npullm_result_free(&r2);
}

// A session file whose K/V rows cannot be used (cut short, a flipped byte, another model's key, a
// version 1 file without them, messages edited after the save) still loads its history: the next
// turn prefills the conversation again and (history unedited) answers as a session that never
// stopped.
TEST(CapiChat, ASessionFileWithUnusableKvRowsLoadsItsHistory) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  Opened o(test_params(dir, kTemplate));
  ASSERT_NE(o.session, nullptr);
  const npullm_sampling s = greedy(16);
  ASSERT_EQ(npullm_chat_start(o.session, "You tell short stories."), NPULLM_OK) << npullm_last_error();
  ASSERT_EQ(npullm_chat(o.session, "Tell me about a dog.", &s, nullptr, nullptr, nullptr), NPULLM_OK) << npullm_last_error();
  const std::string file = (dir.path / "chat.session").string();
  ASSERT_EQ(npullm_session_save(o.session, file.c_str()), NPULLM_OK) << npullm_last_error();
  std::ifstream in(file, std::ios::binary);
  const std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t json_end = saved.find("\n}\n") + 3;  // the rows follow the JSON's closing brace and a newline
  ASSERT_GT(saved.size(), json_end + 1000) << "no K/V rows were saved";
  npullm_kv_state kv;
  ASSERT_EQ(npullm_session_kv_state(o.session, &kv), NPULLM_OK);

  npullm_result want;
  ASSERT_EQ(npullm_chat(o.session, "What was its name?", &s, nullptr, nullptr, &want), NPULLM_OK) << npullm_last_error();

  std::string flipped = saved;
  flipped[json_end + 500] = static_cast<char>(flipped[json_end + 500] ^ 0x40);
  std::string other_key = saved;
  const size_t key = other_key.find("\"key\": \"") + 8;
  other_key[key] = other_key[key] == '0' ? '1' : '0';
  nlohmann::json edited = nlohmann::json::parse(saved.substr(0, json_end));
  edited["messages"][1]["content"] = "Tell me about a dog!";
  nlohmann::json v1 = nlohmann::json::parse(saved.substr(0, json_end));
  v1.erase("kv");
  v1["version"] = 1;
  const std::pair<const char*, std::string> cases[] = {
      {"cut short", saved.substr(0, saved.size() - 100)},
      {"a flipped byte", flipped},
      {"another model's key", other_key},
      {"version 1", v1.dump(2)},
      {"an edited history", edited.dump(2) + "\n" + saved.substr(json_end)},
  };
  for (const auto& [what, bytes] : cases) {
    SCOPED_TRACE(what);
    const std::string path = (dir.path / "bad.session").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    npullm_session* other = nullptr;
    ASSERT_EQ(npullm_session_create(o.model, &other), NPULLM_OK);
    ASSERT_EQ(npullm_session_load(other, path.c_str()), NPULLM_OK) << npullm_last_error();
    npullm_chat_message* h = nullptr;
    size_t n = 0;
    ASSERT_EQ(npullm_session_history(other, &h, &n), NPULLM_OK);
    EXPECT_EQ(n, 3u);
    npullm_messages_free(h, n);
    npullm_result got;
    ASSERT_EQ(npullm_chat(other, "What was its name?", &s, nullptr, nullptr, &got), NPULLM_OK) << npullm_last_error();
    if (std::string(what) != "an edited history") {
      EXPECT_STREQ(got.text, want.text);
    }
    EXPECT_GT(got.metrics.prefill_tokens, kv.rows_used);  // the whole conversation again
    npullm_result_free(&got);
    npullm_session_free(other);
  }
  npullm_result_free(&want);
}

TEST(CapiChat, SessionFileErrors) {
  NPULLM_REQUIRE_SHARED(kModel);
  TempDir dir;
  Opened o(test_params(dir, kTemplate));
  ASSERT_NE(o.session, nullptr);
  EXPECT_EQ(npullm_session_load(o.session, (dir.path / "missing.json").c_str()), NPULLM_ERR_IO);
  const std::string garbage = (dir.path / "garbage.json").string();
  std::ofstream(garbage) << "{ not json";
  EXPECT_EQ(npullm_session_load(o.session, garbage.c_str()), NPULLM_ERR_MODEL);
  EXPECT_NE(std::string(npullm_last_error()).find("not JSON"), std::string::npos) << npullm_last_error();
  const std::string other = (dir.path / "other.json").string();
  std::ofstream(other) << R"([{"role": "user", "content": "hi"}])";
  EXPECT_EQ(npullm_session_load(o.session, other.c_str()), NPULLM_ERR_MODEL);
  EXPECT_NE(std::string(npullm_last_error()).find("npullm-session"), std::string::npos) << npullm_last_error();
  EXPECT_EQ(npullm_session_save(o.session, (dir.path / "no/such/dir/x.json").c_str()), NPULLM_ERR_IO);
  // A model without a template cannot hold a chat: MODEL, with the reason.
  TempDir dir2;
  Opened plain(test_params(dir2));
  ASSERT_NE(plain.session, nullptr);
  EXPECT_EQ(npullm_chat_start(plain.session, "x"), NPULLM_ERR_MODEL);
  EXPECT_EQ(npullm_chat(plain.session, "x", nullptr, nullptr, nullptr, nullptr), NPULLM_ERR_MODEL);
  EXPECT_NE(std::string(npullm_last_error()).find("chat template"), std::string::npos) << npullm_last_error();
}

}  // namespace
