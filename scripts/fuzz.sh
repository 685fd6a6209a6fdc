#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan) into build-fuzz/ and runs each
# for SECONDS (default 20), one after another. Fails on any crash, sanitizer report, uncaught
# exception, leak, time-out (-timeout, a single input running too long) or allocation over the limit.
#   scripts/fuzz.sh [SECONDS]
#   FUZZ_TARGETS="fuzz_jinja fuzz_gguf" scripts/fuzz.sh 60     only those harnesses
#   FUZZ_ARGS="-runs=1000000" scripts/fuzz.sh 600               extra libFuzzer flags
# Seeds come from ../shared (or $NPULLM_SHARED_DIR) and the npm tokenizer.json files
# (scripts/fetch-test-tokenizers.sh), written by fuzz_make_seeds into build-fuzz/fuzz/seeds; blobs
# come from `build/npullm compile` when that tool is built. Each harness keeps its growing corpus in
# build-fuzz/fuzz/corpus/NAME and writes the input of any failure to build-fuzz/fuzz/artifacts/
# (replay: build-fuzz/fuzz/NAME FILE). See tests/fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
build=build-fuzz
shared="${NPULLM_SHARED_DIR:-$(cd .. && pwd)/shared}"

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DNPULLM_FUZZ=ON \
  -DNPULLM_BUILD_TESTS=OFF -DNPULLM_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j2 --target fuzz_all

out="$build/fuzz"
rm -rf "$out/seeds"
"$out/fuzz_make_seeds" "$shared" "${NPULLM_TEST_DATA:-build/test-data}" "$out/seeds"
if [ -x build/npullm ]; then
  for m in models/llama2c/stories260K.gguf golden/arch/gemma3-spm.Q4_K_M.gguf; do
    [ -f "$shared/$m" ] || continue
    build/npullm compile -m "$shared/$m" --out "$out/seeds/blob/$(basename "$m" .gguf)" --no-cache \
      --variants 64 --max-prompt-len 32 --prefill-chunk 16 -t 1 >/dev/null
  done
fi

# harness:seed folder:dictionary:largest input (the real chat templates run to 12 KB and render
# slowly; mutating their first 4 KB keeps the Jinja harness fast)
targets=(fuzz_gguf:gguf:gguf:65536 fuzz_model_load:model_load:gguf:65536 fuzz_blob:blob::65536
         fuzz_encoders:encoders::4096 fuzz_tokenizer_json:tokenizer_json:json:65536 fuzz_jinja:jinja:jinja:4096
         fuzz_openai_request:openai_request:json:16384)
mkdir -p "$out/artifacts"
failed=()
for t in "${targets[@]}"; do
  IFS=: read -r name seeds dict max_len <<<"$t"
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $name "* ]]; then continue; fi
  corpus="$out/corpus/$name"
  mkdir -p "$corpus"
  seed_dirs=()
  [ -d "$out/seeds/$seeds" ] && seed_dirs+=("$out/seeds/$seeds")
  [ -d "tests/fuzz/seeds/$seeds" ] && seed_dirs+=("tests/fuzz/seeds/$seeds")
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -max_len="$max_len"
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$name-")
  [ -n "$dict" ] && args+=(-dict="tests/fuzz/dict/$dict.dict")
  echo "fuzz.sh: $name for ${secs}s"
  # shellcheck disable=SC2086
  if ! "$out/$name" "${args[@]}" ${FUZZ_ARGS:-} "$corpus" "${seed_dirs[@]}" >"$out/$name.log" 2>&1; then
    failed+=("$name")
    tail -n 40 "$out/$name.log"
  fi
  grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^#[0-9]+.*DONE" "$out/$name.log" | tr '\n' ' ' || true
  echo
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $out/artifacts, logs in $out/NAME.log)" >&2
  exit 1
fi
echo "fuzz.sh: every harness ran ${secs}s without a failure"
