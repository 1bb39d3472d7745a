#!/usr/bin/env bash
# Stuck-rank acceptance: SIGSTOP a random rank at a random moment of a magic-check run, alternating
# dp=4 and n_ci=4,n_per_block=2 with --timeout 5. A trial passes when the command exits 2 within
# 15 s of the stop, names the stopped rank and its phase, prints no C++ stack frame, and leaves no
# rank process behind. Prints one line per trial and a summary; exits 1 if any trial failed.
# Every choice (rank, moment) flows from the seed, printed first.
# Usage: scripts/stuck-rank-trials.sh [--seed N] [BUILD_DIR (build)] [TRIALS (20)]   (or: ctest -L long)
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=trials-common.sh
source "$root/scripts/trials-common.sh"
trial_args 20 "$@"
bin="$build/tools/magic-check"
require_binaries "$bin"
layouts=("dp=4" "n_ci=4,n_per_block=2")
worlds=(4 10)
timeout=5
bound=15
work=$(mktemp -d "${TMPDIR:-/tmp}/stuck-rank-trials-XXXXXX")

# How long a clean run lasts once every rank is up: the stops are drawn inside that window.
declare -a window
for i in 0 1; do
  dir="$work/baseline-$i"
  mkdir -p "$dir"
  start=$(now)
  TMPDIR="$work" MAGIC_PID_DIR="$dir" "$bin" --topology "${layouts[$i]}" --timeout "$timeout" >"$dir/out" 2>&1 &
  pid=$!
  wait_for_pids "$dir" "${worlds[$i]}"
  up=$(now)
  wait "$pid"
  code=$?
  end=$(now)
  window[i]=$(elapsed "$up" "$end")
  echo "baseline ${layouts[$i]}: exit $code, $(elapsed "$start" "$end") s, of which ${window[i]} s with every rank up"
done

passed=0
times=()
for ((t = 1; t <= trials; t++)); do
  i=$(((t - 1) % 2))
  layout=${layouts[i]}
  world=${worlds[i]}
  stopped=""
  victim=$((RANDOM % world))
  delay=$(awk -v w="${window[i]}" -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.9 * w * r / 32768 }')
  # Ranks other than 0 finish before rank 0 compares: a victim that already exited cannot be
  # stopped, so the same rank is tried again at half the delay (3 attempts).
  for attempt in 1 2 3; do
    [ "$attempt" -gt 1 ] && delay=$(awk -v d="$delay" 'BEGIN { printf "%.2f", d / 2 }')
    dir="$work/trial-$t-$attempt"
    mkdir -p "$dir"
    TMPDIR="$work" MAGIC_PID_DIR="$dir" "$bin" --topology "$layout" --timeout "$timeout" >"$dir/out" 2>&1 &
    pid=$!
    wait_for_pids "$dir" "$world" || break
    sleep "$delay"
    if kill -STOP "$(cat "$dir/rank-$victim.pid")" 2>/dev/null; then
      stopped=$(now)
      break
    fi
    wait "$pid"
  done
  wait "$pid"
  code=$?
  end=$(now)
  secs=$([ -n "$stopped" ] && elapsed "$stopped" "$end" || echo "-")
  line=$(grep -m1 "was stopped by signal 19" "$dir/out")
  named=$(sed -n "s/.*: rank \([0-9]*\) of $world (pid [0-9]*) was stopped by signal 19.* in phase '\([^']*\)'.*/\1|\2/p" \
    "$dir/out" | head -1)
  named_rank=${named%%|*}
  phase=${named#*|}
  frames=$(grep -c -e 'frame #' -e 'Exception raised from' "$dir/out")
  left=0
  for f in "$dir"/rank-*.pid; do
    p=$(cat "$f")
    if [ -e "/proc/$p" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null; then
      left=$((left + 1))
      kill -9 "$p" 2>/dev/null
    fi
  done
  verdict=ok
  if [ -z "$stopped" ] || [ "$code" -ne 2 ] || [ -z "$line" ] || [ "$named_rank" != "$victim" ] ||
    [ -z "$phase" ] || [ "$phase" = "unknown" ] || [ "$frames" -ne 0 ] || [ "$left" -ne 0 ] ||
    awk -v s="$secs" -v b="$bound" 'BEGIN { exit !(s > b) }'; then
    verdict=FAIL
  else
    passed=$((passed + 1))
    times+=("$secs")
  fi
  printf "trial %2d  %-21s stopped rank %d after %5.2f s (attempt %d): exit %d, %5s s later; named rank %s in phase '%s'; frames %d; left %d  %s\n" \
    "$t" "$layout" "$victim" "$delay" "$attempt" "$code" "$secs" "${named_rank:--}" "$phase" "$frames" "$left" "$verdict"
  [ "$verdict" = ok ] || sed 's/^/    | /' "$dir/out"
done

if [ ${#times[@]} -gt 0 ]; then
  stats=$(printf "%s\n" "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END {
    printf "min %.2f s, median %.2f s, max %.2f s", v[1], (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR] }')
else
  stats="no passing trial"
fi
echo "summary: $passed of $trials trials passed (exit 2 within $bound s of the stop, rank and phase named, no stack frames, nothing left); time from stop to exit: $stats"
# The outputs and rank logs (TMPDIR above) are kept when a trial failed.
if [ "$passed" -eq "$trials" ]; then
  rm -rf "$work"
else
  echo "outputs and rank logs kept in $work"
  exit 1
fi
