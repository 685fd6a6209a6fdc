// Session files: the chat history and the runtime options as JSON, then (version 2) the chat's
// K/V rows as raw bytes, so a loaded conversation resumes without prefilling it again.
//
//   { "format": "npullm-session", "version": 2, "model": ..., "options": ..., "messages": [...],
//     "kv": { "key": ..., "ids": [...], "pending": [...], "n_keep": N, "bytes": B, "xxh64": "...",
//             "history_xxh64": "..." } }
//   "\n", then B bytes of rows (LLMPipeline::kv_snapshot)
//
// "kv" is absent when there is nothing to save (no chat turn yet, a model with sliding-window
// rings). The rows are checked before use: a key for another model, K/V type or layout, a short
// file, a checksum that does not match, or messages edited since the save (their own checksum,
// "history_xxh64": the rows hold the conversation as it was) leave the history alone, loaded and
// prefilled again on the next turn (with a warning on stderr), as version 1 files are.
#include "genai/session_file.h"

#include <xxhash.h>

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"

namespace npullm::genai {

namespace {

using nlohmann::json;

constexpr const char* kFormat = "npullm-session";
constexpr int kFormatVersion = 2;  // reads 1 (no K/V rows) and 2

json options_of(const PipelineConfig& c) {
  return {{"prefill_chunk", c.prefill_chunk},
          {"variants", c.variants},
          {"max_prompt_len", c.max_prompt_len},
          {"min_response_len", c.min_response_len},
          {"kv_type", c.kv_type == KvType::F32 ? "f32" : c.kv_type == KvType::Q8_0 ? "q8_0" : "f16"},
          {"context_policy", c.context_policy == ContextPolicy::Truncate ? "truncate" : "shift"},
          {"n_keep", c.n_keep},
          {"chat_template", c.chat_template}};
}

std::string hex64(const void* data, size_t size) { return fmt::format("{:016x}", XXH64(data, size, 0)); }

std::string history_sum(const json& messages) {
  const std::string text = messages.dump();
  return hex64(text.data(), text.size());
}

std::vector<ChatMessage> messages_of(const json& msgs, const std::string& name) {
  if (!msgs.is_array()) fail("{}: \"messages\" must be an array", name);
  std::vector<ChatMessage> out;
  for (const json& m : msgs) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() || !m["content"].is_string())
      fail("{}: every message needs string fields \"role\" and \"content\"", name);
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

// The saved K/V state after the JSON in `in`, or the reason it cannot be used (then `why` is set).
KvSnapshot snapshot_of(const json& kv, const json& messages, std::istream& in, std::string& why) {
  KvSnapshot s;
  try {
    if (kv.at("history_xxh64").get<std::string>() != history_sum(messages)) {
      why = "was saved with other messages (the history was edited)";
      return {};
    }
    s.key = kv.at("key").get<std::string>();
    s.ids = kv.at("ids").get<std::vector<int32_t>>();
    s.pending = kv.at("pending").get<std::vector<int32_t>>();
    s.n_keep = kv.at("n_keep").get<int64_t>();
    const uint64_t bytes = kv.at("bytes").get<uint64_t>();
    const std::string sum = kv.at("xxh64").get<std::string>();
    if (in.get() != '\n') {
      why = "is missing (the file ends after its JSON)";
      return {};
    }
    // Read in pieces, so a corrupt byte count costs at most the file's own size, not an allocation.
    std::vector<char> piece(size_t{1} << 20);
    while (s.rows.size() < bytes && in) {
      in.read(piece.data(), static_cast<std::streamsize>(std::min<uint64_t>(piece.size(), bytes - s.rows.size())));
      s.rows.insert(s.rows.end(), piece.begin(), piece.begin() + in.gcount());
    }
    if (s.rows.size() != bytes) {
      why = fmt::format("is cut short ({} of {} bytes)", s.rows.size(), bytes);
      return {};
    }
    if (hex64(s.rows.data(), s.rows.size()) != sum) {
      why = "does not match its checksum";
      return {};
    }
  } catch (const json::exception& e) {
    why = fmt::format("is malformed ({})", e.what());
    return {};
  }
  return s;
}

}  // namespace

int64_t write_session(std::ostream& out, const std::string& model, const PipelineConfig& options, const LLMPipeline& pipe) {
  json msgs = json::array();
  for (const ChatMessage& m : pipe.history()) msgs.push_back({{"role", m.role}, {"content", m.content}});
  json doc = {{"format", kFormat}, {"version", kFormatVersion}, {"model", model}, {"options", options_of(options)}, {"messages", msgs}};
  const KvSnapshot kv = pipe.kv_snapshot();
  if (!kv.rows.empty())
    doc["kv"] = {{"key", kv.key},
                 {"ids", kv.ids},
                 {"pending", kv.pending},
                 {"n_keep", kv.n_keep},
                 {"bytes", kv.rows.size()},
                 {"xxh64", hex64(kv.rows.data(), kv.rows.size())},
                 {"history_xxh64", history_sum(msgs)}};
  out << doc.dump(2) << "\n";
  out.write(reinterpret_cast<const char*>(kv.rows.data()), static_cast<std::streamsize>(kv.rows.size()));
  return kv.rows.empty() ? 0 : static_cast<int64_t>(kv.ids.size());
}

LoadedSession read_session(std::istream& in, const std::string& name, LLMPipeline& pipe, bool bare_arrays) {
  json j;
  try {
    in >> j;  // one JSON value; version 2's rows follow it
  } catch (const json::exception& e) {
    fail("{}: not JSON: {}", name, e.what());
  }
  LoadedSession out;
  if (bare_arrays && j.is_array()) {
    pipe.set_history(messages_of(j, name));
    out.messages = pipe.history().size();
    return out;
  }
  if (!j.is_object() || j.value("format", "") != kFormat)
    fail("{}: not an npullm session file (expected \"format\": \"{}\")", name, kFormat);
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() < 1 ||
      j["version"].get<int>() > kFormatVersion)
    fail("{}: unsupported session file version (this release reads versions 1 and 2)", name);
  if (!j.contains("messages")) fail("{}: \"messages\" must be an array", name);
  const std::vector<ChatMessage> messages = messages_of(j["messages"], name);
  out.messages = messages.size();
  if (j.contains("kv")) {
    std::string why;
    const KvSnapshot kv = snapshot_of(j["kv"], j["messages"], in, why);
    if (why.empty() && pipe.restore_chat(messages, kv)) {
      out.kv_restored = true;
      return out;
    }
    if (why.empty()) why = "belongs to another model, K/V type or capacity";
    fmt::print(stderr, "npullm: warning: {}: the saved K/V state {}; the conversation is prefilled again on its next turn\n", name, why);
  }
  pipe.set_history(messages);
  return out;
}

}  // namespace npullm::genai
