"""The device runtime's heap, on the real MicroPython unix port (dev/devheap.py).

Full runtime: bus + link + UART uplink over a pty + the built-in services +
the example sensor, from the .mpy bundle, driven through a session, telemetry,
sys/config/get and a sys/config/set that loads the validator.

The unix port keeps module code on the heap (boards freeze it into flash;
see firmware/README.md "Memory"), so the heap given is the code's share, as
measured, plus the unix board's 108 KB budget for the runtime's data (76 KB
of objects, sealed sessions' keys and buffers among them, and the link's 32 KB
spool; the workload needs about 100 KB at rest, and ~2 KB more at its
tightest, a sys/config/set loading the validator while a loaded machine
leaves frames in flight: 1 run in 20 failed there in 104 KB); the firmware
itself checks that budget at boot and refuses a config over it.
"""

import json
import os
from pathlib import Path

import pytest

from dev import devheap
from tests.conftest import ROOT

BOARD = os.path.join(ROOT, "boards", "unix.json")

# dev/devheap.py runs the runtime under micropython.
pytestmark = pytest.mark.micropython


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return devheap.bundle(str(tmp_path_factory.mktemp("devheap")))


def test_runtime_runs_with_its_data_in_the_unix_boards_budget(tree):
    budget = json.loads(Path(BOARD).read_text())["budget"]["heap"]
    assert budget == 108 * 1024
    code = devheap.code_heap(tree)
    heap = (code + 1023) // 1024 + budget // 1024
    r = devheap.run(tree, "%dK" % heap, seconds=1.0, board=BOARD)
    assert r["ok"], (r["steps"], r["host"], r["output"])
    # what the firmware measured at READY, as checked against the budget
    assert r["data"] is not None and r["data"] + 16384 <= budget, r["output"]
    print("code %d B, data at READY %d B, ran in %d KB" % (r["code"], r["data"], heap))


def test_config_over_the_heap_budget_is_refused_at_boot(tree):
    # four 1024-slot export feeds (34 KB on 64-bit) cannot fit the unix board's data budget
    # beside the 32 KB spool
    r = devheap.run(
        tree,
        "400K",
        seconds=0.5,
        board=BOARD,
        link={
            "heartbeat": 0.5,
            "out_queue": 1024,
            "exports": [["sensor/#", ""], ["sys/#", ""], ["app/#", ""], ["log/#", ""]],
        },
    )
    assert r["exit"] == 2, r["output"]
    assert "over the unix board's budget of 110592" in r["output"]
    assert "lower queues.bus, link.out_queue" in r["output"]
    assert "Traceback" not in r["output"]
    assert r["steps"] == []  # refused before any session


def test_too_small_a_heap_fails_the_workload(tree):
    # the measurement can fail: 100 KB cannot even hold the code
    r = devheap.run(tree, "100K", seconds=0.5)
    assert not r["ok"]
