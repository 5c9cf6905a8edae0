"""The reliability suite: faults, bad input, security, load.

Short by default (CI runs it with the rest of pytest); long with ``--soak``
or ``EDGEBUS_SOAK=1``. ``python -m dev.soak`` runs the long form and writes
RELIABILITY.md from what the tests record here: each test calls
``rel.record(case, tried=N, **figures)`` once its assertions have held;
outcomes come from pytest's junit XML."""

import json
import os
import time

import pytest

RESULTS = os.environ.get("EDGEBUS_REL_OUT")  # a JSON-lines file, set by dev.soak


def _write(row):
    if RESULTS:
        with open(RESULTS, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")


class Rel:
    def __init__(self, soak, nodeid):
        self.soak = soak
        self.nodeid = nodeid
        self.t0 = time.monotonic()

    def n(self, short, long):
        """An iteration count: ``short`` in CI, ``long`` in the soak run."""
        return long if self.soak else short

    def record(self, case, tried, **figures):
        row = {
            "kind": "figures",
            "case": case,
            "test": self.nodeid,
            "tried": tried,
            "soak": self.soak,
            "seconds": round(time.monotonic() - self.t0, 1),
        }
        row.update(figures)
        _write(row)
        print("REL", json.dumps(row, default=str))


@pytest.fixture
def rel(request):
    soak = request.config.getoption("--soak") or os.environ.get("EDGEBUS_SOAK") == "1"
    return Rel(soak, request.node.nodeid)


@pytest.fixture
def rel_device(mpy_tree):
    """Start tests/reliability/rel_device.py under the real micropython binary:
    rel_device(uplink, key, node, rate, count, boot, heap="288K") -> Popen.
    Killed at the end of the test. 288K: the unix port keeps the .mpy code on
    its heap beside the device's 64 KB spool; every serial test here failed
    at 230K and passed at 260K (0.9x, the 10% to spare of
    test_portable_on_micropython.py's heaps)."""
    from tests.conftest import ROOT, mpy_script

    for start in mpy_script(mpy_tree, os.path.join(ROOT, "tests", "reliability", "rel_device.py")):
        yield lambda uplink, key, node, rate, count, boot, heap="288K": start(
            [uplink, key, node, str(rate), str(count), boot], heap
        )
