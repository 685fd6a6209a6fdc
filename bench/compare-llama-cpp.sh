#!/usr/bin/env bash
# Side-by-side speed: llama.cpp's llama-bench and `npullm bench` on the same GGUF files, the same
# thread count, back to back, file by file (the machine is shared: only ratios taken in one run
# mean anything).
#
#   bench/compare-llama-cpp.sh [-t THREADS] [-r REPS] [-p N] [-n N] [-o DIR] [MODEL.gguf ...]
#
# Without models it makes the five benchmark files of the Speed issue and one Q4_K_M file per newer
# family (Qwen3-0.6B, Gemma-3-1B, Phi-4-mini shapes: 0.5, 0.8 and 2.5 GB) with `npullm synth` in DIR
# (default /tmp/npullm-bench). llama-bench is built once into DIR from the llama.cpp source that
# the npm package node-llama-cpp@3.21.1 ships (a git bundle; no network access beyond npm).
# AMX is left out of that build: its AMX matmul crashes on this machine type (SIGSEGV in
# ggml_backend_amx_mul_mat), and the issue's reference figures are AVX-512 ones.
# Results: DIR/compare-<date>.md (a table) and the raw outputs beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=3 n_prompt=512 n_gen=128 dir=/tmp/npullm-bench
while getopts "t:r:p:n:o:" opt; do
  case $opt in
    t) threads=$OPTARG ;; r) reps=$OPTARG ;; p) n_prompt=$OPTARG ;; n) n_gen=$OPTARG ;; o) dir=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
mkdir -p "$dir"
npullm=build/npullm
[ -x "$npullm" ] || scripts/build.sh

llama_bench="$dir/llama.cpp/build/bin/llama-bench"
if [ ! -x "$llama_bench" ]; then
  (cd "$dir" && [ -d node_modules/node-llama-cpp ] || npm i --no-save --ignore-scripts node-llama-cpp@3.21.1 >/dev/null)
  [ -d "$dir/llama.cpp" ] || git clone -q "$dir/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$dir/llama.cpp"
  cmake -S "$dir/llama.cpp" -B "$dir/llama.cpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON \
    -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF >/dev/null
  cmake --build "$dir/llama.cpp/build" -j2 --target llama-bench >/dev/null
fi

models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  for spec in "tinyllama-1.1b Q4_0" "tinyllama-1.1b Q8_0" "tinyllama-1.1b Q4_K_M" "qwen2.5-0.5b Q8_0" "qwen2.5-0.5b Q4_K_M" \
              "qwen3-0.6b Q4_K_M" "gemma-3-1b Q4_K_M" "phi-4-mini Q4_K_M"; do
    set -- $spec
    f="$dir/$1-$2.gguf"
    [ -f "$f" ] || "$npullm" synth --preset "$1" --type "$2" -o "$f" >/dev/null
    models+=("$f")
  done
fi

out="$dir/compare-$(date +%Y%m%d-%H%M%S).md"
{
  echo "threads $threads, $reps repetitions, pp$n_prompt / tg$n_gen; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| model | llama.cpp pp | npullm pp | ratio | llama.cpp tg | npullm tg | ratio | npullm roofline | npullm RSS MiB |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$out"
for m in "${models[@]}"; do
  name=$(basename "$m" .gguf)
  "$llama_bench" -m "$m" -p "$n_prompt" -n "$n_gen" -t "$threads" -r "$reps" -o json >"$dir/$name.llama.json" 2>/dev/null
  "$npullm" bench -m "$m" -p "$n_prompt" -n "$n_gen" -t "$threads" -r "$reps" --json >"$dir/$name.npullm.json"
  python3 - "$dir/$name.llama.json" "$dir/$name.npullm.json" "$name" >>"$out" <<'EOF'
import json, sys
lc = json.load(open(sys.argv[1]))
us = json.load(open(sys.argv[2]))
lpp = next(r["avg_ts"] for r in lc if r["n_prompt"] > 0)
ltg = next(r["avg_ts"] for r in lc if r["n_gen"] > 0)
upp, utg = us["pp"]["tps_mean"], us["tg"]["tps_mean"]
print(f"| {sys.argv[3]} | {lpp:.1f} | {upp:.1f} | {upp / lpp:.2f} | {ltg:.1f} | {utg:.1f} | {utg / ltg:.2f} "
      f"| {100 * us['roofline_fraction']:.0f} % of {us['bandwidth_gbps']:.1f} GB/s | {us['peak_rss_bytes'] / 2**20:.0f} |")
EOF
  tail -1 "$out"
done
echo "table: $out"
