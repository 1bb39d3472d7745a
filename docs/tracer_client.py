#!/usr/bin/env python3
"""Collects the tracer's projection signal per layer over steps (docs/tracer.md).

Connects to a run's tracer (magic-run --trace-port P --trace-vectors V.safetensors), asks for the
hidden states after each block projected onto the layer's vector and for the loss, and prints one
row per training step: the loss and, per layer, the mean projection of the batch's hidden states.
That is the persona-vector monitoring of Megatron's tensor tracer demonstration, on our stream.

    /usr/bin/python3 docs/tracer_client.py ws://127.0.0.1:8765/trace --token TOKEN [--json out.json]

TOKEN is the one the run printed in its viewer's URL (http://127.0.0.1:8765/?token=TOKEN); the
URL given may carry it instead (ws://127.0.0.1:8765/trace?token=TOKEN).

Needs Debian's python3-websockets. Start the run with --trace-wait so that it waits for this
client before training: the control below applies from the next record on.
"""
import argparse
import asyncio
import json
import sys
import urllib.parse

import websockets

CONTROL = {"type": "control", "paused": False, "points": [
    {"kind": "activation", "compressor": "projection"},
    {"kind": "loss", "compressor": "none"},
]}


def with_token(url, token):
    """The WebSocket URL with the tracer's token as its token= parameter (every websockets version
    sends a URL's query; not every one takes extra headers the same way)."""
    if not token:
        return url
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query) + [("token", token)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


async def collect(url):
    """Returns ({layer: {step: mean projection}}, {step: loss}, records seen, records dropped)."""
    projections, losses, records, dropped = {}, {}, 0, 0
    async with websockets.connect(url, max_size=1 << 24) as ws:
        await ws.send(json.dumps(CONTROL))
        async for text in ws:
            m = json.loads(text)
            if m["type"] == "error":
                sys.exit(f"tracer_client: the tracer refused the control: {m['field']}: {m['message']}")
            if m["type"] == "dropped":
                dropped += m["count"]
            if m["type"] == "end":
                break
            if m["type"] != "record":
                continue
            records += 1
            data = m["data"]
            # Training steps only: the forward of the query (step -1) is not a step.
            if m["compressor"] == "projection" and "mean" in data and m["step"] >= 0:
                projections.setdefault(m["layer"], {})[m["step"]] = data["mean"]
            elif m["kind"] == "loss" and m["compressor"] == "none":
                losses[m["step"]] = data["values"][0]
    return projections, losses, records, dropped


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="the tracer's WebSocket, ws://127.0.0.1:PORT/trace")
    parser.add_argument("--token", help="the tracer's token, from the viewer's URL the run printed")
    parser.add_argument("--json", help="also write the series to this file")
    args = parser.parse_args()
    try:
        projections, losses, records, dropped = asyncio.run(collect(with_token(args.url, args.token)))
    except (OSError, websockets.exceptions.InvalidHandshake) as e:
        # 401 or 403 from the server: no token, or not the run's (the URL is shown without it).
        sys.exit(f"tracer_client: cannot connect to {args.url.split('?')[0]}: {e}")
    if not projections:
        sys.exit("tracer_client: no projection records (was the run started with --trace-vectors?)")
    layers = sorted(projections)
    steps = sorted(set(losses) | {s for series in projections.values() for s in series})
    print("step  loss      " + "  ".join(f"{layer:>10}" for layer in layers))
    for s in steps:
        loss = f"{losses[s]:.4f}" if s in losses else "-"
        cells = [f"{projections[layer][s]:10.4f}" if s in projections[layer] else f"{'-':>10}" for layer in layers]
        print(f"{s:4d}  {loss:8}  " + "  ".join(cells))
    print(f"tracer_client: {records} records, {dropped} dropped, {len(layers)} layers over {len(steps)} steps")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"projection": projections, "loss": losses, "records": records, "dropped": dropped}, out)


if __name__ == "__main__":
    main()
