// Shared by the libFuzzer harnesses (tests/fuzz/README.md).
//
// The contract every harness checks: a parser given any bytes either succeeds or throws
// npullm::Error. Only npullm::Error is caught; any other exception (std::out_of_range,
// std::bad_alloc, a JSON library exception...) escapes, and libFuzzer reports it as a crash, as it
// does for ASan/UBSan findings, hangs (-timeout) and huge allocations (-malloc_limit_mb).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"

namespace npullm::fuzz {

// Runs `f`, swallowing npullm::Error (the expected answer to bad input).
template <typename F>
void expect_ok_or_error(F&& f) {
  try {
    f();
  } catch (const npullm::Error&) {
  }
}

// ../shared (the build's NPULLM_SHARED_DIR), or $NPULLM_SHARED_DIR when set.
inline std::string shared_path(const std::string& rel) {
  const char* e = std::getenv("NPULLM_SHARED_DIR");
  return std::string(e && *e ? e : NPULLM_SHARED_DIR) + "/" + rel;
}

// A harness whose fixed data (a vocabulary) is missing cannot fuzz anything: say so and stop.
[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "fuzz harness: %s\n", what.c_str());
  std::exit(2);
}

// Splits `data` at its first NUL byte: the text before, and what follows (empty without a NUL).
inline std::pair<std::string_view, std::string_view> split_at_nul(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, {}};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

}  // namespace npullm::fuzz
