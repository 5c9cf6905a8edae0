"""Updates that go wrong, with real parts: bad releases rolled back by the
devices themselves, a power cut mid-transfer on a 115,200-baud serial line and
one during the trial, and chunks altered on the way refused. Fleet devices
(the real firmware on the MicroPython unix port), a real mosquitto, the bridge
as a process and `edgebus ota` as a user runs it (tests/host/tools/otakit.py)."""

import json
import os
import struct
import time

import pytest

from dev.harness.ota import bundle_hash, mqtt_fleet, ota, ota_bg, ready_bridge, status
from edgebus.tools.commands import otadelta
from edgebus.tools.sim.fleet import Fleet
from tests.conftest import wait_until
from tests.host.tools import otakit

pytestmark = [pytest.mark.micropython]


def slot_bytes(fleet, node):
    """Bytes under the device's ota/ slots, as its flash holds them."""
    d = os.path.join(fleet.out, "devices", node, "ota")
    n = 0
    for root, _dirs, files in os.walk(d):
        n += sum(os.path.getsize(os.path.join(root, f)) for f in files if f != "state.json")
    return n


def push_lines(p, timeout=300):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.splitlines(), err


@pytest.mark.mosquitto
def test_a_hang_no_session_and_a_power_cut_on_trial_each_roll_back_with_why(tmp_path):
    hang = otakit.bundle(tmp_path, "hang")  # its temp service blocks the event loop
    nosession = otakit.bundle(tmp_path, "nosession")  # its MQTT topics moved
    good = otakit.bundle(tmp_path, "good")
    hangmain = otakit.bundle(tmp_path, "hangmain")  # its main module hangs as it loads
    with mqtt_fleet(tmp_path, 4, config={"watchdog_ms": 3000}) as (fleet, bridge):
        sock = bridge.sock
        a, b, c, d = [dev["node"] for dev in fleet.devices]
        push = ("push", "--yes", "--trial-s", "10", "--timeout", "10", "--bundle")
        pa = ota_bg(sock, *push, hang, "--to", a)
        pb = ota_bg(sock, *push, nosession, "--to", b)
        pc = ota_bg(sock, *push, good, "--to", c)
        pd = ota_bg(sock, *push, hangmain, "--to", d)
        # The power cut: c is killed while its new bundle is on trial.
        wait_until(lambda: (status(sock).get(c) or {}).get("state") == "trial", 60)
        fleet.kill(c)
        fleet.start(c)
        results = {n: push_lines(p) for n, p in ((a, pa), (b, pb), (c, pc), (d, pd))}
        st = status(sock)
        why = {
            a: "hung: the watchdog reset it during its trial (starting)",
            b: "no session within 10 s",
            c: "reset during its trial (",
            d: "hung: the watchdog reset it during its trial (starting)",
        }
        for n, (code, out, err) in results.items():
            assert code == 1, (n, out, err)
            assert out[-2].startswith(n + ": rolled back: " + why[n]), (n, out)
            f = st[n]["last_failure"]
            assert f["reason"].startswith(why[n]) and f["hash"], (n, f)
            # back on the bundle before (the factory modules), running and reporting
            assert st[n]["running"]["hash"] is None and st[n]["state"] == "idle", st[n]
        for dev in (fleet.devices[0], fleet.devices[3]):
            with open(dev["log"]) as f:
                assert "WDT (simulated): not fed for 3000 ms" in f.read()
        # Each row says whether its state is current: its link, from the bridge.
        r = ota(sock, "status", "--json")
        links = {row["node"]: row["link"] for row in json.loads(r.stdout)}
        assert {n: (lk or {}).get("state") for n, lk in links.items()} == dict.fromkeys(
            (a, b, c, d), "up"
        ), links
        assert all(lk["since"] <= time.time() for lk in links.values()), links


def test_a_serial_device_cut_off_mid_transfer_resumes_where_its_flash_left_off(tmp_path):
    good = otakit.bundle(tmp_path, "good", version="9.9.9")
    with Fleet(tmp_path / "fleet", serial=1, baud=115200) as fleet:
        fleet.start()
        with ready_bridge(tmp_path, fleet) as bridge:
            sock = bridge.sock
            node = fleet.devices[0]["node"]
            cable = fleet.cables[0]
            total = sum(f[1] for f in otakit.manifest(good)["files"])
            sent0 = cable.bytes["b_to_a"]
            # --full: the device would copy most files from its factory modules
            p = ota_bg(
                sock, "push", "--yes", "--full", "--bundle", good, "--to", node, "--timeout", "5"
            )

            # The retained status shows the transfer's progress as it goes
            # (every few seconds), not begin's snapshot with no figures.
            def staged():
                return (status(sock).get(node) or {}).get("staged") or {}

            def progress():
                st = staged()
                return st if isinstance(st.get("bytes"), int) else None

            # The status that showed progress is the one checked: a second
            # read may come after the transfer moved on (a loaded machine).
            assert wait_until(progress, 60)["total"] == total
            # Half the bundle on the device's flash, then the power goes.
            wait_until(lambda: slot_bytes(fleet, node) > total // 2, 120)
            fleet.kill(node)
            kept = slot_bytes(fleet, node)
            time.sleep(1)  # the device is off for a second: the push waits for its route
            fleet.start(node)
            code, out, err = push_lines(p)
            assert code == 0 and out[-2].startswith(node + ": committed 9.9.9"), out + [err]
            st = status(sock)[node]
            assert st["state"] == "committed" and st["running"]["hash"] == bundle_hash(good)
            # Resumed, not started over: what crossed the line is the bundle
            # once and its framing, not the half before the cut a second time.
            sent = cable.bytes["b_to_a"] - sent0
            assert kept > total // 2 and sent < 1.35 * total, (kept, sent, total)


@pytest.mark.mosquitto
def test_chunks_altered_on_the_way_and_bad_manifests_are_refused(tmp_path):
    good = otakit.bundle(tmp_path, "good")
    man = otakit.manifest_bytes(good)
    h = bundle_hash(good)
    first = otakit.manifest(good)["files"][0]
    data = otakit.file_bytes(good, first[0])
    with mqtt_fleet(tmp_path, 1) as (fleet, bridge):
        node = fleet.devices[0]["node"]
        dev = otakit.Calls(bridge.sock, node)

        def begin(m=man, hh=h):
            return dev.call({"op": "begin", "version": "x", "hash": hh, "size": len(m)})

        def refused(r, why):
            assert r[0] == "failed" and r[1].startswith("ota: " + why), r

        r = begin()
        assert r[0] == "ok" and (r[1]["slot"], r[1]["have"]) == ("a", [0]), r
        # The manifest altered on the way: its hash is not begin's.
        altered = man.replace(b'"board":"unix"', b'"board":"unIx"')
        refused(dev.put(0, 0, altered), "manifest: SHA-256 mismatch")
        assert begin()[1]["have"] == [0]  # deleted: it is sent again
        refused(dev.put(0, 5, man[5:]), "out of order: file 0 has 0 bytes")
        assert dev.put(0, 0, man) == ("ok", {"next": len(man)})
        # A module altered on the way: its SHA-256 is not the manifest's.
        refused(dev.put(1, 0, bytes([data[0] ^ 1]) + data[1:]), "file %s: SHA-256" % first[0])
        # A compressed chunk that does not decode to the length it names.
        z = struct.pack(">HIH", 1 | otadelta.ZBIT, 0, 200) + otadelta.deflate(data[:100], 10)
        refused(dev.call(z), "file %s: a compressed chunk did not decode" % first[0])
        refused(dev.call({"op": "switch", "hash": h}), "file %s incomplete" % first[0])
        # Manifests whose hash is honest but that are for another board,
        # or would write outside the slot: refused when they complete.
        for text, why in (
            (man.replace(b'"board":"unix"', b'"board":"esp32"'), "bundle built for board"),
            (man.replace(first[0].encode(), b"../../x.mpy", 1), "manifest: unsafe"),
        ):
            assert begin(text, otakit.sha256(text))[1]["have"] == [0]
            refused(dev.put(0, 0, text), why)
        refused(dev.call({"op": "nothing"}), "sys/ota/op takes bytes")
        assert dev.health()["ota_refused"] == 8
        # Nothing was switched to: the device runs what it ran.
        st = status(bridge.sock)[node]
        assert st["running"]["hash"] is None and st["state"] == "receiving", st
