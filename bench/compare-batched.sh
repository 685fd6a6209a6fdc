#!/usr/bin/env bash
# Side-by-side parallel decode: llama.cpp's llama-batched-bench and `npullm bench --parallel N` on
# the same GGUF file and thread count, back to back (only ratios taken in one run mean anything).
#
#   bench/compare-batched.sh [-t THREADS] [-r REPS] [-n N_GEN] [-p PROMPT] [-l "4 8"] [-o DIR] [MODEL.gguf]
#
# Without a model it makes the TinyLlama-1.1B-shape Q4_0 file with `npullm synth` in DIR (default
# /tmp/npullm-bench). llama.cpp is built into DIR from the source node-llama-cpp@3.21.1 ships (a git
# bundle; nothing beyond npm is fetched) the way its users build it: GGML_NATIVE=ON. If that build
# crashes on this machine (its AMX path has), a second build without AMX is used and the table
# says so. Both tools decode N sequences of PROMPT prompt tokens each for N_GEN steps; llama.cpp's
# figure is S_TG (generated tokens / generation time), npullm's tg_tps_total (the same quotient).
# Results: DIR/batched-<date>.md and the raw outputs beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=3 n_gen=128 prompt=32 levels="4 8" dir=/tmp/npullm-bench
while getopts "t:r:n:p:l:o:" opt; do
  case $opt in
    t) threads=$OPTARG ;; r) reps=$OPTARG ;; n) n_gen=$OPTARG ;; p) prompt=$OPTARG ;; l) levels=$OPTARG ;; o) dir=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
mkdir -p "$dir"
npullm=build/npullm
[ -x "$npullm" ] || scripts/build.sh

# build_llama NAME EXTRA_CMAKE_FLAGS...: llama-batched-bench into $dir/llama.cpp/build-NAME
build_llama() {
  local name=$1
  shift
  local b="$dir/llama.cpp/build-$name"
  if [ ! -x "$b/bin/llama-batched-bench" ]; then
    (cd "$dir" && [ -d node_modules/node-llama-cpp ] || npm i --no-save --ignore-scripts node-llama-cpp@3.21.1 >/dev/null)
    [ -d "$dir/llama.cpp" ] || git clone -q "$dir/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$dir/llama.cpp"
    cmake -S "$dir/llama.cpp" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF "$@" >/dev/null
    cmake --build "$b" -j2 --target llama-batched-bench >/dev/null
  fi
  echo "$b/bin/llama-batched-bench"
}

model=${1:-}
if [ -z "$model" ]; then
  model="$dir/tinyllama-1.1b-Q4_0.gguf"
  [ -f "$model" ] || "$npullm" synth --preset tinyllama-1.1b --type Q4_0 -o "$model" >/dev/null
fi
name=$(basename "$model" .gguf)
npl=$(echo "$levels" | tr ' ' ',')
ctx=$(( (prompt + n_gen + 16) * $(echo "$levels" | tr ' ' '\n' | sort -n | tail -1) ))

native=$(build_llama native -DGGML_NATIVE=ON)
build="native (GGML_NATIVE=ON)"
run_llama() { "$1" -m "$model" -c "$ctx" -b 2048 -ub 512 -npp "$prompt" -ntg "$n_gen" -npl "$npl" -t "$threads" -tb "$threads" --output-format jsonl; }
if ! run_llama "$native" >"$dir/$name.batched.native.jsonl" 2>"$dir/$name.batched.native.err"; then
  noamx=$(build_llama noamx -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON \
    -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF)
  echo "compare-batched: the native llama.cpp build failed here (see $dir/$name.batched.native.err); using the AVX-512 build without AMX" >&2
  build="AVX-512 without AMX (the native build crashed)"
  native=$noamx
fi

out="$dir/batched-$(date +%Y%m%d-%H%M%S).md"
{
  echo "$name: threads $threads, $reps rounds, $prompt prompt tokens + $n_gen generated per sequence; llama.cpp $build;"
  echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| round | N | llama.cpp S_TG t/s | npullm tg total t/s | ratio | npullm batch-1 tg | npullm N / batch-1 |"
  echo "|---|---|---|---|---|---|---|"
} >"$out"
for r in $(seq 1 "$reps"); do
  run_llama "$native" >"$dir/$name.batched.$r.jsonl" 2>/dev/null
  for n in $levels; do
    "$npullm" bench -m "$model" -p 0 -n "$n_gen" -t "$threads" -r 1 --ttft-prompt 0 --parallel "$n" --parallel-prompt "$prompt" --json \
      >"$dir/$name.npullm.p$n.$r.json"
    python3 - "$dir/$name.batched.$r.jsonl" "$dir/$name.npullm.p$n.$r.json" "$n" "$r" >>"$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
n = int(sys.argv[3])
lc = next(x["speed_tg"] for x in rows if x.get("pl") == n)
us = json.load(open(sys.argv[2]))
tot, b1 = us["parallel"]["tg_tps_total"], us["tg"]["tps_mean"]
print(f"| {sys.argv[4]} | {n} | {lc:.1f} | {tot:.1f} | {tot / lc:.2f} | {b1:.1f} | {tot / b1:.2f} |")
PY
    tail -1 "$out"
  done
done
echo "table: $out"
