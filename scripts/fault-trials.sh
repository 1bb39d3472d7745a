#!/usr/bin/env bash
# Fault trials (issue 46): SIGKILL or SIGSTOP a random rank at a random moment of a distributed run,
# over magic-check's mesh layouts (dp=2,cp=2 and tp=2,dp=2), its three-pool layout
# (n_ci=4,n_per_block=2) and magic-run --topology dp=2,cp=2 (fixtures/runs/demo.json, 8 steps, with
# --out, --html and a spill_dir), each with --timeout 5. A trial passes when the command exits 2
# within timeout + 5 s of the signal, names the signalled rank and its phase, prints no C++ stack
# frame, and leaves no rank process, no new /dev/shm entry and no stray file: its TMPDIR holds at
# most the rank logs its error names, no --out folder or hidden partial sibling appears, and the
# spill_dir holds at most the resumable run folder (manifest, lock, rank-N/ records, no partial).
# Every choice (case, signal, rank, moment) flows from the seed, printed first.
# Usage: scripts/fault-trials.sh [--seed N] [BUILD_DIR (build)] [TRIALS (100)]   (env MAGIC_FAULT_SEED)
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=trials-common.sh
source "$root/scripts/trials-common.sh"
trial_args 100 "$@"
check="$build/tools/magic-check"
run="$build/tools/magic-run"
require_binaries "$check" "$run"
timeout=5
bound=$((timeout + 5))
work=$(mktemp -d "${TMPDIR:-/tmp}/fault-trials-XXXXXX")

# The cases: a name, its family, its world size and its command (run inside the trial's folder D).
names=("dp=2,cp=2" "tp=2,dp=2" "n_ci=4,n_per_block=2" "magic-run dp=2,cp=2")
families=(mesh mesh three-pool magic-run)
worlds=(4 4 10 4)
command_of() { # case folder
  local d=$2
  case $1 in
    0 | 1 | 2) echo "$check --topology ${names[$1]} --timeout $timeout" ;;
    3) echo "$run --config $root/fixtures/runs/demo.json --training.steps 8 --training.spill_dir $d/spill" \
      "--topology dp=2,cp=2 --timeout $timeout --out $d/out/scores --html" ;;
  esac
}
# Trial t's case: of each ten trials four are mesh (two per layout), three three-pool, three magic-run.
case_of() { local c=$((($1 - 1) % 10)); ((c < 4)) && echo $((c % 2)) || { ((c < 7)) && echo 2 || echo 3; }; }

shm() { ls -A /dev/shm 2>/dev/null | sort; }

# Starts case $1 in a fresh folder $2 (pids/, tmp/, out/, spill/) and leaves its pid in $launched.
start() {
  local c=$1 d=$2
  mkdir -p "$d/pids" "$d/tmp" "$d/out" "$d/spill"
  # shellcheck disable=SC2046
  TMPDIR="$d/tmp" MAGIC_PID_DIR="$d/pids" $(command_of "$c" "$d") >"$d/log" 2>&1 &
  launched=$!
}

# What a killed run may leave: the rank logs its error names, and a resumable run folder.
strays() { # folder
  local d=$1 logs
  logs=$(sed -n 's/.*logs of every rank: \(.*\)\/$/\1/p' "$d/log" | head -1)
  find "$d/tmp" -mindepth 1 -maxdepth 1 | while read -r f; do [ "$f" = "$logs" ] || echo "$f"; done
  find "$d/out" -mindepth 1
  find "$d/spill" -mindepth 1 | grep -v -E "^$d/spill/magic-run-[0-9a-f]{16}(/manifest\.json|/lock|/rank-[0-9]+(/(step|replay|query)-[0-9]+\.safetensors)?)?$"
}

# How long a clean run lasts once every rank is up: the signals are drawn inside that window.
declare -a window
for c in 0 1 2 3; do
  d="$work/baseline-$c"
  start "$c" "$d"
  wait_for_pids "$d/pids" "${worlds[c]}"
  up=$(now)
  wait "$launched"
  code=$?
  window[c]=$(elapsed "$up" "$(now)")
  echo "baseline ${names[c]}: exit $code, ${window[c]} s with every rank up"
  [ "$code" -eq 0 ] || { sed 's/^/    | /' "$d/log"; echo "fault-trials: a clean run failed; kept $work"; exit 1; }
done

passed=0 slowest=0 kills=0 stops=0
declare -A family_count=()
for ((t = 1; t <= trials; t++)); do
  c=$(case_of "$t")
  world=${worlds[c]}
  # Signals alternate by case and by each ten trials: half SIGKILL, half SIGSTOP in every case.
  if (((t - 1) / 10 % 2 == (t - 1) % 2)); then sig=KILL; num=9; else sig=STOP; num=19; fi
  victim=$((RANDOM % world))
  delay=$(awk -v w="${window[c]}" -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.9 * w * r / 32768 }')
  shm_before=$(shm)
  signalled=""
  # A victim that already finished cannot be signalled: the same rank again at half the delay.
  for attempt in 1 2 3; do
    [ "$attempt" -gt 1 ] && delay=$(awk -v d="$delay" 'BEGIN { printf "%.2f", d / 2 }')
    d="$work/trial-$t-$attempt"
    start "$c" "$d"
    wait_for_pids "$d/pids" "$world" || break
    sleep "$delay"
    vpid=$(cat "$d/pids/rank-$victim.pid")
    # A rank that has exited but is not yet reaped (a zombie) takes a signal too: it counts as gone.
    if ! grep -q '^State:[[:space:]]*Z' "/proc/$vpid/status" 2>/dev/null && kill "-$sig" "$vpid" 2>/dev/null; then
      signalled=$(now)
      break
    fi
    wait "$launched"
  done
  wait "$launched"
  code=$?
  end=$(now)
  secs=$([ -n "$signalled" ] && elapsed "$signalled" "$end" || echo "-")
  verb=$([ "$sig" = KILL ] && echo killed || echo stopped)
  named=$(sed -n "s/.*: rank \([0-9]*\) of $world (pid $vpid) was $verb by signal $num.* in phase '\([^']*\)'.*/\1|\2/p" \
    "$d/log" | head -1)
  named_rank=${named%%|*}
  phase=${named#*|}
  frames=$(grep -c -e 'frame #' -e 'Exception raised from' "$d/log")
  left=0
  for f in "$d"/pids/rank-*.pid; do
    p=$(cat "$f")
    if [ -e "/proc/$p" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null; then
      left=$((left + 1))
      kill -9 "$p" 2>/dev/null
    fi
  done
  new_shm=$(comm -13 <(echo "$shm_before") <(shm) | grep -c .)
  stray=$(strays "$d")
  n_stray=$(echo "$stray" | grep -c .)
  verdict=ok
  if [ -z "$signalled" ] || [ "$code" -ne 2 ] || [ "$named_rank" != "$victim" ] || [ -z "$phase" ] ||
    [ "$phase" = "unknown" ] || [ "$frames" -ne 0 ] || [ "$left" -ne 0 ] || [ "$new_shm" -ne 0 ] ||
    [ "$n_stray" -ne 0 ] || awk -v s="$secs" -v b="$bound" 'BEGIN { exit !(s > b) }'; then
    verdict=FAIL
  else
    passed=$((passed + 1))
    [ "$sig" = KILL ] && kills=$((kills + 1)) || stops=$((stops + 1))
    family_count[${families[c]}]=$((${family_count[${families[c]}]:-0} + 1))
    slowest=$(awk -v a="$slowest" -v b="$secs" 'BEGIN { print (b > a ? b : a) }')
  fi
  printf "trial %3d  %-20s SIG%-4s rank %d after %5.2f s (try %d): exit %d, %5s s later; named rank %s in '%s'; frames %d, left %d, shm %d, stray %d  %s\n" \
    "$t" "${names[c]}" "$sig" "$victim" "$delay" "$attempt" "$code" "$secs" "${named_rank:--}" "$phase" \
    "$frames" "$left" "$new_shm" "$n_stray" "$verdict"
  if [ "$verdict" = ok ]; then
    rm -rf "$work"/trial-"$t"-*
  else
    sed 's/^/    | /' "$d/log"
    [ -n "$stray" ] && echo "$stray" | sed 's/^/    stray: /'
  fi
done

echo "fault-trials: $passed of $trials passed (SIGKILL $kills, SIGSTOP $stops; mesh ${family_count[mesh]:-0}," \
  "three-pool ${family_count[three-pool]:-0}, magic-run ${family_count[magic-run]:-0}); slowest end $slowest s after the signal (seed $seed)"
if [ "$passed" -eq "$trials" ]; then
  rm -rf "$work"
else
  echo "fault-trials: the failed trials' folders are kept in $work"
  exit 1
fi
