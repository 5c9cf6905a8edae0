"""sys/health fits one frame (firmware/services/health.py fit) under the real
MicroPython unix port and CPython: a report with every section and long
errors, as a WiFi, NTP and sleep device in an outage sends, is trimmed in
steps (zero counters, errors' text, the spool's detail) and says so."""

import json
import subprocess
import sys

import pytest

from edgebus.tools.boardkit import devicefiles, mpybuild

ERR = "open: MqttError: TLS with broker.example:8883 (as broker.example) failed: ECONNREFUSED"
SCRIPT = """
import json, sys
sys.path.insert(0, %(dir)r)
from firmware.services import health
h = json.loads(%(report)r)
for room in (2000, 960, 850, 750):
    d = health.fit(json.loads(%(report)r), room)
    n = len(json.dumps(d, separators=(",", ":")))
    print(json.dumps([room, n, d.get("trimmed", False), d]))
"""


def report():
    link = {k: 0 for k in ("sessions", "gaps", "acked", "forged", "bad_frames", "oversize_out")}
    link.update(state="hello_sent", sid="00003dce03a865c4", last_error=ERR, sessions=3)
    link["spool"] = {"depth": 9, "capacity": 32768, "unsent": 9, "evicted": 0, "bytes": 2300}
    link["spool"].update(oldest_age=21, dropped_unsent=0, refused=0)
    err = {"last_error": ERR}
    return {
        "uptime": 23, "board": "esp32", "manifest": "board.json", "mem_alloc": 61000,
        "link": link, "uplink": dict(err, opens=0, open_failures=6, ends=0, sent=0),
        "network": dict(err, state="up", rssi=-67, joins=1, drops=0, failures=0),
        "clock": dict(err, source="ntp", ntp="pool.ntp.org", offset_ms=-829, syncs=1),
        "sleep": {"every": 300, "cycles": 62, "last_awake": 1.27, "unacked_at_sleep": 0},
    }  # fmt: skip


@pytest.mark.parametrize(
    "exe", [pytest.param("micropython", marks=pytest.mark.micropython), "cpython"]
)
def test_a_report_too_large_for_a_frame_is_trimmed_to_fit(exe):
    code = SCRIPT % {"dir": devicefiles.DEVICE_DIR, "report": json.dumps(report())}
    run = [mpybuild.micropython(), "-c", code] if exe == "micropython" else [sys.executable]
    r = subprocess.run(
        run, input=None if exe == "micropython" else code, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = {
        room: (n, trimmed, d) for room, n, trimmed, d in map(json.loads, r.stdout.split("\n")[:-1])
    }
    assert rows[2000][1] is False and rows[2000][2]["link"]["gaps"] == 0  # fits: as it is
    for room in (960, 850, 750):
        n, trimmed, d = rows[room]
        assert trimmed and n <= room, (room, n)
        assert "gaps" not in d["link"] and d["link"]["sessions"] == 3  # zeros go first
        assert d["sleep"] == report()["sleep"] and d["clock"]["offset_ms"] == -829
    assert rows[960][2]["uplink"]["last_error"] == ERR  # errors kept while they fit
    assert rows[750][2]["uplink"]["last_error"] == ERR[:48]
    assert rows[750][2]["link"]["spool"] == {"depth": 9, "unsent": 9}
