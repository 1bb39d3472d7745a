#!/usr/bin/env python3
"""ctest python.ddp_dumps: the tiny GPT's training step dumped by python/magic_dump.py in one
process (the reference) and by five correct data-parallel versions of it, each of which must match
the reference at fp64 (worst relative error <= 1e-9), judged by the Python oracle
(dump_reader.py) and, when given, by magic-compare (exit 0):

  ddp-world2, ddp-world4          DistributedDataParallel, the batch split over the ranks
  hand-reduced-world2             a hand-written all-reduce of every gradient
  accumulate-world2               DDP with two micro-batches per rank (no_sync on the first)
  reduce-scatter-world3           a hand-written sharded-gradient data parallel: each rank keeps
                                  uneven rows of every reduced gradient (and of the batch: 3, 3, 2)

The batch's ranks and micro-batches hold different numbers of valid labels, so a step passes only
if it normalizes by the global count. Run: /usr/bin/python3 ddp_dumps.py [--magic-compare PATH]
"""

import os
import sys
import time

from compare_dumps import arguments, oracle_differences, private_temporary_folder, run_magic_compare, verdict
from dump_reader import read_safetensors
from ranks import run_on_ranks
from training_steps import accumulation_step, ddp_step, hand_reduced_step, reduce_scatter_step, reference_step


def check_uneven_shards(folder):
    """The reduce-scatter dump must really hold uneven pieces: rank files whose gradient pieces
    differ in rows (else the demonstration would not exercise uneven shard(0))."""
    rows_per_rank = []
    for rank in range(3):
        tensors = read_safetensors(os.path.join(folder, f"rank{rank}.safetensors"))
        rows_per_rank.append([t.shape[0] if t.dim() else 0 for t in tensors.values()])
    assert len({tuple(rows) for rows in rows_per_rank}) == 3, f"pieces are not uneven: {rows_per_rank}"


def main():
    args = arguments(__doc__.splitlines()[0])
    started = time.monotonic()
    with private_temporary_folder() as tmp:
        reference = os.path.join(tmp, "single-process.dump")
        reference_step(reference)
        runs = {name: os.path.join(tmp, name + ".dump") for name in
                ("ddp-world2", "hand-reduced-world2", "accumulate-world2", "ddp-world4", "reduce-scatter-world3")}
        run_on_ranks(2, [(ddp_step, {"folder": runs["ddp-world2"]}),
                         (hand_reduced_step, {"folder": runs["hand-reduced-world2"]}),
                         (accumulation_step, {"folder": runs["accumulate-world2"]})])
        run_on_ranks(4, [(ddp_step, {"folder": runs["ddp-world4"]})])
        run_on_ranks(3, [(reduce_scatter_step, {"folder": runs["reduce-scatter-world3"]})])
        check_uneven_shards(runs["reduce-scatter-world3"])

        failures = []
        for name, folder in runs.items():
            differences = oracle_differences(folder, reference)
            print(f"{name}: Python oracle: {'pass' if not differences else differences}")
            if differences:
                failures.append(f"{name}: the oracle finds {differences}")
            if args.magic_compare:
                code, report, output = run_magic_compare(args.magic_compare, folder, reference, tmp)
                print(output)
                if code != 0 or not report["passed"]:
                    failures.append(f"{name}: magic-compare exit {code}, expected 0")
    return verdict(started, failures, "PASS: every data-parallel step matches the single-process step")


if __name__ == "__main__":
    sys.exit(main())
