#!/usr/bin/env bash
# Every test on a fresh Debian 12 machine: install what is missing, build everything, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default
cmake --build --preset default
ctest --preset default
