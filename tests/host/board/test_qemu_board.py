"""A real 32-bit board: MicroPython firmware for the MPS2-AN385 (Cortex-M3) with
edgebus frozen in, built from source (edgebus firmware build), booted in the real
qemu-system-arm (edgebus flash's QemuBoard) and joined over its emulated UART
to a real bridge process through pyserial."""

import asyncio
import os
import re
import subprocess
from pathlib import Path

import pytest

import edgebus
from dev.harness.bridge import BridgeProcess
from dev.harness.process import run_module
from edgebus import tlog
from edgebus.client.local import attach_local
from edgebus.tools.boardkit import devicefiles, executables, mpybuild
from edgebus.tools.commands.status import fetch
from edgebus.tools.sim import qemuboard
from tests.conftest import ROOT, compile_portable_tests, until
from tests.host.board import qemukit
from tests.host.spark.sparkkit import spark_env

pytestmark = pytest.mark.qemu  # every test here boots the board (so: slow)

NODE = "mps2-1"
KEY = "k-mps2"


@pytest.fixture(scope="module")
def image():
    return qemukit.build_image()


def _device_config(**over):
    cfg = {
        "node": NODE,
        "key": KEY,
        "board": qemukit.BOARD,
        "uplink": {"kind": "uart", "port": 1, "backoff_min": 0.2, "backoff_max": 1},
        "link": {"heartbeat": 1, "handshake_timeout": 2},
        "services": [{"module": "temp", "period": 0.5}],
        "health_period": 1,
    }
    cfg.update(over)
    return cfg


@pytest.fixture
def board(image, tmp_path):
    """start(config, uart="pty") -> (QemuBoard, Console); stopped at teardown."""
    started = []

    def start(config, uart="pty", files=None):
        b, _meta = image
        state = str(tmp_path / "board")
        f = qemuboard.device_files(b, config, main=devicefiles.LOADER if config else None)
        f.update(files or {})
        qemuboard.prepare_flash(b, state, f)
        qb = qemuboard.QemuBoard(b, _meta["image"], state, repl="pty", uart=uart).start()
        con = qemukit.Console(qb.repl_port)
        started.append((qb, con))
        return qb, con

    yield start
    for qb, con in started:
        con.close()
        qb.close()


def _bridge(tmp_path, port):
    path = tmp_path / "bridge.toml"
    path.write_text(f"""
[bridge]
node = "gw"
state_dir = "state"
socket = "state/bridge.sock"
heartbeat = 1
[log]
dir = "log"
patterns = ["dev/#"]
[[serial]]
node = "{NODE}"
port = "{port}"
key = "{KEY}"
""")
    return BridgeProcess(str(tmp_path), toml=path, cwd=tmp_path).start()


def _ep(*path):
    return ("dev", NODE) + path


def test_board_boots_joins_the_bridge_answers_and_reboots_with_a_new_sid(board, tmp_path):
    qb, con = board(_device_config())
    line, ready = con.wait_line("READY node=%s" % NODE, 30)
    assert "board=qemu-mps2-an385" in line
    br = _bridge(tmp_path, qb.uart_port)
    sock = br.sock
    try:

        async def main():
            await until(lambda: os.path.exists(sock), 15)
            bus = edgebus.Bus(q_length=64)
            link, task = await attach_local(bus, sock, node="tester")
            c = bus.connect(principal="test")
            view = c.retained_view("dev/#")
            temp = c.subscribe(_ep("sensor", "temp"), queue_len=64)
            await until(lambda: link.status == "up", 15)
            await until(lambda: view.get(_ep("sys", "info")) is not None, 30)
            info = view.get(_ep("sys", "info")).payload
            assert info["node"] == NODE and info["board"] == "qemu-mps2-an385"
            assert info["platform"] == "qemu" and info["impl"].startswith("micropython")
            m = await asyncio.wait_for(temp.recv(), 10)
            assert m.payload["simulated"] is True
            st = (await fetch(sock))["links"]["serial:" + NODE]
            assert st["state"] == "up" and st["generation"] == 1
            sid1 = st["peer_sid"]

            async def call(topic, payload):
                await until(lambda: topic in bus.endpoints(), 10)
                return await c.call(topic, payload, timeout=10)

            assert await call(_ep("sys", "config", "get"), "node") == NODE
            got = await call(_ep("sys", "config", "get"), None)
            assert got["key"] == "***" and got["uplink"]["port"] == 1
            r = await call(_ep("sys", "config", "set"), {"info_period": 30})
            assert r["changed"] == ["info_period"]
            assert await call(_ep("sys", "config", "get"), "info_period") == 30
            bad = await _failure(call(_ep("sys", "config", "set"), {"health_period": "x"}))
            assert "health_period" in str(bad)

            while temp.recv_nowait() is not None:
                pass
            n_before = (await asyncio.wait_for(temp.recv(), 10)).payload["n"]
            assert (await call(_ep("sys", "reboot"), None))["rebooting"] is True
            con.wait_for("READY node=%s" % NODE, 30, start=ready)

            async def rejoined():
                s = (await fetch(sock))["links"]["serial:" + NODE]
                return s if s["state"] == "up" and s["generation"] == 2 else None

            for _ in range(300):
                st2 = await rejoined()
                if st2:
                    break
                await asyncio.sleep(0.1)
            assert st2, "the rebooted board did not rejoin with generation 2"
            # Telemetry of the new boot: its sensor counts from 0 again.
            while (await asyncio.wait_for(temp.recv(), 10)).payload["n"] >= n_before:
                pass
            # The change made before the reboot is on the board's littlefs.
            assert await call(_ep("sys", "config", "get"), "info_period") == 30
            await link.close()
            task.cancel()
            return sid1, st2["peer_sid"]

        sid1, sid2 = asyncio.run(main())
    finally:
        rc = br.stop(15)
    assert rc == 0, br.log()
    # The boot counter (first 6 hex digits) moved on with the reboot.
    assert sid1 != sid2 and int(sid2[:6], 16) == int(sid1[:6], 16) + 1, (sid1, sid2)
    assert con.text.count("READY node=%s" % NODE) == 2
    recs = [r for _, r in tlog.read_log(str(tmp_path / "log"))]
    temps = [r for r in recs if tuple(r["topic"]) == _ep("sensor", "temp")]
    assert {r["peer_sid"] for r in temps} == {sid1, sid2}
    assert {r["generation"] for r in temps} == {1, 2}


async def _failure(aw):
    try:
        await aw
    except edgebus.Failed as e:
        return e
    raise AssertionError("the call did not fail")


# -- the portable core suite on the board, driven with mpremote over its REPL UART

# Every module but those that need a network stack, which the board lacks
# (a module says so with NETWORK = True).
PORTABLE = sorted(
    m
    for m in (
        f[:-3]
        for f in os.listdir(os.path.join(ROOT, "tests", "portable"))
        if f.startswith("test_") and f.endswith(".py")
    )
    if not getattr(__import__("tests.portable." + m, fromlist=["_"]), "NETWORK", False)
)


# The tests' own code and their second Link (a pair per test) live on the heap
# beside the frozen core's objects: the suite runs in a 144 KB heap, as it runs
# in 80-160 KB on the unix port (tests/test_portable_on_micropython.py); the
# relay module's rings of three buses and six links need more than 128 KB.
SUITE_HEAP = 147456


def test_an_image_at_another_heap_has_that_heap():
    """The two heaps share one kept build directory (make does not see the
    -D flag change); each image must still carry its own heap array."""
    _b, small = qemukit.build_image()
    _b, big = qemukit.build_image(SUITE_HEAP)
    # a third, made from the directory the others left (in a fresh cache)
    _b, mid = qemukit.build_image(96 * 1024)
    assert len({small["image"], big["image"], mid["image"]}) == 3
    assert small["bss_bytes"] < 96 * 1024 <= mid["bss_bytes"] < SUITE_HEAP <= big["bss_bytes"]


@pytest.fixture(scope="module")
def suite_board(tmp_path_factory):
    """The board with the portable tests (bytecode .mpy) on its flash and no
    main.py, so its REPL is free; edgebus is the frozen one."""
    b, meta = qemukit.build_image(SUITE_HEAP)
    tree = str(tmp_path_factory.mktemp("suite"))
    compile_portable_tests(tree)
    mpybuild.compile_file(
        os.path.join(ROOT, "tests", "mpy", "run.py"), os.path.join(tree, "run.mpy")
    )
    files = {}
    for dirpath, _d, fs in os.walk(tree):
        for f in fs:
            p = os.path.join(dirpath, f)
            files[os.path.relpath(p, tree)] = Path(p).read_bytes()
    files.update(qemuboard.device_files(b, None, main=None))
    state = str(tmp_path_factory.mktemp("suite-board"))
    qemuboard.prepare_flash(b, state, files)
    qb = qemuboard.QemuBoard(b, meta["image"], state, repl="pty", uart="null").start()
    yield qb
    qb.close()


@pytest.mark.parametrize("mod", PORTABLE)
def test_portable_module_on_the_board(suite_board, mod):
    code = "import run; run.run(['tests.portable.%s'])" % mod
    r = subprocess.run(
        executables.command("mpremote") + ["connect", suite_board.repl_port, "exec", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    ran = set(re.findall(r"^PASS \S+ (\S+)\r?$", r.stdout, re.M))
    names = {
        n for n in dir(__import__("tests.portable." + mod, fromlist=["_"])) if n.startswith("test_")
    }
    assert ran == names, out


# -- bad input on the board's UART: noise and a cut line, as on the unix port


def test_noise_and_a_cut_on_the_board_uart_are_survived_and_counted(board, tmp_path):
    from edgebus.tools.sim.ptycable import PtyCable

    with PtyCable() as cable:
        qb, con = board(_device_config(), uart=cable.a)
        br = _bridge(tmp_path, cable.b)
        sock = br.sock
        try:

            async def link_state():
                try:
                    return (await fetch(sock))["links"].get("serial:" + NODE)
                except OSError:
                    return None

            async def wait_link(cond, timeout=90):  # a loaded 2-core CI machine
                for _ in range(int(timeout / 0.1)):
                    s = await link_state()
                    if s and cond(s):
                        return s
                    await asyncio.sleep(0.1)
                raise AssertionError("link state not reached: %s" % (s,))

            async def main():
                up = await wait_link(lambda s: s["state"] == "up")
                sid = up["peer_sid"]
                rx0 = up["counters"].get("frames_in", 0)
                cable.noise = 0.002  # both ways: frames to and from the board
                # the noise may take the session down meanwhile (no transport then)
                await wait_link(
                    lambda s: (
                        (s.get("transport") or {}).get("crc_errors", 0) >= 3
                        and cable.bytes["corrupted"] >= 10
                    )
                )
                cable.noise = 0.0
                cable.cut()
                await wait_link(lambda s: s["state"] != "up")
                cable.restore()
                s = await wait_link(
                    lambda s: s["state"] == "up" and s["counters"].get("frames_in", 0) > rx0 + 20
                )
                return sid, s

            sid, s = asyncio.run(main())
        finally:
            rc = br.stop(15)
        assert rc == 0, br.log()
    # The same boot throughout: the board never crashed or rebooted.
    assert s["peer_sid"] == sid and s["generation"] == 1
    assert con.text.count("READY") == 1 and "Traceback" not in con.text, con.text


@pytest.mark.mosquitto
@pytest.mark.micropython
@pytest.mark.spark
def test_the_demo_with_the_board_a_broker_outage_and_its_audit(image, tmp_path):
    """`./do demo` end to end (dev/demo.py): real mosquitto stopped and
    restarted in the middle; the real firmware on the MicroPython port on a pty
    and over MQTT, and on the emulated board; the bridge and its log; then
    Spark: the ingest job, its delivery audit and `edgebus report`, whose audit
    line says nothing was lost and how late the spooled readings came."""
    pytest.importorskip("pyspark")
    out = str(tmp_path / "demo")
    r = run_module(
        "dev.demo",
        *("--seconds", "8", "--outage", "4", "--outage-at", "2"),
        *("--qemu", "--serial-devices", "1", "--out", out),
        env=spark_env(),
        timeout=480,
    )
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert "3 of 3 device links had a session" in r.stdout, text
    assert "demo: broker outage: mosquitto stopped for 4 s" in r.stdout
    boot = Path(out, "devices", "mps2-1.log").read_text()
    assert "READY node=mps2-1" in boot
    recs = [rec for _, rec in tlog.read_log(os.path.join(out, "telemetry"))]
    assert {rec["peer_node"] for rec in recs} == {"sim-1", "sim-mqtt-1", "mps2-1"}
    temps = [rec for rec in recs if tuple(rec["topic"][2:]) == ("sensor", "temp")]
    assert temps and all(rec["seq"] is not None and rec["generation"] == 1 for rec in temps)
    # The MQTT device's readings of the outage came late, none was lost.
    m = re.search(
        r"^audit: nothing lost; (\d+) readings came late, p50 (\S+) s, p99 (\S+) s", r.stdout, re.M
    )
    assert m, text
    # Late in the audit: what the link flagged, less the boot's start (taken
    # before its first reading in session and before its first number
    # arrived: audit.gaps.START_GRACE).
    mine = [rec for rec in recs if rec["peer_node"] == "sim-mqtt-1" and rec["seq"] is not None]
    first = min(rec["ts_device"] for rec in mine if not (rec["extra"] or {}).get("late"))
    came = min(rec["ts_host"] for rec in mine)
    late = [
        rec
        for rec in mine
        if (rec["extra"] or {}).get("late")
        and (rec["ts_device"] >= first or rec["ts_device"] >= came)
    ]
    assert int(m.group(1)) >= len(late) > 0
    assert float(m.group(3)) >= 1.0  # spooled for seconds, not milliseconds
    assert os.path.getsize(os.path.join(out, "audit.png")) > 10000
    assert not [ln for ln in text.splitlines() if "WARN" in ln], text
