"""Board manifests: every shipped one is valid and says what the tools rely on;
a broken one is refused with a message naming the file, the field and the fix."""

import json
import os
import shutil
from pathlib import Path

import pytest

from edgebus.tools.boardkit import boards
from edgebus.tools.boardkit.boards import BoardError, load_board

BOARDS = ["esp32", "esp32-s3", "esp8266", "linux-edge", "qemu-mps2-an385", "rp2-pico-w", "unix"]


def test_the_seven_boards_are_listed_and_valid():
    assert boards.list_boards() == BOARDS
    for name in BOARDS:
        b = load_board(name)
        assert b["name"] == name
        assert b["uplink"] in ("uart", "mqtt")
        assert b["budget"]["heap"] > 0 and b["budget"]["flash"] > 0


@pytest.mark.parametrize(
    "name,chip,offset,arch",
    [
        ("esp32", "esp32", 0x1000, "xtensawin"),
        ("esp32-s3", "esp32s3", 0x0, "xtensawin"),
        ("esp8266", "esp8266", 0x0, "xtensa"),
    ],
)
def test_esp_boards_name_chip_offset_and_arch(name, chip, offset, arch):
    b = load_board(name)
    assert b["flash"]["method"] == "esptool"
    assert b["flash"]["chip"] == chip
    assert b["flash"]["firmware_offset"] == offset  # hex string -> int
    # MicroPython's .bin starts with the bootloader, so both offsets are the same.
    assert b["flash"]["bootloader_offset"] == offset
    assert b["mpy"]["arch"] == arch
    assert b["firmware"]["family"] == "micropython"


def test_the_emulated_board_builds_from_its_board_dir_and_boots_in_qemu():
    b = load_board("qemu-mps2-an385")
    assert b["flash"] == {"method": "qemu", "system": "arm", "machine": "mps2-an385", "size": "1MB"}
    assert b["firmware"]["build"] == {"board_dir": "qemu-mps2-an385", "image": "firmware.elf"}
    assert os.path.isfile(os.path.join(boards.BOARDS_DIR, "qemu-mps2-an385", "mpconfigboard.mk"))
    assert b["mpy"]["arch"] == "armv7m"
    assert b["uart"] == {"id": 1, "baud": 115200, "driver": "mps2uart", "tx": None, "rx": None}


def test_a_uart_driver_must_be_a_module_name(tmp_path):
    d = json.loads(Path(boards.board_path("qemu-mps2-an385")).read_text())
    d["uart"]["driver"] = "not a module"
    p = tmp_path / "qemu-mps2-an385.json"
    p.write_text(json.dumps(d))
    with pytest.raises(BoardError, match="uart.driver: expected a module name"):
        load_board(str(p))


def test_rp2_unix_and_linux_edge():
    rp2 = load_board("rp2-pico-w")
    assert rp2["flash"]["method"] == "uf2" and rp2["mpy"]["arch"] == "armv6m"
    assert rp2["flash"]["uf2_family_id"] == 0xE48BFF56  # RP2040
    unix = load_board("unix")
    assert unix["mpy"]["arch"] is None  # bytecode
    assert unix["device"]["soft_reset"] is False  # Ctrl-D ends the process
    assert unix["budget"]["heap"] == 110592  # 76 KB of objects + the 32 KB spool
    assert unix["queues"]["spool"] == 32768  # a 10 s outage and the reconnect at 20/s
    edge = load_board("linux-edge")
    assert edge["runtime"] == "cpython" and edge["mpy"] is None
    assert edge["flash"]["method"] == "none"


def test_unknown_board_lists_the_known_ones():
    with pytest.raises(BoardError) as e:
        load_board("esp33")
    msg = str(e.value)
    assert 'unknown board "esp33"' in msg and 'did you mean "esp32"' in msg
    for name in BOARDS:
        assert name in msg


def _broken(tmp_path, board="esp32", **changes):
    """A copy of boards/ with boards/<board>.json changed; returns its directory."""
    d = tmp_path / "boards"
    shutil.copytree(boards.BOARDS_DIR, d)
    path = d / (board + ".json")
    data = json.loads(path.read_text())
    for dotted, value in changes.items():
        keys = dotted.split("__")
        obj = data
        for k in keys[:-1]:
            obj = obj[k]
        if value is KeyError:
            del obj[keys[-1]]
        else:
            obj[keys[-1]] = value
    path.write_text(json.dumps(data))
    return str(d)


@pytest.mark.parametrize(
    "change,expect",
    [
        ({"budget__heap": KeyError}, 'budget: missing key "heap"'),
        ({"uplink": KeyError}, 'manifest: missing key "uplink"'),
        ({"budget__heap": "64K"}, 'budget.heap: expected an integer, got "64K"'),
        ({"budget__heap": 4096}, "budget.heap: expected an integer >= 8192, got 4096"),
        ({"flash__firmware_offset": "1000h"}, "flash.firmware_offset: expected a hex string"),
        ({"uplink": "wifi"}, 'uplink: expected one of "uart", "mqtt", got "wifi"'),
        ({"mpy__arch": "xtensa-lx6"}, "mpy.arch: expected one of"),
        ({"flash__chip": "esp33"}, "flash.chip: expected one of"),
        ({"flash__method": "jtag"}, 'flash.method: expected one of "none", "esptool", "uf2"'),
        ({"flsh": {}}, 'unknown key "flsh"'),
        ({"name": "esp-32"}, "the file is named esp32.json"),
        (
            {"budget__flash": 8 * 1024 * 1024},
            "budget.flash: 8388608 bytes is more than the 4MB flash",
        ),
        ({"queues__full": "block"}, 'queues.full: expected one of "drop_oldest", "reject_newest"'),
        ({"device__machine": "with (ESP32"}, "device.machine: not a valid regular expression"),
        ({"uart__baud": KeyError}, 'uart: missing key "baud"'),
        ({"budget__reserve": -1}, "budget.reserve: expected an integer >= 0, got -1"),
    ],
)
def test_bad_manifests_are_refused_with_the_field_named(tmp_path, change, expect):
    d = _broken(tmp_path, **change)
    with pytest.raises(BoardError) as e:
        load_board("esp32", boards_dir=d)
    msg = str(e.value)
    assert expect in msg, msg
    assert "esp32.json" in msg  # which file to fix


def test_cpython_board_must_not_name_mpy(tmp_path):
    d = _broken(tmp_path, "linux-edge", mpy={"version": 6, "arch": None})
    with pytest.raises(BoardError, match="a cpython board runs .py sources"):
        load_board("linux-edge", boards_dir=d)


def test_invalid_json_names_line_and_column(tmp_path):
    d = tmp_path / "b"
    d.mkdir()
    (d / "x.json").write_text('{"name": "x",\n "runtime": }')
    with pytest.raises(BoardError, match=r"x.json: not valid JSON: .*line 2, column 13"):
        load_board("x", boards_dir=str(d))


def test_a_manifest_path_works_as_a_board_name(tmp_path):
    p = tmp_path / "myboard.json"
    data = json.loads(Path(os.path.join(boards.BOARDS_DIR, "esp32.json")).read_text())
    data["name"] = "myboard"
    p.write_text(json.dumps(data))
    assert load_board(str(p))["name"] == "myboard"
    with pytest.raises(BoardError, match="no such file"):
        load_board(str(tmp_path / "nope.json"))


def test_every_field_is_documented():
    doc = Path(os.path.join(boards.BOARDS_DIR, "README.md")).read_text()
    for name in BOARDS:
        data = json.loads(Path(os.path.join(boards.BOARDS_DIR, name + ".json")).read_text())
        for k, v in data.items():
            if isinstance(v, dict):
                for sub in v:
                    assert "`%s.%s`" % (k, sub) in doc, "%s.%s" % (k, sub)
            else:
                assert "`%s`" % k in doc, k


def test_cli_lists_and_validates(capsys):
    assert boards.main([]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in BOARDS)
    assert boards.main(["nope"]) == 1


def test_a_board_may_set_its_heap_reserve(tmp_path):
    d = _broken(tmp_path, budget__reserve=45000)
    assert load_board("esp32", boards_dir=d)["budget"]["reserve"] == 45000
    assert load_board("esp32")["budget"]["reserve"] is None  # the runtime's RESERVE
