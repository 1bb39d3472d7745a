#!/usr/bin/env bash
# Full disks (issue 46): magic-run (fixtures/runs/demo.json, 4 steps, one process) under
# RLIMIT_FSIZE with SIGXFSZ ignored, so that a write past the limit fails with EFBIG as on a full
# disk, for each kind of write: the run folder's manifest, a checkpoint, a REPLAY record (the limit
# lets the smaller checkpoints through), a dump, a trace file, the score files and the report.
# Each must exit 2 with one error line naming the file, leave nothing half-written, and then, with
# the limit lifted, resume (--resume, the spill folder) or rerun to the scores of a run that never
# failed (bit-identical). Prints one line per case; exits 1 if any failed.
# Usage: scripts/full-disk-cases.sh [BUILD_DIR (build)]   (or: ctest -R full_disk_cases)
set -u

build=$(cd "${1:-build}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
run="$build/tools/magic-run"
[ -x "$run" ] || { echo "full-disk-cases: no $run: build first" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/full-disk-cases-XXXXXX")
trap 'cd / && rm -rf "$work"' EXIT
cd "$work" || exit 2
export TMPDIR="$work"
sed "s#\"\.\./text/#\"$root/fixtures/text/#g" "$root/fixtures/runs/demo.json" >run.json
base=(--config run.json --training.steps 4 --top 100) # --top 100: report.html past scores.tsv in size
kib() { echo $((($(stat -c %s "$1") + 1023) / 1024)); }

# A run that never failed: its scores, and the sizes the limits are set between.
"$run" "${base[@]}" --training.spill_dir clean-spill --keep-checkpoints --out clean --html >clean.log 2>&1 ||
  { cat clean.log; exit 1; }
clean=$(sha256sum <clean/scores.safetensors)
checkpoint=$(kib "$(ls clean-spill/magic-run-*/rank-0/step-*.safetensors | head -1)")
record=$(kib "$(ls clean-spill/magic-run-*/rank-0/replay-*.safetensors | head -1)")
scores=$(for f in clean/scores.safetensors clean/scores.tsv clean/run.json; do kib "$f"; done | sort -n | tail -1)
report=$(kib clean/report.html)
[ "$record" -gt "$checkpoint" ] && [ "$report" -gt "$scores" ] || { echo "full-disk-cases: no limit tells the writes apart"; exit 1; }

failed=0
# case NAME LIMIT_KIB PATH_FRAGMENT AFTER ARGS...: the run with the limit, then AFTER (resume|rerun).
case_() {
  local name=$1 limit=$2 fragment=$3 after=$4
  shift 4
  local problems=() out last lines
  out=$(trap '' XFSZ; ulimit -f "$limit"; "$run" "${base[@]}" "$@" 2>&1)
  local code=$?
  last=$(grep -m1 '^magic-run: error: ' <<<"$out")
  lines=$(grep -c '^magic-run: error: ' <<<"$out")
  [ "$code" -eq 2 ] || problems+=("exit $code, not 2")
  [ "$lines" -eq 1 ] || problems+=("$lines error lines")
  [[ "$last" == "magic-run: error: "*"$fragment"* ]] || problems+=("the error names no $fragment")
  # Only a run folder that holds work is kept (to resume); any other is no run's.
  if [ "$after" = resume ]; then
    compgen -G "spill/magic-run-*/rank-0/step-*.safetensors" >/dev/null || problems+=("no checkpoint kept to resume")
  elif [ -e spill ] && [ -n "$(find spill -mindepth 1)" ]; then
    problems+=("spill holds $(find spill -mindepth 1 | tr '\n' ' ')")
  fi
  local half
  half=$(find . -name '*.partial*' | grep -v '^./clean')
  [ -z "$half" ] || problems+=("left: $half")
  [ ! -e trace ] && [ ! -e dump ] || problems+=("a failed trace or dump folder is left: $(find trace dump 2>/dev/null | tr '\n' ' ')")
  [ ! -e out/report.html ] || problems+=("out/report.html is there")
  local how=() again
  [ "$after" = resume ] && how=(--resume)
  again=$("$run" "${base[@]}" "$@" "${how[@]}" 2>&1)
  local again_code=$?
  [ "$again_code" -eq 0 ] || problems+=("the $after exited $again_code: $(tail -n 1 <<<"$again")")
  if [ -e out/scores.safetensors ]; then
    [ "$(sha256sum <out/scores.safetensors)" = "$clean" ] || problems+=("the $after's scores differ")
  fi
  [ "$after" != resume ] || grep -q "resuming: " <<<"$again" || problems+=("the resume did not resume")
  [ -z "$(find spill -mindepth 1 2>/dev/null)" ] || problems+=("spill holds $(find spill -mindepth 1 | head -3)")
  local verdict=ok
  [ ${#problems[@]} -eq 0 ] || { verdict="FAIL: ${problems[*]}"; failed=$((failed + 1)); }
  echo "full-disk $name (ulimit -f $limit): exit $code: $last"
  echo "  then $after: exit $again_code: $(grep -m1 -e '^resuming: ' -e '^wrote ' -e '^dump: ' -e '^trace' <<<"$again")  $verdict"
  rm -rf out spill dump trace
}

case_ manifest 0 /manifest.json rerun --training.spill_dir spill --out out
case_ checkpoint 8 rank-0/step-0.safetensors rerun --training.spill_dir spill --out out
case_ record "$checkpoint" rank-0/replay- resume --training.spill_dir spill --out out
case_ dump 0 dump/ rerun --dump dump
case_ trace 0 trace/ rerun --trace-file trace
case_ scores 0 out/ rerun --out out
case_ report "$scores" out/report.html rerun --out out --html

[ "$failed" -eq 0 ] && echo "full-disk-cases: 7 of 7 passed" || { echo "full-disk-cases: $failed of 7 failed"; exit 1; }
