#!/usr/bin/env bash
# The main job: set up, build, and generate text. Uses the real model in ../shared when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=../shared/models/llama2c/stories260K.gguf
if [ ! -f "$model" ]; then
  echo "demo: $model is not here; a synthetic model is not available yet (npullm synth is planned)" >&2
  exit 1
fi
build/npullm run -m "$model" -p "${1:-Once upon a time}" -n "${2:-200}" --temp 0
