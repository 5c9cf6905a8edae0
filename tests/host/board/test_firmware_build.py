"""edgebus firmware build and edgebus flash for the emulated board, without
building or booting anything: inputs checked, errors that say what to do."""

import os
import tarfile

import pytest

from edgebus.tools import cli
from edgebus.tools.boardkit import boards, devicefiles, firmware
from edgebus.tools.sim import qemuboard

BOARD = "qemu-mps2-an385"


def _run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_no_source_names_the_option_and_the_variable(capsys, monkeypatch):
    monkeypatch.delenv(firmware.ENV_SOURCE, raising=False)
    code, out = _run(["firmware", "build", "--board", BOARD], capsys)
    assert code == 1 and "--micropython" in out and firmware.ENV_SOURCE in out


def test_a_folder_that_is_not_micropython_is_refused(tmp_path, capsys):
    code, out = _run(
        ["firmware", "build", "--board", BOARD, "--micropython", str(tmp_path)], capsys
    )
    assert code == 1 and "not a MicroPython source tree" in out


def test_a_tarball_without_micropython_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EDGEBUS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "x.txt").write_text("x")
    tb = tmp_path / "other.tar.gz"
    with tarfile.open(tb, "w:gz") as t:
        t.add(tmp_path / "x.txt", "other/x.txt")
    code, out = _run(["firmware", "build", "--board", BOARD, "--micropython", str(tb)], capsys)
    assert code == 1 and "holds no MicroPython source tree" in out


def test_a_board_without_a_build_says_where_its_firmware_comes_from(capsys):
    code, out = _run(
        ["firmware", "build", "--board", "esp32", "--micropython", "/nonexistent"], capsys
    )
    assert code == 1 and "no firmware.build" in out and "micropython.org" in out


def test_a_missing_toolchain_names_the_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    with pytest.raises(firmware.FirmwareError) as e:
        firmware.check_toolchain("arm")
    assert "arm-none-eabi-gcc" in str(e.value)
    assert "gcc-arm-none-eabi libnewlib-arm-none-eabi" in str(e.value)


def test_missing_qemu_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(qemuboard.QemuError, match="apt-get install .*qemu-system-arm"):
        qemuboard.qemu_binary(boards.load_board(BOARD))


def test_the_freeze_manifest_is_the_boards_then_edgebus_and_firmware():
    m = firmware.freeze_manifest(boards.load_board(BOARD))
    assert (
        "include(%r)" % os.path.join(firmware.board_dir(boards.load_board(BOARD)), "manifest.py")
        in m
    )
    assert "module('edgebus/bus.py'" in m and "module('firmware/main.py'" in m


def test_the_cache_key_follows_the_inputs():
    b = boards.load_board(BOARD)
    man = firmware.freeze_manifest(b)
    k = firmware.build_key(b, "tarball:x", man, 65536)
    assert k == firmware.build_key(b, "tarball:x", man, 65536)
    assert k != firmware.build_key(b, "tarball:x", man, 131072)
    assert k != firmware.build_key(b, "tarball:y", man, 65536)


def test_flash_dry_run_prints_the_qemu_command(tmp_path, capsys):
    img = tmp_path / "firmware.elf"
    img.write_bytes(b"\x7fELF")
    code, out = _run(
        [
            "flash",
            "--board",
            BOARD,
            "--firmware",
            str(img),
            "--dry-run",
            "--state",
            str(tmp_path / "st"),
            "--uart",
            "tcp:4455",
        ],
        capsys,
    )
    if code == 1 and "not found" in out:
        pytest.skip("qemu-system-arm is not installed: " + out)
    assert code == 0, out
    assert "-machine mps2-an385" in out and "-semihosting" in out
    assert "tcp:127.0.0.1:4455,server=on,wait=off" in out


def test_flash_refuses_a_bad_uart_spec_and_a_missing_image(tmp_path, capsys):
    code, out = _run(
        ["flash", "--board", BOARD, "--firmware", str(tmp_path / "no.elf"), "--dry-run"], capsys
    )
    assert code == 1 and "no such firmware image" in out
    img = tmp_path / "firmware.elf"
    img.write_bytes(b"\x7fELF")
    code, out = _run(
        ["flash", "--board", BOARD, "--firmware", str(img), "--dry-run", "--uart", "usb"], capsys
    )
    assert code == 1 and "expected pty, tcp:PORT" in out


def test_the_device_files_are_config_board_and_main():
    b = boards.load_board(BOARD)
    f = qemuboard.device_files(b, {"node": "n"})
    assert sorted(f) == ["board.json", "config.json", "main.py"]
    # main.py is the loader's source: it chooses the bundle an update installed.
    assert f["main.py"] == devicefiles.main_py() and b"def choose(" in f["main.py"]


def test_old_images_are_pruned_newest_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEBUS_CACHE", str(tmp_path))
    d = tmp_path / "firmware"
    for i in range(6):
        (d / ("%s-%d" % (BOARD, i))).mkdir(parents=True)
        os.utime(d / ("%s-%d" % (BOARD, i)), (1000 + i, 1000 + i))
    (d / "other-board-1").mkdir()
    firmware.prune(BOARD, keep=2)
    assert sorted(os.listdir(d)) == ["other-board-1", BOARD + "-4", BOARD + "-5"]


def test_the_runtime_takes_the_board_json_edgebus_flash_wrote(tmp_path, monkeypatch):
    from firmware import ConfigError, boot

    monkeypatch.chdir(tmp_path)
    # None on this filesystem: the built-in defaults, and said so
    got = boot.load_board(BOARD)
    assert got["name"] == BOARD and got["manifest"] is None
    assert got["queues"] == boot.DEFAULTS["queues"] and "budget" not in got
    b = boards.load_board(BOARD)
    (tmp_path / "board.json").write_bytes(qemuboard.device_files(b)["board.json"])
    for name in (BOARD, None):
        got = boot.load_board(name)
        assert got["uart"]["driver"] == "mps2uart" and got["manifest"] == "board.json"
        assert got["budget"] == b["budget"] and got["queues"] == b["queues"]
    # The host tools' part of the manifest is not kept in the device's heap.
    assert "notes" in b and "flash" in b
    assert set(got) <= set(boot.RUNTIME_KEYS) | {"manifest"}
    # A manifest of another board: the device stops, naming both
    with pytest.raises(
        ConfigError,
        match="board.json is the manifest of board %s but the config says board esp32" % BOARD,
    ):
        boot.load_board("esp32")
    (tmp_path / "board.json").write_text("{not json")
    with pytest.raises(ConfigError, match="board.json is not valid JSON"):
        boot.load_board(BOARD)


def test_boot_sids_count_boots_and_never_repeat(tmp_path):
    from firmware.boot import boot_sid

    p = str(tmp_path / "bootcount")
    sids = [boot_sid(p) for _ in range(3)]
    assert [int(s[:6], 16) for s in sids] == [1, 2, 3] and len(set(sids)) == 3
    assert all(len(s) == 16 for s in sids)
    (tmp_path / "bootcount").write_text("garbage")  # a damaged counter
    assert boot_sid(p)[:6] == "000001"
    assert boot_sid(str(tmp_path / "no" / "dir" / "bootcount"))[:6] == "000000"  # unwritable
