"""A power cut during the switch to a staged bundle (firmware/otaswitch.py),
on the real firmware under the MicroPython unix port: the device, running a
good bundle from slot a with the next one staged in slot b, is asked over
its pty link to switch, and its process is killed with SIGKILL at one step
of the switch's writes. Booted again, it runs the old good bundle or the new
one on trial, never anything else, and the pointer's accounting (good, prev,
rollbacks, failed) comes out as after an uncut switch.

The steps are reached in the real process: a driver that exists only here
(KILLAT) wraps the device's ``os`` and ``open``, and at the step writes a
mark and stops; the test kills the process there. One step runs on a
filesystem whose rename does not replace (firmware.write_atomic's fallback
for FAT: the old pointer removed, then the new one renamed into place)."""

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from edgebus.tools.boardkit import boards, devicefiles, mpybuild
from edgebus.tools.sim.fleet import DEVICE_HEAP  # the fleet's: a slot's code is on the heap
from edgebus.tools.sim.ptycable import PtyCable
from edgebus.topic import key
from tests.conftest import ROOT, until
from tests.host import devicekit
from tests.host.tools import otakit

pytestmark = [pytest.mark.micropython]

NODE, KEY = "d1", "k1"
OP = "dev/%s/sys/ota/op" % NODE
OLD, NEW = "1.0.0", "9.9.9"
MARK = "killpoint.reached"

# The device's main, as a test's hook: the step, then the loader run as the
# board's main.py runs it. Nothing of it is in the firmware.
KILLAT = """
import builtins, sys, time
import os as _os

STEP = %r
POINTER, STAGE = "ota/state.json", "ota/stage.json"
_open = builtins.open


def _stop():
    # written whole, then renamed: the test kills as soon as the name exists
    with _open("killpoint.tmp", "w") as f:
        f.write(STEP)
    _os.rename("killpoint.tmp", "killpoint.reached")
    while True:  # the test kills the process here
        time.sleep(1)


def _exists(p):
    try:
        _os.stat(p)
        return True
    except OSError:
        return False


class _Os:
    def __getattr__(self, name):
        return getattr(_os, name)

    def rename(self, a, b):
        if b.endswith(POINTER):
            if STEP == "pointer-rename":
                _stop()
            if STEP == "fat-pointer-swap" and _exists(b):
                raise OSError(17)  # EEXIST: this filesystem's rename does not replace
        _os.rename(a, b)

    def remove(self, p):
        if STEP == "stage-remove" and p.endswith(STAGE):
            _stop()
        _os.remove(p)
        if (STEP, p[-len(STAGE):]) in (("reboot", STAGE), ("fat-pointer-swap", POINTER)):
            _stop()


def _hooked_open(p, *a):
    if STEP == "pointer-write" and p.endswith(POINTER + ".tmp"):
        _stop()
    return _open(p, *a)


sys.modules["os"] = _Os()
builtins.open = _hooked_open
import main  # the loader (the board's main.py): imported, it does not run by itself

sys.exit(main.run("config.json"))
"""

# step -> what the next boot runs: the switch's writes in order.
STEPS = {
    "pointer-write": OLD,  # before the new pointer's temp file is written
    "pointer-rename": OLD,  # the temp file whole, not renamed over the pointer
    "stage-remove": NEW,  # the pointer switched, the stage record still there
    "reboot": NEW,  # everything written, before the reboot
    "fat-pointer-swap": NEW,  # the old pointer removed, the new one not renamed yet
}


def _slot_files(bundle_dir, slot_dir):
    """A bundle as a transfer leaves it in a slot: its manifest's files and ota.jsonl."""
    for path, _size, _sha in otakit.manifest(bundle_dir)["files"] + [["ota.jsonl", 0, ""]]:
        os.makedirs(os.path.dirname(os.path.join(slot_dir, path)), exist_ok=True)
        shutil.copy(os.path.join(bundle_dir, path), os.path.join(slot_dir, path))


def _entry(slot, version, h):
    return {"slot": slot, "version": version, "hash": h}


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A device directory running OLD from slot a (committed) with NEW staged
    in slot b by a real transfer over the device's link; the factory
    modules' tree; the pointer; NEW's hash and file sizes."""
    tmp = tmp_path_factory.mktemp("switchcut")
    tree = str(tmp / "factory")
    mpybuild.compile_tree(ROOT, ["edgebus", "firmware"], tree)
    old, new = otakit.bundle(tmp, "same", version=OLD), otakit.bundle(tmp, "good", version=NEW)
    d = tmp / "device"
    (d / "ota").mkdir(parents=True)
    for name, data in boards.runtime_files(boards.load_board("unix")).items():
        (d / name).write_bytes(data)
    (d / "main.py").write_bytes(devicefiles.main_py())
    _slot_files(old, str(d / "ota" / "a"))
    pointer = {"good": _entry("a", OLD, otakit.sha256(otakit.manifest_bytes(old))), "trial": None}
    (d / "ota" / "state.json").write_text(json.dumps(pointer))
    man = otakit.manifest_bytes(new)
    blobs = [man] + [otakit.file_bytes(new, f[0]) for f in otakit.manifest(new)["files"]]
    h = otakit.sha256(man)

    async def transfer(bus, link, dev):
        c = await _ready(bus, link)
        r = await c.call(OP, {"op": "begin", "version": NEW, "hash": h, "size": len(man)}, 10)
        assert r["slot"] == "b" and r["have"] == [0], r
        for i, blob in enumerate(blobs):
            for off in range(0, len(blob), otakit.CHUNK):
                head = i.to_bytes(2, "big") + off.to_bytes(4, "big")
                await c.call(OP, head + blob[off : off + otakit.CHUNK], 10)
        r = await c.call(OP, {"op": "begin", "version": NEW, "hash": h, "size": len(man)}, 10)
        assert r["have"] == [len(b) for b in blobs], r

    _session(d, tree, transfer, ["main.py", "config.json"])
    return d, tree, pointer, h, [len(b) for b in blobs]


def _session(d, tree, body, argv):
    """body(bus, link, device process) while the device runs argv in d with
    a host link on its pty; the process is killed after."""
    with PtyCable() as cable:
        cfg = {
            "node": NODE,
            "key": KEY,
            "board": "unix",
            "uplink": {"kind": "uart", "port": cable.a, "backoff_min": 0.2, "backoff_max": 1},
            "link": {"heartbeat": 0.5, "handshake_timeout": 1.0},
        }
        (d / "config.json").write_text(json.dumps(cfg))
        env = dict(os.environ, MICROPYPATH=".frozen:" + tree)
        with open(d / "device.log", "a") as log:
            p = subprocess.Popen(
                [mpybuild.micropython(), "-X", "heapsize=" + DEVICE_HEAP] + argv,
                cwd=d,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            return asyncio.run(devicekit.host(cable, KEY, lambda bus, link: body(bus, link, p)))
        finally:
            p.kill()
            p.wait()


async def _ready(bus, link):
    """A connection, once the device's session is up with its endpoints."""
    await until(lambda: link.status == "up" and key(OP) in bus.endpoints(), 30)
    return bus.connect()


def _log(d):
    return (d / "device.log").read_text()


@pytest.mark.parametrize("step", list(STEPS))
def test_a_power_cut_at_each_step_of_the_switch_boots_old_or_new_on_trial(staged, tmp_path, step):
    src, tree, pointer, h, sizes = staged
    d = tmp_path / "device"
    shutil.copytree(src, d)
    (d / "device.log").write_text("")
    (d / "killat.py").write_text(KILLAT % step)

    async def cut(bus, link, dev):
        c = await _ready(bus, link)
        r = await c.call(OP, {"op": "begin", "version": NEW, "hash": h, "size": sizes[0]}, 10)
        assert r["have"] == sizes, r  # staged whole: the switch goes ahead
        switch = asyncio.ensure_future(c.call(OP, {"op": "switch", "hash": h, "trial_s": 60}, 5))
        await until(lambda: (d / MARK).exists() or dev.poll() is not None, 30)
        assert dev.poll() is None, _log(d)
        dev.send_signal(signal.SIGKILL)  # the power cut, at the step
        dev.wait()
        switch.cancel()

    _session(d, tree, cut, ["-m", "killat"])
    assert (d / MARK).read_text() == step

    async def after(bus, link, dev):
        c = await _ready(bus, link)
        st = await c.call(OP, {"op": "status"}, 10)
        ran = st["running"]["version"]
        assert (ran, st["rollbacks"], st["last_failure"]) == (STEPS[step], 0, None), st
        if ran == OLD:
            assert st["state"] == "committed" and st["running"]["slot"] == "a", st
            # The staged bundle is intact: the next switch needs no byte sent again.
            r = await c.call(OP, {"op": "begin", "version": NEW, "hash": h, "size": sizes[0]}, 10)
            assert r["have"] == sizes, r
            return st
        assert (st["state"], st["running"]["slot"]) == ("trial", "b"), st
        assert "wdt" not in st  # the unix port's trial has the simulated watchdog
        t = time.monotonic()
        while st["state"] == "trial" and time.monotonic() - t < 45:
            await asyncio.sleep(1)
            st = await c.call(OP, {"op": "status"}, 10)
        return st

    st = _session(d, tree, after, ["main.py", "config.json"])
    after_ptr = json.loads((d / "ota" / "state.json").read_text())
    if STEPS[step] == OLD:
        assert after_ptr == pointer, (after_ptr, _log(d))
    else:
        assert (st["state"], st["running"]["version"]) == ("committed", NEW), (st, _log(d))
        assert after_ptr == {
            "good": _entry("b", NEW, h),
            "prev": pointer["good"],
            "trial": None,
        }, after_ptr
        assert "READY node=%s" % NODE in _log(d) and "OTA: committed %s" % NEW in _log(d)
