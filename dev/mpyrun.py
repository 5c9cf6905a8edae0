"""Run a script under the real MicroPython unix port with edgebus as .mpy.

usage: python -m dev.mpyrun [--heap 64K] script.py [args]
Compiles edgebus/ with mpy-cross into a temporary directory (as a board
would hold it), copies the script there and runs `micropython` on it.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from edgebus.tools.boardkit import mpybuild

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bundle(out, packages=("edgebus",)):
    """Compile packages into out; returns {module path: bytes}."""
    return mpybuild.compile_tree(ROOT, list(packages), out)


def run(script, args=(), heap="64K", packages=("edgebus",), **kw):
    """Run script under micropython with the bundle; returns CompletedProcess."""
    with tempfile.TemporaryDirectory() as d:
        bundle(d, packages)
        shutil.copy(script, os.path.join(d, "main_script.py"))
        return subprocess.run(
            [mpybuild.micropython(), "-X", "heapsize=" + heap, "main_script.py"] + list(args),
            cwd=d,
            **kw,
        )


def main(argv):
    heap = "64K"
    if len(argv) > 1 and argv[0] == "--heap":
        heap, argv = argv[1], argv[2:]
    if not argv:
        print(__doc__)
        return 2
    return run(argv[0], argv[1:], heap).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
