"""Duty-cycle devices (firmware/sleep.py) and the bridge's mailbox
(bridge/mailbox.py), with real parts: mosquitto on a free loopback port, the
bridge in this process with a log, and two fleet devices (the real firmware
on the MicroPython unix port) waking every 2 s on the deep-sleep simulator
(firmware/sleepsim.py), the fleet starting each again at its wake; one
wake without the broker leaves its readings to the flash journal."""

import asyncio
import collections
import os

import pytest

import edgebus
from edgebus import tlog
from edgebus.bridge import config, status
from edgebus.bridge.daemon import Bridge
from edgebus.tools.commands.status import render
from edgebus.tools.sim.fleet import SLEEP_EXIT, Fleet
from tests.conftest import until

# A service the test gives the devices: what the device's bus holds under
# cmd/ (the host's retained desired state, imported) published back as
# sensor/cmd once per wake.
CMDECHO = """
import asyncio

async def start(ctx, opts):
    c = ctx.connect("cmdecho")
    await asyncio.sleep(0.3)
    v = c.retained_view("cmd/#")
    for m in v.snapshot():
        c.publish("sensor/cmd", {"topic": "/".join(m.topic), "value": m.payload})
"""


def _asleep(b, node):
    lk = b.links["mqtt:" + node]
    return lk.status != "up" and b.mailbox.sleep_of(node) is not None


@pytest.mark.micropython
def test_duty_cycle_devices_and_the_mailbox(tmp_path, broker):
    fleet = Fleet(
        str(tmp_path / "fleet"),
        mqtt=2,
        broker=("127.0.0.1", broker.port),
        period=0.3,
        health_period=0.5,
        journal=True,
        config={
            "sleep": {"every": 2, "awake": 3, "linger": 1.0},
            "services": [{"module": "temp", "period": 0.3}, "cmdecho"],
        },
    )
    a, z = (d["node"] for d in fleet.devices)
    for d in fleet.devices:
        with open(os.path.join(d["dir"], "cmdecho.py"), "w") as f:
            f.write(CMDECHO)
    log_dir = tmp_path / "log"
    cfg = config.parse(
        {
            "bridge": {"state_dir": str(tmp_path / "state"), "heartbeat": 0.5},
            "log": {"dir": str(log_dir), "commit_ms": 50},
            "mqtt": {
                "url": "mqtt://127.0.0.1:%d" % broker.port,
                "devices": [{"node": d["node"], "key": d["key"]} for d in fleet.devices],
            },
            "mailbox": {"entries": 3, "margin": 1},
        }
    )

    async def main():
        b = Bridge(cfg)
        task = asyncio.create_task(b.run())
        me = b.bus.connect(principal={"uid": os.getuid()})  # a local user, as the socket's
        stranger = b.bus.connect(principal={"uid": 4242})  # one without an [[acl]] entry
        sub = b.conn.subscribe("dev/#", queue_len=4096)
        fleet.start()
        await until(lambda: _asleep(b, a), 20, "%s asleep" % a)
        # Asleep, not down: the status page and the fleet's totals say so.
        st = status.page(b, None)
        assert st["links"]["mqtt:" + a]["state"] == "asleep"
        assert st["links"]["mqtt:" + a]["asleep_until"] > 0
        assert st["fleet"]["states"].get("asleep", 0) >= 1
        assert "asleep until" in render(st)  # edgebus status's table
        # Desired state retained, a call queued and one waiting, while it sleeps.
        b.conn.retain("dev/%s/cmd/led" % a, {"on": True})
        cget = "dev/%s/sys/config/get" % a
        with pytest.raises(edgebus.NoRoute):
            await me.call(cget, None)
        held = await me.call("bridge/mailbox", {"topic": cget, "value": None, "wait": False})
        assert held["held"] is True and held["node"] == a and held["expires"] > held["wakes"]
        waiting = asyncio.create_task(
            me.call("bridge/mailbox", {"topic": cget, "wait": True}, timeout=15)
        )
        # A topic that is no endpoint of the device (sys/info is retained):
        # failed at the wake, once its routes are back, not held to expiry.
        info = "dev/%s/sys/info" % a
        nothing = asyncio.create_task(
            me.call("bridge/mailbox", {"topic": info, "wait": True}, timeout=15)
        )
        with pytest.raises(edgebus.Failed, match="denied"):
            await stranger.call("bridge/mailbox", {"topic": cget, "wait": False})
        # The next wake: the waiting caller has its reply, the queued call's
        # outcome is retained, the desired state reached the device.
        assert (await waiting)["node"] == a
        with pytest.raises(edgebus.Failed, match="offers no endpoint " + info):
            await nothing
        out = b.bus.connect().retained_view("bridge/mailbox/+")
        await until(lambda: out.get("bridge/mailbox/" + a), 10, "the queued call's outcome")
        assert out.get("bridge/mailbox/" + a).payload["replied"]["node"] == a
        c = b.mailbox.counters
        assert (c["held"], c["delivered"], c["no_endpoint"]) == (3, 2, 1)

        # z sleeps and never wakes (a power cut): a full mailbox is refused,
        # what it holds expires, and past its wake's margin it is a fault.
        await until(lambda: _asleep(b, z), 20, "%s asleep" % z)
        fleet.kill(z)
        zget = {"topic": "dev/%s/sys/config/get" % z, "wait": False, "expiry": 0.5}
        for _ in range(3):
            await me.call("bridge/mailbox", zget)
        with pytest.raises(edgebus.Failed, match="full"):
            await me.call("bridge/mailbox", zget)
        await until(lambda: b.mailbox.counters["expired"] == 3, 10, "the expiries")
        await until(lambda: b.mailbox.sleep_of(z)["state"] == "overslept", 10, "overslept")
        assert status.page(b, None)["fleet"]["states"].get("overslept") == 1
        c = b.mailbox.counters
        assert (c["refused_full"], c["denied"]) == (1, 1)

        # A wake without the broker: a sleeps with its readings unacknowledged,
        # on flash, and the next wake delivers them.
        await until(lambda: b.links["mqtt:" + a].status == "up", 20, a + " awake")
        n = fleet.devices[0]["sleeps"]
        broker.stop()
        await until(lambda: fleet.devices[0]["sleeps"] > n, 20, a + " asleep in the outage")
        broker.start()
        await until(lambda: fleet.devices[0]["sleeps"] > n + 2, 30, "two more cycles of " + a)
        await until(lambda: _asleep(b, a), 20, "%s asleep" % a)
        b.stop()
        await task
        return sub

    try:
        sub = asyncio.run(main())
    finally:
        fleet.stop()
    d = fleet.devices[0]
    assert d["restarts"] == 0 and set(d["exits"]) == {SLEEP_EXIT}
    seen = collections.Counter()
    readings = collections.defaultdict(list)
    echoed = []
    for _, r in tlog.read_log(str(log_dir)):
        if r.get("peer_node") != a or r["seq"] is None:  # sequenced: the readings
            continue
        seen[(r["peer_sid"], r["seq"])] += 1
        if r["topic"][2:] == ("sensor", "temp"):
            readings[r["peer_sid"]].append(r["payload"]["n"])
        if r["topic"][2:] == ("sensor", "cmd"):
            echoed.append(r["payload"])
    assert not [k for k, n in seen.items() if n > 1]  # none twice
    assert len(readings) >= 4  # one boot per wake
    for ns in readings.values():  # each wake's readings, none lost (the outage's too)
        assert sorted(ns) == list(range(len(ns)))
    assert {"topic": "cmd/led", "value": {"on": True}} in echoed
    health = []
    while True:
        m = sub.recv_nowait()
        if m is None:
            break
        if m.topic[1:] == (a, "sys", "health"):
            health.append(m.payload["sleep"])
    assert max(h["cycles"] for h in health) >= 3  # sys/health counts the cycles
    assert max(h["unacked_at_sleep"] or 0 for h in health) > 0  # the outage's wake
