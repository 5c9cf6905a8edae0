"""Runs every portable test module under the real MicroPython unix port with a
64 KB heap, from the .mpy bundle; the same modules also run here under pytest."""
import ast
import os
import re

import pytest

from tests.conftest import ROOT, run_micropython

PORTABLE = os.path.join(ROOT, "tests", "portable")
MODULES = sorted(f[:-3] for f in os.listdir(PORTABLE) if f.startswith("test_") and f.endswith(".py"))


def _test_names(mod):
    tree = ast.parse(open(os.path.join(PORTABLE, mod + ".py")).read())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


@pytest.mark.parametrize("mod", MODULES)
def test_module_on_micropython(mpy_tree, mod):
    r = run_micropython(mpy_tree, ["run.py", "tests.portable." + mod])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    ran = set(re.findall(r"^PASS \S+ (\S+)$", r.stdout, re.M))
    # Every test the module defines ran and passed on MicroPython.
    assert ran == _test_names(mod), out
