"""micropython-lib through the board manifests' "require" (tools/mpylib.py):
resolved by MicroPython's own manifest code from the source's
lib/micropython-lib, placed where mip places them, and a clear error naming
the source option when there is no source or no such package."""

import os

import pytest

from edgebus.tools import boards, build, cli, firmware, mpylib

ESP32 = boards.load_board("esp32")


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
    assert cli.main(["build", "--board", "esp32", "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "board esp32 requires micropython-lib packages (ntptime)" in err, err
    assert "--micropython" in err and mpylib.ENV_SOURCE in err, err
    assert not (tmp_path / "x").exists()
    # a board that requires nothing needs no source
    assert cli.main(["build", "--board", "qemu-mps2-an385", "--out", str(tmp_path / "q")]) == 0
