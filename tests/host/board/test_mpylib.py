"""micropython-lib through the board manifests' "require" (tools/boardkit/mpylib.py):
resolved by MicroPython's own manifest code from the source's
lib/micropython-lib, placed where mip places them, and a clear error naming
the source option when there is no source or no such package."""

import json
import os

import pytest

from edgebus.tools import cli
from edgebus.tools.boardkit import boards, build, firmware, mpylib

# The stock board images freeze ntptime (bundle-networking): a board that
# lacks it says so in its manifest, as this copy of esp32's does.
ESP32 = dict(boards.load_board("esp32"), require=["ntptime"])


@pytest.fixture
def source():
    src = os.environ.get(mpylib.ENV_SOURCE)
    if not src or not os.path.exists(src):
        pytest.skip("no MicroPython source: set %s" % mpylib.ENV_SOURCE)
    return src


def test_a_board_bundle_has_ntptime_in_lib_and_its_firmware_requires_it(source, tmp_path):
    rep = build.build(ESP32, str(tmp_path / "b"), log=lambda *a: None)
    assert "lib/ntptime.mpy" in rep["files"] and "ntptime.mpy" not in rep["files"]
    with open(tmp_path / "b" / "lib" / "ntptime.mpy", "rb") as f:
        assert f.read(1) == b"M"  # an .mpy, compiled for the board
    assert "require('ntptime')" in firmware.freeze_manifest(ESP32).splitlines()
    tree = mpylib.source_tree(source)[0]
    [(src, rel)] = mpylib.resolve(tree, ["ntptime"])
    assert rel == "ntptime.py" and src.startswith(mpylib.lib_dir(tree))


def test_no_source_or_an_unknown_package_is_one_clear_line(source, tmp_path, monkeypatch, capsys):
    tree = mpylib.source_tree(source)[0]
    with pytest.raises(mpylib.SourceError, match="Package 'no-such-pkg' not found"):
        mpylib.resolve(tree, ["no-such-pkg"])
    monkeypatch.delenv(mpylib.ENV_SOURCE)
    manifest = tmp_path / "esp32.json"
    with open(boards.board_path("esp32")) as f:
        manifest.write_text(json.dumps(dict(json.load(f), require=["ntptime"])))
    # No source at all: the bundle leaves the package out and says so.
    assert cli.main(["build", "--board", str(manifest), "--out", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert "board esp32 requires micropython-lib packages (ntptime), left out" in out, out
    assert "--micropython" in out and "mpremote mip install ntptime" in out, out
    assert not (tmp_path / "x" / "lib").exists()
    # A source given that is not one: an error, nothing written.
    code = cli.main(
        [
            "build",
            "--board",
            str(manifest),
            "--micropython",
            "/nowhere",
            "--out",
            str(tmp_path / "y"),
        ]
    )
    assert code == 1 and "--micropython /nowhere: no such file" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()
    # a board that requires nothing needs no source
    assert cli.main(["build", "--board", "esp32", "--out", str(tmp_path / "q")]) == 0
