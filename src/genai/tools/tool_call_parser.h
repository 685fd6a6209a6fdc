// The model's reply -> content text and tool calls, as the reply streams in.
//
// Per family (tool_types.h), a call starts at its marker and its JSON runs to the closing marker
// or the end of the reply:
//   Hermes, Generic  <tool_call>{"name": .., "arguments": {..}}</tool_call>   (one call per block)
//   Phi4Mini         <|tool_call|>[{"name": .., "arguments": {..}}, ..]<|/tool_call|>
//   Llama3           <|python_tag|>{"name": .., "parameters": {..}}, or that JSON as the whole reply
//   Harmony          a harmony message to functions.NAME, its body the arguments object (read by
//                    genai/chat's HarmonyParser, text before any marker being content): gpt-oss's own
//                    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{..}<|call|>,
//                    the template's <|start|>assistant to=functions.NAME<|channel|>commentary json
//                    <|message|>{..}, and what the serving scheduler hands on (HarmonyParser::render_call);
//                    an analysis message is reasoning (Delta::reasoning), never content
// Llama 3's and Phi-4-mini's markers are control tokens, which the detokenizer does not print, so
// for them a reply that starts with '{' or '[' is read whole as calls too; so it is for every family
// under tool_choice required / a named function (Mode::Required), where the reply is constrained to
// the bare call JSON (tool_constraint.h).
// A block that does not parse as calls of the offered tools stays in the content, as written:
// text is never lost. Whitespace around calls is not content.
//
// The result does not depend on how the text is cut into pieces: feeding the reply whole or a
// byte at a time gives the same content and calls, so a streamed reply equals the non-streamed.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "genai/chat/harmony_parser.h"
#include "genai/tools/tool_types.h"

namespace npullm::genai::tools {

class ToolCallParser {
 public:
  enum class Mode { Auto, Required };

  // What a piece of text adds: content to show now, and calls completed now (in order).
  struct Delta {
    std::string content;
    std::vector<ToolCall> calls;
    std::string reasoning;  // Harmony only: the analysis channel, when the reply comes unsplit
  };

  // `tools`: the names a call may have; `parallel` false keeps the first call only. Call ids are
  // `id_prefix` + the call's index.
  ToolCallParser(Family family, Mode mode, std::vector<std::string> tools, bool parallel, std::string id_prefix);

  Delta feed(std::string_view piece);
  Delta finish();  // the reply ended: what was held back

  // Everything so far (after finish(): the whole reply's content and calls).
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& calls() const { return calls_; }
  const std::string& reasoning() const { return reasoning_; }

 private:
  void process(Delta& d, bool at_end);
  void emit_content(Delta& d, std::string_view text);
  // Parses a call block (the text between the markers); false when it is not calls of our tools.
  bool parse_calls(std::string_view body, Delta& d);
  // Harmony: what the harmony parser found in a piece -> content, reasoning and calls.
  void take_harmony(Delta& d, HarmonyParser::Delta h);
  void add_calls(std::vector<ToolCall> found, Delta& d);

  Family family_;
  Mode mode_;
  std::vector<std::string> tools_;
  bool parallel_;
  std::string id_prefix_;
  std::string open_, close_;  // the family's markers ("" close: the call runs to the end)

  std::string buf_;           // text not yet said
  bool in_call_ = false;      // buf_ is a call's body (after its open marker, if any)
  bool bare_ = false;         // the call began without a marker (JSON at the reply's start)
  bool seen_text_ = false;    // non-whitespace seen outside calls (the reply does not start with JSON)
  bool after_call_ = false;   // whitespace right after a call is not content
  std::string held_ws_;       // trailing whitespace not yet said (dropped before a call)
  std::string content_, reasoning_;
  std::vector<ToolCall> calls_;
  HarmonyParser harmony_{true};  // Harmony: reads the reply (text before any marker is content)
  int64_t found_ = 0;         // calls parsed (kept or not)
};

}  // namespace npullm::genai::tools
