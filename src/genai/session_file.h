// Session files: a chat saved to disk and resumed later, by the C API (npullm_session_save /
// _load) and `npullm chat` (/save, /load). Format and checks in session_file.cpp. The callers open
// the files (their own errors for a path that cannot be opened); these read and write the bytes.
#pragma once
#include <npullm/llm_pipeline.h>

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>

namespace npullm::genai {

// Writes `pipe`'s chat history, the model path and options (for the reader's information) and
// the chat's K/V rows where it has any to save (LLMPipeline::kv_snapshot); returns how many rows.
int64_t write_session(std::ostream& out, const std::string& model, const PipelineConfig& options, const LLMPipeline& pipe);

struct LoadedSession {
  size_t messages = 0;
  bool kv_restored = false;  // false: the history is prefilled again with the next turn
};

// Reads a session file named `name` (for messages) into `pipe`: the history, and the K/V rows
// where they fit (else a warning on stderr says why not, and only the history is set). With
// `bare_arrays`, a plain JSON array of {"role", "content"} objects (what `npullm chat` saved
// before session files) is read as a history too. Throws npullm::Error for what is not a session
// file or is malformed, leaving `pipe` as it was.
LoadedSession read_session(std::istream& in, const std::string& name, LLMPipeline& pipe, bool bare_arrays = false);

}  // namespace npullm::genai
