"""What the dump tests share: where python/ is, a temporary folder that the ranks also use, the
Python oracle's comparison of two dumps, and running magic-compare with its JSON report."""

import argparse
import contextlib
import json
import os
import subprocess
import tempfile
import time

from dump_reader import read_dump, worst_relative_error

FP64_TOLERANCE = 1e-9  # docs/dump-format.md's reader judges fp64 records to this worst relative error


def arguments(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--magic-compare", help="the built magic-compare; without it only the Python oracle judges")
    return parser.parse_args()


@contextlib.contextmanager
def private_temporary_folder():
    """A temporary folder, removed at the end, that is also TMPDIR for every process started inside
    (the ranks and their multiprocessing files), so nothing is left in the shared /tmp."""
    saved = os.environ.get("TMPDIR")
    with tempfile.TemporaryDirectory(prefix="magic-pydump-") as folder:
        os.environ["TMPDIR"] = folder
        tempfile.tempdir = None  # re-read TMPDIR
        try:
            yield folder
        finally:
            if saved is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved
            tempfile.tempdir = None


def oracle_differences(candidate, reference):
    """The Python oracle's judgement of dump `candidate` against `reference`: the records (name,
    kind, phase, order, step) whose whole tensors differ beyond FP64_TOLERANCE, are missing or are
    extra, each with its worst relative error (None for missing or extra), in the reference's order."""
    _, want = read_dump(reference)
    _, got = read_dump(candidate)
    assert want, f"{reference} holds no records"
    differences = []
    for identity, expected in want.items():
        if identity not in got:
            differences.append((identity, None))
            continue
        actual = got[identity]
        if actual.shape != expected.shape:
            differences.append((identity, None))
            continue
        error = worst_relative_error(actual.double(), expected.double())
        if error > (FP64_TOLERANCE if expected.is_floating_point() else 0.0):
            differences.append((identity, error))
    differences += [(identity, None) for identity in got if identity not in want]
    return differences


def run_magic_compare(binary, candidate, reference, folder):
    """(exit code, parsed --json report, stdout) of `magic-compare candidate reference`."""
    report_path = os.path.join(folder, "report.json")
    done = subprocess.run([binary, candidate, reference, "--json", report_path], capture_output=True, text=True,
                          timeout=120)
    with open(report_path) as f:
        report = json.load(f)
    os.remove(report_path)
    return done.returncode, report, done.stdout + done.stderr


def verdict(started, failures, passed_line):
    """The test's last lines and its exit code: the failures, or `passed_line`."""
    print(f"({time.monotonic() - started:.1f} s)")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print(passed_line)
    return 0
