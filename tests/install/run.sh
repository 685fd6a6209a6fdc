#!/usr/bin/env bash
# The installed tree (ctest's InstallTree): `cmake --install BUILD --prefix TMP`, its layout (SONAME,
# static library, headers, CMake package, pkg-config file, Python module), exported symbols = the C
# header's functions + the C++ API, then the C example and the C++ example built out of the source
# tree against the installed package (CMake, and the C one also with pkg-config and statically);
# each run on stories260K: the C example's and the installed Python module's greedy text must equal
# `npullm run --temp 0`'s.
#
#   tests/install/run.sh BUILD_DIR
# Exit 77 (a skip) when ../shared's model is missing, unless NPULLM_REQUIRE_DATA=1.
set -euo pipefail   # (no `cmd | grep -q`: grep's early exit would fail the pipe with SIGPIPE)
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
model=${NPULLM_SHARED_DIR:-$src/../shared}/models/llama2c/stories260K.gguf
tmp=$(mktemp -d "${TMPDIR:-/tmp}/npullm-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export NPULLM_CACHE_DIR=$tmp/cache   # every blob cache in the temp dir (../shared may be read-only, $HOME untouched)
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
libdir=$(dirname "$(find "$prefix" -name 'libnpullm.so.1' | head -1)")
[ -n "$libdir" ] && [ -d "$libdir" ] || fail "no libnpullm.so.1 installed"
for f in include/npullm/npullm.h include/npullm/llm_pipeline.h bin/npullm; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
for f in libnpullm.so libnpullm.a cmake/npullm/npullmConfig.cmake cmake/npullm/npullmConfigVersion.cmake \
         cmake/npullm/npullmTargets.cmake pkgconfig/npullm.pc python3/dist-packages/npullm/__init__.py; do
  [ -e "$libdir/$f" ] || fail "$libdir/$f is not installed"
done
grep -q 'Library soname: \[libnpullm.so.1\]' <<<"$(readelf -d "$libdir/libnpullm.so")" || fail "libnpullm.so has no SONAME libnpullm.so.1"
echo "installed: $(cd "$prefix" && find . -type f | wc -l) files; SONAME libnpullm.so.1"

# Exports: every function the C header declares, and besides them only the C++ API.
declared=$(grep -oE '\bnpullm_[a-z0-9_]+\(' "$prefix/include/npullm/npullm.h" | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$libdir/libnpullm.so" | awk '{print $3}' | sed 's/@.*//' | grep '^npullm_' | sort -u)
diff <(echo "$declared") <(echo "$exported") >&2 || fail "the exported C functions differ from npullm.h's (< header, > library)"
other=$(nm -D --defined-only "$libdir/libnpullm.so" | awk '{print $3}' | c++filt | sed 's/@.*//' |
  grep -vE '^npullm_|^npullm::LLMPipeline::(LLMPipeline|~LLMPipeline|[a-z])|^npullm::finish_reason_name|npullm::ContextLengthError$|^NPULLM_1$' || true)
[ -z "$other" ] || fail "libnpullm.so exports internals: $(echo "$other" | head -5)"
echo "exports: $(echo "$exported" | wc -l) C functions (all of npullm.h) + the C++ API"

# Out of the source tree: copies of the examples and a consumer project, built against the prefix.
mkdir "$tmp/consumer"
cp "$src/examples/c/generate.c" "$src/examples/chat_example.cpp" "$src/tests/install/consumer/CMakeLists.txt" "$tmp/consumer/"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$tmp/consumer" -B "$tmp/consumer-build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/consumer-configure.log" || { cat "$tmp/consumer-configure.log"; fail "the consumer does not configure"; }
cmake --build "$tmp/consumer-build" >"$tmp/consumer-build.log" 2>&1 || { cat "$tmp/consumer-build.log"; fail "the consumer does not build"; }
! grep -rq "$src" "$tmp/consumer-build/CMakeFiles" "$tmp/consumer-build/CMakeCache.txt" || fail "the consumer build refers to the source tree"
[ -x "$tmp/consumer-build/c_example_static" ] || fail "npullm::npullm_static was not defined by the CMake package"
PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --exists npullm || fail "pkg-config does not find npullm"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -pedantic -Werror "$tmp/consumer/generate.c" -o "$tmp/c_pkgconfig" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs npullm) -Wl,-rpath,"$libdir"
grep -q "$libdir/libnpullm.so.1" <<<"$(ldd "$tmp/consumer-build/c_example")" || fail "c_example does not load the installed libnpullm.so.1"
grep -q "$libdir/libnpullm.so.1" <<<"$(ldd "$tmp/c_pkgconfig")" || fail "the pkg-config build does not load the installed libnpullm.so.1"
! grep -q libnpullm <<<"$(ldd "$tmp/consumer-build/c_example_static")" || fail "c_example_static links libnpullm.so"
echo "built against the installed tree: C (CMake, pkg-config, static) and C++ examples"

if [ ! -f "$model" ]; then
  echo "needs $model (not present: test data missing)" >&2
  [ "${NPULLM_REQUIRE_DATA:-0}" = 1 ] && exit 1
  exit 77
fi
cache=$NPULLM_CACHE_DIR
prompt="Once upon a time"
want=$("$prefix/bin/npullm" run -m "$model" -p "$prompt" -n 40 --temp 0 --json --cache-dir "$cache" 2>/dev/null |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["text"])')
[ -n "$want" ] || fail "npullm run gave no text"
for exe in "$tmp/consumer-build/c_example" "$tmp/c_pkgconfig" "$tmp/consumer-build/c_example_static"; do
  got=$("$exe" "$model" "$prompt" 40 "$cache" 2>"$tmp/stderr") || { cat "$tmp/stderr"; fail "$exe failed"; }
  [ "$got" = "$want" ] || fail "$(basename "$exe"): '$got' != npullm run's '$want'"
done
echo "C example (3 builds) = npullm run --temp 0: $want"
"$tmp/consumer-build/cpp_example" "$model" chatml >"$tmp/cpp.out" 2>&1 || { cat "$tmp/cpp.out"; fail "the C++ example failed"; }
grep -q "prefilled" "$tmp/cpp.out" || fail "the C++ example printed no turn"
echo "C++ example: $(grep -c prefilled "$tmp/cpp.out") chat turns"

# The installed Python module finds the installed library by itself.
got=$(env -u NPULLM_LIBRARY PYTHONPATH="$libdir/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 python3 - "$model" "$cache" "$libdir" <<'PY'
import sys
import npullm
assert npullm.__file__.startswith(sys.argv[3]), npullm.__file__
with npullm.LLM(sys.argv[1], cache_dir=sys.argv[2]) as llm:
    text = "".join(llm.generate("Once upon a time", max_new_tokens=40))
maps = open("/proc/self/maps").read()
assert sys.argv[3] + "/libnpullm.so" in maps, "libnpullm was not loaded from the installed tree"
print(text)
PY
) || fail "the installed Python module failed"
[ "$got" = "$want" ] || fail "Python: '$got' != '$want'"
echo "installed Python module = npullm run --temp 0"
echo "PASS"
