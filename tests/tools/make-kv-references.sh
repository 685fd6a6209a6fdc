#!/usr/bin/env bash
# Writes tests/data/golden-kv/<model>.json: llama.cpp's own figures with a Q8_0 K and V cache on each
# golden model of ../shared/golden (and golden/arch), the outside reference that the Q8_0 K/V golden
# tests (tests/npuw/test_golden_kv.cpp) hold npullm to. Only the figures are committed, not logits.
#
#   tests/tools/make-kv-references.sh [LLAMA_CPP_SOURCE] [LLAMA_CPP_BUILD]
#
# LLAMA_CPP_SOURCE defaults to /tmp/npullm-bench/llama.cpp (the tree bench/compare-llama-cpp.sh
# clones), LLAMA_CPP_BUILD to its build-noamx (cmake Release, BUILD_SHARED_LIBS, GGML_NATIVE=OFF with
# AVX-512, OpenMP, llamafile sgemm). tests/tools/llama_kv_reference.cpp is compiled against it.
# llama.cpp refuses a quantised V cache without flash attention, so the Q8_0 run has flash_attn on;
# the F32 runs with flash attention off and on are recorded beside it as controls (off reproduces the
# golden JSON's kl_llama).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-/tmp/npullm-bench/llama.cpp}
bld=${2:-$src/build-noamx}
shared=${NPULLM_SHARED_DIR:-../shared}
exe=$(mktemp -d)/llama_kv_reference
g++ -std=c++20 -O2 -I"$src/include" -I"$src/ggml/include" tests/tools/llama_kv_reference.cpp \
  -L"$bld/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$bld/bin" -o "$exe"
commit=$(git -C "$src" rev-parse HEAD)
build_desc=$(grep -E '^(CMAKE_BUILD_TYPE|GGML_NATIVE|GGML_AVX512|GGML_AVX512_VNNI|GGML_OPENMP|GGML_LLAMAFILE|BUILD_SHARED_LIBS):' "$bld/CMakeCache.txt" | tr '\n' ' ')
mkdir -p tests/data/golden-kv
for json in "$shared"/golden/*.json "$shared"/golden/arch/*.json; do
  name=$(basename "$json" .json)
  gguf="${json%.json}.gguf"
  [ -f "$gguf" ] || continue  # llama-2-tiny-random: its model lives elsewhere and it is F16, no ideal
  q8=$("$exe" "$gguf" "$json" q8_0 1)
  f32fa=$("$exe" "$gguf" "$json" f32 1)
  f32=$("$exe" "$gguf" "$json" f32 0)
  python3 - "$json" "$name" "$commit" "$build_desc" "$q8" "$f32fa" "$f32" >"tests/data/golden-kv/$name.json" <<'PY'
import json, sys
golden, name, commit, build, q8, f32fa, f32 = sys.argv[1:]
g = json.load(open(golden))
q8, f32fa, f32 = json.loads(q8), json.loads(f32fa), json.loads(f32)
settings = dict(g["settings"], type_k="q8_0", type_v="q8_0", flash_attn=True)
out = {
  "model": name,
  "golden_json": golden.split("golden/", 1)[1],
  "what": "llama.cpp's own logits with a Q8_0 K and V cache (flash attention on: llama.cpp refuses a "
          "quantised V cache without it) against the golden's ideal (dequantised-F32) and native logits; "
          "metric mean KL(softmax(ref) || softmax(llama.cpp)) over the 64 positions, top-1 agreement with the ideal",
  "reference": {
    "implementation": "llama.cpp",
    "commit": commit,
    "build": build.strip(),
    "program": "tests/tools/llama_kv_reference.cpp (public llama.h), run by tests/tools/make-kv-references.sh",
    "command": f"llama_kv_reference {name}.gguf {name}.json q8_0 1",
  },
  "settings": settings,
  "q8_0": {k: q8[k] for k in ("kl_ideal", "kl_native", "top1_ideal", "top1_ideal_count")},
  "controls": {
    "f32_flash_attn": {k: f32fa[k] for k in ("kl_ideal", "kl_native", "top1_ideal", "top1_ideal_count")},
    "f32_no_flash_attn": {k: f32[k] for k in ("kl_ideal", "kl_native", "top1_ideal", "top1_ideal_count")},
    "golden_kl_llama": g["acceptance"]["kl_llama"],
  },
  "n_tokens": q8["n_tokens"],
}
print(json.dumps(out, indent=1))
PY
  echo "$name: Q8_0 K/V KL(ideal) $(python3 -c "import json;print(json.load(open('tests/data/golden-kv/$name.json'))['q8_0'])")"
done
