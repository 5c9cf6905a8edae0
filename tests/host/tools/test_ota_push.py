"""edgebus ota with real parts: two fleet devices (the real firmware on the
MicroPython unix port, its loader as main.py) over a real mosquitto, the
bridge as its own process under the [[acl]] the README gives a user who
updates devices, and the `edgebus ota` command run as that user types it."""

import asyncio
import re
import shutil
import signal

import pytest

from dev.harness.ota import bundle_hash, mqtt_fleet, ota, ota_args, ota_bg, ota_env, status
from edgebus.bridge.daemon import Bridge
from edgebus.tools.boardkit import otamanifest
from edgebus.tools.sim.fleet import Fleet
from tests.conftest import until, wait_until
from tests.host.tools import otakit

pytestmark = [pytest.mark.micropython]


@pytest.mark.mosquitto
def test_a_canary_that_rolls_back_halts_the_push_then_a_good_bundle_updates_the_fleet(tmp_path):
    crash = otakit.bundle(tmp_path, "crash")  # its temp service raises at import
    good = otakit.bundle(tmp_path, "good", version="9.9.9")  # its VERSION is 9.9.9
    with mqtt_fleet(tmp_path, 2) as (fleet, bridge):
        sock = bridge.sock
        one, two = [d["node"] for d in fleet.devices]

        # The canary (10% of two: one device, the first by name) rolls back
        # with the device's reason; the push stops and the other is untouched.
        r = ota(sock, "push", "--bundle", crash, "--to", "sim-*", "--yes", "--timeout", "10")
        assert r.returncode == 1, r.stderr
        out = r.stdout.splitlines()
        assert "canary (1): %s" % one in out and "wave 2 (1): %s" % two in out
        assert out[-2].startswith(one + ": rolled back: ") and "boom" in out[-2], out
        assert out[-1] == "0 committed, 0 already running, 1 rolled back, 0 failed, " + (
            "1 untouched (halted)"
        )
        assert "halted after the canary: 1 of 1 rolled back or failed" in r.stderr
        st = status(sock)
        assert st[one]["last_failure"]["version"] == "crash"
        assert st[one]["running"]["hash"] is None  # the factory modules again
        assert (st[two]["state"], st[two]["staged"], st[two]["last_failure"]) == (
            "idle",
            None,
            None,
        )

        # The same bundle again: its new rollback is told from the old one.
        r = ota(sock, "push", "--bundle", crash, "--to", one, "--yes", "--trial-s", "10")
        assert r.returncode == 1 and "%s: rolled back: " % one in r.stdout, r.stdout + r.stderr
        assert status(sock)[one]["rollbacks"] == 2

        # One device stops answering before the push and comes back only once
        # the bridge has lost it: the push waits for its route and goes on.
        frozen = fleet.devices[0]["proc"]
        frozen.send_signal(signal.SIGSTOP)
        try:
            p = ota_bg(
                sock,
                *("push", "--bundle", good, "--to", "*", "--canary", "0", "--timeout", "3"),
                "--yes",
            )
            wait_until(lambda: (bridge.link(one) or {}).get("state") not in ("up", None), 30)
        finally:
            frozen.send_signal(signal.SIGCONT)
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stdout + stderr
        assert "asleep" not in stderr  # down, not asleep as it announced: no wake to wait for
        out = stdout.splitlines()
        assert out[0].startswith("bundle 9.9.9 (") and out[1] == "wave 1 (2): %s, %s" % (
            one,
            two,
        )
        assert sorted(l.split(" in ")[0] for l in out[2:4]) == [
            "%s: committed 9.9.9" % one,
            "%s: committed 9.9.9" % two,
        ]
        assert out[4] == "2 committed, 0 already running, 0 rolled back, 0 failed"
        # The bar ends with the transfers, not the trials (10 s at least), so
        # its elapsed time and rate are the transfer's.
        bar_s = [int(m) * 60 + int(s) for m, s in re.findall(r"\[(\d+):(\d+)<", stderr)][-1]
        took = max(int(t) for t in re.findall(r" in (\d+) s", stdout))
        assert bar_s <= took - 5, (bar_s, stdout, stderr)
        st = status(sock)
        h = bundle_hash(good)
        for n in (one, two):
            assert st[n]["state"] == "committed" and st[n]["running"]["hash"] == h, st[n]
        for d in fleet.devices:  # the slot's code runs: its version at READY
            with open(d["log"]) as f:
                assert "READY node=%s fw=9.9.9" % d["node"] in f.read()

        # Again: nothing to send.
        r = ota(sock, "push", "--bundle", good, "--to", "sim-*", "--yes")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-3:] == [
            "%s: already running 9.9.9" % one,
            "%s: already running 9.9.9" % two,
            "0 committed, 2 already running, 0 rolled back, 0 failed",
        ]

        # A bundle for another board, and a pattern nothing matches.
        other = tmp_path / "other"
        shutil.copytree(good, other)
        meta = otamanifest.decode_manifest((other / "ota.jsonl").read_bytes())
        (other / "ota.jsonl").write_bytes(otamanifest.encode_manifest(dict(meta, board="esp32")))
        r = ota(sock, "push", "--bundle", str(other), "--to", "sim-*", "--yes")
        assert r.returncode == 4 and r.stdout.splitlines() == [
            "%s: skipped: board unix, the bundle is for esp32" % n for n in (one, two)
        ], r.stdout
        assert "no device of board esp32 matches 'sim-*'" in r.stderr
        r = ota(sock, "push", "--bundle", good, "--to", "pump-*", "--yes")
        assert r.returncode == 4 and "no device matches 'pump-*' (2 device(s)" in r.stderr

        # Rollback: the device before the update ran the factory modules.
        r = ota(sock, "rollback", two)
        assert (r.returncode, r.stdout) == (
            0,
            "%s: rolling back to the factory modules (it reboots)\n" % two,
        ), r.stderr
        wait_until(lambda: (status(sock).get(two) or {}).get("state") == "idle", 60)
        assert status(sock)[one]["running"]["hash"] == h


def test_a_device_behind_a_gateway_is_updated_from_the_site(tmp_path):
    # The site's bridge reaches the device's sys/ota/op through the gateway's
    # [[peer]] link (export_calls dev/+/sys/#), as the example configuration has it.
    from tests.host.bridge.test_peers import free_port, gateway_config, site_config

    good = otakit.bundle(tmp_path, "good", version="9.9.9")
    port = free_port()
    sock = str(tmp_path / "site.sock")
    with Fleet(tmp_path / "fleet", serial=1) as fleet:
        fleet.start()
        node = fleet.devices[0]["node"]
        site_cfg = site_config(tmp_path, port)
        site_cfg.socket = sock

        async def main():
            site = Bridge(site_cfg)
            st = asyncio.create_task(site.run())
            gw = Bridge(gateway_config(tmp_path, port, fleet))
            gt = asyncio.create_task(gw.run())
            try:
                await until(lambda: ("dev", node, "sys", "ota", "op") in site.bus.endpoints(), 30)
                p = await asyncio.create_subprocess_exec(
                    *ota_args("push", "--bundle", good, "--to", node, "--yes"),
                    env=ota_env(sock),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                out, err = await asyncio.wait_for(p.communicate(), 240)
                return p.returncode, out.decode(), err.decode()
            finally:
                gw.stop()
                site.stop()
                await gt
                await st

        code, out, err = asyncio.run(main())
        assert code == 0 and "%s: committed 9.9.9" % node in out, out + err
        with open(fleet.devices[0]["log"]) as f:
            assert "READY node=%s fw=9.9.9" % node in f.read()
