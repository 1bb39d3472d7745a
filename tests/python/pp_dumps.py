#!/usr/bin/env python3
"""ctest python.pp_dumps: a tiny GPT with a tied head trained two steps as a two-stage pipeline
(pp_steps.py: GPipe, three unequal micro-batches, activations and cotangents sent point to point,
the token embedding's copies on both stages), dumped by python/magic_dump.py with each stage's
tensors placed on its stage (docs/dump-format.md, `on`), against the same steps in one process:

  pp2-tied                 correct: the Python oracle (dump_reader.py) and magic-compare (exit 0)
                           find every record equal to the single process's
  embedding-sum-skipped    each stage steps its copy of the tied embedding with its own gradient
                           term: magic-compare exits 1 and its first divergence is step 0's
                           tok_emb.weight reduced gradient, named as partial sums left unreduced
                           over pp whose pp 1 replica differs from pp 0's

Run: /usr/bin/python3 pp_dumps.py [--magic-compare PATH]
"""

import json
import os
import sys
import time

from compare_dumps import arguments, oracle_differences, private_temporary_folder, run_magic_compare, verdict
from dump_reader import read_safetensors
from pp_steps import STAGES, pp_run, reference_run
from ranks import run_on_ranks


def check_stages_hold_their_own(folder):
    """Each stage's file holds its own layers only, and the manifest is version 4 with blocks.0 on
    stage 0 and blocks.1 on stage 1: the dump really exercises pieces some ranks do not hold."""
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["version"] == 4, manifest["version"]
    on = {(r["name"], r["kind"], r["step"], r["micro_batch"]): r["placements"][0].get("on") for r in manifest["records"]}
    assert on[("blocks.0.ln1.weight", "reduced_gradient", 0, -1)] == [0], on
    assert on[("blocks.1.ln1.weight", "reduced_gradient", 0, -1)] == [1], on
    assert on[("tok_emb.weight", "gradient", 0, 0)] == [0, 1], on
    counts = [len(read_safetensors(os.path.join(folder, f"rank{s}.safetensors"))) for s in range(STAGES)]
    assert 0 < counts[0] < len(manifest["records"]) and 0 < counts[1] < len(manifest["records"]), counts


def check_oracle_sees_the_bug(folder, reference):
    """The bug really changes the run where the test says, by the tests' own reader (which refuses
    replicas that differ outright)."""
    try:
        differences = oracle_differences(folder, reference)
    except AssertionError as e:
        assert "replicas differ" in str(e) and "tok_emb.weight reduced_gradient" in str(e), e
        return
    raise AssertionError(f"the oracle reads the copies of the tied embedding as equal: {differences}")


def check_first_divergence(code, report):
    assert code == 1, f"exit {code}, expected 1"
    first = report["first_divergence"]
    assert (first["name"], first["kind"], first["step"], first["micro_batch"]) == \
        ("tok_emb.weight", "reduced_gradient", 0, -1), first
    line = first["line"]
    assert line.startswith("first divergence: step 0, reduction, tok_emb.weight reduced_gradient, "), line
    assert "partial sums left unreduced over pp (summed over the pp ranks they match); replicas differ: pp 1 " \
           "differs from pp 0" in line, line
    assert "every earlier record agrees to" in line, line


def main():
    args = arguments(__doc__.splitlines()[0])
    started = time.monotonic()
    failures = []
    with private_temporary_folder() as tmp:
        reference = os.path.join(tmp, "single-process.dump")
        reference_run(reference)
        correct, bug = os.path.join(tmp, "pp2-tied.dump"), os.path.join(tmp, "embedding-sum-skipped.dump")
        run_on_ranks(STAGES, [(pp_run, {"folder": correct}),
                              (pp_run, {"folder": bug, "bug": "embedding-sum-skipped"})])
        try:
            check_stages_hold_their_own(correct)
        except AssertionError as e:
            failures.append(f"pp2-tied: {e}")
        differences = oracle_differences(correct, reference)
        print(f"pp2-tied: Python oracle: {'pass' if not differences else differences}")
        if differences:
            failures.append(f"pp2-tied: the oracle finds {differences}")
        try:
            check_oracle_sees_the_bug(bug, reference)
            print("embedding-sum-skipped: Python oracle: the copies of the tied embedding differ")
        except AssertionError as e:
            failures.append(f"embedding-sum-skipped: Python oracle: {e}")
        if args.magic_compare:
            code, report, output = run_magic_compare(args.magic_compare, correct, reference, tmp)
            print("\n".join(output.splitlines()[-3:]))
            if code != 0 or not report["passed"]:
                print(output)
                failures.append(f"pp2-tied: magic-compare exit {code}, expected 0")
            code, report, output = run_magic_compare(args.magic_compare, bug, reference, tmp)
            print("\n".join(output.splitlines()[-3:]))
            try:
                check_first_divergence(code, report)
                print("embedding-sum-skipped: magic-compare: caught as expected")
            except AssertionError as e:
                print(output)
                failures.append(f"embedding-sum-skipped: magic-compare: {e}")
    return verdict(started, failures, "PASS: the pipelined steps match, and the skipped embedding sum is named")


if __name__ == "__main__":
    sys.exit(main())
