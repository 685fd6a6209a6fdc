// Helpers shared by the tests: where ../shared is, and skipping cleanly when it is absent.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"

namespace npullm::test {

#ifndef NPULLM_SHARED_DIR
#define NPULLM_SHARED_DIR "../shared"
#endif

inline std::string shared_path(const std::string& rel) {
  return std::string(NPULLM_SHARED_DIR) + "/" + rel;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `f` and returns the npullm::Error message it throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace npullm::test

// Skips the current test (with a message saying what is missing) when a file from ../shared is absent.
#define NPULLM_REQUIRE_SHARED(rel)                                                        \
  do {                                                                                    \
    if (!std::filesystem::exists(::npullm::test::shared_path(rel)))                       \
      GTEST_SKIP() << "needs ../shared/" << (rel) << " (not present: test data missing)"; \
  } while (0)
