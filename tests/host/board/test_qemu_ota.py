"""edgebus ota on the emulated 32-bit board: the MPS2-AN385 firmware (edgebus
and firmware frozen in, its loader as main.py on littlefs) booted in the real
qemu-system-arm, its UART on a pty that a bridge process's [[serial]] link
opens, and `edgebus ota` run as the user docs/devices.md's [[acl]] lets update
devices (dev/qemuheap.py's OtaRig, which also measures the update)."""

import asyncio
import re

import pytest

from dev import qemuheap
from dev.harness.poll import wait_until
from edgebus.tools.commands import otaplan
from edgebus.tools.sim import qemuboard
from firmware import VERSION
from tests.host.board import qemukit
from tests.host.board.test_qemu_board import SUITE_HEAP
from tests.host.tools import otakit

pytestmark = pytest.mark.qemu  # boots the board (so: slow)

NODE = qemuheap.ota_config()["node"]


def test_a_bundle_on_the_board_runs_before_its_frozen_modules_until_a_factory_rollback(tmp_path):
    # The bundle's code loads into the heap (the board runs only its frozen
    # modules from flash): on trial the runtime takes ~100 KB at READY, more
    # than the board's 64 KB budget, so the board here has the portable
    # suite's heap (one image for both). Both transfers are received while
    # the frozen modules run: one from a slot needs ~140 KB (dev/qemuheap.py).
    board, meta = qemukit.build_image(SUITE_HEAP)
    crash = otakit.bundle(tmp_path, "crash", board=qemukit.BOARD)  # its temp service raises
    good = otakit.bundle(tmp_path, "good", board=qemukit.BOARD, version="9.9.9")
    h = otaplan.load_bundle(good).hash
    flash = board["budget"]["flash"]
    big = otaplan.load_bundle(otakit.oversized(tmp_path, good, flash))  # more than its flash
    code = otakit.oversized(tmp_path / "code", good, SUITE_HEAP, "blob.py")  # more than its heap
    rig = qemuheap.OtaRig(board, meta["image"], tmp_path / "rig", qemuheap.ota_config())

    async def main():
        async with rig.watch() as w:
            info = await w.until("info", lambda i: True)
            assert (info["fw"], info["bundle"]["hash"]) == (VERSION, None)

            # A bundle larger than the board's flash: refused from begin's free
            # figure, before a byte of it is sent (the manifest not even).
            r = await asyncio.to_thread(rig.ota, "push", "--bundle", big.dir, "--to", NODE, "-y")
            assert r.returncode == 1, r.stdout + r.stderr
            m = re.search(
                r"^%s: failed: does not fit its flash: the bundle needs (\d+) more bytes, "
                r"(\d+) are free$" % NODE,
                r.stdout,
                re.M,
            )
            assert m and int(m.group(1)) == big.total and 0 < int(m.group(2)) < flash, r.stdout
            st = await w.until("ota", lambda s: s["staged"] and s["staged"]["hash"] == big.hash)
            assert st["staged"]["bytes"] is None and st["running"]["hash"] is None, st

            # Code larger than the board's whole heap could never load on its
            # trial: refused from begin's heap figure, before a byte is sent.
            r = await asyncio.to_thread(rig.ota, "push", "--bundle", code, "--to", NODE, "-y")
            m = re.search(
                r"^%s: failed: its code cannot load: the bundle's modules take (\d+) bytes and "
                r"its whole heap is (\d+); " % NODE,
                r.stdout,
                re.M,
            )
            assert r.returncode == 1 and m, r.stdout + r.stderr
            assert int(m.group(2)) <= SUITE_HEAP < int(m.group(1)), r.stdout

            # A release that crashes on the board goes back, with the reason.
            r = await asyncio.to_thread(rig.ota, "push", "--bundle", crash, "--to", NODE, "--yes")
            assert r.returncode == 1, r.stdout + r.stderr
            assert "%s: rolled back: " % NODE in r.stdout and "boom" in r.stdout, r.stdout
            st = await w.until("ota", lambda s: s["rollbacks"] == 1)
            assert st["last_failure"]["version"] == "crash" and st["running"]["hash"] is None, st

            r = await asyncio.to_thread(rig.ota, "push", "--bundle", good, "--to", NODE, "--yes")
            assert r.returncode == 0, r.stdout + r.stderr
            assert "%s: committed 9.9.9 in " % NODE in r.stdout
            # The board has no watchdog: the push says what that means for its trial.
            assert "%s: on trial without a watchdog (its runtime has none): a hang is " % NODE in (
                r.stderr
            ), r.stderr
            # The slot's modules, not the frozen ones: its VERSION and hash.
            info = await w.until("info", lambda i: i["bundle"]["hash"] == h)
            assert info["fw"] == "9.9.9" and info["bundle"]["slot"] in ("a", "b"), info
            # sys/ota is its own retained fact: it may come in after sys/info
            await w.until("ota", lambda s: s["state"] == "committed")

            r = await asyncio.to_thread(rig.ota, "rollback", NODE, "--factory")
            assert r.stdout == "%s: rolling back to the factory modules (it reboots)\n" % NODE, (
                r.stdout + r.stderr
            )
            info = await w.until("info", lambda i: i["bundle"]["hash"] is None)
            assert info["fw"] == VERSION
            await w.until("ota", lambda s: s["state"] == "idle")

    with rig:
        asyncio.run(main())
        # The console is read apart from the link: its last READY may come
        # after the link's sys/info said the factory modules were back.
        boots = wait_until(lambda: len(rig.readies()) >= 4 and rig.readies(), 30)
    # The factory's boot, the crash's trial (it never gets to READY), the
    # rollback's, the good bundle's trial, the factory's again.
    assert [fw for fw, _a in boots] == [VERSION, VERSION, "9.9.9", VERSION], rig.con.text
    assert "no watchdog: " in rig.con.text  # the board has none (firmware.main.watchdog)


def test_a_watchdog_the_board_has_not_is_a_config_error(tmp_path):
    board, meta = qemukit.build_image(SUITE_HEAP)
    state = str(tmp_path / "board")
    cfg = qemuheap.ota_config(watchdog_ms=5000)
    qemuboard.prepare_flash(board, state, qemuboard.device_files(board, cfg))
    with qemuboard.QemuBoard(board, meta["image"], state, repl="pty", uart="null") as qb:
        con = qemukit.Console(qb.start().repl_port)
        try:
            why = "watchdog_ms: this runtime has no machine.WDT nor _thread"
            con.wait_for("config error: config.json: " + why, 30)
        finally:
            con.close()
