#!/usr/bin/env bash
# Installs what magic-check needs on Debian 12, skipping what is already there.
set -euo pipefail
# libopenblas0-openmp replaces the reference BLAS that Debian's LibTorch links by default
# (through update-alternatives): fp64 matrix products get several times faster.
# chromium: headless, it loads the --html report in the tests and screenshots it for docs/.
# python3-torch: the independent PyTorch oracle of tests/python (run with /usr/bin/python3).
packages=(build-essential cmake ninja-build libtorch-dev libgloo-dev libgtest-dev
          librapidcheck-dev nlohmann-json3-dev libcli11-dev libopenblas0-openmp chromium
          python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
