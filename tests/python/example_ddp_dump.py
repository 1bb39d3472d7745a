#!/usr/bin/env python3
"""ctest python.example_ddp_dump: the example of docs/magic-dump-python.md runs as documented
(python/examples/ddp_dump_example.py --out DIR), its DDP dump matches its single-process dump,
judged by the Python oracle and, when given, by magic-compare (exit 0), and every python block of
the document is a passage of the example file or of the bridge demonstration (tests/python/bridge_steps.py,
run by python.bridge_dumps), so the document shows code that runs."""

import os
import re
import subprocess
import sys

from compare_dumps import arguments, oracle_differences, private_temporary_folder, run_magic_compare
from paths import REPOSITORY

EXAMPLE = os.path.join(REPOSITORY, "python", "examples", "ddp_dump_example.py")
BRIDGE = os.path.join(REPOSITORY, "tests", "python", "bridge_steps.py")
DOCUMENT = os.path.join(REPOSITORY, "docs", "magic-dump-python.md")


def check_document_quotes_the_example():
    """Each ```python block's lines (indentation aside) appear, consecutively, in the example or
    in the bridge demonstration."""
    with open(DOCUMENT) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    sources = []
    for path in (EXAMPLE, BRIDGE):
        with open(path) as f:
            sources.append([line.strip() for line in f])
    assert blocks, f"{DOCUMENT} has no python block"
    for block in blocks:
        lines = [line.strip() for line in block.splitlines()]
        assert any(source[i:i + len(lines)] == lines for source in sources for i in range(len(source))), \
            f"{DOCUMENT}: this block is not a passage of {EXAMPLE} or {BRIDGE}:\n{block}"


def main():
    args = arguments(__doc__.splitlines()[0])
    check_document_quotes_the_example()
    with private_temporary_folder() as tmp:
        done = subprocess.run([sys.executable, EXAMPLE, "--out", tmp], capture_output=True, text=True, timeout=300)
        print(done.stdout + done.stderr)
        assert done.returncode == 0, f"the example exited {done.returncode}"
        ddp, single = os.path.join(tmp, "ddp.dump"), os.path.join(tmp, "single.dump")
        differences = oracle_differences(ddp, single)
        assert not differences, f"the oracle finds {differences}"
        if args.magic_compare:
            code, report, output = run_magic_compare(args.magic_compare, ddp, single, tmp)
            print(output)
            assert code == 0 and report["passed"], f"magic-compare exit {code}, expected 0"
    print("PASS: the documented example's DDP run matches its single-process run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
