#!/usr/bin/env bash
# Configures and builds npullm (Release) into build/; the tool is build/npullm.
#   scripts/build.sh            everything (tool, tests, benchmarks)
#   scripts/build.sh TARGET...  only those targets (the demo builds `npullm` alone)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
if [ $# -gt 0 ]; then
  cmake --build build -j2 --target "$@"
else
  cmake --build build -j2
fi
