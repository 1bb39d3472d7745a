# What the trial scripts (fault-trials.sh, write-kill-trials.sh, stuck-rank-trials.sh) share,
# sourced: their arguments, the seed every random choice flows from, a clock, waiting for ranks.

# trial_args DEFAULT_TRIALS "$@": sets `build` (absolute), `trials` and `seed` from
# [--seed N] [BUILD_DIR (build)] [TRIALS]; the seed is --seed, else $MAGIC_FAULT_SEED, else the
# clock's. Seeds $RANDOM and prints the seed first. -h prints the calling script's Usage line.
trial_args() {
  local default_trials=$1 args=()
  shift
  seed=${MAGIC_FAULT_SEED:-}
  while [ $# -gt 0 ]; do
    case $1 in
      --seed) seed=${2:?--seed needs a number}; shift 2 ;;
      -h | --help) sed -n 's/^# Usage: //p' "$0"; exit 0 ;;
      *) args+=("$1"); shift ;;
    esac
  done
  build=$(cd "${args[0]:-build}" 2>/dev/null && pwd) || { echo "$(basename "$0"): no build folder ${args[0]:-build}" >&2; exit 2; }
  trials=${args[1]:-$default_trials}
  seed=${seed:-$(($(date +%s) % 32768))}
  echo "$(basename "$0" .sh): seed $seed (repeat with --seed $seed)"
  RANDOM=$seed
}

# require_binaries PATH...: each must be there and executable.
require_binaries() {
  local b
  for b in "$@"; do [ -x "$b" ] || { echo "$(basename "$0" .sh): no $b: build first" >&2; exit 2; }; done
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# wait_for_pids DIR WORLD: until every rank has written DIR/rank-R.pid (each does so just before
# rendezvous); 1 after 90 s.
wait_for_pids() {
  local dir=$1 world=$2 r
  for _ in $(seq 900); do
    for ((r = 0; r < world; r++)); do [ -s "$dir/rank-$r.pid" ] || break; done
    [ "$r" -eq "$world" ] && return 0
    sleep 0.1
  done
  return 1
}
