"""The bridge's presence on MQTT (docs/protocol.md "MQTT
presence"), with real parts: mosquitto on a free loopback port, the bridge as
its own process (python -m edgebus.bridge.daemon), the device's MQTT transport under
the real micropython binary (tests/mpy/presence_device.py) and the real
firmware on the unix port (tools/sim/fleet.py)."""

import asyncio
import json
import os
import threading
import time

import pytest

from dev.harness.bridge import BridgeProcess
from dev.harness.mqtt import Watcher, retained
from edgebus.link.link import Link
from edgebus.tools.sim.fleet import Fleet
from tests.conftest import ROOT, mpy_script, until, wait_until

PRESENCE = "edgebus/_bridge"
DEVICE_HEAP = "192K"  # core + link (sealed) on the 64-bit unix port


@pytest.fixture
def presence_device(mpy_tree):
    """presence_device(port, node) -> Popen of tests/mpy/presence_device.py
    under micropython, with .lines: its output so far (read by a thread)."""
    for start in mpy_script(mpy_tree, os.path.join(ROOT, "tests", "mpy", "presence_device.py")):

        def run(port, node):
            p = start(["127.0.0.1", str(port), node], DEVICE_HEAP)
            p.lines = []
            threading.Thread(
                target=lambda: p.lines.extend(iter(p.stdout.readline, "")), daemon=True
            ).start()
            return p

        yield run


def test_bridge_presence_is_retained_and_reaches_the_device(tmp_path, broker, presence_device):
    """Retained "online" while the bridge runs; "offline" after a SIGKILL (its
    last will) and after a clean stop (published before DISCONNECT); the
    device transport's on_peer sees each change."""
    bridge = BridgeProcess(str(tmp_path), broker.port, {"d1": "k1"})
    watcher = Watcher(broker.port, [PRESENCE])
    dev = presence_device(broker.port, "d1")

    def peers():
        return [ln.split()[1] for ln in dev.lines if ln.startswith("PEER")]

    async def main():
        await until(lambda: "OPEN\n" in dev.lines, 15)
        assert peers() == []  # nothing retained yet: no bridge ever
        bridge.start()
        await until(lambda: watcher.last(PRESENCE) == b"online", 15)
        assert retained(broker.port, PRESENCE) == (b"online", True)
        await until(lambda: peers() == ["1"], 10)

        bridge.kill()  # no goodbye: the broker's last will
        await until(lambda: watcher.last(PRESENCE) == b"offline", 10)
        assert retained(broker.port, PRESENCE) == (b"offline", True)
        await until(lambda: peers() == ["1", "0"], 10)

        bridge.start()
        await until(lambda: peers() == ["1", "0", "1"], 15)
        assert retained(broker.port, PRESENCE) == (b"online", True)

        assert bridge.stop() == 0  # SIGTERM: the clean stop
        await until(lambda: peers() == ["1", "0", "1", "0"], 10)
        assert retained(broker.port, PRESENCE) == (b"offline", True)
        assert dev.poll() is None and dev.lines.count("OPEN\n") == 1  # one connection throughout

    try:
        asyncio.run(main())
    finally:
        watcher.close()
        bridge.close()
    print("device:", "".join(dev.lines[-6:]))


def test_device_reconnecting_gets_the_retained_presence(tmp_path, broker, presence_device):
    """A device (re)connecting learns at once whether the bridge is there:
    the retained message comes with its subscription."""
    bridge = BridgeProcess(str(tmp_path), broker.port, {"d1": "k1"}).start()
    try:

        async def main():
            await until(lambda: retained(broker.port, PRESENCE, 0.5) == (b"online", True), 15)
            dev = presence_device(broker.port, "d1")
            await until(lambda: any(ln.startswith("PEER 1") for ln in dev.lines), 15)
            bridge.kill()
            dev2 = presence_device(broker.port, "d2")
            await until(lambda: any(ln.startswith("PEER 0") for ln in dev2.lines), 15)

        asyncio.run(main())
    finally:
        bridge.close()


@pytest.mark.micropython
@pytest.mark.skipif(not hasattr(Link, "peer_presence"), reason="needs Link.peer_presence")
def test_firmware_device_follows_a_bridge_restart_by_presence(tmp_path, broker):
    """The real firmware (5 s heartbeat: a 15 s liveness timeout) notices a
    bridge SIGKILL by the bridge's last will, says HELLO again, and has its
    session back once the bridge is up again: its own counters (sys/health,
    mirrored as plain MQTT) show the presence taken (peer_offline) and a
    session ended. Sealed, the word "offline" only makes it check: a PING
    unanswered within 2 s ends the session (docs/protocol.md, MQTT presence)."""
    # The firmware's default heartbeat: 5 s.
    fleet = Fleet(
        str(tmp_path / "fleet"),
        mqtt=1,
        broker=("127.0.0.1", broker.port),
        health_period=0.5,
        link={"heartbeat": 5.0},
    )
    d = fleet.devices[0]
    node = d["node"]
    up, health = "edgebus/%s/up" % node, "dev/%s/sys/health" % node
    bridge = BridgeProcess(
        str(tmp_path), broker.port, {node: d["key"]}, mirror=["dev/+/sys/health"]
    )
    watcher = Watcher(broker.port, [up, health])

    def device_link(since=0.0):
        """The device's link counters from its latest health since `since`."""
        ms = watcher.messages(health, since)
        return json.loads(ms[-1][2])["link"] if ms else None

    try:
        bridge.start()
        fleet.start()
        wait_until(lambda: (bridge.link(node) or {}).get("state") == "up", 60)
        before = wait_until(
            lambda: (lambda k: k if k and k["state"] == "up" else None)(device_link()),
            20,
            lambda: watcher.messages(health),
        )
        t0 = time.monotonic()
        bridge.kill()
        wait_until(lambda: watcher.first_hello(up, t0), 30)  # the device noticed
        noticed = watcher.first_hello(up, t0) - t0
        bridge.start()
        wait_until(lambda: (bridge.link(node) or {}).get("state") == "up", 60)
        t1 = time.monotonic()
        after = wait_until(
            lambda: (lambda k: k if k and k["state"] == "up" else None)(device_link(t1)),
            20,
            lambda: watcher.messages(health, t1),
        )
        assert after["peer_offline"] > before["peer_offline"]  # the last will, taken
        assert after["session_ends"] > before["session_ends"]  # it ended one
        assert after["sessions"] > before["sessions"]
        print("bridge SIGKILL -> device HELLO %.2f s; -> session up %.2f s" % (noticed, t1 - t0))
    finally:
        watcher.close()
        bridge.close()
        fleet.stop()
