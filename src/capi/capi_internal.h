// What the C API's opaque handles hold, and the one place C++ exceptions become status codes.
// Every exported function body runs inside guard(): nothing thrown inside may cross into C.
#pragma once
#include <npullm/llm_pipeline.h>
#include <npullm/npullm.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "genai/grammar/grammar.h"

struct npullm_model {
  std::string path;
  npullm::PipelineConfig cfg;  // with spec_max_k and draft_model: what the sessions are made with
  // The model's own pipeline serves tokenize, templates and info (sessions have their own, since
  // each owns a sequence's K/V rows). Its chat format is built lazily, so calls are serialised.
  std::unique_ptr<npullm::LLMPipeline> pipe;
  mutable std::mutex mu;
  std::vector<int64_t> variants;
  std::string description;
  int32_t bos = -1, eos = -1;
  int64_t n_vocab = 0;
};

struct npullm_session {
  std::string model_path;
  npullm::PipelineConfig cfg;
  std::unique_ptr<npullm::LLMPipeline> pipe;
  npullm_metrics last{};
  npullm_spec_metrics last_spec{};      // npullm_metrics' layout is fixed: the speculation counters apart
  npullm::StructuredOutput structured;  // npullm_session_set_structured: applies to every generation
  npullm::Speculation speculative;      // npullm_session_set_speculative: likewise
};

namespace npullm::capi {

// Records `message` as this thread's last error and returns `status`.
npullm_status set_error(npullm_status status, const std::string& message);

// An error whose status the C API chose (an argument check, a missing file).
struct StatusError : Error {
  npullm_status status;
  StatusError(npullm_status s, const std::string& m) : Error(m), status(s) {}
};

[[noreturn]] inline void refuse(npullm_status s, const std::string& message) { throw StatusError(s, message); }
inline void require(bool ok, const char* what) {
  if (!ok) refuse(NPULLM_ERR_INVALID_ARGUMENT, what);
}

// Runs `body` (which returns nothing); maps whatever it throws to a status and a message.
// `npullm_error`: the status an npullm::Error from the layers below means at this call site.
template <typename F>
npullm_status guard(npullm_status npullm_error, F&& body) noexcept {
  try {
    body();
    return NPULLM_OK;
  } catch (const StatusError& e) {
    return set_error(e.status, e.what());
  } catch (const ContextLengthError& e) {
    return set_error(NPULLM_ERR_CONTEXT, e.what());
  } catch (const genai::grammar::GrammarError& e) {
    return set_error(NPULLM_ERR_INVALID_ARGUMENT, e.what());  // a refused schema, grammar or expression
  } catch (const Error& e) {
    return set_error(npullm_error, e.what());
  } catch (const std::bad_alloc&) {
    return set_error(NPULLM_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return set_error(NPULLM_ERR_INTERNAL, e.what());
  } catch (...) {
    return set_error(NPULLM_ERR_INTERNAL, "unknown C++ exception");
  }
}

// malloc'd copies the caller releases with npullm_free (std::bad_alloc when malloc fails).
char* copy_text(const std::string& s);
int32_t* copy_ids(const std::vector<int32_t>& ids);

// An enum argument or field as the integer a C caller stored: C lets any int through, and loading
// an out-of-range value as the C++ enum type would be undefined before we could refuse it. Read it
// before any typed load (a guard() lambda reads its captures by reference).
template <typename E>
int raw_enum(const E& e) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<int>(v);
}

std::vector<ChatMessage> to_messages(const npullm_chat_message* messages, size_t n);

}  // namespace npullm::capi
