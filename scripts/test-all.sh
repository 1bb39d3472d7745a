#!/usr/bin/env bash
# Every test on a fresh Debian 12 machine: install what is missing, build everything, run ctest.
# The suite writes only under per-process directories it removes (tests/main.cpp): a file or
# folder that is new in the temporary directory after ctest fails the run, named.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default
cmake --build --preset default
tmp="${TMPDIR:-/tmp}"
before=$(mktemp)
after=$(mktemp)
trap 'rm -f "$before" "$after"' EXIT
ls -A "$tmp" | sort >"$before"
ctest --preset default
ls -A "$tmp" | sort >"$after"
left=$(comm -13 "$before" "$after" | grep -vxF -e "$(basename "$before")" -e "$(basename "$after")" || true)
if [ -n "$left" ]; then
  echo "test-all: the suite left these in $tmp:" >&2
  printf '%s\n' "$left" | sed 's/^/  /' >&2
  exit 1
fi
echo "test-all: nothing new in $tmp"
