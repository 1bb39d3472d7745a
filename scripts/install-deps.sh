#!/usr/bin/env bash
# Installs what magic-check needs on Debian 12, skipping what is already there.
set -euo pipefail
# libopenblas0-openmp replaces the reference BLAS that Debian's LibTorch links by default
# (through update-alternatives): fp64 matrix products get several times faster. libblas-dev (which
# libtorch-dev pulls in too) links the attention's gemm loop to that BLAS (lib/model/batched_matmul.h).
# chromium: headless, it loads the --html report in the tests and screenshots it for docs/.
# python3-torch: the independent PyTorch oracle of tests/python (run with /usr/bin/python3).
# libicu-dev: Unicode classes and NFC for the BPE tokenizers (lib/text).
# libyaml-cpp-dev: YAML run configs (lib/core/config_file.h).
# libboost-dev: Boost.Beast and Asio (header-only) for the tracer's WebSocket server (lib/live).
# python3-websockets: the tracer's Python client example (docs/tracer.md), run by a test.
packages=(build-essential cmake ninja-build libtorch-dev libgloo-dev libgtest-dev
          librapidcheck-dev nlohmann-json3-dev libcli11-dev libopenblas0-openmp libblas-dev chromium
          python3-torch libicu-dev libyaml-cpp-dev libboost-dev python3-websockets)
# Node.js runs the tokenizer oracle of tests/js (an independent GPT-2 encoder from npm); a
# machine that has node and npm already (from any source) keeps them.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The test oracles' npm packages, at the versions package-lock.json pins.
js="$(dirname "$0")/../tests/js"
if [ ! -d "$js/node_modules" ]; then
  echo "install-deps: installing the npm packages of tests/js"
  npm ci --prefix "$js" --no-audit --no-fund --loglevel=error
fi
