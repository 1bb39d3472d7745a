#!/usr/bin/env bash
# Screenshots an --html report with headless Chromium, for docs/:
#   scripts/render-report.sh REPORT.html OUT.png
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 REPORT.html OUT.png" >&2
  exit 2
fi
command -v chromium >/dev/null || { echo "$0: chromium not found; run: bash scripts/install-deps.sh" >&2; exit 2; }
[ -f "$1" ] || { echo "$0: $1: no such file" >&2; exit 2; }
report=$(realpath "$1")
out=$(realpath -m "$2")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: the sandbox refuses to start as root and in most containers; the page is our own.
timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --user-data-dir="$profile" --hide-scrollbars --window-size=1280,1800 --screenshot="$out" \
  "file://$report" 2>/dev/null
[ -s "$out" ] || { echo "$0: chromium wrote no screenshot" >&2; exit 1; }
echo "wrote $out"
