// Chat formatting: which Jinja template a conversation is rendered with, and rendering it.
#pragma once
#include <string>
#include <vector>

#include <npullm/llm_pipeline.h>
#include <nlohmann/json.hpp>

#include "genai/tokenizer/tokenizer.h"

namespace npullm::genai {

class ChatFormat {
 public:
  // `choice`: empty = the model's own template (tokenizer.chat_template); otherwise the name of a
  // built-in template, a file holding one, or Jinja source. Throws npullm::Error when there is none
  // or it does not parse.
  ChatFormat(const std::string& choice, const Tokenizer& tok);
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // The same over messages as the template sees them (JSON: tool calls, tool results), with extra
  // template variables (`tools`, ...): what genai/tools renders a conversation with tools through.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra) const;
  // A rendered conversation -> ids: BOS added unless the template already wrote it, special tokens
  // parsed (the one rule for LLMPipeline's chats and the serving scheduler's requests).
  std::vector<int32_t> encode(const Tokenizer& tok, const std::string& rendered) const;
  // Whether the template speaks harmony (gpt-oss: it writes <|channel|> and <|message|>): a reply
  // is then a run of channel messages, of which only the final channel (and preambles) is the
  // visible reply, split off by genai/chat/harmony_parser.h.
  bool harmony() const { return harmony_; }
  // The tokens that end a reply in this format besides EOS, those the vocabulary has: for harmony
  // <|return|>, <|call|> (a tool call waits for its result) and <|endoftext|>; none otherwise.
  std::vector<int32_t> reply_end_ids(const Tokenizer& tok) const;
  const std::string& name() const { return name_; }
  const std::string& bos_text() const { return bos_; }
  const std::string& source() const { return source_; }  // the Jinja source

 private:
  std::string name_, source_, bos_, eos_;
  bool harmony_ = false;
};

}  // namespace npullm::genai
