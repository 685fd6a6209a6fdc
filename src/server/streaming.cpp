// A streamed reply: server-sent events, each "data: {chunk}" one or more pieces of text as the
// scheduler produced them, then the finish reason, usage when asked, and "data: [DONE]". A client
// that stops taking bytes or goes away cancels its request.
#include <chrono>

#include "server/http_server_impl.h"
#include "server/openai_response.h"

namespace npullm::server {

using genai::tools::ToolCallParser;

void HttpServer::Impl::stream(genai::Scheduler& sched, httplib::Response& res, std::shared_ptr<Channel> ch, bool chat, const std::string& id,
                              int64_t created, bool usage, std::shared_ptr<ToolCallParser> tools) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const std::string model = sched.model_name();
  auto chunk = [=](json choice_fields, const char* finish) {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
    for (auto& [k, v] : choice_fields.items()) choice[k] = v;
    json j = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created}, {"model", model},
              {"choices", json::array({choice})}};
    if (usage) j["usage"] = nullptr;
    return "data: " + dump(j) + "\n\n";
  };
  auto started = std::make_shared<bool>(false);
  auto calls_said = std::make_shared<size_t>(0);
  genai::Scheduler* sched_ptr = &sched;
  std::atomic<int>* open = &open_streams;
  ++*open;
  res.set_chunked_content_provider(
      "text/event-stream",
      [=](size_t, httplib::DataSink& sink) {
        auto gone = [&] {
          ch->gone = true;
          sched_ptr->cancel(ch->id);
          return false;
        };
        if (!*started) {
          *started = true;
          if (chat) {
            const std::string first = chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}}, nullptr);
            if (!sink.write(first.data(), first.size())) return gone();
          }
        }
        std::deque<std::string> pieces, thoughts;
        bool done = false;
        genai::ServeResult result;
        {
          std::unique_lock lk(ch->m);
          ch->cv.wait_for(lk, std::chrono::milliseconds(100),
                          [&] { return !ch->pieces.empty() || !ch->reasoning.empty() || ch->done; });
          pieces.swap(ch->pieces);
          thoughts.swap(ch->reasoning);
          done = ch->done;
          if (done) result = ch->result;
        }
        std::string evs;
        auto say = [&](const ToolCallParser::Delta& d) {
          for (json& delta : tool_reply_deltas(d, *calls_said)) evs += chunk({{"delta", std::move(delta)}}, nullptr);
        };
        // A harmony reply's reasoning comes before its content.
        for (const std::string& t : thoughts) evs += chunk({{"delta", {{"reasoning_content", t}}}}, nullptr);
        for (const std::string& p : pieces) {
          if (tools) say(tools->feed(p));
          else evs += chat ? chunk({{"delta", {{"content", p}}}}, nullptr) : chunk({{"text", p}}, nullptr);
        }
        if (done && tools && result.error.empty()) say(tools->finish());
        if (!evs.empty() && !sink.write(evs.data(), evs.size())) return gone();
        if (!done) return sink.is_writable() ? true : gone();
        std::string tail;
        if (!result.error.empty()) {
          tail += "data: " + dump(ApiError{500, result.error, "server_error", "", ""}.body()) + "\n\n";
        } else {
          const char* why = finish_name(result.finish, tools && !tools->calls().empty());
          tail += chat ? chunk({{"delta", json::object()}}, why) : chunk({{"text", ""}}, why);
          if (usage) {
            json u = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                      {"model", model}, {"choices", json::array()}, {"usage", usage_json(result)}};
            tail += "data: " + dump(u) + "\n\n";
          }
        }
        tail += "data: [DONE]\n\n";
        if (!sink.write(tail.data(), tail.size())) return gone();
        sink.done();
        return true;
      },
      [ch, sched_ptr, open](bool success) {
        {
          // The connection ended before the stream did (the client went away): stop generating.
          std::lock_guard lk(ch->m);
          if (!ch->done) {
            ch->gone = true;
            sched_ptr->cancel(ch->id);
          }
        }
        --*open;
      });
}

}  // namespace npullm::server
