"""The 64 KB heap budget: the core plus a device-sized workload (subscriptions,
a watch, a view, retained state, an endpoint answering calls) must run on the
real MicroPython unix port with -X heapsize=64K, from the .mpy bundle."""

import os
import re
import shutil

from tests.conftest import ROOT, run_micropython


def test_device_workload_fits_in_64k(mpy_tree):
    shutil.copy(os.path.join(ROOT, "tests", "mpy", "budget_app.py"), mpy_tree)
    # Imported, not run as a script: a script's folder goes first on
    # sys.path as an absolute path, so every import's path string (and with
    # it the heap's layout) would hang on where pytest's tmp folder lies; a
    # board imports from its root, as '' here.
    r = run_micropython(mpy_tree, ["-c", "import budget_app"], heap="64K")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    m = re.search(r"OK delivered=(\d+) free=(\d+)", out)
    assert m and int(m.group(1)) == 400, out
    print("heap left in 64 KB after the workload: %s bytes" % m.group(2))
