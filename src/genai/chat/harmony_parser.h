// gpt-oss's "harmony" reply -> the visible reply, the reasoning, and tool calls, as it streams in.
//
// A harmony reply is a run of messages, each a header and a body:
//   <|channel|>analysis<|message|>The user asks ... <|end|>
//   <|start|>assistant<|channel|>final<|message|>The answer.<|return|>
// or, for a tool call, a header naming the recipient:
//   <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>
//   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{...}<|call|>
// (the prompt ends in "<|start|>assistant", so the first header starts without <|start|>).
// The detokenizer prints <|start|>, <|channel|>, <|message|> and <|constrain|> (Vocab marks them
// USER_DEFINED, as llama.cpp does for this vocabulary) but not the control tokens <|end|>,
// <|return|>, <|call|>; so a body ends at the next header's marker, at any of those three when a
// vocabulary does print them, or at the end of the reply.
//
// Where each body goes:
//   channel "analysis"                    -> reasoning (the chain of thought: never the reply)
//   a recipient ("to=...") in the header  -> a tool call (its body is the arguments)
//   channel "final", "commentary" without a recipient (a preamble meant for the user), any other
//   or no channel                         -> content, the visible reply
// Text before any header that never turns into one (a model that does not speak harmony) is
// content. Headers and markers are never content.
//
// A parser made with `text_first` reads a stream in which text before any marker is content rather
// than a header: the visible reply as the serving scheduler hands it on, with the calls it found
// written back into it (render_call), which genai/tools' harmony tool-call parser reads.
//
// The result does not depend on how the text is cut into pieces: feeding the reply whole or a byte
// at a time gives the same content, reasoning and calls (a partial marker at the end of a piece is
// held back until the next piece tells what it is), so a streamed reply equals the non-streamed one.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace npullm::genai {

class HarmonyParser {
 public:
  struct Call {
    std::string recipient;   // e.g. "functions.get_weather"
    std::string constraint;  // the content type after <|constrain|> or the channel ("json"), "" if none
    std::string arguments;   // the body as written
  };
  // What a piece of text adds: visible reply and reasoning to show now, calls completed now.
  struct Delta {
    std::string content;
    std::string reasoning;
    std::vector<Call> calls;
  };

  HarmonyParser() = default;
  explicit HarmonyParser(bool text_first);

  // A call as a harmony message, the way gpt-oss's template writes an earlier call:
  // <|start|>assistant to=RECIPIENT<|channel|>commentary CONSTRAINT<|message|>ARGUMENTS<|call|>.
  // This parser reads it back as the same call.
  static std::string render_call(const Call& call);

  Delta feed(std::string_view piece);
  Delta finish();  // the reply ended: what was held back

  // Everything so far (after finish(): the whole reply's).
  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }
  const std::vector<Call>& calls() const { return calls_; }

 private:
  enum class State { Header, Body };
  enum class Sink { Content, Reasoning, Call };

  void process(Delta& d, bool at_end);
  // Reads a finished header (the text before <|message|>) and picks where the body goes.
  void open_body(std::string_view header);
  void close_body(Delta& d);
  void say(Delta& d, std::string_view text);

  State state_ = State::Header;
  Sink sink_ = Sink::Content;
  bool first_header_ = true;   // the reply's first header: plain text here may be no header at all
  std::string buf_;            // text not yet handled (a header so far, or a body's held-back tail)
  std::string content_, reasoning_;
  std::vector<Call> calls_;
  Call call_;                  // the call whose arguments are being read (sink_ == Call)
};

}  // namespace npullm::genai
