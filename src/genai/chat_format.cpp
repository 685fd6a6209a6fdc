#include "genai/chat_format.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "genai/jinja/builtin_templates.h"
#include "genai/jinja/template.h"

namespace npullm::genai {

ChatFormat::ChatFormat(const std::string& choice, const Tokenizer& tok) {
  const Vocab& v = tok.vocab();
  // The model's own BOS/EOS texts are what its template expects.
  bos_ = v.bos >= 0 && v.bos < tok.n_vocab() ? v.tokens[static_cast<size_t>(v.bos)] : "";
  eos_ = v.eos >= 0 && v.eos < tok.n_vocab() ? v.tokens[static_cast<size_t>(v.eos)] : "";
  if (choice.empty()) {
    if (v.chat_template.empty())
      fail("the model has no chat template (tokenizer.chat_template); choose one with --chat-template NAME|FILE");
    name_ = "model";
    source_ = v.chat_template;
  } else if (const jinja::BuiltinTemplate* b = jinja::find_builtin_template(choice)) {
    name_ = std::string(b->name);
    source_ = std::string(b->source);
  } else if (std::filesystem::is_regular_file(choice)) {
    std::ifstream in(choice, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    name_ = choice;
    source_ = ss.str();
  } else if (choice.find("{%") != std::string::npos || choice.find("{{") != std::string::npos) {
    name_ = "inline";
    source_ = choice;
  } else {
    std::string names;
    for (const auto& b : jinja::builtin_templates()) names += (names.empty() ? "" : ", ") + std::string(b.name);
    fail("chat template '{}' is neither a built-in template ({}) nor a file", choice, names);
  }
  jinja::Template check(source_, name_);  // parse now: a broken template fails at load, not mid-chat
  harmony_ = source_.find("<|channel|>") != std::string::npos && source_.find("<|message|>") != std::string::npos;
}

std::vector<int32_t> ChatFormat::reply_end_ids(const Tokenizer& tok) const {
  std::vector<int32_t> ids;
  if (!harmony_) return ids;
  for (const char* t : {"<|return|>", "<|call|>", "<|endoftext|>"})
    if (const int32_t id = tok.find_token(t); id >= 0) ids.push_back(id);
  return ids;
}

std::string ChatFormat::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  return jinja::render_chat_template(source_, msgs, add_generation_prompt, bos_, eos_);
}

std::string ChatFormat::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& extra) const {
  return jinja::render_chat_template(source_, messages, add_generation_prompt, bos_, eos_, extra);
}

std::vector<int32_t> ChatFormat::encode(const Tokenizer& tok, const std::string& rendered) const {
  const bool has_bos = !bos_.empty() && rendered.rfind(bos_, 0) == 0;
  return tok.encode(rendered, /*add_bos=*/!has_bos, /*parse_special=*/true);
}

}  // namespace npullm::genai
