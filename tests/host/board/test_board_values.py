"""Every board's manifest reaches its device: the bundle edgebus build makes
for the board carries board.json (installed by deploy and mip alike), and the
runtime started from that bundle runs and reports the manifest's queues,
spool and heap budget (sys/info, sys/health). The MicroPython boards' bundles
run on the real unix port (their .mpy files are bytecode, which every port
loads), linux-edge's sources on CPython; what is board-specific here is the
manifest, which is the point."""

import asyncio
import json
import os
import re
import sys

import pytest

import edgebus
from edgebus.tools.boardkit import boards, build, mpybuild
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import ROOT, processes, until
from tests.host import devicekit

pytestmark = pytest.mark.micropython

NODE, KEY = "b1", "board-key"


def _readme_heap():
    """The heap of firmware/README.md's first command (the unix port from the
    .mpy bundle): these devices run with it, so the command the docs show is
    the one tested. The 64-bit unix port's objects are about twice a board's."""
    with open(os.path.join(ROOT, "firmware", "README.md")) as f:
        m = re.search(r"micropython -X heapsize=(\d+K) -m firmware\.main config\.json", f.read())
    assert m, "firmware/README.md no longer shows how to start the runtime"
    return m.group(1)


HEAP = _readme_heap()


def _start(start, board, bundle, cfg):
    if board["runtime"] == "cpython":
        cmd = [sys.executable, "-u"]
    else:
        cmd = [mpybuild.micropython(), "-X", "heapsize=" + HEAP]
    return start(cmd + ["-m", "firmware.main", cfg], bundle)


def _config(tmp_path, board, port):
    p = str(tmp_path / "config.json")
    with open(p, "w") as f:
        json.dump(
            {
                "node": NODE,
                "key": KEY,
                "board": board,
                "uplink": {"kind": "uart", "port": port, "backoff_min": 0.2, "backoff_max": 1},
                "link": {"heartbeat": 0.5},
                "health_period": 0.3,
            },
            f,
        )
    return p


def _build(board, tmp_path):
    out = str(tmp_path / "bundle")
    # Bytecode: each board's bundle runs here on the unix port.
    build.build(board, out, log=lambda *a: None, native=False)
    with open(os.path.join(out, "package.json")) as f:
        urls = json.load(f)["urls"]
    assert ["board.json", "board.json"] in urls  # mip and deploy install it
    with open(os.path.join(out, "board.json"), "rb") as f:
        assert f.read() == boards.runtime_files(board)["board.json"]
    return out


@pytest.mark.parametrize("name", [n for n in boards.list_boards() if n != "esp8266"])
def test_the_device_runs_and_reports_its_boards_manifest(name, tmp_path):
    board = boards.load_board(name)
    bundle = _build(board, tmp_path)
    q = board["queues"]
    with PtyCable() as cable:
        for start in processes():
            dev = _start(start, board, bundle, _config(tmp_path, name, cable.a))

            async def body(bus, link):
                c = bus.connect()
                view = c.retained_view("dev/%s/sys/info" % NODE)
                health = c.subscribe("dev/%s/sys/health" % NODE, queue_len=8)
                await until(lambda: len(view) == 1, 30)
                h = await asyncio.wait_for(health.recv(), 10)
                # its board is the bundle's: a remote change would stop it at boot
                topic = ("dev", NODE, "sys", "config", "set")
                await until(lambda: topic in bus.endpoints(), 10)
                with pytest.raises(edgebus.Failed, match="bundle is built for board %s" % name):
                    await c.call(topic, {"board": "other"}, timeout=5)
                return view.snapshot()[0].payload, h.payload

            try:
                info, health = asyncio.run(devicekit.host(cable, KEY, body))
            except BaseException:
                dev.kill()
                print(dev.communicate()[0])
                raise
    assert info["board"] == name and info["manifest"] == "board.json"
    assert info["budget"] == board["budget"]
    for k in ("bus", "full", "uplink_tx", "spool"):
        assert info["queues"][k] == q[k], (k, info["queues"])
    assert health["board"] == name and health["manifest"] == "board.json"
    assert health["link"]["spool"]["capacity"] == q["spool"]


def test_the_esp8266_bundle_refuses_to_start_and_says_why(tmp_path):
    """The esp8266's ~28 KB heap does not hold the device runtime (its manifest's
    notes): the device stops at boot with one line naming the budget."""
    board = boards.load_board("esp8266")
    bundle = _build(board, tmp_path)
    for start in processes():
        dev = _start(start, board, bundle, _config(tmp_path, "esp8266", "/dev/null"))
        out = dev.communicate(timeout=60)[0]
    assert dev.returncode == 2, out
    assert "over the esp8266 board's budget of 28672" in out, out


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
def test_a_manifest_for_another_board_stops_the_device_with_one_line(tmp_path, runtime):
    board = boards.load_board("esp32" if runtime == "micropython" else "linux-edge")
    bundle = _build(board, tmp_path)
    for start in processes():
        dev = _start(start, board, bundle, _config(tmp_path, "rp2-pico-w", "/dev/null"))
        out = dev.communicate(timeout=60)[0]
    assert dev.returncode == 2, out
    assert out.strip().splitlines() == [
        "edgebus firmware: config error: %s: board.json is the manifest of board %s but the "
        "config says board rp2-pico-w: deploy the bundle built for rp2-pico-w (edgebus build "
        "--board rp2-pico-w) or correct the config's board"
        % (tmp_path / "config.json", board["name"])
    ]


def test_a_heap_too_small_for_the_runtime_says_so_in_one_line(tmp_path):
    """firmware/README.md's first command with too little heap (160K, which
    it once showed): a line saying what to do, not a traceback."""
    board = boards.load_board("unix")
    bundle = _build(board, tmp_path)
    cmd = [mpybuild.micropython(), "-X", "heapsize=160K", "-m", "firmware.main"]
    for start in processes():
        dev = start(cmd + [_config(tmp_path, "unix", "/dev/null")], bundle)
        out = dev.communicate(timeout=60)[0]
    assert dev.returncode == 1, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out, out
    assert lines[0].startswith("edgebus firmware: out of heap (") and "heapsize=256K" in out, out
