// Helpers shared by the tests: where the test data is, failing (or skipping) when it is absent,
// reading reference files, comparing floats, running the npullm binary. One helper each.
//
// Test data: ../shared (the compile definition NPULLM_SHARED_DIR), or $NPULLM_SHARED_DIR when set
// (a run against a modified copy). Without NPULLM_REQUIRE_DATA=1 a test whose data is absent skips
// with "needs test data: <path>"; with it (scripts/test.sh sets it) the test fails, naming the file.
// A test skipped for any other reason (a CPU feature, a tool not installed) uses
// NPULLM_SKIP_UNSUPPORTED, whose message scripts/check-skips.sh accepts; every other skip fails CI.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "formats/ggml_types.h"
#include "model/synth.h"

namespace npullm::test {

#ifndef NPULLM_SHARED_DIR
#define NPULLM_SHARED_DIR "../shared"
#endif

// $NPULLM_SHARED_DIR, else the folder built in.
// Writes a seeded synth model (`npullm synth --preset P --type T`, 2 threads) to `path`; returns
// the options it was made with (its shape, for the vocabulary size and the like).
inline model::SynthOptions write_synth(const std::string& path, const std::string& preset, const std::string& type,
                                       uint64_t seed) {
  model::SynthOptions o;
  o.shape = model::synth_preset(preset);
  o.type = model::synth_file_type(type);
  o.seed = seed;
  o.threads = 2;
  model::synth_write(o, path);
  return o;
}

inline std::string shared_dir() {
  if (const char* e = std::getenv("NPULLM_SHARED_DIR"); e && *e) return e;
  return NPULLM_SHARED_DIR;
}

inline std::string shared_path(const std::string& rel) { return shared_dir() + "/" + rel; }

// A fresh folder under the system temp dir (blob caches, session files: never ../shared or the
// source tree), removed with everything in it when this goes out of scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "npullm-test-XXXXXX").string();
    if (!mkdtemp(t.data())) std::abort();
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

#ifndef NPULLM_TEST_DATA_DIR
#define NPULLM_TEST_DATA_DIR "tests/data"
#endif

// A file of tests/data: small outside reference figures committed with the tests (each with its
// provenance and the tool in tests/tools that made it), not test data that may be absent.
inline std::string repo_data_path(const std::string& rel) { return std::string(NPULLM_TEST_DATA_DIR) + "/" + rel; }

// NPULLM_REQUIRE_DATA=1: a missing data file is a failure, not a skip.
inline bool data_required() {
  const char* e = std::getenv("NPULLM_REQUIRE_DATA");
  return e && std::string(e) == "1";
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

// Equal bit for bit (NaNs and signed zeros included).
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF), written independently of
// the library's own validator.
inline bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      n = 1, cp = c;
    } else if ((c >> 5) == 0x6) {
      n = 2, cp = c & 0x1F;
    } else if ((c >> 4) == 0xE) {
      n = 3, cp = c & 0x0F;
    } else if ((c >> 3) == 0x1E) {
      n = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Token ids written as decimal numbers separated by white space (" 1 2 3" or "1 2 3").
inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int64_t id; in >> id;) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

// A llama.cpp tokenizer vector pair (../shared/models/README.md section 3): the .inp holds texts
// separated by "\n__ggml_vocab_test__\n" (the last one may end without it), the .out one line of ids
// per text. As many cases as the files hold.
struct VocabCases {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
};

inline VocabCases load_vocab_cases(const std::string& inp_path, const std::string& out_path) {
  VocabCases c;
  const std::string inp = read_file(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size())
    c.texts.push_back(inp.substr(pos, next - pos));
  if (const size_t last = inp.rfind(sep); inp.size() > (last == std::string::npos ? 0 : last + sep.size()))
    c.texts.push_back(inp.substr(last == std::string::npos ? 0 : last + sep.size()));
  const std::string out = read_file(out_path);
  for (size_t pos = 0, next; (next = out.find('\n', pos)) != std::string::npos; pos = next + 1)
    c.expected.push_back(parse_ids(out.substr(pos, next - pos)));
  return c;
}

// Every "<name>.inp" in `dir` that has its "<name>.out", as the path without the suffix, sorted.
inline std::vector<std::string> vector_pairs_in(const std::string& dir) {
  std::vector<std::string> stems;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string p = e.path().string();
    if (p.size() > 4 && p.substr(p.size() - 4) == ".inp" && std::filesystem::exists(p.substr(0, p.size() - 4) + ".out"))
      stems.push_back(p.substr(0, p.size() - 4));
  }
  std::sort(stems.begin(), stems.end());
  return stems;
}

// Logits from a reference file: raw float32, or binary16 when the name ends in ".f16".
inline std::vector<float> read_logits(const std::string& path, size_t n) {
  if (!std::filesystem::exists(path)) ADD_FAILURE() << "missing test data: " << path;
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

// ln sum_i exp(x_i), in double.
inline double log_sum_exp(std::span<const float> x) {
  double mx = -1e300, s = 0;
  for (float v : x) mx = std::max(mx, double(v));
  for (float v : x) s += std::exp(double(v) - mx);
  return mx + std::log(s);
}

// KL(softmax(ref) || softmax(ours)) of one row, in double.
inline double kl_row(std::span<const float> ref, std::span<const float> ours) {
  const double lp = log_sum_exp(ref), lq = log_sum_exp(ours);
  double kl = 0;
  for (size_t v = 0; v < ref.size(); ++v) {
    const double a = double(ref[v]) - lp, b = double(ours[v]) - lq;
    kl += std::exp(a) * (a - b);
  }
  return kl;
}

// Mean over `rows` positions of KL(softmax(ref) || softmax(ours)), in double.
inline double mean_kl(const std::vector<float>& ref, const std::vector<float>& ours, size_t rows, size_t V) {
  double total = 0;
  for (size_t r = 0; r < rows; ++r)
    total += kl_row(std::span(ref).subspan(r * V, V), std::span(ours).subspan(r * V, V));
  return total / double(rows);
}

// Index of the largest value (the first of equals).
inline size_t argmax(std::span<const float> x) {
  return static_cast<size_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

// Share of the `rows` positions whose top-1 token is the same in both [rows][V] matrices.
inline double top1_agreement(const std::vector<float>& a, const std::vector<float>& b, size_t rows, size_t V) {
  size_t same = 0;
  for (size_t r = 0; r < rows; ++r)
    same += argmax(std::span(a).subspan(r * V, V)) == argmax(std::span(b).subspan(r * V, V));
  return double(same) / double(rows);
}

// The prompt ids of a golden logits reference (../shared/golden/README.md): its JSON's "tokens", by
// the JSON's path under ../shared ("golden/qwen2-gpt2.Q4_0.json").
inline std::vector<int32_t> golden_tokens(const std::string& json_rel) {
  return nlohmann::json::parse(read_file(shared_path(json_rel)))["tokens"].get<std::vector<int32_t>>();
}

// llama2.c's greedy reference for stories260K (../shared/models/README.md section 1): case A
// (prompt "Once upon a time": prompt_ids, 200 ids, text, logits of positions 0..7) and case B.
constexpr const char* kStoriesModel = "models/llama2c/stories260K.gguf";
constexpr const char* kStoriesReference = "models/llama2c/stories260K.greedy-reference.json";
inline nlohmann::json stories_reference() { return nlohmann::json::parse(read_file(shared_path(kStoriesReference))); }

// Case A's whole sequence as the model sees it: BOS, then llama2.c's next_ids (the prompt after BOS
// and the 200 greedy ids), 201 ids.
inline std::vector<int32_t> stories_sequence() {
  std::vector<int32_t> t{1};
  for (int32_t id : stories_reference()["cases"][0]["next_ids"].get<std::vector<int32_t>>()) t.push_back(id);
  return t;
}

// A command run through the shell: its exit status and output.
struct Proc {
  int rc;
  std::string out, err;
};

// A folder of this test process's own in the system's temp folder, made on first use and removed,
// with everything in it, when the process exits: a run of the suite leaves nothing behind. (Only
// by the process that made it: a forked child that exits must not take its parent's files.)
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    pid_t owner = ::getpid();
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("npullm-test-" + std::to_string(owner));
    Scratch() { std::filesystem::create_directories(path); }
    ~Scratch() {
      std::error_code ec;
      if (::getpid() == owner) std::filesystem::remove_all(path, ec);
    }
  };
  static const Scratch s;
  return s.path;
}

// Fails the current test when a child's stderr holds an UndefinedBehaviorSanitizer report
// ("FILE:LINE:COL: runtime error: ..."). Under GCC, ASan + UBSan builds run UBSan as a runtime of its
// own that writes to stderr whatever log_path says, so a finding in a child whose exit status a
// test does not check (or whose failure it expects) would otherwise pass unseen.
inline void check_child_sanitizers(const std::string& cmd, const std::string& err) {
  const size_t at = err.find(": runtime error: ");
  if (at == std::string::npos) return;
  const size_t from = err.rfind('\n', at);
  ADD_FAILURE() << "UndefinedBehaviorSanitizer reported in a child process (" << cmd.substr(0, 200) << "):\n"
                << err.substr(from == std::string::npos ? 0 : from + 1, 4000);
}

// Runs a shell command line, capturing stdout and stderr.
inline Proc run_shell(const std::string& cmd) {
  const std::filesystem::path dir = scratch_dir() / "shell";
  std::filesystem::create_directories(dir);
  const std::string o = (dir / "out").string(), e = (dir / "err").string();
  const int status = std::system((cmd + " >" + o + " 2>" + e).c_str());
  Proc r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_file(o), read_file(e)};
  check_child_sanitizers(cmd, r.err);
  return r;
}

#ifdef NPULLM_BINARY
inline std::string npullm_binary() { return NPULLM_BINARY; }
// `npullm <args>` (the binary this build made; arguments are shell words).
inline Proc run_npullm(const std::string& args) { return run_shell(npullm_binary() + " " + args); }
#endif

}  // namespace npullm::test

// The current test needs `path` (a file or folder outside the repository): without it the test
// skips ("needs test data: <path>"), or fails under NPULLM_REQUIRE_DATA=1. `hint` says how to get it.
#define NPULLM_REQUIRE_FILE(path, hint)                                                           \
  do {                                                                                            \
    const std::string npullm_required_ = (path);                                                  \
    if (!std::filesystem::exists(npullm_required_)) {                                             \
      if (::npullm::test::data_required())                                                        \
        GTEST_FAIL() << "missing test data: " << npullm_required_ << " (NPULLM_REQUIRE_DATA=1) " \
                     << (hint);                                                                   \
      GTEST_SKIP() << "needs test data: " << npullm_required_ << " (not present) " << (hint);    \
    }                                                                                             \
  } while (0)

// The same for a file under the shared data folder (../shared or $NPULLM_SHARED_DIR).
#define NPULLM_REQUIRE_SHARED(rel) NPULLM_REQUIRE_FILE(::npullm::test::shared_path(rel), "")

// Skips for a documented reason other than missing data (a CPU feature, a tool not installed);
// scripts/check-skips.sh allows these in CI and prints them.
#define NPULLM_SKIP_UNSUPPORTED(reason) GTEST_SKIP() << "unsupported here: " << (reason)
