// `npullm chat-template` against runaway templates, in a child process as a user would run it: the
// issue's list doubled 30 times and string doubled 29 times are refused with a clear error (exit 1,
// "npullm: error: ... the limit of one render's values"), never a signal, under a 4 GiB address
// space (what `prlimit --as=4294967296` sets: RLIMIT_AS) and without one. Before the render's value
// budget, the list case ended in "internal error: std::bad_alloc" after 3.8 s under that limit and
// the string case died with SIGSEGV after 9.7 s. Outside sanitizer builds the child's CPU time and
// peak resident memory are bounded too (1 s, 256 MiB). And the tests' own helpers: a child's
// UndefinedBehaviorSanitizer report fails the test that ran it, whatever the child's exit status.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace npullm {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // shadow memory: no address-space limit, no time or RSS bound
#else
constexpr bool kSanitized = false;
#endif

struct Child {
  int rc = -1;         // exit status, or 128 + signal
  bool signalled = false;
  std::string err;
  double cpu_s = 0;    // user + system
  long max_rss_kib = 0;
};

// `npullm ARGS...` with its stderr in a file, RLIMIT_AS set to `as_bytes` (0: none); wait4's usage.
Child run_limited(const std::vector<std::string>& args, rlim_t as_bytes) {
  const std::string err_path = (test::scratch_dir() / "render-limits.err").string();
  std::fflush(stdout);  // (or the child's freopen would write the parent's buffered lines again)
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(err_path.c_str(), "w", stderr)) ::_exit(126);
    if (!std::freopen("/dev/null", "w", stdout)) ::_exit(126);
    if (as_bytes != 0) {
      const rlimit lim{as_bytes, as_bytes};
      if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(125);
    }
    std::vector<std::string> all = {test::npullm_binary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Child c;
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  c.signalled = WIFSIGNALED(status);
  c.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  c.err = test::read_file(err_path);
  c.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  c.max_rss_kib = ru.ru_maxrss;
  return c;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (test::scratch_dir() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(CliRenderLimits, RunawayTemplatesAreRefusedNotCrashed) {
  const std::string messages = write_file("empty-messages.json", "[]");
  const struct { const char* name; std::string source; const char* expect; } cases[] = {
      {"list", "{% set ns = namespace(l=[1]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}",
       "list, tuple and dict elements, the limit of one render's values"},
      {"string", "{% set ns = namespace(s='x') %}{% for i in range(29) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
       "bytes of strings, the limit of one render's values"},
      {"string-tilde", "{% set ns = namespace(s='x') %}{% for i in range(29) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
       "bytes of strings, the limit of one render's values"},
  };
  for (const auto& c : cases) {
    const std::string tmpl = write_file(std::string("runaway-") + c.name + ".jinja", c.source);
    for (rlim_t as : {rlim_t{0}, rlim_t{4294967296}}) {
      if (as != 0 && kSanitized) continue;
      const Child r = run_limited({"chat-template", "--template", tmpl, "--messages", messages}, as);
      SCOPED_TRACE(std::string(c.name) + (as ? " under a 4 GiB address space" : ""));
      EXPECT_FALSE(r.signalled) << "killed by signal " << r.rc - 128 << "\n" << r.err;
      EXPECT_EQ(r.rc, 1) << r.err;
      EXPECT_NE(r.err.find("npullm: error: "), std::string::npos) << r.err;
      EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
      std::printf("[          ] %s%s: exit %d, %.2f s CPU, %ld MiB peak\n", c.name, as ? " (RLIMIT_AS 4 GiB)" : "", r.rc, r.cpu_s,
                  r.max_rss_kib / 1024);
      if (!kSanitized) {
        // The memory bound is what tells a refused render from one that ran away (2^29 bytes would
        // pass 512 MiB); the CPU bound only catches a hang, so it leaves room for a slow, shared CI
        // machine (0.7 s here, 1.03 s on one CI run).
        EXPECT_LT(r.cpu_s, 10.0) << "CPU seconds";
        EXPECT_LT(r.max_rss_kib, 256 * 1024) << "peak resident KiB";
      }
    }
  }
}

TEST(CliRenderLimits, AChildsUbsanReportFailsTheTest) {
  EXPECT_NONFATAL_FAILURE(
      test::check_child_sanitizers("npullm run", "warming up\nsrc/x.cpp:3:5: runtime error: signed integer overflow\n"),
      "UndefinedBehaviorSanitizer reported in a child process");
  test::check_child_sanitizers("npullm run", "npullm: error: cannot open model.gguf");  // no report, no failure
}

}  // namespace
}  // namespace npullm
