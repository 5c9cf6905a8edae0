"""The embedded default (dev/demo.py) runs: real mosquitto, the real firmware
under the real MicroPython port on ptys and MQTT, the bridge and its log.
The Spark half has its own tests (tests/host/spark/)."""

import subprocess
import sys

import pytest

from edgebus import tlog
from tests.conftest import ROOT

# The demo starts mosquitto and the firmware under micropython itself.
pytestmark = [pytest.mark.mosquitto, pytest.mark.micropython]


def test_demo_pipeline_without_spark(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dev.demo",
            "--seconds",
            "6",
            "--no-spark",
            "--no-qemu",
            "--serial-devices",
            "2",
            "--out",
            str(tmp_path / "demo"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 of 3 device links had a session" in r.stdout, r.stdout
    recs = [rec for _, rec in tlog.read_log(str(tmp_path / "demo" / "telemetry"))]
    nodes = {rec["peer_node"] for rec in recs}
    assert nodes == {"sim-1", "sim-2", "sim-mqtt-1"}
    temps = [rec for rec in recs if tuple(rec["topic"][2:]) == ("sensor", "temp")]
    assert temps and all(rec["seq"] is not None and rec["generation"] == 1 for rec in temps)
