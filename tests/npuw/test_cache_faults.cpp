// The cache under faults (issue 12, item 2): a disk that fills mid-write, a read-only, missing or
// uncreatable cache folder, processes killed at random points while writing, two processes
// compiling the same model into one cache at once, and entries truncated or with flipped bytes.
// Each case runs `npullm run` greedy and checks two things: the text is the text of a run without a
// cache, and afterwards every entry the cache holds verifies (blobs: every checksum; packed weights:
// size and hash of header and bytes), so no later run can trust a damaged one. Runs use the small
// llama2.c model (F32: blobs only) and the golden qwen2 Q4_0 model (blobs and packed weights).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "blob/blob_image.h"
#include "npuw/weights_bank.h"
#include "test_util.h"

namespace npullm {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kStories = "models/llama2c/stories260K.gguf";
constexpr const char* kQwen = "golden/qwen2-gpt2.Q4_0.gguf";

struct Spawn {
  rlim_t fsize_limit = RLIM_INFINITY;  // RLIMIT_FSIZE (with SIGXFSZ ignored: writes fail with EFBIG)
  int kill_after_ms = -1;              // SIGKILL after this long (< 0: never)
  bool as_nobody = false;              // when root: run as uid/gid 65534, for whom a 0555 folder is read-only
};

// `npullm <args>` without a shell, its output read through pipes (a file limit must not cut them).
test::Proc spawn_npullm(const std::vector<std::string>& args, const Spawn& how = {}) {
  int out[2], err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0) return {-1, "", "pipe failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
    if (how.fsize_limit != RLIM_INFINITY) {
      ::signal(SIGXFSZ, SIG_IGN);  // kept across exec: the write returns EFBIG instead of killing
      const rlimit lim{how.fsize_limit, how.fsize_limit};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    if (how.as_nobody && ::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(125);
    std::vector<std::string> all = {test::npullm_binary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]), ::close(err[1]);
  test::Proc r{-1, "", ""};
  const auto deadline = Clock::now() + std::chrono::milliseconds(how.kill_after_ms);
  bool killed = false;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    int wait_ms = 1000;
    if (how.kill_after_ms >= 0 && !killed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        ::kill(pid, SIGKILL);
        killed = true;
      }
      wait_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 1000)));
    }
    if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  test::check_child_sanitizers("npullm " + (args.empty() ? std::string() : args[0]), r.err);
  return r;
}

std::vector<std::string> run_args(const std::string& model, const std::string& cache) {
  std::vector<std::string> a = {"run", "-m", test::shared_path(model), "-p", "Once upon a time", "-n", "24", "--temp", "0",
                                "--json", "--variants", "64", "--prefill-chunk", "16", "-t", "1"};
  if (cache.empty()) a.push_back("--no-cache");
  else a.insert(a.end(), {"--cache-dir", cache});
  return a;
}

struct RunResult {
  int rc = -1;
  std::string text, err;
  nlohmann::json stats;
};

RunResult run(const std::string& model, const std::string& cache, const Spawn& how = {}) {
  const test::Proc p = spawn_npullm(run_args(model, cache), how);
  RunResult r{p.rc, "", p.err, {}};
  if (p.rc == 0) {
    const auto j = nlohmann::json::parse(p.out, nullptr, false);
    if (j.is_object()) {
      r.text = j.value("text", "");
      r.stats = j.value("stats", nlohmann::json::object());
    } else {
      r.rc = -2;
    }
  }
  return r;
}

// The greedy text without a cache: what every faulty run must still produce.
const std::string& reference_text(const std::string& model) {
  static std::map<std::string, std::string> texts;
  if (!texts.count(model)) {
    const RunResult r = run(model, "");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_FALSE(r.text.empty());
    texts[model] = r.text;
  }
  return texts[model];
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = test::scratch_dir() / "cache-faults" / name;
  fs::remove_all(d);
  fs::create_directories(d.parent_path());
  return d;
}

struct Entries {
  std::vector<fs::path> blobs, packed, temps;
  std::vector<std::string> problems;  // entries that do not verify
  size_t size() const { return blobs.size() + packed.size(); }
};

// Every entry of the cache at `dir`, each verified as a run would before trusting it.
Entries check_cache(const fs::path& dir) {
  Entries e;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return e;
  for (const auto& f : fs::recursive_directory_iterator(dir, ec)) {
    if (!f.is_regular_file()) continue;
    const std::string name = f.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) {
      e.temps.push_back(f.path());
    } else if (f.path().extension() == ".blob") {
      e.blobs.push_back(f.path());
      const std::string bytes = test::read_file(f.path().string());
      const std::string why = test::error_of([&] {
        blob::read_blob(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), f.path().string());
      });
      if (!why.empty()) e.problems.push_back(f.path().string() + ": " + why);
    } else if (f.path().extension() == ".w") {
      e.packed.push_back(f.path());
      if (std::string why = npuw::GgufWeightsBank::verify_file(f.path().string()); !why.empty())
        e.problems.push_back(f.path().string() + ": " + why);
    }
  }
  return e;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) n++;
  return n;
}

bool has_packed_weights(const std::string& model) { return std::string(model) == kQwen; }

// A complete, valid cache for `model` in `dir` (a cold run), with its entry count checked.
Entries warm_cache(const std::string& model, const fs::path& dir) {
  const RunResult cold = run(model, dir.string());
  EXPECT_EQ(cold.rc, 0) << cold.err;
  EXPECT_EQ(cold.text, reference_text(model));
  Entries e = check_cache(dir);
  EXPECT_GT(e.blobs.size(), 0u);
  EXPECT_TRUE(e.problems.empty()) << joined(e.problems);
  return e;
}

// A warm run: right text, nothing compiled or rebuilt, nothing reported.
void expect_warm(const std::string& model, const fs::path& dir) {
  const RunResult w = run(model, dir.string());
  ASSERT_EQ(w.rc, 0) << w.err;
  EXPECT_EQ(w.text, reference_text(model));
  EXPECT_EQ(w.stats.value("compiled_blobs", -1), 0) << w.err;
  EXPECT_EQ(w.stats.value("packed_weights", -1), 0) << w.err;
  EXPECT_EQ(w.err.find("warning"), std::string::npos) << w.err;
}

class CacheFaults : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = GetParam();
    NPULLM_REQUIRE_SHARED(model_);
  }
  std::string model_;
};

// RLIMIT_FSIZE (SIGXFSZ ignored) makes every write past the limit fail with EFBIG, as a full disk
// fails with ENOSPC: the entries that fit are whole, the others are absent (no temporary file
// either), the warning comes once per kind of entry, and the text is right.
TEST_P(CacheFaults, DiskFullMidWrite) {
  const fs::path dir = fresh_dir("full");
  const size_t full = warm_cache(model_, dir).size();
  // 4 KiB: only the smallest blob fits; 16 KiB: no whole blob of the big ones; 64 KiB: the blobs
  // and small packed weights fit, the large packed weights do not.
  for (rlim_t limit : {rlim_t{4096}, rlim_t{16 << 10}, rlim_t{64 << 10}}) {
    fs::remove_all(dir);
    const RunResult r = run(model_, dir.string(), {.fsize_limit = limit});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.text, reference_text(model_)) << "file size limit " << limit;
    EXPECT_LE(count_of(r.err, "blob cache cannot be written"), 1u) << r.err;
    EXPECT_LE(count_of(r.err, "packed weights cannot be stored"), 1u) << r.err;
    const Entries e = check_cache(dir);
    EXPECT_TRUE(e.problems.empty()) << joined(e.problems);
    EXPECT_TRUE(e.temps.empty()) << e.temps.front();
    for (const fs::path& p : e.blobs) EXPECT_LE(fs::file_size(p), limit) << p;
    for (const fs::path& p : e.packed) EXPECT_LE(fs::file_size(p), limit) << p;
    // Whatever did not fit was reported (once per kind); a cache that took everything, not.
    const size_t warnings = count_of(r.err, "cannot be written") + count_of(r.err, "cannot be stored");
    if (e.size() < full) EXPECT_GE(warnings, 1u) << "limit " << limit << ": " << e.size() << " of " << full << " entries\n" << r.err;
    else EXPECT_EQ(warnings, 0u) << r.err;
    std::printf("[          ] file size limit %llu: %zu of %zu entries stored\n", static_cast<unsigned long long>(limit), e.size(), full);
  }
  // Room again: the next run completes the cache, and the one after is warm.
  const RunResult r = run(model_, dir.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.text, reference_text(model_));
  const Entries e = check_cache(dir);
  EXPECT_TRUE(e.problems.empty()) << joined(e.problems);
  expect_warm(model_, dir);
  fs::remove_all(dir);
}

// A folder the run cannot write: a warm one is used as it is; an empty one is compiled around
// (in memory, one warning per kind of entry). Root ignores permissions, so the run drops to nobody.
TEST_P(CacheFaults, ReadOnlyCacheDir) {
  const fs::path dir = fresh_dir("readonly");
  fs::create_directories(dir);
  fs::permissions(dir.parent_path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                         fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  const Spawn nobody{.as_nobody = true};
  RunResult r = run(model_, dir.string(), nobody);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.text, reference_text(model_));
  EXPECT_EQ(count_of(r.err, "blob cache cannot be written"), 1u) << r.err;
  EXPECT_LE(count_of(r.err, "packed weights cannot be stored"), 1u) << r.err;
  EXPECT_EQ(check_cache(dir).size(), 0u);

  // Warm it (writable), then read-only again: every entry is used, nothing is written or reported.
  fs::permissions(dir, fs::perms::owner_write, fs::perm_options::add);
  const size_t entries = warm_cache(model_, dir).size();
  for (const auto& f : fs::recursive_directory_iterator(dir))
    fs::permissions(f.path(), fs::perms::owner_write, fs::perm_options::remove);
  fs::permissions(dir, fs::perms::owner_write, fs::perm_options::remove);
  r = run(model_, dir.string(), nobody);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.text, reference_text(model_));
  EXPECT_EQ(r.stats.value("compiled_blobs", -1), 0) << r.err;
  EXPECT_EQ(r.stats.value("packed_weights", -1), 0) << r.err;
  EXPECT_EQ(check_cache(dir).size(), entries);
  for (const auto& f : fs::recursive_directory_iterator(dir))
    fs::permissions(f.path(), fs::perms::owner_write, fs::perm_options::add);
  fs::permissions(dir, fs::perms::owner_write, fs::perm_options::add);
  fs::remove_all(dir);
}

// A folder that does not exist is made (parents too); one that cannot be made (its parent is a
// file) is compiled around with one warning.
TEST_P(CacheFaults, MissingCacheDir) {
  const fs::path base = fresh_dir("missing");
  const fs::path dir = base / "a" / "b" / "cache";
  warm_cache(model_, dir);
  expect_warm(model_, dir);

  fs::create_directories(base);
  { std::ofstream(base / "file") << "not a folder"; }
  const RunResult r = run(model_, (base / "file" / "cache").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.text, reference_text(model_));
  EXPECT_EQ(count_of(r.err, "blob cache cannot be written"), 1u) << r.err;
  EXPECT_LE(count_of(r.err, "packed weights cannot be stored"), 1u) << r.err;
  fs::remove_all(base);
}

// SIGKILL at a random time during a cold start, again and again on the same cache: after each
// kill every entry there verifies; then a run completes with the right text, sweeps the temporary
// files of the dead processes, and the next run is warm.
TEST_P(CacheFaults, KilledAtRandomPointsWhileWriting) {
  const fs::path dir = fresh_dir("killed");
  const auto t0 = Clock::now();
  warm_cache(model_, dir);
  const int cold_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> when(0, std::max(cold_ms, 10));
  int finished = 0;
  fs::remove_all(dir);
  for (int i = 0; i < 12; ++i) {
    const int ms = when(rng);
    const test::Proc p = spawn_npullm(run_args(model_, dir.string()), {.kill_after_ms = ms});
    if (p.rc == 0) {
      finished++;
      fs::remove_all(dir);  // a cold start again: the next kill must land in the writes
    } else {
      EXPECT_EQ(p.rc, 128 + SIGKILL) << p.err;
    }
    const Entries e = check_cache(dir);
    EXPECT_TRUE(e.problems.empty()) << "after a kill at " << ms << " ms:\n" << joined(e.problems);
  }
  std::printf("[          ] %s: 12 runs killed at random in [0, %d] ms, %d finished first\n", model_.c_str(), cold_ms, finished);
  const RunResult r = run(model_, dir.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.text, reference_text(model_));
  const Entries e = check_cache(dir);
  EXPECT_TRUE(e.problems.empty()) << joined(e.problems);
  EXPECT_TRUE(e.temps.empty()) << "left over: " << e.temps.front();
  expect_warm(model_, dir);
  fs::remove_all(dir);
}

// Two cold starts of the same model into one empty cache at the same time: both right, the cache
// whole afterwards, and a third start compiles nothing.
TEST_P(CacheFaults, TwoProcessesCompileTheSameModelAtOnce) {
  const fs::path dir = fresh_dir("concurrent");
  for (int round = 0; round < 2; ++round) {
    fs::remove_all(dir);
    RunResult a, b;
    std::thread ta([&] { a = run(model_, dir.string()); });
    std::thread tb([&] { b = run(model_, dir.string()); });
    ta.join();
    tb.join();
    ASSERT_EQ(a.rc, 0) << a.err;
    ASSERT_EQ(b.rc, 0) << b.err;
    EXPECT_EQ(a.text, reference_text(model_));
    EXPECT_EQ(b.text, reference_text(model_));
    EXPECT_EQ(a.err.find("warning"), std::string::npos) << a.err;
    EXPECT_EQ(b.err.find("warning"), std::string::npos) << b.err;
    const Entries e = check_cache(dir);
    EXPECT_TRUE(e.problems.empty()) << joined(e.problems);
    EXPECT_TRUE(e.temps.empty()) << e.temps.front();
    expect_warm(model_, dir);
  }
  fs::remove_all(dir);
}

// Damage every entry of a warm cache with `damage`; the next run must produce the right text,
// report each damaged entry once, and leave the cache whole (rebuilt), the run after warm.
template <typename Damage>
void damaged_entries_are_rebuilt(const std::string& model, const fs::path& dir, Damage damage) {
  const Entries before = warm_cache(model, dir);
  if (has_packed_weights(model)) {
    EXPECT_GT(before.packed.size(), 0u);
  }
  for (const fs::path& p : before.blobs) damage(p);
  for (const fs::path& p : before.packed) damage(p);
  const Entries broken = check_cache(dir);
  EXPECT_EQ(broken.problems.size(), before.size()) << "every entry damaged:\n" << joined(broken.problems);

  const RunResult r = run(model, dir.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.text, reference_text(model));
  EXPECT_EQ(r.stats.value("compiled_blobs", -1), static_cast<int>(before.blobs.size()));
  EXPECT_EQ(r.stats.value("packed_weights", -1), static_cast<int>(before.packed.size()));
  for (const fs::path& p : before.blobs) EXPECT_EQ(count_of(r.err, p.filename().string()), 1u) << p << "\n" << r.err;
  for (const fs::path& p : before.packed) EXPECT_EQ(count_of(r.err, p.filename().string() + " is damaged"), 1u) << p << "\n" << r.err;
  const Entries after = check_cache(dir);
  EXPECT_TRUE(after.problems.empty()) << joined(after.problems);
  EXPECT_EQ(after.size(), before.size());
  expect_warm(model, dir);
}

TEST_P(CacheFaults, TruncatedEntriesAreRebuilt) {
  const fs::path dir = fresh_dir("truncated");
  int i = 0;
  damaged_entries_are_rebuilt(model_, dir, [&](const fs::path& p) {
    const uintmax_t size = fs::file_size(p);
    // Cut in the header, in the middle, or by one byte at the end, in turn.
    const uintmax_t keep = i % 3 == 0 ? 40 : i % 3 == 1 ? size / 2 : size - 1;
    fs::resize_file(p, keep);
    i++;
  });
  fs::remove_all(dir);
}

TEST_P(CacheFaults, FlippedBytesAreCaught) {
  const fs::path dir = fresh_dir("flipped");
  std::mt19937 rng(7);
  int i = 0;
  damaged_entries_are_rebuilt(model_, dir, [&](const fs::path& p) {
    const uintmax_t size = fs::file_size(p);
    // One bit of one byte: in the header, then anywhere, in turn.
    const uintmax_t at = i++ % 2 == 0 ? std::uniform_int_distribution<uintmax_t>(0, std::min<uintmax_t>(size, 128) - 1)(rng)
                                      : std::uniform_int_distribution<uintmax_t>(0, size - 1)(rng);
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ (1 << std::uniform_int_distribution<int>(0, 7)(rng)));
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  });
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, CacheFaults, ::testing::Values(kStories, kQwen), [](const auto& info) {
  return std::string(info.param) == kStories ? std::string("stories260K") : std::string("qwen2_Q4_0");
});

}  // namespace
}  // namespace npullm
