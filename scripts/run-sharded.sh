#!/usr/bin/env bash
# Runs a GoogleTest binary as N shards side by side (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX; each
# test runs in exactly one shard), each shard's output to a file printed when all have ended; then
# one summary line per shard. Exits 1 if any shard failed, naming it and its failed tests.
#   scripts/run-sharded.sh N COMMAND [ARGS...]
set -uo pipefail
n=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=()
for ((i = 0; i < n; i++)); do
  GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i "$@" >"$dir/shard$i.log" 2>&1 &
  pids+=($!)
done
rcs=()
for ((i = 0; i < n; i++)); do
  wait "${pids[$i]}"
  rcs+=($?)
done
rc=0
for ((i = 0; i < n; i++)); do
  echo "===== shard $i of $n (exit ${rcs[$i]}) ====="
  cat "$dir/shard$i.log"
done
for ((i = 0; i < n; i++)); do
  summary=$(grep -E '^\[==========\] [0-9]+ tests? from .* ran|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [0-9]' "$dir/shard$i.log" | tr '\n' ' ')
  echo "run-sharded: shard $i of $n: exit ${rcs[$i]}: ${summary:-no GoogleTest summary (crashed?)}"
  if [[ "${rcs[$i]}" -ne 0 ]]; then
    rc=1
    grep -E '^\[  FAILED  \] [A-Za-z_]' "$dir/shard$i.log" | sort -u | sed "s/^/run-sharded: shard $i: /" >&2
    # A shard that died (a sanitizer's abort, a signal) names no failure: the test it was running.
    grep -E '^\[ RUN      \]' "$dir/shard$i.log" | tail -1 | sed "s/^/run-sharded: shard $i: last started: /" >&2
    echo "run-sharded: shard $i of $n failed (exit ${rcs[$i]}): $*" >&2
  fi
done
exit $rc
