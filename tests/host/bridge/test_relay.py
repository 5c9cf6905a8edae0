"""Relay through the bridge: one device calls another's action, one over a
serial line and one over MQTT, both the real firmware on MicroPython."""

import asyncio
import json
import os

import pytest

from dev.broker import Mosquitto
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.tools.sim.fleet import Fleet, merge
from tests.conftest import until

pytestmark = [pytest.mark.micropython, pytest.mark.mosquitto]

# A service of the test's own, as a user adds one: call the target now and
# then and publish what came back (or why not) on sensor/relay.
CALLER = """
import asyncio

async def start(ctx, opts):
    c = ctx.connect("caller")
    while True:
        try:
            v = {"ok": await c.call(opts["target"], "node", timeout=3)}
        except Exception as e:
            v = {"err": "%s %s" % (type(e).__name__, e)}
        c.publish("sensor/relay", v)
        await asyncio.sleep(0.3)
"""


def test_a_device_calls_another_through_the_bridge_over_serial_and_mqtt(tmp_path):
    with (
        Mosquitto() as broker,
        Fleet(
            tmp_path / "fleet",
            serial=1,
            mqtt=1,
            broker=("127.0.0.1", broker.port),
            period=5,
            link={"heartbeat": 1.0, "import_calls": [["host/#", ""], ["dev/#", ""]]},
        ) as fleet,
    ):
        with open(os.path.join(fleet.bundle, "caller.py"), "w") as f:
            f.write(CALLER)
        ser, mq = fleet.devices
        for d, other in ((ser, mq), (mq, ser)):
            with open(d["config"]) as f:
                c = json.load(f)
            c["services"].append(
                {"module": "caller", "target": "dev/%s/sys/config/get" % other["node"]}
            )
            with open(d["config"], "w") as f:
                json.dump(c, f)
        fleet.start()
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        cfg = bridge_config.parse(
            merge(
                parts,
                {
                    "bridge": {
                        "state_dir": str(tmp_path / "state"),
                        "heartbeat": 1.0,
                        "relay_calls": ["dev/+/sys/config/get"],
                    }
                },
            )
        )

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            seen = {}
            sub = b.bus.connect().subscribe("dev/+/sensor/relay", queue_len=16)

            async def collect():
                async for m in sub:
                    seen[m.topic[1]] = m.payload

            ct = asyncio.create_task(collect())
            try:
                await until(
                    lambda: (
                        seen.get(ser["node"]) == {"ok": mq["node"]}
                        and seen.get(mq["node"]) == {"ok": ser["node"]}
                    ),
                    60,
                )
            except AssertionError:
                raise AssertionError((seen, {k: l.stats()["counters"] for k, l in b.links.items()}))
            # Each device's calls entered the host bus over its own link.
            for lid in ("serial:" + ser["node"], "mqtt:" + mq["node"]):
                assert b.links[lid].stats()["counters"]["calls_in"] >= 1
            ct.cancel()
            b.stop()
            await t

        asyncio.run(main())
