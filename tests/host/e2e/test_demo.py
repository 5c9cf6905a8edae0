"""The demo (dev/demo.py) end to end: real mosquitto stopped and restarted in
the middle, the real firmware under the real MicroPython port on a pty and
over MQTT, the bridge and its log, then Spark: the ingest job, its delivery
audit and `edgebus report`, whose audit line says nothing was lost and how
late the spooled readings came."""

import os
import re

import pytest

from dev.harness.process import run_module
from edgebus import tlog
from tests.host.spark.sparkkit import spark_env

# The demo starts mosquitto, the firmware under micropython and Spark itself.
pytestmark = [pytest.mark.mosquitto, pytest.mark.micropython, pytest.mark.spark]


def test_demo_with_a_broker_outage_and_its_audit(tmp_path):
    pytest.importorskip("pyspark")
    out = str(tmp_path / "demo")
    r = run_module(
        "dev.demo",
        *("--seconds", "8", "--outage", "4", "--outage-at", "2"),
        *("--no-qemu", "--serial-devices", "1", "--out", out),
        env=spark_env(),
        timeout=420,
    )
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert "2 of 2 device links had a session" in r.stdout, text
    assert "demo: broker outage: mosquitto stopped for 4 s" in r.stdout
    recs = [rec for _, rec in tlog.read_log(os.path.join(out, "telemetry"))]
    assert {rec["peer_node"] for rec in recs} == {"sim-1", "sim-mqtt-1"}
    temps = [rec for rec in recs if tuple(rec["topic"][2:]) == ("sensor", "temp")]
    assert temps and all(rec["seq"] is not None and rec["generation"] == 1 for rec in temps)
    # The MQTT device's readings of the outage came late, none was lost.
    m = re.search(
        r"^audit: nothing lost; (\d+) readings came late, p50 (\S+) s, p99 (\S+) s", r.stdout, re.M
    )
    assert m, text
    late = [
        rec for rec in recs if rec["peer_node"] == "sim-mqtt-1" and (rec["extra"] or {}).get("late")
    ]
    assert int(m.group(1)) >= len(late) > 0
    assert float(m.group(3)) >= 1.0  # spooled for seconds, not milliseconds
    assert os.path.getsize(os.path.join(out, "audit.png")) > 10000
    assert not [ln for ln in text.splitlines() if "WARN" in ln], text
