#!/usr/bin/env bash
# The tracer's viewer in headless Chromium against a real run: magic-run on the demo config with
# --trace-port 0 (clipping on, so the clip coefficient is traced too) waits for the browser; the
# test (viewer_test.js) switches the gradients' compressor to tiles with the page's flag picker,
# waits for the records of the new kind, for every trace point kind and for the run's end, and
# saves a screenshot.
#   tests/js/viewer_e2e.sh MAGIC_RUN [SCREENSHOT.png]   (STEPS=N: training steps, default 12;
#   docs/tracer.png is the whole demo, STEPS=32)
set -euo pipefail
if [ "${MAGIC_NO_BROWSER:-}" = 1 ]; then
  echo "viewer_e2e: skipped (MAGIC_NO_BROWSER=1)"
  exit 77
fi
run=$1
shot=${2:-}
src="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/magic-viewer-e2e.XXXXXX")"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
"$run" --config "$src/fixtures/runs/demo.json" --training.steps "${STEPS:-12}" --optimizer.clip_norm 1.0 \
  --trace-port 0 --trace-wait 120 \
  --out "$tmp/out" > "$tmp/run.log" 2>&1 &
pid=$!
url=""
for _ in $(seq 1 600); do
  url="$(sed -n 's/^trace: serving \(http[^ ]*\) (viewer).*/\1/p' "$tmp/run.log")"
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/run.log"; echo "viewer_e2e: magic-run ended before serving"; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$tmp/run.log"; echo "viewer_e2e: magic-run never said where it serves"; exit 1; }
echo "viewer_e2e: $url"
node "$src/tests/js/viewer_test.js" --url "$url" --screenshot "${shot:-$tmp/screenshot.png}" --timeout-ms 240000 \
  --switch gradient=tile --wait-end \
  --expect-kinds input,activation,attention,logits,loss,gradient,reduced_gradient,update,other,cotangent,score
set +e
wait "$pid"
rc=$?
pid=""
set -e
tail -3 "$tmp/run.log"
[ "$rc" -eq 0 ] || { cat "$tmp/run.log"; echo "viewer_e2e: magic-run exited $rc"; exit 1; }
echo "viewer_e2e: passed"
