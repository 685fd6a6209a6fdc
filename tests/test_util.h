// Helpers shared by the tests: where ../shared is, and skipping cleanly when it is absent.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "formats/ggml_types.h"

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

// Logits from a reference file: raw float32, or binary16 when the name ends in ".f16".
inline std::vector<float> read_logits(const std::string& path, size_t n) {
  const std::string raw = read_file(path);
  std::vector<float> out(n);
  if (path.size() > 4 && path.substr(path.size() - 4) == ".f16") {
    EXPECT_EQ(raw.size(), n * 2) << path;
    for (size_t i = 0; i < n && 2 * i + 1 < raw.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = fp16_to_fp32(h);
    }
  } else {
    EXPECT_EQ(raw.size(), n * 4) << path;
    std::memcpy(out.data(), raw.data(), std::min(raw.size(), n * 4));
  }
  return out;
}

// Mean over `rows` positions of KL(softmax(ref) || softmax(ours)), in double.
inline double mean_kl(const std::vector<float>& ref, const std::vector<float>& ours, size_t rows, size_t V) {
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    auto logsumexp = [&](const std::vector<float>& x) {
      double mx = -1e300, s = 0;
      for (size_t v = 0; v < V; ++v) mx = std::max(mx, double(x[r * V + v]));
      for (size_t v = 0; v < V; ++v) s += std::exp(double(x[r * V + v]) - mx);
      return mx + std::log(s);
    };
    const double lp = logsumexp(ref), lq = logsumexp(ours);
    double kl = 0;
    for (size_t v = 0; v < V; ++v) {
      const double a = double(ref[r * V + v]) - lp, b = double(ours[r * V + v]) - lq;
      kl += std::exp(a) * (a - b);
    }
    total += kl;
  }
  return total / double(rows);
}

}  // namespace npullm::test

// Skips the current test (with a message saying what is missing) when a file from ../shared is absent.
#define NPULLM_REQUIRE_SHARED(rel)                                                        \
  do {                                                                                    \
    if (!std::filesystem::exists(::npullm::test::shared_path(rel)))                       \
      GTEST_SKIP() << "needs ../shared/" << (rel) << " (not present: test data missing)"; \
  } while (0)
