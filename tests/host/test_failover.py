"""The uplink's failover rules (tests/mpy/failover_cases.py) under CPython
and, from the .mpy bundle, under the real MicroPython unix port, where the
firmware runs. The failover itself, end to end with two brokers and two
bridges: tests/host/test_e2e_failover.py."""
import os
import re
import shutil
import sys

import pytest

from tests.conftest import ROOT, run_micropython
from tools import mpybuild

sys.path.insert(0, os.path.join(ROOT, "tests", "mpy"))
import failover_cases  # noqa: E402

CASES = sorted(n for n in dir(failover_cases) if n.startswith("test_"))


@pytest.mark.parametrize("name", CASES)
def test_case_on_cpython(name):
    getattr(failover_cases, name)()


@pytest.mark.micropython
def test_cases_on_micropython(tmp_path):
    out = str(tmp_path)
    mpybuild.compile_tree(ROOT, ["edgebus", "firmware"], out)
    mpybuild.compile_file(os.path.join(ROOT, "tests", "mpy", "failover_cases.py"),
                          os.path.join(out, "failover_cases.mpy"))
    shutil.copy(os.path.join(ROOT, "tests", "mpy", "run.py"), out)
    r = run_micropython(out, ["run.py", "failover_cases"], heap="96K")
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(re.findall(r"^PASS failover_cases (\S+)$", r.stdout, re.M)) == set(CASES), r.stdout
