"""The device runtime (firmware/) end to end: compiled to .mpy and run under the
real micropython binary on one end of a pty cable (tools/sim/ptycable.py), a
CPython host Link (responder, pyserial-asyncio) on the other end.

Heap: the device runs with -X heapsize=256K: on the 64-bit unix port the
modules' code is on the heap (~92 KB; frozen into flash on boards), see
tests/host/firmware/test_device_heap.py and firmware/README.md "Memory".
"""

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import edgebus
from edgebus.tools.boardkit import mpybuild
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import ROOT, processes, until
from tests.host import devicekit

DEVICE_HEAP = "256K"
NODE = "d1"
KEY = "k1"


@pytest.fixture(scope="module")
def fw_tree(tmp_path_factory):
    """edgebus/ and firmware/ compiled to .mpy, as a board would hold them."""
    out = str(tmp_path_factory.mktemp("fw"))
    mpybuild.compile_tree(ROOT, ["edgebus", "firmware"], out)
    return out


def _config(tmp_path, port, **over):
    cfg = {
        "node": NODE,
        "key": KEY,
        "board": "unix",
        "uplink": {
            "kind": "uart",
            "port": port,
            "baud": 115200,
            "backoff_min": 0.2,
            "backoff_max": 2,
        },
        "link": {"heartbeat": 0.5, "handshake_timeout": 1.0},
        "queues": {"bus": 8},
        "services": [{"module": "temp", "period": 0.3}],
        "health_period": 0.5,
    }
    cfg.update(over)
    p = str(tmp_path / "config.json")
    with open(p, "w") as f:
        json.dump(cfg, f)
    return p


@pytest.fixture
def device(fw_tree):
    for start in processes():

        def run(cfg_path, runtime="micropython"):
            if runtime == "micropython":
                cmd, cwd = [mpybuild.micropython(), "-X", "heapsize=" + DEVICE_HEAP], fw_tree
            else:
                cmd, cwd = [sys.executable, "-u"], ROOT
            return start(cmd + ["-m", "firmware.main", cfg_path], cwd)

        yield run


async def _host(cable, body):
    return await devicekit.host(cable, KEY, body)


def _ep(node, *path):
    return ("dev", node) + path


async def _call(bus, c, topic, payload, timeout=5.0):
    await until(lambda: topic in bus.endpoints(), timeout)  # the proxy is bound
    return await c.call(topic, payload, timeout=timeout)


def test_device_runtime_over_pty(device, tmp_path):
    with PtyCable() as cable:
        cfg_path = _config(tmp_path, cable.a)
        dev = device(cfg_path)

        async def body(bus, link):
            c = bus.connect(principal="test")
            view = c.retained_view("dev/#")
            health = c.subscribe(_ep(NODE, "sys", "health"), queue_len=16)
            temp = c.subscribe(_ep(NODE, "sensor", "temp"), queue_len=256)
            await until(lambda: link.status == "up", 15)
            assert link.peer_node == NODE and link.generation == 1
            sid1 = link.peer_sid

            # sys/info: retained, with its fields
            await until(lambda: view.get(_ep(NODE, "sys", "info")) is not None)
            info = view.get(_ep(NODE, "sys", "info")).payload
            assert info["fw"] and info["node"] == NODE and info["board"] == "unix"
            # this tree has no board.json: the built-in defaults, and said so
            assert info["manifest"] is None and info["queues"]["spool"] == 24576
            assert info["impl"].startswith("micropython ") and info["platform"] == "linux"
            assert type(info["uptime"]) is int and info["mem_free"] > 0
            assert "reset_cause" in info  # None on the unix port: no machine.reset_cause

            # sys/health, periodic (0.5 s)
            h = [await asyncio.wait_for(health.recv(), 5) for _ in range(3)]
            t = [m.payload["uptime"] for m in h]
            assert h[-1].payload["link"]["state"] == "up"
            assert h[-1].payload["uplink"]["opens"] >= 1
            # what the device says it sent: every data frame before this health
            # message arrived here, with the sequence numbers below its tx_seq
            up = h[-1].payload["uplink"]
            seen = [m.origin.extra["seq"] for m in h]
            assert up["sent"] >= 2 and up["tx_seq"] == up["sent"] + 1 <= seen[-1]
            assert link.counters.get("gaps", 0) == 0
            mem = h[-1].payload["mem_alloc"]
            assert mem > 0 and t[-1] >= t[0]

            # the simulated sensor, from its first reading of the boot on (taken
            # while the device was starting, before its uplink ran)
            m = await asyncio.wait_for(temp.recv(), 5)
            assert m.payload["simulated"] is True and 17 < m.payload["c"] < 25
            assert m.payload["n"] == 0
            assert m.origin.peer_sid == sid1

            # sys/config/get over the link (key redacted)
            got = await _call(bus, c, _ep(NODE, "sys", "config", "get"), None)
            assert got["node"] == NODE and got["key"] == "***" and got["health_period"] == 0.5
            assert (
                await _call(bus, c, _ep(NODE, "sys", "config", "get"), "uplink")
                == json.loads(Path(cfg_path).read_text())["uplink"]
            )

            # sys/config/set: valid -> persisted; invalid -> Failed with the reason
            r = await _call(
                bus,
                c,
                _ep(NODE, "sys", "config", "set"),
                {"health_period": 0.4, "link": {"out_queue": 24}},
            )
            assert r["saved"] is True and r["restart_needed"] == ["link"]
            on_disk = json.loads(Path(cfg_path).read_text())
            assert on_disk["health_period"] == 0.4 and on_disk["link"]["out_queue"] == 24
            assert on_disk["link"]["heartbeat"] == 0.5 and on_disk["node"] == NODE
            bad = [
                ({"uplink": {"baud": "fast"}}, "uplink.baud must be int, not str"),
                ({"colour": "red"}, "unknown key colour"),
                ({"node": "evil"}, "node cannot be changed remotely"),
                ({"queues": {"bus": 0}}, "queues.bus must be between 1 and 1024"),
            ]
            for change, why in bad:
                with pytest.raises(edgebus.Failed) as ei:
                    await _call(bus, c, _ep(NODE, "sys", "config", "set"), change)
                assert why in str(ei.value.reason), ei.value.reason
            assert json.loads(Path(cfg_path).read_text()) == on_disk  # failed sets wrote nothing

            # cut the cable past liveness: the device reconnects by itself,
            # same sid, same generation
            cable.cut()
            await until(lambda: link.status != "up", 5)
            await asyncio.sleep(1.0)
            cable.restore()
            await until(lambda: link.status == "up", 15)
            assert link.peer_sid == sid1 and link.generation == 1
            assert link.counters["sessions"] == 2
            m = await asyncio.wait_for(temp.recv(), 5)  # data flows again
            while m.origin.generation != 1:
                m = await asyncio.wait_for(temp.recv(), 5)
            return sid1, mem

        async def restart(bus, link):
            sid1 = link.peer_sid
            dev.kill()
            dev.wait()
            dev2 = device(cfg_path)
            await until(lambda: link.status == "up" and link.peer_sid != sid1, 15)
            assert link.generation == 2
            c = bus.connect(principal="test")
            # the restarted device runs with the persisted config
            got = await _call(bus, c, _ep(NODE, "sys", "config", "get"), None)
            assert got["health_period"] == 0.4 and got["link"]["out_queue"] == 24
            # sys/reboot: reply, then the process exits with status 3
            r = await _call(bus, c, _ep(NODE, "sys", "reboot"), None)
            assert r["rebooting"] is True
            for _ in range(100):
                if dev2.poll() is not None:
                    break
                await asyncio.sleep(0.05)
            return dev2

        async def both(bus, link):
            sid1, mem = await body(bus, link)
            return sid1, mem, await restart(bus, link)

        try:
            sid1, mem, dev2 = asyncio.run(_host(cable, both))
        except BaseException:
            dev.kill()
            print(dev.communicate()[0])
            raise
        out1 = dev.communicate(timeout=5)[0]
        assert "READY node=d1" in out1 and "mem_alloc=" in out1, out1
        assert "no board manifest (board.json): running built-in defaults, spool 24576" in out1
        assert "config changed: health_period, link" in out1, out1
        out2 = dev2.communicate(timeout=5)[0]
        assert dev2.returncode == 3, out2
        assert "REBOOT: exiting with status 3" in out2, out2
        print("device heap after start (sys/health mem_alloc):", mem)


def test_cpython_device_smoke(device, tmp_path):
    """The same runtime under CPython (a Linux edge box), over the same cable."""
    with PtyCable() as cable:
        dev = device(_config(tmp_path, cable.a), runtime="cpython")

        async def body(bus, link):
            c = bus.connect()
            view = c.retained_view("dev/#")
            await until(lambda: link.status == "up", 15)
            await until(lambda: view.get(_ep(NODE, "sys", "info")) is not None)
            assert view.get(_ep(NODE, "sys", "info")).payload["impl"].startswith("cpython")
            got = await _call(bus, c, _ep(NODE, "sys", "config", "get"), "node")
            assert got == NODE

        asyncio.run(_host(cable, body))
        dev.kill()


@pytest.mark.parametrize(
    "cfg,why",
    [
        ({"key": "k", "uplink": {"kind": "uart"}}, "missing key node"),
        (
            {"node": "d", "uplink": {"kind": "uart", "baud": "fast"}},
            "uplink.baud must be int, not str",
        ),
        ({"node": 5, "uplink": {"kind": "uart"}}, "node must be str, not int"),
        (
            {"node": "d", "uplink": {"kind": "carrier-pigeon"}},
            "uplink.kind must be one of uart, mqtt",
        ),
        ({"node": "d", "uplink": {"kind": "uart"}, "colour": 1}, "unknown key colour"),
        ("{not json", "is not valid JSON"),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "services": ["nosuch"]},
            "service 'nosuch' cannot be loaded",
        ),
        ({"node": "d", "uplink": {"kind": "mqtt"}}, "uplink.host is required for an mqtt uplink"),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "link": {"journal": 5}},
            "link.journal must be str or null, not int",
        ),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "link": {"journal": "../up"}},
            "link.journal must be a directory name without '..'",
        ),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "link": {"journal_bytes": 4096}},
            "link.journal_bytes must be between 16384",
        ),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "network": {"password": "pw"}},
            "missing key network.ssid",
        ),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "network": {"ssid": "lab"}},
            "network: no network module in this build",
        ),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "time": {"ntp": "h", "every": 5}},
            "time.every must be at least 15 s",
        ),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "time": {"ntp": "127.0.0.1"}},
            'time: no machine.RTC on this runtime; "rtc": "firmware.rtcsim" simulates one',
        ),
        (
            {"node": "d", "uplink": {"kind": "uart"}, "reboot_after": 3},
            "reboot_after must be 0 (never) or between 10 and 604800 s, not 3",
        ),
        (
            {
                "node": "d",
                "uplink": {"kind": "uart"},
                "reboot_after": 60,
                "link": {"journal": "j"},
                "sleep": {"every": 60},
            },
            "reboot_after does not go with sleep",
        ),
    ],
)
@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
def test_bad_config_is_a_clear_error(device, tmp_path, cfg, why, runtime):
    p = tmp_path / "config.json"
    p.write_text(cfg if type(cfg) is str else json.dumps(cfg))
    dev = device(str(p), runtime)
    out = dev.communicate(timeout=20)[0]
    assert dev.returncode == 2, out
    assert "config error" in out and why in out, out


def test_missing_config_file(device, tmp_path):
    dev = device(str(tmp_path / "nope.json"))
    out = dev.communicate(timeout=20)[0]
    assert dev.returncode == 2 and "cannot read" in out, out


def test_uplink_that_cannot_open_backs_off_without_crashing(device, tmp_path):
    """No tty yet: the runtime keeps running, logs and counts each failed open,
    and waits longer each time (exponential backoff with jitter)."""
    dev = device(_config(tmp_path, str(tmp_path / "no-such-tty")))
    import time

    time.sleep(3.0)
    assert dev.poll() is None  # still running: no crash loop
    dev.kill()
    out = dev.communicate(timeout=5)[0]
    stamps = [float(line[1:10]) for line in out.splitlines() if "uplink uart: open:" in line]
    assert len(stamps) >= 3, out
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert gaps[-1] > gaps[0], out  # 0.2 s doubling to 2 s, each 0.5-1x jittered
    assert "READY" in out, out


def _bridge_config(tmp_path, port):
    """A bridge with this device's key, on the broker at 127.0.0.1:port."""
    from edgebus.bridge import config as bridge_config

    return bridge_config.parse(
        {
            "bridge": {"state_dir": str(tmp_path / "state"), "heartbeat": 0.5},
            "mqtt": {
                "url": "mqtt://127.0.0.1:%d" % port,
                "devices": [{"node": NODE, "key": KEY}],
            },
        }
    )


@pytest.mark.mosquitto
def test_device_runtime_over_mqtt_through_the_bridge_survives_broker_restart(device, tmp_path):
    """The firmware's MQTT uplink against a real mosquitto and the real bridge."""
    from dev.broker import Mosquitto
    from edgebus.bridge.daemon import Bridge

    with Mosquitto() as broker:
        dev = device(
            _config(
                tmp_path,
                None,
                uplink={
                    "kind": "mqtt",
                    "host": "127.0.0.1",
                    "port": broker.port,
                    "keepalive": 5,
                    "backoff_min": 0.2,
                    "backoff_max": 1,
                },
            )
        )
        cfg = _bridge_config(tmp_path, broker.port)

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            c = b.bus.connect()
            view = c.retained_view("dev/#")
            await until(lambda: view.get(_ep(NODE, "sys", "info")) is not None, 20)
            assert view.get(_ep(NODE, "sys", "info")).origin.link_id == "mqtt:" + NODE
            assert (await _call(b.bus, c, _ep(NODE, "sys", "config", "get"), "node")) == NODE
            link = b.links["mqtt:" + NODE]
            sessions = link.counters["sessions"]
            broker.stop()
            await asyncio.sleep(0.5)
            broker.start()
            await until(lambda: link.status == "up" and link.counters["sessions"] > sessions, 20)
            assert link.generation == 1  # the same device boot
            assert (await _call(b.bus, c, _ep(NODE, "sys", "config", "get"), "node")) == NODE
            b.stop()
            await t

        asyncio.run(main())
        dev.kill()
        out = dev.communicate(timeout=5)[0]
        assert "uplink mqtt: open" in out, out


@pytest.mark.mosquitto
def test_reboot_after_resets_a_device_only_once_its_session_is_gone_that_long(device, tmp_path):
    """reboot_after 10: the device runs on past 10 s while its session is up;
    once the bridge is gone it resets (exit status 3 on the unix port) 10 s
    later, and says why."""
    from dev.broker import Mosquitto
    from edgebus.bridge.daemon import Bridge

    with Mosquitto() as broker:
        uplink = {"kind": "mqtt", "host": "127.0.0.1", "port": broker.port, "keepalive": 5}
        dev = device(_config(tmp_path, None, uplink=uplink, reboot_after=10))
        cfg = _bridge_config(tmp_path, broker.port)

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            await until(lambda: NODE in b.mqtt.links and b.mqtt.links[NODE].status == "up", 30)
            link = b.mqtt.links[NODE]
            t_up = time.monotonic()
            # up past reboot_after (the timer counts from the last session,
            # not from the boot): no reset
            await until(lambda: time.monotonic() - t_up > 12, 20)
            assert dev.poll() is None, link.stats()
            b.stop()
            await t
            return time.monotonic()

        gone = asyncio.run(main())
        out = dev.communicate(timeout=60)[0]
        waited = time.monotonic() - gone
    assert dev.returncode == 3, out
    assert "reboot: no session for 10 s (reboot_after)" in out, out
    assert "REBOOT: exiting with status 3" in out, out
    assert waited >= 8, (waited, out)  # 10 s from the session's end, less the liveness wait


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
def test_the_example_key_runs_only_on_the_simulator(device, tmp_path, runtime):
    """The example config's key is public: the simulator (the MicroPython unix
    port) takes it for a try-out, a real device (here CPython, a Linux edge
    box) refuses it at boot."""
    with open(os.path.join(ROOT, "firmware", "config.example.json")) as f:
        assert json.load(f)["key"] == "change-me"
    p = _config(tmp_path, str(tmp_path / "no-such-tty"), key="change-me")
    dev = device(p, runtime)
    if runtime == "cpython":
        out = dev.communicate(timeout=30)[0]
        assert dev.returncode == 2 and "key is the example's 'change-me'" in out, out
    else:
        seen = ""
        while "READY node=d1" not in seen:  # it starts (EOF would mean it stopped)
            line = dev.stdout.readline()
            assert line, seen
            seen += line
        dev.kill()


# A service's own ImportError (its module exists), one of a user package's
# and a module that is not there: each reported in its own words.
IMPORT_ERRORS = [
    ("temp", "service 'temp' cannot be loaded: no temperature sensor on this board"),
    ("sensors.bme", "service 'sensors.bme' cannot be loaded: bme: no I2C bus on this board"),
    ("nosuch", "service 'nosuch' cannot be loaded: no module named 'nosuch'"),
]


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
def test_a_service_that_raises_import_error_is_reported_in_its_own_words(
    fw_tree, tmp_path, runtime
):
    """The temp service raising ImportError with words that name it is not
    "no module named 'temp'" (the words were taken for the missing module's),
    nor a dotted user service a missing firmware.services package."""
    import shutil

    tree = tmp_path / "tree"
    if runtime == "micropython":
        shutil.copytree(fw_tree, tree)
        (tree / "firmware" / "services" / "temp.mpy").unlink()
        cmd, cwd, env = [mpybuild.micropython(), "-X", "heapsize=" + DEVICE_HEAP], tree, None
    else:
        shutil.copytree(Path(ROOT) / "firmware", tree / "firmware")
        cmd, cwd = [sys.executable, "-u"], tree
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), ROOT]))
    (tree / "firmware" / "services" / "temp.py").write_text(
        'raise ImportError("no temperature sensor on this board")\n'
    )
    (tree / "sensors").mkdir()
    (tree / "sensors" / "__init__.py").write_text("")
    (tree / "sensors" / "bme.py").write_text('raise ImportError("bme: no I2C bus on this board")\n')
    for name, why in IMPORT_ERRORS:
        p = tmp_path / "config.json"
        p.write_text(json.dumps({"node": "d", "uplink": {"kind": "uart"}, "services": [name]}))
        r = subprocess.run(
            cmd + ["-m", "firmware.main", str(p)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert why.lower() in out.lower(), out
        assert (name == "nosuch") == ("no module named" in out.lower()), out
