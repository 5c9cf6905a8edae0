"""The embedded default (dev/demo.py) runs: real mosquitto, the real firmware
under the real MicroPython port on ptys and MQTT, the bridge and its log.
The Spark half has its own tests (tests/host/spark/)."""

import pytest

from tests.host.e2e.e2ekit import demo

# The demo starts mosquitto and the firmware under micropython itself.
pytestmark = [pytest.mark.mosquitto, pytest.mark.micropython]


def test_demo_pipeline_without_spark(tmp_path):
    recs = demo(str(tmp_path / "demo"), 3, "--no-qemu", "--serial-devices", "2", timeout=120)
    nodes = {rec["peer_node"] for rec in recs}
    assert nodes == {"sim-1", "sim-2", "sim-mqtt-1"}
    temps = [rec for rec in recs if tuple(rec["topic"][2:]) == ("sensor", "temp")]
    assert temps and all(rec["seq"] is not None and rec["generation"] == 1 for rec in temps)
