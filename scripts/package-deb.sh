#!/usr/bin/env bash
# Builds the Debian package from a build folder where npullm and npullm_shared are built: `cpack -G DEB` over the installed
# targets (the tool, libnpullm, headers, CMake and pkg-config files, the Python module), whose
# Depends are the Debian packages of the libraries it links. The DebPackage test and the container
# image (deploy/Dockerfile) both make their .deb with this script, so they ship the same package.
#
#   scripts/package-deb.sh BUILD_DIR OUT_DIR     prints the .deb's path on its last line
set -euo pipefail
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^project(npullm VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
arch=$(dpkg --print-architecture)
log="$out/cpack.log"
cpack -G DEB --config "$build/CPackConfig.cmake" -B "$out" >"$log" 2>&1 || { cat "$log" >&2; echo "package-deb: cpack failed" >&2; exit 1; }
deb="$out/npullm_${version}_${arch}.deb"
[ -f "$deb" ] || { ls "$out" >&2; echo "package-deb: no $(basename "$deb")" >&2; exit 1; }
echo "$deb"
