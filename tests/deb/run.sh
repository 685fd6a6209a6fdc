#!/usr/bin/env bash
# The Debian package (ctest's DebPackage): `cpack -G DEB` (scripts/package-deb.sh, which
# deploy/Dockerfile uses too) gives npullm_<version>_amd64.deb whose Depends are the Debian
# packages of the libraries it links (all installed here); unpacked into a throwaway root with
# `dpkg -x` (not installed), its npullm runs stories260K and prints `npullm run --temp 0`'s text
# from the build, and its Python module works from there too.
#
#   tests/deb/run.sh BUILD_DIR
# Exit 77 (a skip) when ../shared's model is missing, unless NPULLM_REQUIRE_DATA=1.
set -euo pipefail   # (no `cmd | grep -q`: grep's early exit would fail the pipe with SIGPIPE)
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
model=${NPULLM_SHARED_DIR:-$src/../shared}/models/llama2c/stories260K.gguf
tmp=$(mktemp -d "${TMPDIR:-/tmp}/npullm-deb-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export NPULLM_CACHE_DIR=$tmp/cache   # every blob cache in the temp dir (../shared may be read-only, $HOME untouched)
fail() { echo "FAIL: $*" >&2; exit 1; }

version=$(sed -n 's/^project(npullm VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
arch=$(dpkg --print-architecture)
# The same script deploy/Dockerfile makes its package with.
deb=$("$src/scripts/package-deb.sh" "$build" "$tmp/pkg" | tail -n 1) || fail "scripts/package-deb.sh failed"
[ "$deb" = "$tmp/pkg/npullm_${version}_${arch}.deb" ] || fail "package-deb.sh made $deb, not npullm_${version}_${arch}.deb"
echo "built $(basename "$deb") ($(du -h "$deb" | cut -f1))"

depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libc6 libstdc++6 libfmt libxxhash libpcre2-8 libedit libcpp-httplib; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib"
done
# Every dependency is a Debian package, and the ones here satisfy it.
while read -r pkg; do
  grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" || fail "Depends names $pkg, which is not installed here"
done < <(tr ',' '\n' <<<"$depends" | sed 's/(.*//; s/|.*//; s/ //g' | grep -v '^$')
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/npullm ./usr/include/npullm/npullm.h libnpullm.so.1 libnpullm.a npullm.pc npullmConfig.cmake dist-packages/npullm/__init__.py; do
  grep -q "$f" <<<"$contents" || fail "the package lacks $f"
done

root=$tmp/root
dpkg -x "$deb" "$root"
if [ ! -f "$model" ]; then
  echo "needs $model (not present: test data missing)" >&2
  [ "${NPULLM_REQUIRE_DATA:-0}" = 1 ] && exit 1
  exit 77
fi
text() { python3 -c 'import json, sys; print(json.load(sys.stdin)["text"])'; }
args=(run -m "$model" -p "Once upon a time" -n 40 --temp 0 --json)
want=$("$build/npullm" "${args[@]}" --cache-dir "$tmp/cache-build" 2>/dev/null | text)
got=$("$root/usr/bin/npullm" "${args[@]}" --cache-dir "$tmp/cache-deb" 2>"$tmp/stderr" | text) || { cat "$tmp/stderr"; fail "the packaged npullm failed"; }
[ -n "$got" ] && [ "$got" = "$want" ] || fail "packaged npullm: '$got' != the build's '$want'"
echo "packaged npullm run --temp 0: $got"

pylib=$(dirname "$(find "$root" -path '*dist-packages/npullm/__init__.py')")
got=$(env -u NPULLM_LIBRARY PYTHONPATH="$(dirname "$pylib")" PYTHONDONTWRITEBYTECODE=1 python3 - "$model" "$tmp/cache-deb" "$root" <<'PY'
import sys
import npullm
with npullm.LLM(sys.argv[1], cache_dir=sys.argv[2]) as llm:
    text = "".join(llm.generate("Once upon a time", max_new_tokens=40))
assert sys.argv[3] in open("/proc/self/maps").read(), "libnpullm was not loaded from the unpacked package"
print(text)
PY
) || fail "the packaged Python module failed"
[ "$got" = "$want" ] || fail "packaged Python module: '$got' != '$want'"
echo "packaged Python module: the same text"
echo "PASS"
