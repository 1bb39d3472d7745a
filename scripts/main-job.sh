#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build, and run the
# magic-run demo (real attribution on the bundled KJV Proverbs fixture).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default
cmake --build --preset default --target magic-run
./build/tools/magic-run --config fixtures/runs/demo.json --out out/demo
