#!/usr/bin/env bash
# End-to-end tests of `npullm serve`: starts a server on a free 127.0.0.1 port, runs the .mjs
# scripts against it, then a second server with --api-key for the auth checks, and checks that
# each server exits 0 within 10 s of SIGTERM (a 5 s drain at most). drain.mjs runs servers of its own.
#
# usage: tests/server/run.sh NPULLM_BIN [MODEL.gguf] [FILTER]
#   MODEL   default ../shared/models/llama2c/stories260K.gguf from the repo root; "" or - for it.
#           Missing: exit 77 (skip), or 1 when NPULLM_REQUIRE_DATA=1.
#   FILTER  extended regex on script names, e.g. 'openai|web|abuse|structured|drain|trace|spec|reasoning' (default: all).
# env: NPULLM_RUNTIME_FLAGS  extra runtime flags for both `serve` and `run` (e.g. "--variants 64,128")
#      NPULLM_SCREENSHOT     where web_page.mjs saves its screenshot (default build/web-page.png)
#      NPULLM_KEEP_TMP=1     keep the temp folder (server logs, blob cache)
#      NPULLM_STRUCTURED_N   requests per kind in structured.mjs (default 4; issue 46's acceptance: 50)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"

BIN="${1:-}"
MODEL="${2:-}"
FILTER="${3:-.}"
[[ -z "$MODEL" || "$MODEL" == "-" ]] && MODEL="${NPULLM_SHARED_DIR:-$ROOT/../shared}/models/llama2c/stories260K.gguf"

if [[ -z "$BIN" ]]; then
  echo "usage: $0 NPULLM_BIN [MODEL.gguf] [FILTER]" >&2
  exit 2
fi
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
[[ -x "$BIN" ]] || { echo "run.sh: $BIN is not an executable" >&2; exit 1; }
if [[ ! -f "$MODEL" ]]; then
  if [[ "${NPULLM_REQUIRE_DATA:-0}" == "1" ]]; then
    echo "run.sh: model $MODEL not found and NPULLM_REQUIRE_DATA=1" >&2
    exit 1
  fi
  echo "run.sh: model $MODEL not found; skipping the server tests"
  exit 77
fi
MODEL="$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")"

SCRIPTS=()
for s in bad_requests openai_client structured concurrency web_page abuse drain trace spec reasoning; do
  [[ "$s" =~ $FILTER ]] && SCRIPTS+=("$s")
done
[[ ${#SCRIPTS[@]} -gt 0 ]] || { echo "run.sh: no script matches '$FILTER'" >&2; exit 2; }

command -v node >/dev/null || { echo "run.sh: node is required" >&2; exit 1; }

# Node dependencies: (re)install when node_modules is missing or older than the lock file.
if [[ ! -f "$HERE/node_modules/.package-lock.json" || "$HERE/package-lock.json" -nt "$HERE/node_modules/.package-lock.json" ]]; then
  echo "run.sh: npm ci in tests/server"
  npm ci --prefix "$HERE" --no-audit --no-fund
fi

# The browser test needs Debian's chromium (no browser downloads).
if [[ " ${SCRIPTS[*]} " == *" web_page "* && ! -x /usr/bin/chromium ]]; then
  if [[ "$(id -u)" == "0" ]]; then
    echo "run.sh: installing chromium"
    apt-get install -y chromium
  else
    echo "run.sh: /usr/bin/chromium is missing; install it (apt-get install chromium) or filter out web_page" >&2
    exit 1
  fi
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/npullm-server-tests.XXXXXX")"
CACHE="$TMP/cache"
mkdir -p "$CACHE"
RUNTIME_FLAGS=(${NPULLM_RUNTIME_FLAGS:-})
SERVER_PID=""
SERVER_LOG=""

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    sleep 1
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ "${NPULLM_KEEP_TMP:-0}" == "1" ]]; then echo "run.sh: kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

log_tail() {
  echo "---- server log tail ($SERVER_LOG) ----" >&2
  tail -n 60 "$SERVER_LOG" >&2 || true
  echo "----" >&2
}

# start_server NAME [extra serve flags...]: starts it in the background and waits for /health.
start_server() {
  local name="$1"; shift
  PORT="$(free_port)"
  URL="http://127.0.0.1:$PORT"
  SERVER_LOG="$TMP/$name.log"
  "$BIN" serve -m "${SERVE_MODEL:-$MODEL}" --chat-template "${CHAT_TEMPLATE:-chatml}" --parallel "${PARALLEL:-8}" --host 127.0.0.1 --port "$PORT" \
    --cache-dir "$CACHE" --drain-timeout 5 "${RUNTIME_FLAGS[@]}" "$@" >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  local deadline=$((SECONDS + 60))
  until node -e 'fetch(process.argv[1]).then(r=>process.exit(r.status===200?0:1),()=>process.exit(1))' "$URL/health"; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "run.sh: server '$name' exited before answering /health" >&2
      log_tail; SERVER_PID=""; return 1
    fi
    if (( SECONDS > deadline )); then
      echo "run.sh: server '$name' did not answer /health within 60 s" >&2
      log_tail; return 1
    fi
    sleep 0.2
  done
  echo "run.sh: server '$name' (pid $SERVER_PID) up at $URL"
}

# stop_server: SIGTERM, then it must exit with status 0 within 10 s.
stop_server() {
  local pid="$SERVER_PID" rc=0
  kill -TERM "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "run.sh: server did not exit within 10 s of SIGTERM" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    SERVER_PID=""; log_tail; return 1
  fi
  wait "$pid" || rc=$?
  SERVER_PID=""
  if [[ $rc -ne 0 ]]; then
    echo "run.sh: server exited with status $rc after SIGTERM (expected 0)" >&2
    log_tail; return 1
  fi
  echo "run.sh: server shut down cleanly"
}

FAILED=()
PASSED=()

# run_script NAME [env assignments...]
run_script() {
  local name="$1"; shift
  local label="$name${1:+ [$*]}"
  echo "== $label"
  if env NPULLM_URL="$URL" NPULLM_BIN="$BIN" NPULLM_MODEL="$MODEL" NPULLM_SERVER_PID="$SERVER_PID" \
       NPULLM_RUN_FLAGS="--cache-dir $CACHE ${NPULLM_RUNTIME_FLAGS:-}" \
       NPULLM_SCREENSHOT="${NPULLM_SCREENSHOT:-$ROOT/build/web-page.png}" \
       "$@" node "$HERE/$name.mjs"; then
    PASSED+=("$label")
  else
    FAILED+=("$label")
    log_tail
  fi
}

start_server main
for s in "${SCRIPTS[@]}"; do
  [[ "$s" == abuse || "$s" == structured || "$s" == drain || "$s" == trace || "$s" == spec || "$s" == reasoning ]] && continue  # on servers of their own, below
  # A script that kills the server would fail the rest with confusing messages; say so instead.
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "run.sh: the server died" >&2; log_tail; exit 1; }
  run_script "$s"
done
stop_server || FAILED+=("clean shutdown")

if [[ " ${SCRIPTS[*]} " == *" bad_requests "* ]]; then
  start_server auth --api-key secret
  run_script bad_requests NPULLM_API_KEY=secret
  stop_server || FAILED+=("clean shutdown (auth server)")
fi

# Structured output and tools, on two golden models with real templates (their contexts hold the
# tool descriptions): Gemma 3's template, which has no tool syntax (the generic form), and Qwen3's
# over the qwen2 model (the Hermes <tool_call> form).
if [[ " ${SCRIPTS[*]} " == *" structured "* ]]; then
  GOLDEN="${NPULLM_SHARED_DIR:-$ROOT/../shared}/golden"
  for spec in "generic:$GOLDEN/arch/gemma3-spm.Q4_K_M.gguf:gemma3" "hermes:$GOLDEN/qwen2-gpt2.Q4_0.gguf:qwen3"; do
    IFS=: read -r family model template <<<"$spec"
    if [[ ! -f "$model" ]]; then
      if [[ "${NPULLM_REQUIRE_DATA:-0}" == "1" ]]; then FAILED+=("structured [$family]: $model not found")
      else echo "run.sh: $model not found; structured output on the $family tool syntax not tested"; fi
      continue
    fi
    SERVE_MODEL="$model" CHAT_TEMPLATE="$template" PARALLEL=4 start_server "tools-$family"
    run_script structured NPULLM_TOOL_FAMILY="$family"
    stop_server || FAILED+=("clean shutdown (tools-$family server)")
  done
fi

# A server with 2 slots and room for 4 waiting requests: of 64 clients, many must get a deliberate
# 503 (with Retry-After and an error body), the rest complete, and nothing else happens.
if [[ " ${SCRIPTS[*]} " == *" concurrency "* ]]; then
  PARALLEL=2 start_server overload --max-queue 4
  run_script concurrency NPULLM_EXPECT_503=1
  stop_server || FAILED+=("clean shutdown (overload server)")
fi

# Abuse (slow, idle, lying and vanishing clients, hostile bodies, a flood) against a server with
# short read/write time-outs and every other limit at its default; it must keep answering.
if [[ " ${SCRIPTS[*]} " == *" abuse "* ]]; then
  PARALLEL=4 start_server abuse --max-queue 16 --read-timeout 3 --write-timeout 3
  run_script abuse
  stop_server || FAILED+=("clean shutdown (abuse server)")
fi

# The execution trace: a server with --trace writes it on SIGUSR1 and keeps serving.
if [[ " ${SCRIPTS[*]} " == *" trace "* ]]; then
  PARALLEL=4 start_server trace --trace "$TMP/serve-trace.json"
  run_script trace NPULLM_TRACE_FILE="$TMP/serve-trace.json"
  stop_server || FAILED+=("clean shutdown (trace server)")
fi

# Speculative decoding: a server with --spec lookup (verify blobs), 4 slots; then one with a draft
# model (the model as its own: its draft runtime's slot per sequence slot), the same checks.
if [[ " ${SCRIPTS[*]} " == *" spec "* ]]; then
  PARALLEL=4 start_server spec --spec lookup --spec-k 7
  run_script spec
  stop_server || FAILED+=("clean shutdown (spec server)")
  PARALLEL=4 start_server spec-draft --spec draft --draft-model "$MODEL" --spec-k 7
  run_script spec
  stop_server || FAILED+=("clean shutdown (spec server with a draft model)")
fi

# reasoning_effort: a server whose chat template is harmony (gpt-oss's), which reads it.
if [[ " ${SCRIPTS[*]} " == *" reasoning "* ]]; then
  PARALLEL=2 CHAT_TEMPLATE=harmony start_server reasoning
  run_script reasoning
  stop_server || FAILED+=("clean shutdown (reasoning server)")
fi

# Readiness and drain: drain.mjs starts its own servers (a fresh cache, so /health is seen saying
# "loading"), on the golden qwen2 file, slow enough that 8 streams outlast the probes of a drain.
if [[ " ${SCRIPTS[*]} " == *" drain "* ]]; then
  DRAIN_MODEL="${NPULLM_SHARED_DIR:-$ROOT/../shared}/golden/qwen2-gpt2.Q4_0.gguf"
  if [[ -f "$DRAIN_MODEL" ]]; then
    run_script drain NPULLM_DRAIN_MODEL="$DRAIN_MODEL" NPULLM_RUNTIME_FLAGS="${NPULLM_RUNTIME_FLAGS:-}"
  elif [[ "${NPULLM_REQUIRE_DATA:-0}" == "1" ]]; then
    FAILED+=("drain: $DRAIN_MODEL not found")
  else
    echo "run.sh: $DRAIN_MODEL not found; readiness and drain not tested"
  fi
fi

echo
echo "passed: ${PASSED[*]:-none}"
if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "FAILED: ${FAILED[*]}" >&2
  exit 1
fi
echo "all server tests passed"
