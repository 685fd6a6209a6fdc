#!/usr/bin/env bash
# The main job: set up, build, and generate text. Uses the real model in ../shared when it is there;
# otherwise makes a small random-weight model with `npullm synth` (and says so).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh npullm   # the tool alone: the tests and benchmarks are not built for the demo
model=../shared/models/llama2c/stories260K.gguf
if [ ! -f "$model" ]; then
  model=build/demo-synth.gguf
  echo "demo: ../shared/models/llama2c/stories260K.gguf is not here; generating with a random-weight model made by 'npullm synth' (its text is gibberish)" >&2
  build/npullm synth --preset tiny --type Q8_0 -o "$model"
fi
build/npullm run -m "$model" -p "${1:-Once upon a time}" -n "${2:-200}" --temp 0
