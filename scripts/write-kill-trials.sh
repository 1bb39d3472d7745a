#!/usr/bin/env bash
# Kills during writes (issue 46): SIGKILL magic-run (one process; fixtures/runs/demo.json, 8 steps,
# a spill_dir, --out over an older run's files, --html, --dump, --trace-file) while it writes a
# spill checkpoint or REPLAY record, the dump or the --out folder (its hidden partial file or
# folder seen, then a random 0-200 polls later), the trace (its records file, written as the run
# goes, seen, then up to half a clean run's time later), or at a random moment of the run. After
# each kill nothing half-written may be taken for whole:
#   --out holds the older run's files or the new ones (sha256 of each, against a clean run's);
#   a kept spill folder resumes (--resume) to scores.safetensors bit-identical to the clean run's,
#     and a killed run with no folder left reruns to them;
#   the dump is absent (the rerun or resume then writes it: a rerun's equal to the clean run's, a
#     resumed run's whole) or whole: magic-compare accepts it against the clean run's;
#   each trace file ends in its `end` line or is recognisably cut (docs/tracer.md, "Files");
#   no partial file or folder is left once the resumed run has ended.
# Every choice (what to wait for, how long) flows from the seed, printed first.
# Usage: scripts/write-kill-trials.sh [--seed N] [BUILD_DIR (build)] [TRIALS (30)]   (env MAGIC_FAULT_SEED)
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=trials-common.sh
source "$root/scripts/trials-common.sh"
trial_args 30 "$@"
run="$build/tools/magic-run"
compare="$build/tools/magic-compare"
require_binaries "$run" "$compare"
work=$(mktemp -d "${TMPDIR:-/tmp}/write-kill-trials-XXXXXX")

# Each run in a folder of its own with its own copy of the config (spill_dir is relative to it) and
# relative paths, so that every run's command and identity are the same.
base=(--config run.json --training.steps 8 --training.spill_dir spill --top 3)
full=("${base[@]}" --out out --html --dump dump --trace-file trace)
prepare() { mkdir -p "$1/tmp" && sed "s#\"\.\./text/#\"$root/fixtures/text/#g" "$root/fixtures/runs/demo.json" >"$1/run.json"; }
# --out's files: checksums, but report.html (it holds the run's timings) only whole or not there.
sums() {
  (cd "$1" 2>/dev/null && sha256sum -- scores.safetensors scores.tsv run.json 2>/dev/null)
  [ -e "$1/report.html" ] && { tail -c 8 "$1/report.html" | grep -q '</html>' && echo "report whole" || echo "report cut"; }
}
partials() { find "$1" -name '*.partial*' 2>/dev/null; }

prepare "$work/clean"
prepare "$work/old"
start=$(date +%s.%N)
(cd "$work/clean" && TMPDIR="$work/clean" "$run" "${full[@]}" >log 2>&1) || { echo "clean run failed"; cat "$work/clean/log"; exit 1; }
# The random moments are drawn inside a clean run's time.
span=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "clean run: $span s"
(cd "$work/old" && TMPDIR="$work/old" "$run" "${base[@]}" --out out >log 2>&1) || { echo "old run failed"; exit 1; }
clean=$(sums "$work/clean/out")
old=$(sums "$work/old/out")
clean_scores=$(sha256sum <"$work/clean/out/scores.safetensors")
[ "$clean" != "$old" ] || { echo "write-kill-trials: the older run's files equal the new ones: nothing to tell apart"; exit 1; }

# What is being written, seen by its partial name (atomic_file.h, atomic_folder.h) or file.
kinds=(spill trace dump out random)
marker() { # kind folder: a glob that matches while that kind of write is in flight
  case $1 in
    spill) echo "$2/spill/magic-run-*/rank-0/*.partial.*" ;;
    trace) echo "$2/trace/records.jsonl" ;; # written as the run goes (docs/tracer.md, "Files")
    dump) echo "$2/.dump.partial-*" ;;
    out) echo "$2/.out.partial-*" ;;
  esac
}

passed=0
declare -A landed=() outcome=()
for ((t = 1; t <= trials; t++)); do
  kind=${kinds[$(((t - 1) % ${#kinds[@]}))]}
  d="$work/trial-$t"
  prepare "$d"
  cp -r "$work/old/out" "$d/out"
  lag=$((RANDOM % 200))
  moment=$(awk -v s="$span" -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.9 * s * r / 32768 }')
  (cd "$d" && exec env TMPDIR="$d/tmp" "$run" "${full[@]}" >log 2>&1) &
  pid=$!
  seen=""
  if [ "$kind" = random ]; then
    sleep "$moment"
  else
    glob=$(marker "$kind" "$d")
    while kill -0 "$pid" 2>/dev/null; do
      if compgen -G "$glob" >/dev/null; then seen=$kind; break; fi
    done
    if [ "$kind" = trace ]; then sleep "$(awk -v m="$moment" 'BEGIN { print m / 2 }')"; fi
    for ((i = 0; i < lag; i++)); do :; done
  fi
  # What the kill interrupted: the partial files and folders in flight at that moment.
  kill -9 "$pid" 2>/dev/null && killed=yes || killed=no
  wait "$pid" 2>/dev/null
  during=$(partials "$d" | sed -n -e 's#.*/spill/.*#spill#p' -e 's#.*/trace/.*#trace#p' -e 's#.*/\.dump\.partial.*#dump#p' \
    -e 's#.*/\.out\.partial.*#out#p' | sort -u | tr '\n' ' ')
  problems=()
  [ "$killed" = yes ] || problems+=("the run ended before the kill")
  now_out=$(sums "$d/out")
  if [ "$now_out" = "$old" ]; then out_state=old; elif [ "$now_out" = "$clean" ]; then out_state=new; else
    out_state=MIXED
    problems+=("--out holds neither run's files")
  fi
  # The dump: absent, or whole and accepted against the clean run's.
  dump_state=absent
  if [ -e "$d/dump" ]; then
    if "$compare" "$d/dump" "$work/clean/dump" >"$d/compare.log" 2>&1; then dump_state=whole; else
      dump_state=HALF
      problems+=("a dump magic-compare does not accept: $(tail -n 1 "$d/compare.log")")
    fi
  fi
  # The trace: each records file ends in its end line (whole) or is cut (the run was killed).
  trace_state=absent
  for f in "$d"/trace/*records.jsonl; do
    [ -e "$f" ] || continue
    if tail -n 1 "$f" | grep -q '"type": *"end"'; then trace_state=whole; else trace_state=cut; fi
  done
  # The spill folder: resumed (or rerun) to the clean run's scores, and then nothing partial left.
  # A dump that is absent is written by the rerun (which removes the killed run's hidden folder).
  if compgen -G "$d/spill/magic-run-*/manifest.json" >/dev/null; then how=--resume; else how=""; fi
  redump=()
  [ "$dump_state" = absent ] && redump=(--dump dump)
  (cd "$d" && TMPDIR="$d/tmp" "$run" "${base[@]}" --out out $how "${redump[@]}" >again.log 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ]; then
    problems+=("the ${how:-re}run after the kill exited $rc: $(tail -n 1 "$d/again.log")")
  elif [ "$(sha256sum <"$d/out/scores.safetensors")" != "$clean_scores" ]; then
    problems+=("the ${how:-re}run's scores differ from the clean run's")
  elif [ ${#redump[@]} -gt 0 ]; then
    # A resumed run records only the steps after its checkpoint: its dump must be whole (it reads),
    # a rerun's must equal the clean run's.
    against="$work/clean/dump"
    [ -n "$how" ] && against="$d/dump"
    "$compare" "$d/dump" "$against" >"$d/compare.log" 2>&1 ||
      problems+=("the ${how:-re}run's dump: $(grep -m1 -e 'error' -e 'FAIL' "$d/compare.log")")
  fi
  left=$(partials "$d" | grep -v "^$d/trace/")
  [ -z "$left" ] || problems+=("left: $left")
  [ "$seen" = trace ] && during="${during}trace"
  resume=${how:+resumed}
  resume=${resume:-rerun}
  key="$kind during=[${during% }] out=$out_state dump=$dump_state trace=$trace_state $resume"
  outcome[$key]=$((${outcome[$key]:-0} + 1))
  for k in $during; do landed[$k]=$((${landed[$k]:-0} + 1)); done
  if [ ${#problems[@]} -eq 0 ]; then
    verdict=ok
    passed=$((passed + 1))
    rm -rf "$d"
  else
    verdict="FAIL: ${problems[*]}"
  fi
  printf "trial %3d  kill %-6s (seen %-5s lag %3d): in flight [%s]; out %s, dump %s, trace %s, %s  %s\n" \
    "$t" "$kind" "${seen:--}" "$lag" "${during% }" "$out_state" "$dump_state" "$trace_state" "$resume" "$verdict"
done

for k in "${!outcome[@]}"; do echo "  ${outcome[$k]} x $k"; done | sort -k3
echo "write-kill-trials: $passed of $trials passed; kills that landed during a write: spill ${landed[spill]:-0}," \
  "trace ${landed[trace]:-0}, dump ${landed[dump]:-0}, out ${landed[out]:-0} (seed $seed)"
if [ "$passed" -eq "$trials" ]; then
  rm -rf "$work"
else
  echo "write-kill-trials: the failed trials' folders are kept in $work"
  exit 1
fi
