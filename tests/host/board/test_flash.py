"""edgebus flash: the --dry-run commands are accepted by esptool's own parser;
image checks; UF2 copy to a (stand-in) mounted RPI-RP2 drive. A real flash
needs hardware (docs/devices.md: Boards)."""

import gc
import os
import pty
import shlex
import struct
import tty
import warnings
from pathlib import Path

import pytest

from edgebus.tools import cli
from edgebus.tools.boardkit import boards, executables
from edgebus.tools.commands import flash

ESP = ["esp32", "esp32-s3", "esp8266"]


def esp_image(path, chip_id):
    """A file with an ESP image header (magic 0xE9; extended header chip id)."""
    hdr = (
        bytes([0xE9, 3, 2, 0x20, 0, 0, 0, 0, 0xEE, 0, 0, 0])
        + (struct.pack("<H", chip_id) if chip_id is not None else b"\0\0")
        + b"\0\0"
    )
    path.write_bytes(hdr + bytes(4096 - len(hdr)))
    return str(path)


def uf2_image(path, family=0xE48BFF56, blocks=3):
    data = b""
    for i in range(blocks):
        data += (
            struct.pack(
                "<8I", 0x0A324655, 0x9E5D5157, 0x2000, 0x10000000 + 256 * i, 256, i, blocks, family
            )
            + bytes([i]) * 476
            + struct.pack("<I", 0x0AB16F30)
        )
    path.write_bytes(data)
    return str(path)


CHIP_IDS = {"esp32": 0, "esp32-s3": 9, "esp8266": None}


class _Connecting(Exception):
    """esptool got past argument parsing and asked for the chip."""


class _NoChip:
    def __getattr__(self, name):
        raise _Connecting(name)


def esptool_accepts(argv):
    """Run esptool's real CLI (esptool.main) on argv with a stand-in for the
    connected chip: parsing succeeds iff esptool then touches the chip."""
    import esptool

    # esptool leaves the image it opened for a chip it never reached to the
    # garbage collector: collected here, where its ResourceWarning is expected.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            esptool.main(argv, esp=_NoChip())
            ok = False
        except _Connecting:
            ok = True
        except SystemExit as e:  # click's usage errors
            ok = e.code == 0
        gc.collect()
    return ok


@pytest.mark.parametrize("name", ESP)
def test_dry_run_commands_are_accepted_by_esptool(name, tmp_path, capsys):
    fw = esp_image(tmp_path / "fw.bin", CHIP_IDS[name])
    assert (
        cli.main(
            [
                "flash",
                "--board",
                name,
                "--port",
                "/dev/ttyUSB0",
                "--firmware",
                fw,
                "--dry-run",
                "--erase",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    cmds = [shlex.split(l) for l in out.splitlines() if l and not l.startswith("#")]
    assert len(cmds) == 3  # chip check, erase, write
    b = boards.load_board(name)
    for argv in cmds:
        assert argv[:3] == executables.command("esptool")
        assert argv[3:7] == ["--chip", b["flash"]["chip"], "--port", "/dev/ttyUSB0"]
        assert esptool_accepts(argv[3:]), argv
    assert cmds[0][-1] == "read-mac" and cmds[1][-1] == "erase-flash"
    write = cmds[2]
    assert write[-2:] == ["0x%x" % b["flash"]["firmware_offset"], fw]
    assert write[write.index("--baud") + 1] == str(b["flash"]["baud"])
    capsys.readouterr()


def test_the_esptool_check_rejects_bad_commands(tmp_path):
    # The check above is not vacuous: esptool's parser refuses these.
    fw = esp_image(tmp_path / "fw.bin", 0)
    assert esptool_accepts(["--chip", "esp32", "--port", "/dev/x", "write-flash", "0x1000", fw])
    assert not esptool_accepts(["--chip", "esp32", "--port", "/dev/x", "write-flash", "0x1000"])
    assert not esptool_accepts(["--chip", "esp33", "--port", "/dev/x", "read-mac"])
    assert not esptool_accepts(["--chip", "esp32", "write-flash", "0x1000", str(tmp_path / "no")])
    assert not esptool_accepts(["--chip", "esp32", "write-flash", "--flash-size", "3MB", "0x0", fw])


def test_dry_run_baud_override(tmp_path, capsys):
    fw = esp_image(tmp_path / "fw.bin", 0)
    cli.main(
        [
            "flash",
            "--board",
            "esp32",
            "--port",
            "/dev/ttyUSB1",
            "--firmware",
            fw,
            "--dry-run",
            "--baud",
            "921600",
        ]
    )
    out = capsys.readouterr().out
    assert "--baud 921600 write-flash 0x1000 " + fw in out
    assert "erase-flash" not in out


@pytest.mark.parametrize(
    "board,make,expect",
    [
        ("esp32", lambda p: esp_image(p, 9), "is an image for ESP32-S3, not esp32"),
        ("esp32-s3", lambda p: esp_image(p, 0), "is an image for ESP32, not esp32-s3"),
        ("esp32", lambda p: uf2_image(p), "is a UF2 image"),
        (
            "esp8266",
            lambda p: (p.write_bytes(b"PK\3\4" + bytes(100)), str(p))[1],
            "does not look like an ESP firmware image (first byte 0x50",
        ),
        (
            "esp8266",
            lambda p: (p.write_bytes(b"\xe9" + bytes(5 * 1024 * 1024)), str(p))[1],
            "more than the 4194304 bytes of 4MB flash",
        ),
        ("rp2-pico-w", lambda p: esp_image(p, 0), "is not a UF2 image"),
        (
            "rp2-pico-w",
            lambda p: uf2_image(p, family=0xE48BFF59),
            "family 0xe48bff59, not 0xe48bff56",
        ),
    ],
)
def test_wrong_images_are_refused(board, make, expect, tmp_path, capsys):
    fw = make(tmp_path / "fw.img")
    assert (
        cli.main(
            ["flash", "--board", board, "--port", "/dev/ttyUSB0", "--firmware", fw, "--dry-run"]
        )
        == 1
    )
    assert expect in capsys.readouterr().err


def test_user_errors(tmp_path):
    fw = esp_image(tmp_path / "fw.bin", 0)
    esp = boards.load_board("esp32")
    with pytest.raises(flash.FlashError, match="--port is required for esp32"):
        flash.flash(esp, fw)
    with pytest.raises(flash.FlashError, match="no such file .*ESP32_GENERIC"):
        flash.flash(esp, str(tmp_path / "missing.bin"), port="/dev/ttyUSB0")
    with pytest.raises(flash.FlashError, match="port /dev/ttyNOPE does not exist"):
        flash.flash(esp, fw, port="/dev/ttyNOPE", log=lambda *a: None)
    for name in ("unix", "linux-edge"):
        with pytest.raises(flash.FlashError, match="has no firmware image to flash"):
            flash.flash(boards.load_board(name), fw)
    with pytest.raises(flash.FlashError, match="--erase is not possible over UF2"):
        flash.flash(boards.load_board("rp2-pico-w"), uf2_image(tmp_path / "p.uf2"), erase=True)


@pytest.mark.slow  # the real esptool in a subprocess
def test_real_esptool_stops_at_the_chip_check(tmp_path, monkeypatch):
    # esptool really runs (a subprocess) against a pty where no ESP answers: the
    # chip check fails with a clear message and nothing is written.
    monkeypatch.setenv("ESPTOOL_CONNECT_ATTEMPTS", "1")
    fw = esp_image(tmp_path / "fw.bin", 0)
    master, slave = pty.openpty()
    tty.setraw(slave)
    lines = []
    try:
        with pytest.raises(flash.FlashError) as e:
            flash.flash(boards.load_board("esp32"), fw, port=os.ttyname(slave), log=lines.append)
    finally:
        os.close(master)
        os.close(slave)
    assert "no answer from the esp32 ROM bootloader" in str(e.value)
    assert "hold BOOT (IO0)" in str(e.value)
    assert len(lines) == 1 and "chip check" in lines[0]  # never reached write-flash


def test_wrong_chip_message_names_the_right_board():
    # esptool's words when --chip differs from the connected chip (esptool/loader.py).
    out = (
        "Connecting....\nA fatal error occurred: This chip is ESP32-S3, not ESP32. "
        "Wrong chip argument?"
    )
    msg = flash._esptool_failure(boards.load_board("esp32"), "/dev/ttyUSB0", out)
    assert (
        msg == "wrong board: the chip on /dev/ttyUSB0 is ESP32-S3, not esp32; use --board esp32-s3"
    )
    import esptool.loader

    src = Path(esptool.loader.__file__).read_text()
    assert 'f"This chip is {chip_type}, not {self.CHIP_NAME}. "' in src


def _fake_drive(tmp_path, label="RPI-RP2"):
    drive = tmp_path / "media" / "RPI RP2"  # a space: escaped in /proc/mounts
    drive.mkdir(parents=True)
    (drive / "INFO_UF2.TXT").write_text(
        "UF2 Bootloader v3.0\nModel: Raspberry Pi RP2\nBoard-ID: %s\n" % label
    )
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 %s vfat rw 0 0\n/dev/root / ext4 rw 0 0\n" % str(drive).replace(" ", "\\040")
    )
    return drive, str(mounts)


def test_uf2_copy_to_the_mounted_drive(tmp_path):
    rp2 = boards.load_board("rp2-pico-w")
    fw = uf2_image(tmp_path / "RPI_PICO_W-v1.22.uf2")
    drive, mounts = _fake_drive(tmp_path)
    assert flash.find_uf2_drive("RPI-RP2", mounts, extra=[]) == str(drive)
    lines = []
    flash.flash_uf2(rp2, fw, None, False, None, lines.append, mounts=mounts, extra=[])
    assert (drive / "RPI_PICO_W-v1.22.uf2").read_bytes() == Path(fw).read_bytes()
    # Dry run: the exact command, nothing copied.
    (drive / "RPI_PICO_W-v1.22.uf2").unlink()
    lines = []
    flash.flash_uf2(rp2, fw, None, True, None, lines.append, mounts=mounts, extra=[])
    assert shlex.join(["cp", fw, str(drive) + "/"]) in lines
    assert not (drive / "RPI_PICO_W-v1.22.uf2").exists()


def test_uf2_without_a_drive(tmp_path):
    rp2 = boards.load_board("rp2-pico-w")
    fw = uf2_image(tmp_path / "fw.uf2")
    _drive, mounts = _fake_drive(tmp_path, label="RPI-RP2350")  # another bootloader
    with pytest.raises(flash.FlashError) as e:
        flash.flash_uf2(rp2, fw, None, False, "/dev/ttyACM0", print, mounts=mounts, extra=[])
    msg = str(e.value)
    assert msg.startswith("no RPI-RP2 drive is mounted")
    assert "mpremote connect /dev/ttyACM0 bootloader" in msg and "BOOTSEL" in msg
    with pytest.raises(flash.FlashError, match="is not a mounted RPI-RP2 drive"):
        flash.flash_uf2(rp2, fw, str(tmp_path), False, None, print)
