#!/usr/bin/env bash
# The tracer's viewer in headless Chromium against a real run: magic-run on the demo config with
# --trace-port 0 (clipping on, so the clip coefficient is traced too) waits for the browser; the
# test (viewer_test.js) switches the gradients' compressor to tiles with the page's flag picker,
# waits for the records of the new kind, for every trace point kind and for the run's end, and
# saves a screenshot. A second page opens mid-run (after three steps): it must get the server's
# history and plot the same loss steps as the first, from step 0 (its screenshot: LATE.png). Last,
# the score tables and the λ axis are checked on records of the test's own (--check-views).
#   tests/js/viewer_e2e.sh MAGIC_RUN [SCREENSHOT.png [LATE.png]]   (STEPS=N: training steps,
#   default 12; docs/tracer.png is the whole demo, STEPS=32; docs/tracer-late-client.png is
#   LATE.png of STEPS=32)
set -euo pipefail
source "$(dirname "$0")/live_viewer.bash"
run=$1
shot=${2:-$live_tmp/screenshot.png}
late=${3:-$live_tmp/late.png}
view_live "$shot" \
  "--switch gradient=tile --wait-end --late-screenshot $late --check-views --expect-kinds input,activation,attention,logits,loss,gradient,reduced_gradient,update,other,cotangent,score" \
  "$run" --config "$live_src/fixtures/runs/demo.json" --training.steps "${STEPS:-12}" --optimizer.clip_norm 1.0 \
  --trace-port 0 --trace-wait 120 --out "$live_tmp/out"
echo "viewer_e2e: passed"
