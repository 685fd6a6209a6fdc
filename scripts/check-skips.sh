#!/usr/bin/env bash
# After `ctest --test-dir BUILD`: prints how many tests skipped and why, from ctest's log. A skip is
# allowed only for a documented reason other than missing data: its output says "unsupported here:"
# (tests/test_util.h NPULLM_SKIP_UNSUPPORTED: a CPU feature this machine lacks). Any other skip (test
# data or a tool missing) fails, naming the test and its message. Usage: scripts/check-skips.sh [BUILD]
set -euo pipefail
build="${1:-build}"
log="$build/Testing/Temporary/LastTest.log"
[[ -f "$log" ]] || { echo "check-skips: no $log (run ctest first)" >&2; exit 1; }
# One line per skipped test: "allowed|refused<TAB>name<TAB>first skip message".
report="$(awk '
  /^[0-9]+\/[0-9]+ Test: / { name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); msg = ""; unsupported = 0; done = 0; next }
  /unsupported here:/ { unsupported = 1; if (msg == "") msg = $0; next }
  /needs test data:|missing test data:|needs readelf|^skip/ { if (msg == "") msg = $0; next }
  # GoogleTest skips (ctest: "Skip regular expression found"), exit 77 of the shell tests ("Test Skipped").
  /Skip regular expression found|^Test Skipped|[Ss]kip return code/ {
    if (!done) printf "%s\t%s\t%s\n", (unsupported ? "allowed" : "refused"), name, (msg == "" ? "(no message)" : msg)
    done = 1
  }
' "$log")"
skipped=0; refused=0
while IFS=$'\t' read -r kind name msg; do
  [[ -n "$kind" ]] || continue
  skipped=$((skipped + 1))
  if [[ "$kind" == allowed ]]; then
    echo "skipped (allowed): $name: ${msg#*unsupported here: }"
  else
    refused=$((refused + 1))
    echo "skipped (NOT allowed: data or tool missing): $name: $msg" >&2
  fi
done <<< "$report"
echo "check-skips: $skipped test(s) skipped, $((skipped - refused)) for a documented reason (unsupported here), $refused for missing data or tools"
[[ "$refused" -eq 0 ]]
