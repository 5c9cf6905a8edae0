"""The time step with real parts: chronyd (Debian's chrony) serving NTP on
loopback, the bridge over a real mosquitto, and real-firmware devices (the
MicroPython unix port, micropython-lib's ntptime) whose simulated RTC starts
an hour slow. With NTP their readings' ts_device in the log is within BOUND_S
of the host clock (those spooled before their session: between the
device's start and their arrival) and marked "clk": "ntp"; with the NTP server unreachable
the bridge's alignment stands in, marked "clk": "bridge", and sys/health says
which clock each device's readings carry."""

import asyncio
import json
import os
import shutil
import socket
import time

import pytest

from dev.broker import Mosquitto
from dev.harness.poll import wait_until
from dev.harness.process import Process
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.tools.sim.fleet import Fleet, merge

pytestmark = [pytest.mark.mosquitto, pytest.mark.micropython]

CHRONYD = shutil.which("chronyd") or "/usr/sbin/chronyd"
# ntptime has 1 s resolution and truncates: a clock it set is up to 1 s
# behind the server's; add the reading's way to the log (ms on loopback).
BOUND_S = 1.5
RTC_OFF_S = -3600  # where each device's simulated RTC starts
CHRONY_CONF = """local stratum 8
allow 127.0.0.1
port 123
bindaddress 127.0.0.1
cmdport 0
pidfile {d}/chronyd.pid
"""


def _ntp_answers():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    try:
        s.sendto(b"\x1b" + bytes(47), ("127.0.0.1", 123))
        return len(s.recv(48)) == 48
    except OSError:
        return False
    finally:
        s.close()


@pytest.fixture
def ntp_server(tmp_path):
    """chronyd on 127.0.0.1:123 serving this host's clock (stratum 8, the
    system clock left alone: -x)."""
    if not os.access(CHRONYD, os.X_OK):
        pytest.skip("chronyd is not installed (./do setup installs Debian's chrony)")
    if _ntp_answers():  # one serves loopback already (a system chronyd): use it
        yield None
        return
    if os.getuid() != 0:
        pytest.skip("chronyd binds NTP's port 123, which needs root")
    d = tmp_path / "chrony"
    d.mkdir()
    (d / "chrony.conf").write_text(CHRONY_CONF.format(d=d))
    with open(d / "chronyd.log", "w") as log:
        p = Process(
            [CHRONYD, "-x", "-d", "-u", "root", "-f", str(d / "chrony.conf")],
            stdout=log,
            stderr=log,
        )
    with p:
        wait_until(_ntp_answers, 10, "chronyd answering on 127.0.0.1:123", procs=[p])
        yield p


def _set(dev, rtc_offset_s, ntp_host):
    with open(os.path.join(dev["dir"], "rtcsim.json"), "w") as f:
        json.dump({"offset_s": rtc_offset_s}, f)
    with open(dev["config"]) as f:
        c = json.load(f)
    c["time"]["ntp"] = ntp_host
    with open(dev["config"], "w") as f:
        json.dump(c, f)


def test_ntp_sets_a_wrong_clock_and_without_it_the_bridge_stands_in(tmp_path, ntp_server):
    with (
        Mosquitto() as broker,
        Fleet(
            tmp_path / "fleet",
            mqtt=2,
            broker=("127.0.0.1", broker.port),
            period=0.2,
            health_period=1.0,
            config={"time": {"rtc": "firmware.rtcsim"}},
        ) as fleet,
    ):
        ntp, lost = fleet.devices
        _set(ntp, RTC_OFF_S, "127.0.0.1")
        _set(lost, RTC_OFF_S, "127.0.0.2")  # nothing answers NTP there
        t0 = time.time()
        fleet.start()
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        cfg = bridge_config.parse(
            merge(parts, {"bridge": {"state_dir": str(tmp_path / "state")}, "log": {"dir": "log"}}),
            base_dir=str(tmp_path),
        )

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            health = b.bus.connect().subscribe("dev/+/sys/health", queue_len=64)
            seen = {}

            async def both_told():
                m = await health.recv()
                seen[m.origin.peer_node] = m.payload["clock"]
                return len(seen) == 2

            while not await asyncio.wait_for(both_told(), 30):
                pass
            temps = b.bus.connect().subscribe("dev/+/sensor/temp", queue_len=256)
            n = {}
            while min(n.get(d["node"], 0) for d in (ntp, lost)) < 10:
                m = await asyncio.wait_for(temps.recv(), 10)
                n[m.origin.peer_node] = n.get(m.origin.peer_node, 0) + 1
            b.stop()
            await t
            return seen

        seen = asyncio.run(main())
    assert seen[ntp["node"]]["source"] == "ntp", seen
    assert abs(seen[ntp["node"]]["offset_ms"] + RTC_OFF_S * 1000) < BOUND_S * 1000, seen
    assert seen[ntp["node"]]["failures"] == 0 and seen[ntp["node"]]["synced_at"], seen
    off = seen[lost["node"]]
    assert off["source"] == "bridge" and off["failures"] >= 1 and off["synced_at"] is None, seen
    assert off["last_error"] == "ntp 127.0.0.2: no answer within 1 s", seen
    recs = [r for _, r in tlog.read_log(str(tmp_path / "log"))]
    for dev, clk in ((ntp, "ntp"), (lost, "bridge")):
        temps = [r for r in recs if tuple(r["topic"]) == ("dev", dev["node"], "sensor", "temp")]
        assert len(temps) >= 10
        for r in temps:
            # every reading, the first included: NTP ran before the first HELLO
            assert r["extra"]["clk"] == clk, r
            # never ahead of the host, nor before the device started; one sent
            # as taken (not spooled before its session) within the bound
            assert t0 - BOUND_S < r["ts_device"] < r["ts_host"] + 0.1, r
            if not r["extra"].get("late"):
                assert r["ts_host"] - r["ts_device"] < BOUND_S, r
