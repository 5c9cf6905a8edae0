"""edgebus fleet: simulated devices (the real firmware on the real MicroPython
unix port) against a real mosquitto and the real bridge."""

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import tomllib

import pytest

from dev.broker import Mosquitto, free_port
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.bridge.keystore import KeyStore
from edgebus.tools.sim.fleet import START_LIMIT, Fleet, merge
from tests.conftest import ROOT, until, wait_until

# The fleet's devices are the firmware under micropython.
pytestmark = pytest.mark.micropython


def bridge_for(fleet, tmp_path, port=None, **bridge):
    """The Config of a bridge beside ``fleet`` (its devices, and its keystore
    as [bridge] keys), its state in tmp_path, with more [bridge] settings."""
    parts = fleet.bridge_config(("127.0.0.1", port) if port else None)
    return bridge_config.parse(
        merge(parts, {"bridge": dict(state_dir=str(tmp_path / "state"), **bridge)})
    )


@pytest.mark.mosquitto
def test_five_devices_over_mqtt_come_up_answer_and_survive_a_broker_restart(tmp_path):
    with (
        Mosquitto() as broker,
        Fleet(tmp_path / "fleet", mqtt=5, broker=("127.0.0.1", broker.port)) as fleet,
    ):
        fleet.start()
        cfg = bridge_for(fleet, tmp_path, broker.port, heartbeat=1.0)
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
                await until(
                    lambda: all(
                        l.status == "up" and l.counters["sessions"] > s
                        for l, s in zip(links, before)
                    ),
                    40,
                )
            except AssertionError:
                raise AssertionError(
                    [(l.link_id, l.status, l.counters, l.last_error, b.mqtt.stats()) for l in links]
                )
            assert all(l.generation == 1 for l in links)  # the same boots
            assert await asyncio.gather(*[config_of(n) for n in nodes]) == nodes
            b.stop()
            await t

        asyncio.run(main())


def test_fleet_command_prints_the_bridge_config_and_a_bridge_beside_it_links_its_devices(
    tmp_path,
):
    """`edgebus fleet` keeps its devices' random keys in the keystore --keys
    names (here the bridge's default, <state_dir>/keys) and says so on its
    console; neither the console nor the fragment holds a key; a bridge with
    the fragment under its own [bridge] table gets a session with each device."""
    frag, state = tmp_path / "fleet.toml", tmp_path / "state"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgebus.tools.cli",
            "fleet",
            "--devices",
            "2",
            "--out",
            str(tmp_path / "f"),
            "--keys",
            str(state / "keys"),
            "--config-out",
            str(frag),
            "--board",
            "esp32-s3",
            "--journal",
            "--set",
            "health_period=1",
            "--set",
            "link.spool=40000",
            "--set",
            "queues.full=reject_newest",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        text = ""
        while "Ctrl-C" not in text:
            line = p.stdout.readline()
            assert line, "fleet exited early: " + text
            text += line
        assert "board esp32-s3: spool 32768 B, bus queue 16, flash journal" in text, text
        assert (
            "edgebus fleet: the devices' keys: random, new at each run, in the keystore %s "
            % (state / "keys")
        ) in text, text
        devs = [
            json.loads((tmp_path / "f" / "devices" / n / "config.json").read_text())
            for n in ("sim-1", "sim-2")
        ]
        store = KeyStore(str(state / "keys"))
        for dev in devs:
            assert store.read(dev["node"])["key"] == dev["key"]
            assert dev["key"] not in text and dev["key"] not in frag.read_text()
        assert devs[1]["board"] == "esp32-s3" and devs[1]["health_period"] == 1
        assert devs[1]["link"] == {"heartbeat": 1.0, "journal": "journal", "spool": 40000}
        assert devs[1]["queues"] == {"full": "reject_newest"}
        cfg = bridge_config.parse(
            tomllib.loads(
                '[bridge]\nstate_dir = "%s"\nheartbeat = 1.0\n\n%s' % (state, frag.read_text())
            )
        )
        assert [(d.node, d.key) for d in cfg.serial] == [("sim-1", None), ("sim-2", None)]
        assert all(os.path.exists(d.port) for d in cfg.serial)

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            ids = ["serial:" + d.node for d in cfg.serial]
            await until(
                lambda: all(b.links.get(i) and b.links[i].counters.get("sessions") for i in ids), 40
            )
            got = [(b.links[i].status, b.links[i].counters.get("auth_failures", 0)) for i in ids]
            b.stop()
            await t
            return got

        assert asyncio.run(main()) == [("up", 0), ("up", 0)]
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
        p.stdout.close()
    assert p.returncode == 0


def test_each_run_draws_new_random_keys_into_the_keystore(tmp_path):
    """No key is derived from the node: two runs in one directory give each
    device a key of its own, 32 random bytes, new at the second run, held in
    its config and (mode 0600) in the fleet's keystore."""
    runs = []
    for _ in range(2):
        with Fleet(tmp_path / "fleet", serial=2) as fleet:
            store = KeyStore(fleet.keys)
            assert fleet.keys == str(tmp_path / "fleet" / "keys")
            for d in fleet.devices:
                with open(d["config"]) as f:
                    assert json.load(f)["key"] == d["key"]
                assert store.read(d["node"])["key"] == d["key"]
                assert os.stat(store.file(d["node"])).st_mode & 0o777 == 0o600
            runs.append([d["key"] for d in fleet.devices])
    keys = runs[0] + runs[1]
    assert all(re.fullmatch("[0-9a-f]{64}", k) for k in keys), keys
    assert len(set(keys)) == 4, keys


@pytest.mark.parametrize(
    "args,why",
    [
        (["--set", "spool"], "--set takes KEY=VALUE"),
        (["--set", "link..spool=1"], "--set takes KEY=VALUE"),
        (
            ["--set", "health_period=1", "--set", "health_period.x=2"],
            "health_period is set to a value",
        ),
        (["--board", "esp33"], 'unknown board "esp33" (did you mean "esp32"?)'),
        (["--board", "linux-edge"], "board linux-edge runs CPython"),
    ],
)
def test_fleet_command_refuses_bad_options_in_one_line(tmp_path, args, why):
    r = subprocess.run(
        [sys.executable, "-m", "edgebus.tools.cli", "fleet", "--out", str(tmp_path)] + args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and why in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


REBOOTS = START_LIMIT + 1  # more than the start limit allows crashes


@pytest.mark.mosquitto
def test_a_device_told_to_reboot_comes_back_under_a_new_boot_while_the_others_run_on(tmp_path):
    """The fleet supervises like systemd's Restart=always: sys/reboot ends the
    device's process with status 3, the fleet starts it again (counted), and
    the other devices keep their sessions. With --journal each device keeps
    its flash journal in its own directory."""
    with (
        Mosquitto() as broker,
        Fleet(
            tmp_path / "fleet",
            mqtt=2,
            period=0.1,
            broker=("127.0.0.1", broker.port),
            journal=True,
            config={"link": {"journal_bytes": 65536}},
        ) as fleet,
    ):
        fleet.start()
        cfg = bridge_for(fleet, tmp_path, broker.port, heartbeat=1.0)
        one, other = [d["node"] for d in fleet.devices]

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            c = b.bus.connect()
            view = c.retained_view("dev/+/sys/info")
            await until(lambda: len(view) == 2, 40)
            l1, l2 = b.links["mqtt:" + one], b.links["mqtt:" + other]
            sid1, sid2, s2 = l1.peer_sid, l2.peer_sid, l2.counters["sessions"]
            topic = ("dev", one, "sys", "reboot")
            await until(lambda: topic in b.bus.endpoints(), 20)
            assert (await c.call(topic, None, timeout=5))["rebooting"] is True
            await until(lambda: l1.status == "up" and l1.peer_sid not in (None, sid1), 40)
            n2 = l2.counters["imported"]
            await until(lambda: l2.counters["imported"] > n2 + 10, 20)
            info = view.get(("dev", one, "sys", "info")).payload
            res = (l1.generation, l2.peer_sid == sid2, l2.counters["sessions"] == s2, info)
            # A reset is not a crash: quick reboots in a row (as updates
            # rolled back make) never reach the start limit.
            for _ in range(REBOOTS - 1):
                sid = l1.peer_sid
                await until(lambda: topic in b.bus.endpoints(), 20)
                assert (await c.call(topic, None, timeout=5))["rebooting"] is True
                await until(lambda: l1.status == "up" and l1.peer_sid not in (None, sid), 40)
            b.stop()
            await t
            return res

        gen, same_boot, same_session, info = asyncio.run(main())
        assert gen == 2 and same_boot and same_session
        d1, d2 = fleet.devices
        assert d1["restarts"] == REBOOTS and d1["exits"] == [3] * REBOOTS
        assert d2["restarts"] == 0 and d2["exits"] == [] and fleet.running() == [one, other]
        assert info["manifest"] == "board.json" and info["queues"]["spool"] == 32768
        for d in fleet.devices:  # each device's own journal, made by the device
            assert os.path.isdir(os.path.join(d["dir"], "journal")), d["node"]
            with open(d["config"]) as f:
                assert json.load(f)["link"] == {
                    "heartbeat": 1.0,
                    "journal": "journal",
                    "journal_bytes": 65536,
                }
        with open(os.path.join(d1["dir"], "bootcount")) as f:
            assert f.read().strip() == str(REBOOTS + 1)


class MuteBroker:
    """A stand-in broker: accepts TCP on a port and never answers (an
    overloaded or wedged broker); counts the connections it took."""

    def __init__(self, port):
        self.sock = socket.create_server(("127.0.0.1", port))
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        self.thread.join(5)
        for c in self.conns:
            c.close()


@pytest.mark.mosquitto
def test_a_device_gives_up_on_a_broker_that_never_answers_and_comes_back(tmp_path):
    """Every network wait has a deadline: a broker that accepts TCP and never
    sends CONNACK costs a device connect_timeout per try, not its uplink; once
    a real broker answers on that port, the session comes up and every reading
    taken meanwhile is delivered from the spool."""
    port = free_port()
    mute = MuteBroker(port)
    try:
        fleet = Fleet(
            tmp_path / "fleet",
            mqtt=1,
            broker=("127.0.0.1", port),
            period=0.2,
            config={"uplink": {"connect_timeout": 0.5}},
        )
        with fleet:
            fleet.start()
            d = fleet.devices[0]
            wait_until(lambda: len(mute.conns) >= 3, 30, lambda: mute.conns)  # it tried again
            with open(d["log"]) as f:
                text = f.read()
            assert "open: MqttError: no CONNACK from 127.0.0.1:%d within 0.5 s" % port in text
            mute.close()
            with Mosquitto(port) as broker:
                cfg = bridge_for(fleet, tmp_path, broker.port)

                async def main():
                    b = Bridge(cfg)
                    t = asyncio.create_task(b.run())
                    temp = b.bus.connect().subscribe(
                        "dev/%s/sensor/temp" % d["node"], queue_len=256
                    )
                    health = b.bus.connect().subscribe("dev/%s/sys/health" % d["node"])
                    first = await asyncio.wait_for(temp.recv(), 40)
                    h = (await asyncio.wait_for(health.recv(), 20)).payload
                    b.stop()
                    await t
                    return first, h

                first, h = asyncio.run(main())
    finally:
        mute.close()
    assert first.payload["n"] == 0 and first.origin.extra.get("late") is True
    assert h["uplink"]["open_failures"] >= 2 and h["link"]["gaps"] == 0, h


@pytest.mark.mosquitto
def test_the_network_step_waits_for_the_access_point_and_rejoins_after_it_drops(tmp_path):
    """A device with a WiFi network (the WLAN simulator standing in for the
    radio): no uplink attempt while it cannot join (a wrong password, then no
    access point), a session once it joins; when the access point drops, the
    uplink drops its transport and waits, the station rejoins, and every
    reading arrives once. sys/health reports the network."""
    net = {
        "ssid": "lab",
        "password": "pw",
        "driver": "firmware.wlansim",
        "backoff_min": 0.2,
        "backoff_max": 1,
    }
    with (
        Mosquitto() as broker,
        Fleet(
            tmp_path / "fleet",
            mqtt=1,
            period=0.1,
            broker=("127.0.0.1", broker.port),
            health_period=0.5,
            config={"network": net},
        ) as fleet,
    ):
        d = fleet.devices[0]
        ap = os.path.join(d["dir"], "wlansim.json")

        def access_point(up, password="pw"):
            with open(ap + ".tmp", "w") as f:
                json.dump({"ap": up, "ssid": "lab", "password": password, "rssi": -61}, f)
            os.rename(ap + ".tmp", ap)

        def log_has(text):
            with open(d["log"]) as f:
                return text in f.read()

        access_point(True, password="other")
        fleet.start()
        wait_until(lambda: log_has("network: join lab: wrong_password"), 20)
        access_point(False)
        wait_until(lambda: log_has("network: join lab: no_ap_found"), 20)
        assert log_has("uplink mqtt: waiting for the network")
        cfg = bridge_for(fleet, tmp_path, broker.port, heartbeat=1.0)

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            c = b.bus.connect()
            temps = c.subscribe("dev/%s/sensor/temp" % d["node"], queue_len=1024)
            health = c.subscribe("dev/%s/sys/health" % d["node"], queue_len=64)
            link = b.links["mqtt:" + d["node"]]
            await asyncio.sleep(1.0)
            assert link.counters.get("sessions", 0) == 0  # nothing while it cannot join
            access_point(True)
            await until(lambda: link.status == "up", 30)
            await until(lambda: link.counters.get("imported", 0) > 20, 20)
            get = ("dev", d["node"], "sys", "config", "get")
            await until(lambda: get in b.bus.endpoints(), 20)
            assert (await c.call(get, "network", timeout=5))["password"] == "***"
            access_point(False)
            await until(lambda: link.status != "up", 20)
            await asyncio.sleep(1.0)
            access_point(True)
            await until(lambda: link.status == "up" and link.counters["sessions"] == 2, 30)
            while True:
                h = (await asyncio.wait_for(health.recv(), 20)).payload
                if h["network"]["joins"] == 2 and h["link"]["spool"]["unsent"] == 0:
                    break
            ns = []
            while True:
                m = temps.recv_nowait()
                if m is None:
                    break
                ns.append(m.payload["n"])
            b.stop()
            await t
            return h, ns, link.counters.get("gaps", 0)

        h, ns, gaps = asyncio.run(main())
    assert ns == list(range(len(ns))) and gaps == 0, ns  # every reading once, in order
    n = h["network"]
    assert n["state"] == "up" and n["rssi"] == -61 and n["drops"] == 1, n
    assert n["failures"] >= 2 and h["uplink"]["open_failures"] == 0, h
