"""The uplink's failover rules (tests/mpy/failover_cases.py) under CPython
and, from the .mpy bundle, under the real MicroPython unix port, where the
firmware runs. The failover itself, end to end with two brokers and two
bridges: tests/host/e2e/test_e2e_failover.py."""

import os
import re
import shutil
import sys

import pytest

from edgebus.tools.boardkit import mpybuild
from tests.conftest import ROOT, run_micropython

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
    mpybuild.compile_file(
        os.path.join(ROOT, "tests", "mpy", "failover_cases.py"),
        os.path.join(out, "failover_cases.mpy"),
    )
    shutil.copy(os.path.join(ROOT, "tests", "mpy", "run.py"), out)
    r = run_micropython(out, ["run.py", "failover_cases"], heap="96K")
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(re.findall(r"^PASS failover_cases (\S+)$", r.stdout, re.M)) == set(CASES), r.stdout


class _Ctx:
    """What probe() reads of the firmware's ctx: the config's node and a log."""

    def __init__(self, node):
        self.config = {"node": node}
        self.lines = []

    def log(self, msg):
        self.lines.append(msg)


def _retain(port, topic, payload):
    import paho.mqtt.client as paho

    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="failover-test-retain")
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.publish(topic, payload, qos=1, retain=True).wait_for_publish(5)
    c.disconnect()
    c.loop_stop()


def _retained_under(port, prefix):
    """The retained messages under prefix/#: those the broker sends on the
    subscription, all in by the time a marker published after it arrives."""
    import queue

    import paho.mqtt.client as paho

    got, marker = [], queue.Queue()

    def on_message(c, u, m):
        if m.topic == prefix + "/marker":
            marker.put(True)
        elif m.retain:
            got.append((m.topic, m.payload))

    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="failover-test-look")
    c.on_message = on_message
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.subscribe(prefix + "/#", qos=1)[1]
    c.publish(prefix + "/marker", b"", qos=1).wait_for_publish(5)
    marker.get(timeout=10)
    c.disconnect()
    c.loop_stop()
    return got


@pytest.mark.mosquitto
def test_mqtt_probe_says_alive_only_for_a_retained_online_presence():
    import asyncio
    import time

    from dev.broker import Mosquitto
    from firmware import uplink_mqtt

    ctx = _Ctx("d1")
    with Mosquitto() as broker:
        gw = {"kind": "mqtt", "host": "127.0.0.1", "port": broker.port, "prefix": "p"}

        def probe(timeout=1.0):
            t0 = time.monotonic()
            alive = asyncio.run(uplink_mqtt.probe(ctx, gw, timeout))
            return alive, time.monotonic() - t0

        # No bridge ever said anything: no answer within the timeout.
        alive, took = probe()
        assert alive is False and took < 3.0
        _retain(broker.port, "p/_bridge", b"offline")  # a bridge's last will
        assert probe()[0] is False
        _retain(broker.port, "p/_bridge", b"online")
        alive, took = probe(5.0)
        assert alive is True and took < 2.0  # the retained answer, at once
        # Another prefix is another gateway: its bridge is not this one.
        assert asyncio.run(uplink_mqtt.probe(ctx, dict(gw, prefix="q"), 0.5)) is False
        # A probe has no presence of its own: nothing of this node is left
        # retained on the broker (it used to leave <prefix>/<node>/probe).
        assert _retained_under(broker.port, "p/d1") == []
        broker.stop()
        alive, took = probe(5.0)
        assert alive is False and took < 2.0  # refused at once
