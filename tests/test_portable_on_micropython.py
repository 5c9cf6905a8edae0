"""Runs every portable test module under the real MicroPython unix port, from
the .mpy bundle; the same modules also run here under pytest.

Heap: the unix port is 64-bit, so the core takes ~38 KB after import here
against roughly half that on 32-bit boards. The behaviour suite runs in an
80 KB heap so that its own test code has room; the 64 KB budget itself is
checked by tests/test_mpy_budget.py with a device-sized workload. A module
that imports more than the core (the link) declares its heap with a
module-level ``MPY_HEAP = "96K"`` and a comment saying why.
Each declared heap leaves 10% to spare (every module passes, three runs
under load, at 0.9x its heap): the link tests run on real time, and the
unix port's heap fragments differently between runs, so a heap at the edge
fails a 2 KB allocation with 30 KB free now and then.
"""

import ast
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_micropython

PORTABLE = os.path.join(ROOT, "tests", "portable")
DEFAULT_HEAP = "80K"
MODULES = sorted(
    f[:-3] for f in os.listdir(PORTABLE) if f.startswith("test_") and f.endswith(".py")
)


def _module(mod):
    return ast.parse(Path(os.path.join(PORTABLE, mod + ".py")).read_text())


def _test_names(mod):
    return {
        n.name
        for n in _module(mod).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    }


def _heap(mod):
    for n in _module(mod).body:
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and getattr(n.targets[0], "id", None) == "MPY_HEAP"
        ):
            return n.value.value
    return DEFAULT_HEAP


@pytest.mark.parametrize("mod,heap", [(m, _heap(m)) for m in MODULES])
def test_module_on_micropython(mpy_tree, mod, heap):
    r = run_micropython(mpy_tree, ["run.py", "tests.portable." + mod], heap=heap)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    ran = set(re.findall(r"^PASS \S+ (\S+)$", r.stdout, re.M))
    # Every test the module defines ran and passed on MicroPython.
    assert ran == _test_names(mod), out
