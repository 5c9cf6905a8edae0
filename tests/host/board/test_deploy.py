"""edgebus deploy against the unix port acting as a board: a real `micropython`
whose REPL is on a pseudo-terminal (tools/sim/simboard.py), driven by mpremote."""

import hashlib
import json
import os
import pty
import subprocess
import sys
import tty
from pathlib import Path

import pytest

from edgebus.tools import cli
from edgebus.tools.boardkit import boards, build
from edgebus.tools.commands import deploy, rawrepl
from edgebus.tools.sim.simboard import SimBoard

UNIX = boards.load_board("unix")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    d = tmp_path_factory.mktemp("bundles")
    quiet = lambda *a: None  # noqa: E731
    build.build(UNIX, str(d / "unix"), log=quiet)
    build.build(boards.load_board("esp32"), str(d / "esp32"), log=quiet)
    build.build(boards.load_board("linux-edge"), str(d / "linux-edge"), log=quiet)
    return d


@pytest.fixture
def sim(tmp_path):
    fs = tmp_path / "board"
    fs.mkdir()
    with SimBoard(str(fs)) as b:
        yield b


def _deploy(sim, bundle, board=UNIX, **kw):
    lines = []
    kw.setdefault("timeout", 5)
    res = deploy.deploy(board, sim.port, str(bundle), log=lines.append, **kw)
    return res, "\n".join(lines)


def _sha(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def test_deploy_copies_then_copies_nothing_and_the_code_runs(sim, bundles, tmp_path):
    cfg = tmp_path / "device.json"
    # The CA the config's TLS names goes with it, from beside it.
    cfg.write_text(json.dumps({"node_id": "sim-1", "uplink": {"tls": {"ca": "ca.pem"}}}))
    (tmp_path / "ca.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    res, text = _deploy(sim, bundles / "unix", config=str(cfg))
    urls = json.loads(Path(bundles / "unix" / "package.json").read_text())["urls"]
    assert sorted(res["written"]) == sorted([d for d, _ in urls] + ["ca.pem", "config.json"])
    assert Path(sim.cwd, "ca.pem").read_bytes() == (tmp_path / "ca.pem").read_bytes()
    assert "MicroPython 1." in text and "no soft reset" in text
    # The files landed in the process's working directory, byte for byte.
    for dest, src in urls:
        assert _sha(os.path.join(sim.cwd, dest)) == _sha(bundles / "unix" / src)
    assert json.loads(Path(os.path.join(sim.cwd, "config.json")).read_text())["node_id"] == "sim-1"

    # Second deploy: one hashing round trip, nothing written.
    res, text = _deploy(sim, bundles / "unix", config=str(cfg))
    assert res["written"] == [] and res["removed"] == []
    assert "up to date: %d files unchanged" % (len(urls) + 2) in text

    # The deployed .mpy run on the board, through mpremote's own CLI with `resume`
    # (the unix port has no soft reset), in the same micropython process.
    code = (
        "import asyncio, edgebus\n"
        "bus = edgebus.Bus()\n"
        "c = bus.connect(principal='t')\n"
        "s = c.subscribe('a/+')\n"
        "c.publish('a/b', 42)\n"
        "m = asyncio.run(s.recv())\n"
        "print('RAN', edgebus.__file__, m.payload)"
    )
    r = subprocess.run(
        [sys.executable, "-m", "mpremote", "connect", sim.port, "resume", "exec", code],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "RAN edgebus/__init__.mpy 42" in r.stdout, r.stdout + r.stderr
    assert sim.alive()


def test_only_changed_files_are_written_and_stale_ones_removed(sim, bundles, tmp_path):
    _deploy(sim, bundles / "unix")
    bus = os.path.join(sim.cwd, "edgebus", "bus.mpy")
    with open(bus, "ab") as f:
        f.write(b"garbage")
    # A leftover source would shadow its .mpy (MicroPython tries .py first).
    Path(os.path.join(sim.cwd, "edgebus", "feed.py")).write_text("raise ImportError")
    os.makedirs(os.path.join(sim.cwd, "edgebus", "old"))
    Path(os.path.join(sim.cwd, "edgebus", "old", "x.mpy")).write_bytes(b"M")
    Path(os.path.join(sim.cwd, "mine.txt")).write_text("not ours")
    res, text = _deploy(sim, bundles / "unix")
    assert res["written"] == ["edgebus/bus.mpy"]
    assert res["removed"] == ["edgebus/feed.py", "edgebus/old/x.mpy"]
    assert "1 of" in text and "2 stale to remove" in text
    assert _sha(bus) == _sha(bundles / "unix" / "edgebus" / "bus.mpy")
    assert os.path.exists(os.path.join(sim.cwd, "mine.txt"))  # outside the bundle: kept


def test_package_json_installs_with_mip(sim, bundles):
    # mpremote's mip reads the bundle's package.json (relative URLs) like a board's mip.
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mpremote",
            "connect",
            sim.port,
            "resume",
            "mip",
            "install",
            "--target",
            "lib",
            str(bundles / "unix" / "package.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "Done" in r.stdout, r.stdout + r.stderr
    for dest, src in json.loads(Path(bundles / "unix" / "package.json").read_text())["urls"]:
        assert _sha(os.path.join(sim.cwd, "lib", dest)) == _sha(bundles / "unix" / src)


def test_cli_deploy(sim, bundles, capsys):
    args = [
        "deploy",
        "--board",
        "unix",
        "--port",
        sim.port,
        "--bundle",
        str(bundles / "unix"),
        "--timeout",
        "5",
    ]
    assert cli.main(args) == 0
    assert cli.main(args) == 0
    assert "up to date" in capsys.readouterr().out


def test_wrong_board_is_refused_before_any_reset(sim, bundles):
    with pytest.raises(deploy.DeployError) as e:
        _deploy(sim, bundles / "esp32", board=boards.load_board("esp32"))
    msg = str(e.value)
    assert msg.startswith("wrong board: the device on %s" % sim.port)
    assert "sys.platform 'linux'" in msg and "use --board unix" in msg
    assert sim.alive()  # identified before a soft reset could end it
    assert not os.listdir(sim.cwd)  # nothing copied


def test_missing_port():
    with pytest.raises(deploy.DeployError, match="port /dev/ttyNOPE0 does not exist"):
        rawrepl.open_board("/dev/ttyNOPE0", 115200, 1)


def test_busy_port(sim, bundles):
    import serial

    holder = serial.Serial(sim.port, exclusive=True)  # like a serial monitor left open
    try:
        with pytest.raises(deploy.DeployError, match="port %s is busy" % sim.port):
            _deploy(sim, bundles / "unix")
    finally:
        holder.close()
    _deploy(sim, bundles / "unix")  # free again: works


def test_no_response_from_the_repl(bundles):
    # A pty with nothing behind it: a board that is off or not running MicroPython.
    master, slave = pty.openpty()
    tty.setraw(slave)
    try:
        with pytest.raises(deploy.DeployError, match=r"no response from the REPL on .* within 1 s"):
            deploy.deploy(
                UNIX, os.ttyname(slave), str(bundles / "unix"), timeout=1, log=lambda *a: None
            )
    finally:
        os.close(master)
        os.close(slave)


def test_mpy_version_mismatch_on_the_device(bundles):
    meta = json.loads(Path(bundles / "unix" / "bundle.json").read_text())
    ident = ("micropython", "linux", "linux [GCC] version", 5 | (2 << 10), "1.19.1")
    with pytest.raises(deploy.DeployError) as e:
        deploy.check_device(UNIX, meta, ident, "/dev/pts/9")
    assert "mpy version mismatch: the bundle is .mpy v6" in str(e.value)
    assert "MicroPython 1.19.1 on /dev/pts/9 loads v5.0" in str(e.value)
    # Native code must also match the sub-version and the arch.
    meta["mpy"].update(native=True, arch="xtensawin")
    esp = boards.load_board("esp32")
    ident = (
        "micropython",
        "esp32",
        "Generic ESP32 module with ESP32",
        6 | (2 << 8) | (10 << 10),
        "1.22.0",
    )
    with pytest.raises(deploy.DeployError, match="native code for xtensawin, mpy v6.3"):
        deploy.check_device(esp, meta, ident, "/dev/ttyUSB0")
    ident = ident[:3] + (6 | (3 << 8) | (10 << 10),) + ident[4:]
    deploy.check_device(esp, meta, ident, "/dev/ttyUSB0")  # matches: no error


def test_bundle_and_config_errors(sim, bundles, tmp_path):
    with pytest.raises(deploy.DeployError, match="no bundle in .*edgebus build --board unix"):
        _deploy(sim, tmp_path / "nothing")
    with pytest.raises(deploy.DeployError, match="built for board esp32, not unix"):
        _deploy(sim, bundles / "esp32")
    bad = tmp_path / "bad.json"
    bad.write_text('{"node_id": }')
    with pytest.raises(deploy.DeployError, match="--config .*bad.json: not valid JSON"):
        _deploy(sim, bundles / "unix", config=str(bad))
    bad.write_text("[1, 2]")
    with pytest.raises(deploy.DeployError, match="must be a JSON object"):
        _deploy(sim, bundles / "unix", config=str(bad))
    with pytest.raises(deploy.DeployError, match="runs CPython, which has no REPL"):
        _deploy(sim, bundles / "linux-edge", board=boards.load_board("linux-edge"))
    # checked before the board is touched: a config the device would stop on
    bad.write_text('{"node": "n", "board": "rp2-pico-w"}')
    with pytest.raises(
        deploy.DeployError, match='names board "rp2-pico-w" but the bundle is for board unix'
    ):
        _deploy(sim, bundles / "unix", config=str(bad))
    bad.write_text('{"node": "n", "key": "change-me"}')
    with pytest.raises(
        deploy.DeployError, match="the example's key 'change-me', which board esp32 refuses"
    ):
        deploy.read_config(str(bad), "esp32")
    assert deploy.read_config(str(bad), "unix")  # the simulator takes it


def test_plan_writes_changed_files_and_removes_stale_ones_in_owned_folders():
    local = {"edgebus/a.mpy": "1", "edgebus/b.mpy": "2", "config.json": "3"}
    dev = {"edgebus/a.mpy": "1", "edgebus/b.mpy": "x", "edgebus/c.py": "4", "other/d": "5"}
    assert deploy.plan(local, dev, ["edgebus"]) == (
        ["edgebus/b.mpy", "config.json"],
        ["edgebus/c.py"],
    )
