"""The repository's root, and python/ on sys.path so that `import magic_dump` finds the writer
under test (spawned ranks inherit sys.path)."""

import os
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(REPOSITORY, "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPOSITORY, "python"))
