#!/usr/bin/env bash
# Fleet test (issue 50): three `npullm serve` replicas on 127.0.0.1 under a shared-prefix workload, routed
# round-robin and then by a model of the endpoint picker's scoring (fleet.mjs, which starts and stops the
# servers itself); fails unless the picker model beats round-robin on prefix hit rate and TTFT p50.
#
# usage: tests/fleet/run.sh NPULLM_BIN [MODEL.gguf]
#   MODEL   default ../shared/golden/qwen2-gpt2.Q4_0.gguf from the repo root; "" or - for it.
#           Missing: exit 77 (skip), or 1 when NPULLM_REQUIRE_DATA=1.
# env: NPULLM_RUNTIME_FLAGS  extra runtime flags for every replica
#      NPULLM_FLEET_REQUESTS, NPULLM_FLEET_CONCURRENCY, NPULLM_FLEET_PROMPTS, NPULLM_FLEET_SEED, NPULLM_FLEET_JSON
#      (see fleet.mjs)
# The openai client comes from tests/server's node_modules (installed here from its lock file if missing).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SERVER_TESTS="$ROOT/tests/server"

BIN="${1:-}"
MODEL="${2:-}"
[[ -z "$MODEL" || "$MODEL" == "-" ]] && MODEL="${NPULLM_SHARED_DIR:-$ROOT/../shared}/golden/qwen2-gpt2.Q4_0.gguf"

if [[ -z "$BIN" ]]; then
  echo "usage: $0 NPULLM_BIN [MODEL.gguf]" >&2
  exit 2
fi
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
[[ -x "$BIN" ]] || { echo "run.sh: $BIN is not an executable" >&2; exit 1; }
if [[ ! -f "$MODEL" ]]; then
  if [[ "${NPULLM_REQUIRE_DATA:-0}" == "1" ]]; then
    echo "run.sh: model $MODEL not found and NPULLM_REQUIRE_DATA=1" >&2
    exit 1
  fi
  echo "run.sh: model $MODEL not found; skipping the fleet test"
  exit 77
fi
MODEL="$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")"

command -v node >/dev/null || { echo "run.sh: node is required" >&2; exit 1; }

# Node dependencies: tests/server's, (re)installed when missing or older than its lock file.
if [[ ! -f "$SERVER_TESTS/node_modules/.package-lock.json" || "$SERVER_TESTS/package-lock.json" -nt "$SERVER_TESTS/node_modules/.package-lock.json" ]]; then
  echo "run.sh: npm ci in tests/server"
  npm ci --prefix "$SERVER_TESTS" --no-audit --no-fund
fi

exec env NPULLM_BIN="$BIN" NPULLM_FLEET_MODEL="$MODEL" NPULLM_PICKER_CONFIG="$ROOT/deploy/k8s/endpoint-picker.yaml" \
  node "$HERE/fleet.mjs"
