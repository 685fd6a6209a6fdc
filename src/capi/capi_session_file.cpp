// Session files: the chat history and the runtime options as JSON. K/V rows are not stored (they
// are as big as the conversation times every layer's K and V); a loaded conversation is prefilled
// again on its next turn, which costs one prefill of its tokens.
#include <fstream>
#include <nlohmann/json.hpp>

#include "capi/capi_internal.h"

using namespace npullm;
using namespace npullm::capi;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "npullm-session";
constexpr int kFormatVersion = 1;

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

std::vector<ChatMessage> messages_of(const json& j, const std::string& path) {
  if (!j.is_object() || j.value("format", "") != kFormat)
    refuse(NPULLM_ERR_MODEL, path + ": not an npullm session file (expected \"format\": \"npullm-session\")");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != kFormatVersion)
    refuse(NPULLM_ERR_MODEL, path + ": unsupported session file version (this library reads version 1)");
  if (!j.contains("messages") || !j["messages"].is_array()) refuse(NPULLM_ERR_MODEL, path + ": \"messages\" must be an array");
  std::vector<ChatMessage> out;
  for (const json& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() || !m["content"].is_string())
      refuse(NPULLM_ERR_MODEL, path + ": every message needs string fields \"role\" and \"content\"");
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

}  // namespace

extern "C" {

npullm_status npullm_session_save(const npullm_session* session, const char* path) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session && path, "session and path must not be NULL");
    json msgs = json::array();
    for (const ChatMessage& m : session->pipe->history()) msgs.push_back({{"role", m.role}, {"content", m.content}});
    const json doc = {{"format", kFormat},
                      {"version", kFormatVersion},
                      {"model", session->model_path},
                      {"options", options_of(session->cfg)},
                      {"messages", msgs}};
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) refuse(NPULLM_ERR_IO, std::string(path) + ": cannot open for writing");
    f << doc.dump(2) << "\n";
    f.flush();
    if (!f) refuse(NPULLM_ERR_IO, std::string(path) + ": write failed");
  });
}

npullm_status npullm_session_load(npullm_session* session, const char* path) {
  return guard(NPULLM_ERR_MODEL, [&] {
    require(session && path, "session and path must not be NULL");
    std::ifstream f(path, std::ios::binary);
    if (!f) refuse(NPULLM_ERR_IO, std::string(path) + ": cannot open the session file");
    json j;
    try {
      j = json::parse(f);
    } catch (const json::exception& e) {
      refuse(NPULLM_ERR_MODEL, std::string(path) + ": not JSON: " + e.what());
    }
    session->pipe->set_history(messages_of(j, path));
  });
}

}  // extern "C"
