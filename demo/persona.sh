#!/usr/bin/env bash
# The tracer's persona-style demonstration (docs/tracer.md, "Demonstration"): on the fine-tuning
# run of demo/topics.sh, one direction per layer (the mean hidden state of the law verses minus
# that of the sea verses, from demo-persona-vectors), and each training step's batch projected
# onto it, live: docs/tracer_client.py collects the signal per layer over steps while the viewer
# (the http://127.0.0.1:PORT/?token=... the run prints) can plot it. Run demo/topics.sh first: it pretrains build/demo/pretrained.
#   demo/persona.sh [PORT]    (default 8765)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
out="$build/demo"
port="${1:-8765}"
[ -f "$out/pretrained/model.safetensors" ] || { echo "persona.sh: run demo/topics.sh first"; exit 2; }
"$build/demo/demo-persona-vectors" --config "$root/demo/topics.yaml" --a law --b sea --out "$out/law_sea.safetensors"
# The run waits for a client (up to two minutes) before it trains.
"$build/tools/magic-run" --config "$root/demo/topics.yaml" --trace-port "$port" --trace-wait 120 \
  --trace-vectors "$out/law_sea.safetensors" > "$out/persona_run.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
until grep -q "^trace: serving" "$out/persona_run.log"; do
  kill -0 "$pid" 2>/dev/null || { cat "$out/persona_run.log"; exit 1; }
  sleep 0.2
done
grep "^trace: serving" "$out/persona_run.log"
# The WebSocket's URL as the run printed it, with the run's token (docs/tracer.md, "The token").
ws_url="$(sed -n 's/^trace: serving .* and \(ws:[^ ]*\)$/\1/p' "$out/persona_run.log")"
/usr/bin/python3 "$root/docs/tracer_client.py" "$ws_url" --json "$out/persona.json"
wait "$pid"
trap - EXIT
echo "persona.sh: the series are in $out/persona.json; the run's output in $out/persona_run.log"
