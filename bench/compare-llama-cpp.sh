#!/usr/bin/env bash
# Side-by-side speed: llama.cpp's llama-bench and `npullm bench` on the same GGUF files, the same
# thread count, back to back, file by file (the machine is shared: only ratios taken in one run
# mean anything).
#
#   bench/compare-llama-cpp.sh [-t THREADS] [-r REPS] [-p N] [-n N] [-d DEPTH] [-b BUSY] [-k KV] [-o DIR] [MODEL.gguf ...]
#   bench/compare-llama-cpp.sh -D DEPTHS [-t THREADS] [-r REPS] [-n N] [-k KV] [-o DIR] [MODEL.gguf ...]
#
# Without models it makes the five benchmark files of the speed issues, one Q4_K_M file per
# newer family (Qwen3-0.6B, Gemma-3-1B, Phi-4-mini shapes) and the two mixtures of experts
# (Qwen3-30B-A3B Q4_K_M, 17.3 GiB; gpt-oss-20b MXFP4_MOE, 11.3 GiB) with `npullm synth` in DIR (default
# /tmp/npullm-bench). llama.cpp comes from the source the npm package node-llama-cpp@3.21.1 ships
# (a git bundle, 80fb11a; no network beyond npm) and is built into DIR:
#  - build-native: GGML_NATIVE=ON, the way its users build it. Every llama.cpp figure comes from it
#    where it runs;
#  - build-noamx, made only once a native run fails: the AVX-512 / VNNI / BF16 flags without AMX.
#    On the Xeons the native build's AMX matmul crashes in prefill (SIGSEGV in
#    ggml_backend_amx_mul_mat), so where a native run fails, that test is taken with this build
#    instead and the table marks it with "*".
# Per file: pp (N prompt tokens), tg (N generated) at depth 0 and at depth DEPTH (after DEPTH tokens
# of context, llama-bench -d / npullm bench --depth); npullm's d DEPTH / d32 ratio comes from one
# `npullm bench --depth 32,DEPTH`, whose repetitions run the two depths back to back (each pair's
# ratio, median over pairs: a shared machine's memory speed moves within minutes); and, with
# -b BUSY > 0, tg again with BUSY busy-looping processes beside each program (started and killed
# by this script, the same for both). With -b, stories260K (../shared) is also timed with 1 and 2 threads under that load.
# -k KV: the K/V cache type of every run of both programs (npullm --kv-type, llama-bench -ctk/-ctv;
# default f16; q8_0 halves the bytes attention reads at depth); the raw outputs then carry it in their names.
# npullm's roofline column: tg x weight bytes per token / the read bandwidth `npullm bench`
# measured in the same run (cli/bandwidth.cpp).
# -D DEPTHS (a comma list, e.g. 4096,16384,30000): long context only (issue 48). Per file, tg of N
# tokens after 0 and each depth's tokens of context: llama.cpp with flash attention off and on (one
# llama-bench run, -fa off,on; the ratio is taken against its faster), npullm from one `npullm bench
# --depth 0,DEPTHS` (with its bytes-bound line, bench's bytes_line_tps). Without models: the
# Qwen2.5-0.5B-shape Q8_0 file.
# Results: DIR/compare-<date>.md (a table) and the raw outputs beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=3 n_prompt=512 n_gen=128 depth=1024 busy=0 kv=f16 dir=/tmp/npullm-bench depths=
while getopts "t:r:p:n:d:b:k:o:D:" opt; do
  case $opt in
    t) threads=$OPTARG ;; r) reps=$OPTARG ;; p) n_prompt=$OPTARG ;; n) n_gen=$OPTARG ;; d) depth=$OPTARG ;;
    b) busy=$OPTARG ;; k) kv=$OPTARG ;; o) dir=$OPTARG ;; D) depths=$OPTARG ;; *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
mkdir -p "$dir"
npullm=build/npullm
[ -x "$npullm" ] || scripts/build.sh

src="$dir/llama.cpp"
if [ ! -d "$src" ]; then
  (cd "$dir" && [ -d node_modules/node-llama-cpp ] || npm i --no-save --ignore-scripts node-llama-cpp@3.21.1 >/dev/null)
  git clone -q "$dir/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$src"
fi
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF)
build_llama() {  # name, cmake flags...
  local name=$1
  shift
  if [ ! -x "$src/build-$name/bin/llama-bench" ]; then
    cmake -S "$src" -B "$src/build-$name" "${common[@]}" "$@" >/dev/null
    cmake --build "$src/build-$name" -j2 --target llama-bench >/dev/null
  fi
}
build_llama native -DGGML_NATIVE=ON
build_noamx() {  # only once a native run has failed (CPUs without AMX never need it)
  build_llama noamx -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON \
    -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF
}

models=("$@")
if [ ${#models[@]} -eq 0 ] && [ -z "$depths" ]; then
  for spec in "tinyllama-1.1b Q4_0" "tinyllama-1.1b Q8_0" "tinyllama-1.1b Q4_K_M" "qwen2.5-0.5b Q8_0" "qwen2.5-0.5b Q4_K_M" \
              "qwen3-0.6b Q4_K_M" "gemma-3-1b Q4_K_M" "phi-4-mini Q4_K_M" "qwen3-30b-a3b Q4_K_M" "gpt-oss-20b MXFP4_MOE"; do
    set -- $spec
    f="$dir/$1-$2.gguf"
    [ -f "$f" ] || "$npullm" synth --preset "$1" --type "$2" -o "$f" >/dev/null
    models+=("$f")
  done
fi

moe_notes=()
busy_pids=()
start_busy() {
  for ((i = 0; i < busy; i++)); do
    bash -c 'while :; do :; done' &
    busy_pids+=($!)
  done
}
stop_busy() {
  [ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null || true
  wait "${busy_pids[@]}" 2>/dev/null || true
  busy_pids=()
}
trap stop_busy EXIT

# llama-bench with the native build, else the no-AMX one, its JSON into OUT: prints the mark ("" or "*").
llama_run() {  # out.json, llama-bench args...
  local out=$1
  shift
  if "$src/build-native/bin/llama-bench" "$@" -ctk "$kv" -ctv "$kv" -t "$threads" -r "$reps" -o json >"$out" 2>"$out.err"; then
    echo ""
  else
    build_noamx >&2
    "$src/build-noamx/bin/llama-bench" "$@" -ctk "$kv" -ctv "$kv" -t "$threads" -r "$reps" -o json >"$out" 2>>"$out.err"
    echo "*"
  fi
}
# One test's rate: prints "t/s mark".
llama_tps() {  # out.json, llama-bench args...
  local mark
  mark=$(llama_run "$@")
  python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))[0]["avg_ts"], sys.argv[2])' "$1" "$mark"
}
npullm_json() {  # out.json, threads, npullm bench args...
  local out=$1 t=$2
  shift 2
  "$npullm" bench "$@" --kv-type "$kv" -t "$t" -r "$reps" --json >"$out"
}
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[3] % eval(sys.argv[2], {}, {"d": d}))' "$@"; }  # file expr format

if [ -n "$depths" ]; then
  [ ${#models[@]} -gt 0 ] || models=("$dir/qwen2.5-0.5b-Q8_0.gguf")
  for m in "${models[@]}"; do
    [ -f "$m" ] || "$npullm" synth --preset qwen2.5-0.5b --type Q8_0 -o "$m" >/dev/null
  done
  out="$dir/compare-depth-$(date +%Y%m%d-%H%M%S).md"
  {
    echo "threads $threads, $reps repetitions, tg$n_gen after each depth, K/V $kv; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "llama.cpp 80fb11a built with GGML_NATIVE=ON (* = its AVX-512 build without AMX); ratio: npullm / llama.cpp's faster"
    echo
    echo "| model | depth | llama.cpp fa off | llama.cpp fa on | npullm | ratio | npullm's bytes-bound line | npullm / line |"
    echo "|---|---|---|---|---|---|---|---|"
  } >"$out"
  for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    [ "$kv" = f16 ] || name+=".kv-$kv"
    lj="$dir/$name.llama.depths.json"
    mark=$(llama_run "$lj" -m "$m" -p 0 -n "$n_gen" -d "0,$depths" -fa off,on)
    npullm_json "$dir/$name.npullm.depths.json" "$threads" -m "$m" -p 0 -n "$n_gen" --depth "0,$depths"
    python3 - "$lj" "$dir/$name.npullm.depths.json" "$name" "$mark" >>"$out" <<'PY'
import json, sys
llama, ours, name, mark = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
tps = {(e["n_depth"], int(e["flash_attn"])): e["avg_ts"] for e in llama}
for d in ours["tg_depths"]:
    depth = d["depth"]
    off, on = tps[(depth, 0)], tps[(depth, 1)]
    line = d.get("bytes_line_tps")
    tail = f"{line:.1f} | {100 * d['tps_mean'] / line:.0f} %" if line else "- | -"
    print(f"| {name} | {depth} | {off:.1f}{mark} | {on:.1f}{mark} | {d['tps_mean']:.1f} | {d['tps_mean'] / max(off, on):.2f} | {tail} |")
PY
  done
  cat "$out"
  echo "table: $out"
  exit 0
fi
out="$dir/compare-$(date +%Y%m%d-%H%M%S).md"
{
  echo "threads $threads, $reps repetitions, pp$n_prompt / tg$n_gen, depth $depth, busy $busy, K/V $kv; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "llama.cpp 80fb11a built with GGML_NATIVE=ON; * = that test crashed in the native build and was taken with its AVX-512 build without AMX"
  echo
  head="| model | pp llama.cpp | pp npullm | ratio | tg llama.cpp | tg npullm | ratio | npullm roofline | tg@d$depth llama.cpp | tg@d$depth npullm | ratio | npullm d$depth / d32 (pairs; interleaved) |"
  sep="|---|---|---|---|---|---|---|---|---|---|---|---|"
  if [ "$busy" -gt 0 ]; then head+=" tg busy llama.cpp | tg busy npullm | ratio |"; sep+="---|---|---|"; fi
  echo "$head"
  echo "$sep"
} >"$out"
for m in "${models[@]}"; do
  name=$(basename "$m" .gguf)
  [ "$kv" = f16 ] || name+=".kv-$kv"
  read -r lpp lpp_mark < <(llama_tps "$dir/$name.llama.pp.json" -m "$m" -p "$n_prompt" -n 0)
  read -r ltg ltg_mark < <(llama_tps "$dir/$name.llama.tg.json" -m "$m" -p 0 -n "$n_gen")
  read -r ltd ltd_mark < <(llama_tps "$dir/$name.llama.tgd.json" -m "$m" -p 0 -n "$n_gen" -d "$depth")
  npullm_json "$dir/$name.npullm.json" "$threads" -m "$m" -p "$n_prompt" -n "$n_gen"
  npullm_json "$dir/$name.npullm.d.json" "$threads" -m "$m" -p 0 -n "$n_gen" --depth "32,$depth"
  upp=$(field "$dir/$name.npullm.json" 'd["pp"]["tps_mean"]' %.1f)
  utg=$(field "$dir/$name.npullm.json" 'd["tg"]["tps_mean"]' %.1f)
  roof=$(field "$dir/$name.npullm.json" '(100 * d["roofline_fraction"], d["bandwidth_gbps"])' '%.0f %% of %.1f GB/s')
  utd=$(field "$dir/$name.npullm.d.json" 'd["tg_depths"][1]["tps_mean"]' %.1f)
  dratio=$(field "$dir/$name.npullm.d.json" '100 * d["tg_depths"][1]["ratio_to_first"]' '%.1f %%')
  dratio+="; $(field "$dir/$name.npullm.d.json" '100 * d["tg_depths"][1]["interleaved_ratio_to_first"]' '%.1f %%')"
  row="| $name | $lpp$lpp_mark | $upp | $(python3 -c "print(f'{$upp / $lpp:.2f}')") | $ltg$ltg_mark | $utg | $(python3 -c "print(f'{$utg / $ltg:.2f}')")"
  row+=" | $roof | $ltd$ltd_mark | $utd | $(python3 -c "print(f'{$utd / $ltd:.2f}')") | $dratio |"
  if [ "$busy" -gt 0 ]; then
    start_busy
    read -r lbusy lbusy_mark < <(llama_tps "$dir/$name.llama.busy.json" -m "$m" -p 0 -n "$n_gen")
    npullm_json "$dir/$name.npullm.busy.json" "$threads" -m "$m" -p 0 -n "$n_gen"
    stop_busy
    ubusy=$(field "$dir/$name.npullm.busy.json" 'd["tg"]["tps_mean"]' %.1f)
    row+=" $lbusy$lbusy_mark | $ubusy | $(python3 -c "print(f'{$ubusy / $lbusy:.2f}')") |"
  fi
  echo "$row" >>"$out"
  tail -1 "$out"
  # A mixture of experts: the decode roofline counts its active bytes only (bench's
  # weight_bytes_per_token); also its start-up, cold (an empty cache: blobs compiled, experts
  # repacked) and warm, and peak RSS against file + K/V.
  if [ "$(field "$dir/$name.npullm.json" 'd.get("expert_slabs_per_token", 0) > 0' %s)" = True ]; then
    cache="$dir/cache-$name"
    rm -rf "$cache"
    t0=$(date +%s.%N); "$npullm" run -m "$m" --tokens 1 -n 1 -t "$threads" --cache-dir "$cache" >/dev/null 2>&1; t1=$(date +%s.%N)
    "$npullm" run -m "$m" --tokens 1 -n 1 -t "$threads" --cache-dir "$cache" >/dev/null 2>&1; t2=$(date +%s.%N)
    rm -rf "$cache"
    moe_notes+=("$name: cold start $(python3 -c "print(f'{$t1 - $t0:.1f}')") s, warm $(python3 -c "print(f'{$t2 - $t1:.1f}')") s; $(field "$dir/$name.npullm.json" \
      '(d["peak_rss_bytes"] / 2**20, '"$(stat -c %s "$m")"' / 2**20, d["kv"]["bytes"] / 2**20, d["expert_slabs_per_token"], d["expert_bytes_per_token"] / 2**20)' \
      'peak RSS %.0f MiB (file %.0f MiB + K/V %.0f MiB); a decoded token read %.0f expert slabs, %.0f MiB')")
  fi
done
for note in "${moe_notes[@]}"; do echo "$note" | tee -a "$out"; done

stories="${NPULLM_SHARED_DIR:-$(cd .. && pwd)/shared}/models/llama2c/stories260K.gguf"
if [ "$busy" -gt 0 ] && [ -f "$stories" ]; then
  # Four pairs, the order alternating (1 then THREADS, THREADS then 1, ...), each run 6 x 448 tokens:
  # a run of 256 tokens lasts ~18 ms, shorter than the scheduler's slices beside a busy process, and
  # single such runs differed by up to 30 % either way for the same code.
  start_busy
  for pair in 1 2 3 4; do
    if ((pair % 2)); then order="1 $threads"; else order="$threads 1"; fi
    for t in $order; do
      "$npullm" bench -m "$stories" -p 0 -n 448 -r 6 -t "$t" --json >"$dir/stories.t$t.busy.$pair.json"
    done
  done
  stop_busy
  python3 - "$dir" "$threads" "$busy" >>"$out" <<'PY'
import json, statistics, sys
d, t, busy = sys.argv[1], sys.argv[2], sys.argv[3]
tps = lambda n, p: json.load(open(f"{d}/stories.t{n}.busy.{p}.json"))["tg"]["tps_mean"]
one = [tps(1, p) for p in range(1, 5)]
many = [tps(t, p) for p in range(1, 5)]
sync = json.load(open(f"{d}/stories.t{t}.busy.1.json"))["sync_points_per_token"]
print(f"\nstories260K tg448 beside {busy} busy process(es), 4 pairs: median {statistics.median(one):.0f} t/s with 1 thread, "
      f"{statistics.median(many):.0f} with {t} ({t} / 1 thread by pair: {', '.join(f'{b / a:.2f}' for a, b in zip(one, many))}; "
      f"{sync:.0f} stages per token on several threads)")
PY
  tail -1 "$out"
fi
echo "table: $out"
