// The C API's version, error and memory functions.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "capi/capi_internal.h"

#ifndef NPULLM_VERSION_STRING
#define NPULLM_VERSION_STRING "0.0.0"
#endif

namespace npullm::capi {

namespace {
thread_local std::string last_error;  // per thread, so concurrent callers never see each other's
}

npullm_status set_error(npullm_status status, const std::string& message) {
  try {
    last_error = message;
  } catch (...) {
    // No memory for the message: the status still says what happened.
  }
  return status;
}

char* copy_text(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

int32_t* copy_ids(const std::vector<int32_t>& ids) {
  // One element at least, so an empty list is still a pointer npullm_free accepts.
  int32_t* out = static_cast<int32_t*>(std::malloc(std::max<size_t>(ids.size(), 1) * sizeof(int32_t)));
  if (!out) throw std::bad_alloc();
  if (!ids.empty()) std::memcpy(out, ids.data(), ids.size() * sizeof(int32_t));
  return out;
}

std::vector<ChatMessage> to_messages(const npullm_chat_message* messages, size_t n) {
  require(messages || n == 0, "messages is NULL");
  std::vector<ChatMessage> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!messages[i].role || !messages[i].content) refuse(NPULLM_ERR_INVALID_ARGUMENT, "message " + std::to_string(i) + " has a NULL role or content");
    out.push_back({messages[i].role, messages[i].content});
  }
  return out;
}

}  // namespace npullm::capi

extern "C" {

const char* npullm_version(void) { return NPULLM_VERSION_STRING; }
int npullm_abi_version(void) { return NPULLM_ABI_VERSION; }
const char* npullm_last_error(void) { return npullm::capi::last_error.c_str(); }
void npullm_free(void* p) { std::free(p); }

const char* npullm_status_name(npullm_status status) {
  switch (status) {
    case NPULLM_OK: return "ok";
    case NPULLM_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case NPULLM_ERR_IO: return "io";
    case NPULLM_ERR_MODEL: return "model";
    case NPULLM_ERR_CONTEXT: return "context";
    case NPULLM_ERR_OUT_OF_MEMORY: return "out_of_memory";
    case NPULLM_ERR_INTERNAL: return "internal";
  }
  return "unknown";
}

}  // extern "C"
