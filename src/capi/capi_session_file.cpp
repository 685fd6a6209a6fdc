// npullm_session_save / _load: the files are opened here (IO errors); their format and checks are
// genai's (genai/session_file.cpp), shared with `npullm chat`'s /save and /load.
#include <fstream>

#include "capi/capi_internal.h"
#include "genai/session_file.h"

using namespace npullm;
using namespace npullm::capi;

extern "C" {

npullm_status npullm_session_save(const npullm_session* session, const char* path) {
  return guard(NPULLM_ERR_INTERNAL, [&] {
    require(session && path, "session and path must not be NULL");
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) refuse(NPULLM_ERR_IO, std::string(path) + ": cannot open for writing");
    genai::write_session(f, session->model_path, session->cfg, *session->pipe);
    f.flush();
    if (!f) refuse(NPULLM_ERR_IO, std::string(path) + ": write failed");
  });
}

npullm_status npullm_session_load(npullm_session* session, const char* path) {
  return guard(NPULLM_ERR_MODEL, [&] {
    require(session && path, "session and path must not be NULL");
    std::ifstream f(path, std::ios::binary);
    if (!f) refuse(NPULLM_ERR_IO, std::string(path) + ": cannot open the session file");
    genai::read_session(f, path, *session->pipe);
  });
}

}  // extern "C"
