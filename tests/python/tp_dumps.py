#!/usr/bin/env python3
"""ctest python.tp_dumps: a hand-written tensor-parallel transformer block (tp_steps.py: heads and
MLP units split over tp, a fused qkv weight sharded by heads, row-parallel outputs as partial sums,
a vocabulary-parallel head padded to a multiple of tp, optionally sequence parallelism) trained two
steps with two micro-batches per step on a dp=2 x tp=2 mesh, dumped by python/magic_dump.py,
against the same steps in one process:

  dp2-tp2, dp2-tp2-sp              correct: the Python oracle (dump_reader.py) and magic-compare
                                   (exit 0) find every record equal to the single process's
  layer-norm-left-unreduced (sp)   the layer norms' gradients, partial over the tp ranks' sequence
                                   shards, miss their all-reduce over tp: magic-compare exits 1 and
                                   its first divergence is step 0's ln2.bias reduced gradient, named
                                   as partial sums left unreduced over tp whose tp 1 replica differs
                                   from tp 0's
  loss-per-micro-batch             each micro-batch's loss normalized by its own labels, then
                                   averaged over micro-batches: exit 1, first divergence step 0,
                                   micro-batch 0's loss (a scale that is no factor of the mesh)

Run: /usr/bin/python3 tp_dumps.py [--magic-compare PATH]
"""

import os
import sys
import time

from compare_dumps import arguments, oracle_differences, private_temporary_folder, run_magic_compare, verdict
from ranks import run_on_ranks
from tp_steps import DP, TP, reference_run, tp_run

CORRECT = {"dp2-tp2": {}, "dp2-tp2-sp": {"sp": True}}
BUGS = {"layer-norm-left-unreduced": {"sp": True, "bug": "layer-norm-left-unreduced"},
        "loss-per-micro-batch": {"bug": "loss-per-micro-batch"}}


def check_oracle_sees_the_bug(bug, folder, reference):
    """The bug really changes the run where the test says: its first differing record, by the
    tests' own reader (which refuses replicas that differ outright)."""
    try:
        differences = oracle_differences(folder, reference)
    except AssertionError as e:
        assert bug == "layer-norm-left-unreduced" and "replicas differ" in str(e) and "ln2.bias" in str(e), e
        return
    assert differences, f"{bug}: the oracle finds no difference"
    (name, kind, _phase, _order, step, micro_batch), _ = differences[0]
    assert (name, kind, step, micro_batch) == ("loss", "loss", 0, 0), differences[0]


def check_first_divergence(bug, code, report):
    """Exit 1 and a first divergence that names the tensor, the tp rank or the micro-batch."""
    assert code == 1, f"exit {code}, expected 1"
    first = report["first_divergence"]
    line = first["line"]
    if bug == "layer-norm-left-unreduced":
        assert (first["name"], first["kind"], first["step"], first["micro_batch"]) == \
            ("ln2.bias", "reduced_gradient", 0, -1), first
        assert line.startswith("first divergence: step 0, reduction, ln2.bias reduced_gradient, "
                               "direction differs"), line
        assert "partial sums left unreduced over tp (summed over the tp ranks they match); replicas differ: tp 1 " \
               "differs from tp 0" in line, line
    else:
        assert (first["name"], first["kind"], first["step"], first["micro_batch"]) == ("loss", "loss", 0, 0), first
        assert line.startswith("first divergence: step 0, micro-batch 0, forward, loss, scale "), line
        assert "no topology factor" in line, line
        # Every record before it (micro-batch 0's inputs and activations on every tp rank) agrees.
        assert "every earlier record agrees to" in line, line


def main():
    args = arguments(__doc__.splitlines()[0])
    started = time.monotonic()
    failures = []
    with private_temporary_folder() as tmp:
        reference = os.path.join(tmp, "single-process.dump")
        reference_run(reference)
        folders = {name: os.path.join(tmp, name + ".dump") for name in (*CORRECT, *BUGS)}
        run_on_ranks(DP * TP, [(tp_run, {"folder": folders[name], **kwargs})
                               for name, kwargs in (*CORRECT.items(), *BUGS.items())])
        for name in CORRECT:
            differences = oracle_differences(folders[name], reference)
            print(f"{name}: Python oracle: {'pass' if not differences else differences}")
            if differences:
                failures.append(f"{name}: the oracle finds {differences}")
            if args.magic_compare:
                code, report, output = run_magic_compare(args.magic_compare, folders[name], reference, tmp)
                print("\n".join(output.splitlines()[-3:]))
                if code != 0 or not report["passed"]:
                    print(output)
                    failures.append(f"{name}: magic-compare exit {code}, expected 0")
        for bug in BUGS:
            try:
                check_oracle_sees_the_bug(bug, folders[bug], reference)
                print(f"{bug}: Python oracle: the bug changes the expected record")
            except AssertionError as e:
                failures.append(f"{bug}: Python oracle: {e}")
            if not args.magic_compare:
                continue
            code, report, output = run_magic_compare(args.magic_compare, folders[bug], reference, tmp)
            print("\n".join(output.splitlines()[-3:]))
            try:
                check_first_divergence(bug, code, report)
                print(f"{bug}: magic-compare: caught as expected")
            except AssertionError as e:
                print(output)
                failures.append(f"{bug}: magic-compare: {e}")
    return verdict(started, failures, "PASS: the tensor-parallel steps match, and each planted bug is named")


if __name__ == "__main__":
    sys.exit(main())
