"""edgebus fleet: simulated devices (the real firmware on the real MicroPython
unix port) against a real mosquitto and the real bridge."""
import asyncio
import os
import signal
import subprocess
import sys

import pytest

from bridge import config as bridge_config
from bridge.daemon import Bridge
from tests.conftest import ROOT, until
from dev.broker import Mosquitto
from tools.fleet import Fleet

# The fleet's devices are the firmware under micropython.
pytestmark = pytest.mark.micropython


@pytest.mark.mosquitto
def test_five_devices_over_mqtt_come_up_answer_and_survive_a_broker_restart(tmp_path):
    with Mosquitto() as broker, Fleet(tmp_path / "fleet", mqtt=5,
                                      broker=("127.0.0.1", broker.port)) as fleet:
        fleet.start()
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        cfg = bridge_config.parse(
            dict(parts, bridge={"state_dir": str(tmp_path / "state"), "heartbeat": 1.0}))
        nodes = [d["node"] for d in fleet.devices]

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            c = b.bus.connect()
            view = c.retained_view("dev/+/sys/info")
            await until(lambda: len(view) == 5, 40)
            assert sorted(m.topic[1] for m in view.snapshot()) == sorted(nodes)

            async def config_of(n):
                topic = ("dev", n, "sys", "config", "get")
                await until(lambda: topic in b.bus.endpoints())
                return await c.call(topic, "node", timeout=5)
            assert await asyncio.gather(*[config_of(n) for n in nodes]) == nodes
            links = [b.links["mqtt:" + n] for n in nodes]
            before = [l.counters["sessions"] for l in links]
            broker.stop()
            await asyncio.sleep(0.5)
            broker.start()
            try:
                await until(lambda: all(l.status == "up" and l.counters["sessions"] > s
                                        for l, s in zip(links, before)), 40)
            except AssertionError:
                raise AssertionError([(l.link_id, l.status, l.counters, l.last_error,
                                       b.mqtt.stats()) for l in links])
            assert all(l.generation == 1 for l in links)      # the same boots
            assert await asyncio.gather(*[config_of(n) for n in nodes]) == nodes
            b.stop()
            await t
        asyncio.run(main())


def test_fleet_command_prints_the_bridge_config(tmp_path):
    frag = tmp_path / "fleet.toml"
    p = subprocess.Popen([sys.executable, "-m", "tools.cli", "fleet", "--devices", "2",
                          "--out", str(tmp_path / "f"), "--config-out", str(frag)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = ""
        while "Ctrl-C" not in line:
            line = p.stdout.readline()
            assert line, "fleet exited early"
        cfg = bridge_config.parse(__import__("tomllib").loads(frag.read_text()))
        assert [d.node for d in cfg.serial] == ["sim-1", "sim-2"]
        assert all(os.path.exists(d.port) for d in cfg.serial)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    assert p.returncode == 0
