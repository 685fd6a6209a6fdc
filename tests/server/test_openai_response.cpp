// Tool calls on the wire: the deltas a streamed reply sends, assembled the way OpenAI's clients do
// (by index: id, type and name set, arguments appended), give the non-streamed message, however the
// model's text was cut into pieces; each call's name comes once, and no piece of its arguments
// cuts a UTF-8 sequence.
#include <gtest/gtest.h>

#include <map>

#include "server/openai_response.h"

namespace npullm::server {
namespace {

using nlohmann::json;
using genai::tools::Family;
using genai::tools::ToolCallParser;

// What openai-node's ChatCompletionStream does with each delta (#accumulateChatCompletion).
struct Assembled {
  std::string content;
  std::map<size_t, json> calls;
  std::map<size_t, int> names;
  void add(const json& delta) {
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!delta.contains("tool_calls")) return;
    for (const json& t : delta["tool_calls"]) {
      json& c = calls[t["index"].get<size_t>()];
      if (t.contains("id")) c["id"] = t["id"];
      if (t.contains("type")) c["type"] = t["type"];
      if (t.contains("function")) {
        if (!c.contains("function")) c["function"] = {{"name", ""}, {"arguments", ""}};
        if (t["function"].contains("name")) {
          c["function"]["name"] = t["function"]["name"];
          names[t["index"].get<size_t>()]++;
        }
        if (t["function"].contains("arguments"))
          c["function"]["arguments"] = c["function"]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
      }
    }
  }
  json message() const {
    json m = {{"role", "assistant"}, {"content", content}};
    if (calls.empty()) return m;
    if (content.empty()) m["content"] = nullptr;
    m["tool_calls"] = json::array();
    for (const auto& [i, c] : calls) m["tool_calls"].push_back(c);
    return m;
  }
};

json whole(Family f, const std::string& text) {
  ToolCallParser p(f, ToolCallParser::Mode::Auto, {"get_weather", "get_time"}, true, "call_x_");
  p.feed(text);
  p.finish();
  return tool_reply_message(p);
}

json streamed(Family f, const std::string& text, size_t cut, size_t piece, Assembled& a) {
  ToolCallParser p(f, ToolCallParser::Mode::Auto, {"get_weather", "get_time"}, true, "call_x_");
  size_t said = 0;
  auto send = [&](const ToolCallParser::Delta& d) {
    for (const json& delta : tool_reply_deltas(d, said, piece)) {
      EXPECT_NO_THROW((void)delta.dump()) << "a delta that is not valid UTF-8";
      a.add(delta);
    }
  };
  for (size_t at = 0; at < text.size(); at += cut) send(p.feed(std::string_view(text).substr(at, cut)));
  send(p.finish());
  return a.message();
}

TEST(OpenAiResponse, StreamedToolCallDeltasAssembleIntoTheMessage) {
  const std::string hermes =
      "Checking both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"note\": \"東京 → Köln, "
      "a long enough value to need many pieces\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  const json expected = whole(Family::Hermes, hermes);
  ASSERT_EQ(expected["tool_calls"].size(), 2u);
  EXPECT_EQ(expected["content"], "Checking both.");
  EXPECT_EQ(expected["tool_calls"][0]["function"]["arguments"],
            R"({"city":"Zürich","note":"東京 → Köln, a long enough value to need many pieces"})");
  for (size_t cut : {1, 2, 3, 7, 1000}) {
    for (size_t piece : {1, 2, 5, 24}) {
      SCOPED_TRACE("cut " + std::to_string(cut) + ", piece " + std::to_string(piece));
      Assembled a;
      EXPECT_EQ(streamed(Family::Hermes, hermes, cut, piece, a), expected);
      for (const auto& [i, n] : a.names) EXPECT_EQ(n, 1) << "call " << i << " named more than once";
    }
  }
  // Phi-4-mini's array form, and a reply without calls (plain content, no tool_calls key).
  const std::string phi = R"(<|tool_call|>[{"name":"get_time","arguments":{"zone":"CET"}},{"name":"get_weather","arguments":{"city":"Oslo"}}]<|/tool_call|>)";
  Assembled a;
  EXPECT_EQ(streamed(Family::Phi4Mini, phi, 4, 3, a), whole(Family::Phi4Mini, phi));
  EXPECT_EQ(whole(Family::Phi4Mini, phi)["tool_calls"][1]["id"], "call_x_1");
  Assembled b;
  const json plain = streamed(Family::Hermes, "Just text, <b>no</b> calls. ", 3, 24, b);
  EXPECT_EQ(plain, whole(Family::Hermes, "Just text, <b>no</b> calls. "));
  EXPECT_EQ(plain["content"], "Just text, <b>no</b> calls. ");
  EXPECT_FALSE(plain.contains("tool_calls"));
}

}  // namespace
}  // namespace npullm::server
