#!/usr/bin/env python3
"""ctest python.ddp_planted_bugs: three data-parallel bugs planted in the tiny GPT's training step
(world 2), each dumped by python/magic_dump.py. magic-compare must fail each (exit 1) on the right
records with the right diagnosis, read from its --json report:

  loss-averaged-twice   the loss averaged per rank and divided by world while DDP averages the
                        gradients again: every gradient, and only the gradients, off by exactly
                        1/world, named "1/dp" (the ranks' halves hold equal label counts, so the
                        loss itself is right)
  forgotten-parameter   a hand-written all-reduce that leaves out one parameter: that parameter's
                        row alone fails, its replicas disagree, its direction differs, and its
                        replicas are named partial sums left unreduced over dp
  mean-of-micro-means   gradient accumulation averaging micro-batch means whose label counts
                        differ: the loss is the first divergence (a scale that is no factor), and
                        every gradient's direction differs (not a scaling: no factor named)

The Python oracle (dump_reader.py) first confirms each bug changed exactly those records, so a
pass here is magic-compare's diagnosis, not an accident of the step.
Run: /usr/bin/python3 ddp_planted_bugs.py [--magic-compare PATH]
"""

import json
import os
import sys
import time

from compare_dumps import arguments, oracle_differences, private_temporary_folder, run_magic_compare, verdict
from ranks import run_on_ranks
from training_steps import (FORGOTTEN_PARAMETER, accumulation_step, ddp_step, hand_reduced_step,
                            reference_step)

WORLD = 2


def reference_records(folder):
    """(name, kind) of every record of the reference dump, in order."""
    with open(os.path.join(folder, "manifest.json")) as f:
        return [(r["name"], r["kind"]) for r in json.load(f)["records"]]


def gradients(records):
    return [r for r in records if r[1] == "reduced_gradient"]


def check_oracle(bug, folder, reference, expected_rows):
    """The oracle sees exactly `expected_rows` differ (a forgotten parameter: its replicas disagree)."""
    if bug == "forgotten-parameter":
        try:
            oracle_differences(folder, reference)
        except AssertionError as e:
            assert "replicas differ" in str(e) and FORGOTTEN_PARAMETER in str(e), e
            return
        raise AssertionError("the oracle found every replica in agreement")
    differing = [(identity[0], identity[1]) for identity, _ in oracle_differences(folder, reference)]
    assert differing == expected_rows, f"{bug}: the oracle finds {differing}, expected {expected_rows}"


def check_magic_compare(bug, code, report, records):
    """Exit 1, failing rows as the bug predicts, and their diagnosis; AssertionError otherwise."""
    assert code == 1, f"exit {code}, expected 1"
    rows = {(r["name"], r["kind"]): r for r in report["records"]}
    failing = [key for key in records if rows[key]["verdict"] != "pass"]
    first = report["first_divergence"]
    if bug == "loss-averaged-twice":
        assert failing == gradients(records), failing
        for key in failing:
            assert rows[key]["factor"] == "1/dp" and rows[key]["diagnosis"].startswith("1/dp"), rows[key]
        assert (first["name"], first["kind"]) == gradients(records)[0] and first["factor"] == "1/dp", first
    elif bug == "forgotten-parameter":
        key = (FORGOTTEN_PARAMETER, "reduced_gradient")
        assert failing == [key], failing
        assert "replicas differ" in rows[key]["diagnosis"] and "direction differs" in rows[key]["diagnosis"], rows[key]
        # Each rank kept its own term: summed over dp they are the reference, and the diagnosis says so.
        assert "partial sums left unreduced over dp" in rows[key]["diagnosis"], rows[key]
        assert (first["name"], first["kind"]) == key, first
    elif bug == "mean-of-micro-means":
        assert failing == [("loss", "loss")] + gradients(records), failing
        assert "no topology factor" in rows[("loss", "loss")]["diagnosis"], rows[("loss", "loss")]
        for key in gradients(records):
            assert rows[key]["factor"] == "" and rows[key]["diagnosis"].startswith("direction differs"), rows[key]
        assert (first["name"], first["kind"]) == ("loss", "loss"), first
    else:
        raise AssertionError(f"unknown bug {bug}")


def main():
    args = arguments(__doc__.splitlines()[0])
    started = time.monotonic()
    failures = []
    with private_temporary_folder() as tmp:
        reference = os.path.join(tmp, "single-process.dump")
        reference_step(reference)
        records = reference_records(reference)
        bugs = {name: os.path.join(tmp, name + ".dump")
                for name in ("loss-averaged-twice", "forgotten-parameter", "mean-of-micro-means")}
        run_on_ranks(WORLD, [
            (ddp_step, {"folder": bugs["loss-averaged-twice"], "bug": "loss-averaged-twice"}),
            (hand_reduced_step, {"folder": bugs["forgotten-parameter"], "forget": FORGOTTEN_PARAMETER}),
            (accumulation_step, {"folder": bugs["mean-of-micro-means"], "bug": "mean-of-micro-means"})])
        expected_by_oracle = {"loss-averaged-twice": gradients(records),
                              "mean-of-micro-means": [("loss", "loss")] + gradients(records)}
        for bug, folder in bugs.items():
            try:
                check_oracle(bug, folder, reference, expected_by_oracle.get(bug))
                print(f"{bug}: Python oracle: the bug changes the expected records")
            except AssertionError as e:
                failures.append(f"{bug}: Python oracle: {e}")
            if not args.magic_compare:
                continue
            code, report, output = run_magic_compare(args.magic_compare, folder, reference, tmp)
            print(output)
            try:
                check_magic_compare(bug, code, report, records)
                print(f"{bug}: magic-compare: caught as expected")
            except AssertionError as e:
                failures.append(f"{bug}: magic-compare: {e}")
    return verdict(started, failures, "PASS: every planted bug is caught")


if __name__ == "__main__":
    sys.exit(main())
