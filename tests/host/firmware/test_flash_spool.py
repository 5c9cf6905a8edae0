"""The flash spool (docs/protocol.md 14) with real parts: a MicroPython device
process on MQTT through a real mosquitto to the bridge, killed and started
again during a broker outage with its journal on."""

import asyncio
import os

import pytest

from dev.harness.bridge import mqtt_config
from edgebus.bridge.daemon import Bridge
from tests.conftest import ROOT, mpy_script, until

# Core + link + MQTT transport + the journal's 4 KB block: 180K fails, and the
# device runs on real time, so its heap fragments differently between runs.
DEVICE_HEAP = "224K"


@pytest.fixture
def flash_device(mpy_tree):
    for start in mpy_script(mpy_tree, os.path.join(ROOT, "tests", "mpy", "flash_device.py")):
        yield lambda port, journal, up_n, down_n: start(
            ["mqtt:127.0.0.1:%d" % port, "k1", "d1", journal, str(up_n), str(down_n)], DEVICE_HEAP
        )


async def _line(proc, prefix):
    """The device's next output line starting with prefix (its output so far
    in the error if it ends first)."""
    seen = []
    while True:
        line = await asyncio.to_thread(proc.stdout.readline)
        if not line:
            raise AssertionError("device ended before %r:\n%s" % (prefix, "".join(seen)))
        seen.append(line)
        if line.startswith(prefix):
            return line.split()[1]


def _journaled(d, sid):
    """The highest sequence number the device's journal files hold for boot
    sid (read as journal.py writes them: header, then E/A/C/O records)."""
    top = 0
    for name in sorted(os.listdir(d)):
        try:
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:  # the device deleted it meanwhile
            continue
        if data[:4] != b"EBJ1" or len(data) < 5 or data[5 : 5 + data[4]] != sid.encode():
            continue
        i = 5 + data[4]
        while i + 5 <= len(data):
            k, v = data[i], int.from_bytes(data[i + 1 : i + 5], "big")
            if k == 0x45:  # E seq len body
                n = int.from_bytes(data[i + 5 : i + 7], "big")
                if i + 7 + n > len(data):
                    break
                top = max(top, v)
                i += 7 + n
            elif k == 0x41:  # A upto
                i += 5
            elif k == 0x43:  # C wall
                i += 9
            elif k == 0x4F:  # O upto sid
                i += 6 + data[i + 5]
            else:
                break
    return top


def test_device_rebooted_during_outage_delivers_earlier_boot_late_under_its_sid(
    tmp_path, broker, flash_device
):
    journal = str(tmp_path / "spool")
    up_n, down_n, n2 = 10, 20, 15

    async def main():
        b = Bridge(
            mqtt_config(
                tmp_path / "state",
                broker.port,
                {"d1": "k1"},
                {"node": "gw"},
                client_id="bridge-test",
            )
        )
        task = asyncio.create_task(b.run())
        sub = b.bus.connect().subscribe("dev/d1/sensor/r", queue_len=256)
        link = b.links["mqtt:d1"]
        dev1 = flash_device(broker.port, journal, up_n, down_n)
        sid1 = await _line(dev1, "SID")
        await until(lambda: link.counters.get("imported", 0) >= up_n, 20)
        broker.stop()  # the outage
        last1 = int(await _line(dev1, "DONE"))
        assert last1 == up_n + down_n
        # Every reading of boot 1 the host has not acknowledged is on flash:
        # the journal is written while there is no session.
        await until(lambda: _journaled(journal, sid1) == last1, 10)
        dev1.kill()  # the reboot, mid-outage
        dev1.wait()
        dev2 = flash_device(broker.port, journal, 0, n2)
        sid2 = await _line(dev2, "SID")
        last2 = int(await _line(dev2, "DONE"))
        assert sid2 != sid1 and last2 == n2
        broker.start()  # the outage ends
        got = {sid1: [], sid2: []}
        while len(got[sid1]) < last1 or len(got[sid2]) < last2:
            m = await asyncio.wait_for(sub.recv(), 30)
            got[m.origin.peer_sid].append(m)
        # Each boot's readings under its own peer_sid, every sequence number
        # once, in order: none lost, none twice.
        one, two = got[sid1], got[sid2]
        assert [m.origin.extra["seq"] for m in one] == list(range(1, last1 + 1))
        assert [m.payload for m in one] == list(range(last1))
        assert [m.origin.extra["seq"] for m in two] == list(range(1, last2 + 1))
        assert [m.payload for m in two] == list(range(last2))
        for m in one:
            assert m.origin.generation == 1 and m.origin.link_id == "mqtt:d1"
            if m.payload >= up_n:  # published in the outage, delivered later
                assert m.origin.extra["late"] is True and m.origin.extra["ts"] > 1.5e9
        for m in two:
            assert m.origin.generation == 2 and m.origin.extra["late"] is True
        assert link.counters.get("gaps", 0) == 0
        assert link.counters.get("hist_imported", 0) >= down_n
        # Acknowledged: the earlier boot's journal files are deleted.
        await until(lambda: _journaled(journal, sid1) == 0, 10)
        b.stop()
        await task
        dev2.kill()

    asyncio.run(main())
