#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what is missing, build, check the headline
# three-pool layout (10 Gloo ranks on loopback) against the single-process reference, then run
# the magic-run attribution demo on the bundled KJV Proverbs fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default
cmake --build --preset default --target magic-check magic-run
mkdir -p out
./build/tools/magic-check --topology n_ci=4,n_per_block=2 --json out/three-pool-check.json
./build/tools/magic-run --config fixtures/runs/demo.json --out out/demo
