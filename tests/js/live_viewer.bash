# Sourced by the viewer's end-to-end scripts: start a program that serves the tracer, open its
# viewer in headless Chromium (viewer_test.js) and require both to succeed; under
# MAGIC_NO_BROWSER=1 exit 77 (a skip) at once.
#   view_live SCREENSHOT "VIEWER_TEST_ARGS" PROGRAM ARGS...
# PROGRAM must be given --trace-port 0 and a --trace-wait long enough for the browser to come.
# Uses (and removes on exit) a temporary folder; sets live_tmp to it.
if [ "${MAGIC_NO_BROWSER:-}" = 1 ]; then
  echo "viewer_e2e: skipped (MAGIC_NO_BROWSER=1)"
  exit 77
fi
live_src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
live_tmp="$(mktemp -d "${TMPDIR:-/tmp}/magic-viewer-e2e.XXXXXX")"
live_pid=""
live_cleanup() {
  [ -n "$live_pid" ] && kill "$live_pid" 2>/dev/null && wait "$live_pid" 2>/dev/null
  rm -rf "$live_tmp"
}
trap live_cleanup EXIT

view_live() {
  local shot=$1 viewer_args=$2
  shift 2
  local name log url rc
  name="$(basename "$1")"
  log="$live_tmp/$name.log"
  : > "$log"  # there before the program opens it: the first sed below must find it (set -e)
  "$@" > "$log" 2>&1 &
  live_pid=$!
  url=""
  for _ in $(seq 1 600); do
    url="$(sed -n 's/^trace: serving \(http[^ ]*\) (viewer).*/\1/p' "$log")"
    [ -n "$url" ] && break
    kill -0 "$live_pid" 2>/dev/null || { cat "$log"; echo "viewer_e2e: $name ended before serving"; exit 1; }
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$log"; echo "viewer_e2e: $name never said where it serves"; exit 1; }
  echo "viewer_e2e: $name serves $url"
  # shellcheck disable=SC2086
  node "$live_src/tests/js/viewer_test.js" --url "$url" --screenshot "$shot" --timeout-ms 240000 $viewer_args
  set +e
  wait "$live_pid"
  rc=$?
  live_pid=""
  set -e
  tail -3 "$log"
  [ "$rc" -eq 0 ] || { cat "$log"; echo "viewer_e2e: $name exited $rc"; exit 1; }
}
