#!/usr/bin/env bash
# The tracer's viewer in headless Chromium against a real magic-check --bite: every rank of a
# dp=2 mesh streams the clean run and each mutation's run through rank 0; the test (viewer_test.js)
# switches the gradients to tiles with the flag picker, waits for the end, for records of at least
# three runs and for every kind a check makes, picks the first run in the page's run picker and
# saves a screenshot.
#   tests/js/viewer_check_e2e.sh MAGIC_CHECK [SCREENSHOT.png]
set -euo pipefail
source "$(dirname "$0")/live_viewer.bash"
check=$1
shot=${2:-$live_tmp/screenshot.png}
view_live "$shot" \
  "--switch gradient=tile --wait-end --expect-runs 3 --expect-kinds input,activation,attention,logits,loss,gradient,reduced_gradient,update,other,cotangent,score" \
  "$check" --topology dp=2 --bite --steps 2 --trace-port 0 --trace-wait 100 --timeout 120 --json "$live_tmp/report.json"
echo "viewer_e2e: passed"
