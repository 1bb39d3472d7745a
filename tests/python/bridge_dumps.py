#!/usr/bin/env python3
"""ctest python.bridge_dumps: a colocated encoder and language model on two layouts of 4 ranks,
enc=dp4; lm=dp2,cp2, joined by a bridge (bridge_steps.py: fan-in, each lm dp rank's rows the
outputs of 2 encoder shards; the lm's sequence in zig-zag chunks over cp), trained two SGD steps
and dumped by python/magic_dump.py on the main grid [dp=2, cp=2] and the named grid
"encoder" [dp=4] (format version 3), against the same steps in one process:

  bridge            correct: the Python oracle (dump_reader.py) and magic-compare (exit 0, PASS)
                    find every record equal to the single process's
  no-intra-cp-sum   the bridge's backward skips the sum over the lm cp group, so each encoder
                    shard's prefix gradient keeps its own cp rank's prefix columns alone: the
                    oracle finds step 0's prefix.grad the first record that differs, and
                    magic-compare exits 1 naming it as the first divergence (every forward
                    record before it agrees)

Run: /usr/bin/python3 bridge_dumps.py [--magic-compare PATH]
"""

import os
import sys
import time

from bridge_steps import WORLD, bridge_run, reference_run
from compare_dumps import arguments, oracle_differences, private_temporary_folder, run_magic_compare, verdict
from dump_reader import read_dump, worst_relative_error
from ranks import run_on_ranks

CORRECT = {"bridge": {}}
BUGS = {"no-intra-cp-sum": {"bug": "no-intra-cp-sum"}}
BRIDGE_BACKWARD = ("prefix.grad", "gradient", "backward", "first", 0, -1)  # the first record the bug changes


def oracle_worst_error(candidate, reference):
    """(records, the worst relative error over them) of `candidate` against `reference`."""
    _, want = read_dump(reference)
    _, got = read_dump(candidate)
    return len(want), max(worst_relative_error(got[i].double(), want[i].double()) for i in want)


def check_oracle_sees_the_bug(folder, reference):
    """The bug really changes the run where the test says: the first differing record, in the
    reference's order, is the bridge's backward, and nothing of the forward differs."""
    differences = oracle_differences(folder, reference)
    assert differences, "the oracle finds no difference"
    assert differences[0][0] == BRIDGE_BACKWARD, differences[0]
    return differences


def check_first_divergence(code, report):
    assert code == 1, f"exit {code}, expected 1"
    first = report["first_divergence"]
    fields = ("name", "kind", "phase", "order", "step", "micro_batch")
    assert tuple(first[f] for f in fields) == BRIDGE_BACKWARD, first
    assert first["line"].startswith("first divergence: ") and BRIDGE_BACKWARD[0] in first["line"], first["line"]
    return first["line"]


def main():
    args = arguments(__doc__.splitlines()[0])
    started = time.monotonic()
    failures = []
    with private_temporary_folder() as tmp:
        reference = os.path.join(tmp, "single-process.dump")
        reference_run(reference)
        folders = {name: os.path.join(tmp, name + ".dump") for name in (*CORRECT, *BUGS)}
        run_on_ranks(WORLD, [(bridge_run, {"folder": folders[name], **kwargs})
                             for name, kwargs in (*CORRECT.items(), *BUGS.items())])
        for name in CORRECT:
            differences = oracle_differences(folders[name], reference)
            records, worst = oracle_worst_error(folders[name], reference)
            print(f"{name}: Python oracle: {'pass' if not differences else differences} "
                  f"({records} records, worst relative error {worst:.1e})")
            if differences:
                failures.append(f"{name}: the oracle finds {differences}")
            if args.magic_compare:
                code, report, output = run_magic_compare(args.magic_compare, folders[name], reference, tmp)
                print("\n".join(output.splitlines()[-3:]))
                if code != 0 or not report["passed"] or "PASS" not in output:
                    print(output)
                    failures.append(f"{name}: magic-compare exit {code}, expected 0 and PASS")
        for bug in BUGS:
            try:
                differences = check_oracle_sees_the_bug(folders[bug], reference)
                print(f"{bug}: Python oracle: {len(differences)} records differ, the first "
                      f"{' '.join(map(str, differences[0][0]))} (worst relative error {differences[0][1]:.1e})")
            except AssertionError as e:
                failures.append(f"{bug}: Python oracle: {e}")
            if not args.magic_compare:
                continue
            code, report, output = run_magic_compare(args.magic_compare, folders[bug], reference, tmp)
            try:
                print(f"{bug}: {check_first_divergence(code, report)}")
            except AssertionError as e:
                print(output)
                failures.append(f"{bug}: magic-compare: {e}")
    return verdict(started, failures, "PASS: the bridge's dumps match, and the missing intra-cp sum is named at "
                                      "the bridge's backward")


if __name__ == "__main__":
    sys.exit(main())
