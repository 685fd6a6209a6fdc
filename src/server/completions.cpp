// A completion request, chat or not: the checks the request layer cannot make alone (depth, stop
// strings, the model's name, the prompt's length), the prompt (through the chat template, with tools
// through genai/tools), the scheduler, and the reply: streamed (streaming.cpp) or whole.
#include <fmt/format.h>

#include <string_view>

#include "common/error.h"
#include "genai/tools/tool_constraint.h"
#include "genai/tools/tool_prompt.h"
#include "server/http_server_impl.h"
#include "server/openai_response.h"

namespace npullm::server {

namespace {

using genai::tools::ToolCallParser;

// True when `body`, read as JSON, nests arrays and objects deeper than `limit` (brackets inside
// strings do not count). Checked before parsing, so that no parser or walker downstream recurses
// on a hostile body; a body that is not JSON at all is left to the parser to reject.
bool nested_deeper_than(std::string_view body, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return false;
}

}  // namespace

const char* finish_name(FinishReason r, bool tool_calls) {
  if (tool_calls) return "tool_calls";
  // A request ended by the server (shut down, or still running when a drain's time ran out) says
  // so, as vLLM's "abort" does, rather than pass for a reply that ended by itself.
  if (r == FinishReason::Cancelled) return "abort";
  return r == FinishReason::Length ? "length" : "stop";
}

ApiError draining_error() {
  return ApiError{503, "the server is shutting down and admits no new requests; retry (another replica will answer)", "server_error",
                  "", "server_draining"};
}

json usage_json(const genai::ServeResult& r) {
  const int64_t completion = static_cast<int64_t>(r.ids.size());
  json u = {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", completion},
            {"total_tokens", r.prompt_tokens + completion},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
  // Predicted Outputs: the prediction's guesses the reply took, and those it did not.
  if (r.prediction_accepted + r.prediction_rejected > 0)
    u["completion_tokens_details"] = {{"accepted_prediction_tokens", r.prediction_accepted},
                                      {"rejected_prediction_tokens", r.prediction_rejected}};
  return u;
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  conn_busy();
  if (!authorized(req, res)) return;
  genai::Scheduler* loaded_sched = loaded(res);
  if (!loaded_sched) return;
  genai::Scheduler& sched = *loaded_sched;
  if (phase == Phase::Draining) return send_error(res, draining_error());
  if (nested_deeper_than(req.body, opt.max_json_depth))
    return send_error(res, bad_request(fmt::format("the request body nests arrays or objects deeper than {} levels", opt.max_json_depth)));
  RequestLimits limits{opt.max_tokens_limit, sched.n_vocab()};
  auto parsed = parse_request(req.body, chat, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  ApiRequest r = std::get<ApiRequest>(std::move(parsed));
  for (const std::string& s : r.gen.stop_strings)
    if (s.size() > opt.max_stop_bytes)
      return send_error(res, bad_request(fmt::format("a stop string is {} bytes long; at most {} are allowed", s.size(), opt.max_stop_bytes), "stop"));
  if (!r.model.empty() && r.model != sched.model_name())
    return send_error(res, ApiError{404, fmt::format("the model '{}' does not exist; this server serves '{}'", r.model, sched.model_name()),
                                    "invalid_request_error", "model", "model_not_found"});
  std::vector<int32_t> ids;
  std::shared_ptr<ToolCallParser> tool_parser;  // set when the reply may hold tool calls
  std::string structured_param = r.structured_param;
  try {
    // reasoning_effort goes to the template as a variable; one that never reads it would drop it.
    const std::string effort = chat ? std::get<ChatRequest>(r.body).reasoning_effort : std::string();
    if (!effort.empty() && sched.chat_template_source().find("reasoning_effort") == std::string::npos)
      return send_error(res, bad_request("'reasoning_effort' is not supported by this model: its chat template has no reasoning effort",
                                         "reasoning_effort"));
    if (chat && std::get<ChatRequest>(r.body).uses_tools()) {
      // Tools, calls and results through the model's own template (genai/tools), the reply
      // constrained to the family's call JSON as tool_choice asks, and parsed back.
      const ChatRequest& c = std::get<ChatRequest>(r.body);
      const genai::tools::Family family = genai::tools::detect_family(sched.chat_template_source());
      genai::tools::TemplateInput in = genai::tools::template_input(family, c.messages, c.tools, c.tool_choice);
      if (!effort.empty()) in.extra["reasoning_effort"] = effort;
      ids = sched.encode_chat(in.messages, in.extra);
      if (c.tool_choice.mode != genai::tools::ToolChoice::Mode::None) {
        r.gen.structured = genai::tools::tool_constraint(family, c.tools, c.tool_choice, c.parallel_tool_calls);
        structured_param = "tools";
        std::vector<std::string> names;
        for (const auto& t : c.tools) names.push_back(t.name);
        const bool required = c.tool_choice.mode != genai::tools::ToolChoice::Mode::Auto;
        tool_parser = std::make_shared<ToolCallParser>(family, required ? ToolCallParser::Mode::Required : ToolCallParser::Mode::Auto,
                                                       std::move(names), c.parallel_tool_calls, fmt::format("call_{:016x}_", fresh_seed()));
      }
    } else if (chat && !effort.empty()) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      for (const auto& m : std::get<ChatRequest>(r.body).messages) messages.push_back({{"role", m.role}, {"content", m.content}});
      ids = sched.encode_chat(messages, nlohmann::ordered_json{{"reasoning_effort", effort}});
    } else if (chat) {
      std::vector<ChatMessage> plain;
      for (const auto& m : std::get<ChatRequest>(r.body).messages) plain.push_back({m.role, m.content});
      ids = sched.encode_chat(plain);
    } else if (!std::get<CompletionRequest>(r.body).prompt_ids.empty()) ids = std::get<CompletionRequest>(r.body).prompt_ids;
    else ids = sched.encode_prompt(std::get<CompletionRequest>(r.body).prompt);
  } catch (const Error& e) {
    return send_error(res, bad_request(fmt::format("cannot render the prompt: {}", e.what()), chat ? "messages" : "prompt"));
  }
  if (static_cast<int64_t>(ids.size()) >= sched.slot_capacity())
    return send_error(res, bad_request(fmt::format("the prompt has {} tokens, but a sequence holds at most {} (prompt and reply together)",
                                                   ids.size(), sched.slot_capacity()),
                                       chat ? "messages" : "prompt", "context_length_exceeded"));
  // Without max_tokens the reply may use every row its slot has left.
  if (!r.has_max_tokens) r.gen.max_new_tokens = sched.slot_capacity();
  // Speculative decoding: the server's --spec for requests without structured output (it changes
  // no text; a grammar and guesses do not mix yet), and the request's prediction where verify
  // blobs exist to check it.
  Speculation& sp = r.gen.speculative;
  if (!sp.prediction.empty()) {
    if (opt.spec_k <= 0)
      return send_error(res, bad_request("'prediction' needs a server started with speculative decoding (npullm serve --spec lookup or draft)",
                                         "prediction"));
    if (r.gen.structured.kind != StructuredOutput::Kind::None)
      return send_error(res, bad_request("'prediction' cannot be combined with structured output (response_format, tools) yet",
                                         "prediction"));
  }
  if (opt.spec_k > 0 && r.gen.structured.kind == StructuredOutput::Kind::None) {
    sp.mode = opt.spec_mode;
    sp.max_k = opt.spec_k;
  }
  if (!r.has_seed) r.gen.seed = fresh_seed();

  auto ch = std::make_shared<Channel>();
  genai::ServeRequest sr;
  sr.prompt_ids = std::move(ids);
  sr.gen = r.gen;
  // A chat's reasoning (gpt-oss's analysis channel) stays out of `content`: it is sent as
  // `reasoning_content`, as llama.cpp's and vLLM's servers do.
  sr.split_reasoning = chat;
  sr.on_reasoning = [ch](std::string_view piece) {
    std::lock_guard lk(ch->m);
    ch->reasoning.emplace_back(piece);
    ch->cv.notify_all();
    return !ch->gone.load();
  };
  sr.on_text = [ch](std::string_view piece) {
    std::lock_guard lk(ch->m);
    ch->pieces.emplace_back(piece);
    ch->cv.notify_all();
    return !ch->gone.load();
  };
  sr.on_done = [ch](const genai::ServeResult& result) {
    std::lock_guard lk(ch->m);
    ch->result = result;
    ch->done = true;
    ch->cv.notify_all();
  };
  try {
    ch->id = sched.submit(std::move(sr));
  } catch (const genai::QueueFull& e) {
    return send_error(res, ApiError{503, e.what(), "server_error", "", "server_overloaded"});
  } catch (const Error& e) {
    if (phase == Phase::Draining) return send_error(res, draining_error());  // the scheduler shut down meanwhile
    // Among them a schema or grammar genai/grammar cannot compile: the message names the keyword.
    return send_error(res, bad_request(e.what(), r.gen.structured.kind != StructuredOutput::Kind::None ? structured_param : ""));
  }
  const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
  const int64_t created = unix_now();
  if (r.stream) return stream(sched, res, ch, chat, id, created, r.include_usage, tool_parser);

  // Until it is done; a client that hangs up meanwhile cancels its request (freeing the slot).
  std::unique_lock lk(ch->m);
  while (!ch->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return ch->done; })) {
    if (!ch->gone && peer_gone()) {
      ch->gone = true;
      sched.cancel(ch->id);
    }
  }
  const genai::ServeResult& out = ch->result;
  if (!out.error.empty()) return send_error(res, ApiError{500, out.error, "server_error", "", ""});
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_name(out.finish)}};
  if (tool_parser) {
    // The same parser the stream uses, fed the whole text: streamed and not give the same calls.
    tool_parser->feed(out.text);
    tool_parser->finish();
    choice["message"] = tool_reply_message(*tool_parser);
    choice["finish_reason"] = finish_name(out.finish, !tool_parser->calls().empty());
  } else if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", out.text}};
  } else {
    choice["text"] = out.text;
  }
  if (chat && !out.reasoning.empty()) choice["message"]["reasoning_content"] = out.reasoning;
  json body = {{"id", id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", sched.model_name()},
               {"choices", json::array({choice})},
               {"usage", usage_json(out)}};
  res.set_content(dump(body), "application/json");
}

}  // namespace npullm::server
