"""Board manifests: load and validate ``boards/<name>.json`` (fields: boards/README.md).

``load_board(name)`` returns the manifest as a dict with hex strings ("0x1000")
turned into ints; every problem a user can make in a manifest raises
``BoardError`` naming the file, the field and what was expected.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from typing import Any, Callable, NoReturn

from edgebus.tools.boardkit import devicefiles

# The manifests install under edgebus/device/boards (from a checkout: boards/).
BOARDS_DIR = devicefiles.BOARDS_DIR
_boot = devicefiles.firmware("boot")
MANIFEST, RUNTIME_KEYS = _boot.MANIFEST, _boot.RUNTIME_KEYS

# mpy-cross -march values (py/persistentcode.h order: the index is the arch
# number stored in .mpy headers and in sys.implementation._mpy).
MPY_ARCHS = (
    "none",
    "x86",
    "x64",
    "armv6",
    "armv6m",
    "armv7m",
    "armv7em",
    "armv7emsp",
    "armv7emdp",
    "xtensa",
    "xtensawin",
    "rv32imc",
    "rv64imc",
)
ESPTOOL_CHIPS = (
    "esp8266",
    "esp32",
    "esp32s2",
    "esp32s3",
    "esp32c2",
    "esp32c3",
    "esp32c5",
    "esp32c6",
    "esp32c61",
    "esp32h2",
    "esp32p4",
)
FLASH_SIZES = ("256KB", "512KB", "1MB", "2MB", "4MB", "8MB", "16MB", "32MB", "64MB", "128MB")
UPLINKS = ("uart", "mqtt")
FULL_POLICIES = ("drop_oldest", "reject_newest")


class BoardError(ValueError):
    """A board name or manifest a user must fix; the message says how."""


def flash_size_bytes(size: str) -> int:
    """'4MB' -> 4194304."""
    n, unit = int(size[:-2]), size[-2:]
    return n * (1024 if unit == "KB" else 1024 * 1024)


# -- a small schema language: a validator is f(value, where) -> normalised value
Check = Callable[[Any, str], Any]


class _Optional:
    """Marks an object key that may be absent (value then `default`)."""

    def __init__(self, check: Check, default: Any = None) -> None:
        self.check, self.default = check, default


def _fail(where: str, expected: str, value: Any) -> NoReturn:
    raise BoardError("%s: expected %s, got %s" % (where, expected, json.dumps(value)))


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        _fail(where, "a string", value)
    return value


def _nonempty(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(where, "a non-empty string", value)
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        _fail(where, "true or false", value)
    return value


def _int(lo: int | None = None, hi: int | None = None) -> Check:
    def check(value: Any, where: str) -> Any:
        # bool is an int subclass; true is not a size.
        if not isinstance(value, int) or isinstance(value, bool):
            _fail(where, "an integer", value)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            rng = ">= %s" % lo if hi is None else "%s..%s" % (lo, hi)
            _fail(where, "an integer " + rng, value)
        return value

    return check


def _hex(value: Any, where: str) -> int:
    """An int, or a hex string like "0x1000" (how esptool and the docs write offsets)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and re.fullmatch(r"0[xX][0-9a-fA-F]+", value):
        return int(value, 16)
    _fail(where, 'a hex string like "0x1000" or a non-negative integer', value)


def _enum(*choices: Any) -> Check:
    def check(value: Any, where: str) -> Any:
        if value not in choices:
            _fail(where, "one of " + ", ".join(json.dumps(c) for c in choices), value)
        return value

    return check


def _matching(pattern: str, what: str) -> Callable[[Any, str], str]:
    """A check that the value is a string matching ``pattern`` whole, else
    says it must be ``what``."""
    rx = re.compile(pattern)

    def check(value: Any, where: str) -> str:
        if not isinstance(value, str) or not rx.fullmatch(value):
            _fail(where, what, value)
        return value

    return check


_version = _matching(r"\d+(\.\d+)*", 'a version like "1.22"')


def _regex(value: Any, where: str) -> str:
    _str(value, where)
    try:
        re.compile(value)
    except re.error as e:
        raise BoardError(
            "%s: not a valid regular expression (%s): %s" % (where, e, json.dumps(value))
        ) from None
    return value


_module_name = _matching(r"[A-Za-z_][A-Za-z0-9_.]*", "a module name")
_package = _matching(
    r"[A-Za-z0-9_][A-Za-z0-9_.-]*", 'a micropython-lib package name like "ntptime"'
)


def _nullable(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def _list_of(check: Check) -> Check:
    def f(value: Any, where: str) -> Any:
        if not isinstance(value, list):
            _fail(where, "a list", value)
        return [check(v, "%s[%d]" % (where, i)) for i, v in enumerate(value)]

    return f


def _str_or_list(value: Any, where: str) -> str | list[str]:
    if isinstance(value, list):
        return _list_of(_nonempty)(value, where)
    return _nonempty(value, where)


def _obj(spec: dict[str, Any]) -> Check:
    def check(value: Any, where: str) -> Any:
        if not isinstance(value, dict):
            _fail(where, "an object", value)
        unknown = sorted(set(value) - set(spec))
        if unknown:
            raise BoardError(
                "%s: unknown key %s (allowed: %s)"
                % (where, ", ".join(json.dumps(k) for k in unknown), ", ".join(spec))
            )
        out = {}
        for key, check_ in spec.items():
            sub = key if where == "" else where + "." + key
            if key not in value:
                if isinstance(check_, _Optional):
                    out[key] = check_.default
                    continue
                raise BoardError("%s: missing key %s" % (where or "manifest", json.dumps(key)))
            c = check_.check if isinstance(check_, _Optional) else check_
            out[key] = c(value[key], sub)
        return out

    return check


_FLASH: dict[str, dict[str, Any]] = {
    "none": {"method": _str},
    "esptool": {
        "method": _str,
        "chip": _enum(*ESPTOOL_CHIPS),
        "size": _enum(*FLASH_SIZES),
        "bootloader_offset": _hex,
        "firmware_offset": _hex,
        # Chip id in the image's extended header (ESP32 family); null for ESP8266.
        "image_chip_id": _nullable(_int(0, 0xFFFF)),
        "baud": _int(9600, 5000000),
        "write_args": _Optional(_list_of(_nonempty), []),
    },
    "uf2": {
        "method": _str,
        "size": _enum(*FLASH_SIZES),
        "drive_label": _nonempty,
        "uf2_family_id": _hex,
    },
    # An emulated board: "flashing" boots the image in qemu-system-<arch>
    # -machine <machine>, its filesystem a host file of `size` (tools/sim/qemuboard.py).
    "qemu": {
        "method": _str,
        "system": _enum("arm"),
        "machine": _nonempty,
        "size": _enum(*FLASH_SIZES),
    },
}


def _flash(value: Any, where: str) -> dict[str, Any]:
    method: Any = value.get("method") if isinstance(value, dict) else None
    if method not in _FLASH:
        if not isinstance(value, dict):
            _fail(where, "an object", value)
        _fail(where + ".method", "one of " + ", ".join(json.dumps(m) for m in _FLASH), method)
    return _obj(_FLASH[method])(value, where)


_UART_PINS = {
    "id": _int(0, 16),
    "tx": _Optional(_int(0, 64)),
    "rx": _Optional(_int(0, 64)),
    "baud": _int(300, 10000000),
    # a module with a UART class, for ports without machine.UART
    "driver": _Optional(_nullable(_module_name)),
}
_UART_TTY = {"device": _nullable(_nonempty), "baud": _int(300, 10000000)}


def _uart(value: Any, where: str) -> dict[str, Any]:
    # A board names machine.UART pins; a host (unix port, Linux) names a tty
    # (null: given at run time, e.g. the simulator's pty).
    if isinstance(value, dict) and "device" in value:
        return _obj(_UART_TTY)(value, where)
    return _obj(_UART_PINS)(value, where)


SCHEMA = _obj(
    {
        "name": _nonempty,
        "description": _nonempty,
        "notes": _Optional(_str),
        "runtime": _enum("micropython", "cpython"),
        "firmware": _obj(
            {
                "family": _enum("micropython", "cpython"),
                "port": _nonempty,
                "board": _nullable(_nonempty),
                "min_version": _version,
                "url": _Optional(_nullable(_str)),
                # How `edgebus firmware build` makes the image from a MicroPython source
                # tree: a board definition of ours (boards/<board_dir>, a BOARD_DIR
                # outside the tree) or, when absent, the port's own BOARD.
                "build": _Optional(
                    _nullable(
                        _obj(
                            {
                                "board_dir": _Optional(_nullable(_nonempty)),
                                "image": _nonempty,  # the file make leaves in BUILD
                            }
                        )
                    )
                ),
            }
        ),
        "device": _nullable(
            _obj(
                {
                    "platform": _str_or_list,  # sys.platform on the device
                    "machine": _regex,  # searched in sys.implementation._machine
                    "root": _enum("/", ""),  # where files go: "/" on boards, "" = cwd
                    "soft_reset": _bool,  # False: Ctrl-D would end the process
                }
            )
        ),
        "mpy": _nullable(
            _obj(
                {
                    "version": _int(1, 255),
                    "arch": _nullable(_enum(*MPY_ARCHS[1:])),
                }
            )
        ),
        "flash": _flash,
        "uart": _uart,
        "uplink": _enum(*UPLINKS),
        "wifi": _Optional(_bool, False),  # a radio the firmware's network step drives
        "queues": _obj(
            {
                "bus": _int(1, 65535),
                "full": _enum(*FULL_POLICIES),
                "uplink_tx": _int(1, 65535),
                "uplink_rx": _int(1, 65535),
                "spool": _int(1024, 1 << 24),  # bytes for readings awaiting acknowledgement
            }
        ),
        # micropython-lib packages the device needs (firmware/README.md): edgebus
        # build puts them in the bundle, edgebus firmware build freezes them
        "require": _Optional(_list_of(_package), []),
        "budget": _obj(
            {
                "heap": _int(8192),
                "flash": _int(4096),
                "fs_block": _int(0, 1 << 20),
                # heap kept free for transients (firmware/boot.py RESERVE when absent)
                "reserve": _Optional(_int(0)),
            }
        ),
    }
)


def validate(data: Any, name: str | None = None, source: str = "manifest") -> dict[str, Any]:
    """Check a parsed manifest; returns it normalised. `name` is the expected
    board name (the file's stem). Errors are prefixed with `source`."""
    try:
        b = SCHEMA(data, "")
        if name is not None and b["name"] != name:
            raise BoardError(
                "name: is %s but the file is named %s.json; they must match"
                % (json.dumps(b["name"]), name)
            )
        if b["runtime"] != b["firmware"]["family"]:
            raise BoardError(
                "firmware.family: %s does not match runtime %s"
                % (json.dumps(b["firmware"]["family"]), json.dumps(b["runtime"]))
            )
        if b["runtime"] == "micropython":
            if b["device"] is None or b["mpy"] is None:
                raise BoardError(
                    'a micropython board needs a "device" and an "mpy" object '
                    "(mpy.arch may be null for bytecode)"
                )
        elif b["device"] is not None or b["mpy"] is not None or b["flash"]["method"] != "none":
            raise BoardError(
                'a cpython board runs .py sources: "device" and "mpy" must be '
                'null and flash.method "none"'
            )
        fl = b["flash"]
        if "size" in fl and b["budget"]["flash"] > flash_size_bytes(fl["size"]):
            raise BoardError(
                "budget.flash: %d bytes is more than the %s flash"
                % (b["budget"]["flash"], fl["size"])
            )
        if fl["method"] == "esptool" and fl["bootloader_offset"] > fl["firmware_offset"]:
            raise BoardError(
                "flash.firmware_offset: 0x%x is below flash.bootloader_offset 0x%x"
                % (fl["firmware_offset"], fl["bootloader_offset"])
            )
    except BoardError as e:
        raise BoardError("%s: %s" % (source, e)) from None
    return b


def list_boards(boards_dir: str | None = None) -> list[str]:
    """Names of the boards that have a manifest, sorted."""
    d = boards_dir or BOARDS_DIR
    try:
        return sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json"))
    except FileNotFoundError:
        return []


def board_path(name: str, boards_dir: str | None = None) -> str:
    """The manifest file for `name` (a board name, or a path to a .json file)."""
    if name.endswith(".json") or os.sep in name:
        return name
    return os.path.join(boards_dir or BOARDS_DIR, name + ".json")


def load_board(name: str, boards_dir: str | None = None) -> dict[str, Any]:
    """The validated manifest of board `name` (or of a manifest file path)."""
    path = board_path(name, boards_dir)
    is_file = path == name
    if not os.path.isfile(path):
        if is_file:
            raise BoardError("board manifest %s: no such file" % name)
        known = list_boards(boards_dir)
        close = difflib.get_close_matches(name, known, n=1)
        raise BoardError(
            "unknown board %s%s; known boards: %s"
            % (
                json.dumps(name),
                " (did you mean %s?)" % json.dumps(close[0]) if close else "",
                ", ".join(known) or "(none: %s is empty)" % (boards_dir or BOARDS_DIR),
            )
        )
    rel = os.path.relpath(path)
    try:
        with open(path) as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise BoardError(
            "%s: not valid JSON: %s (line %d, column %d)" % (rel, e.msg, e.lineno, e.colno)
        ) from None
    stem = os.path.basename(path)[:-5]
    return validate(data, name=stem, source=rel)


def runtime_files(board: dict[str, Any]) -> dict[str, bytes]:
    """{file name: bytes}: the board.json that travels with a bundle (edgebus
    build), a flashed image (edgebus flash) and the fleet's devices, holding
    the part of the manifest the runtime reads (firmware.boot.load_board)."""
    part = {k: board[k] for k in RUNTIME_KEYS if k in board}
    return {MANIFEST: (json.dumps(part, indent=1, sort_keys=True) + "\n").encode()}


def mpy_arch_number(arch: str | None) -> int:
    """The arch number .mpy headers and sys.implementation._mpy use (None -> 0)."""
    return MPY_ARCHS.index(arch or "none")


def main(argv: list[str] | None = None) -> int:
    """python -m edgebus.tools.boardkit.boards [NAME]: validate every manifest
    (or one) and list them."""
    import sys

    names = (argv if argv is not None else sys.argv[1:]) or list_boards()
    status = 0
    for n in names:
        try:
            b = load_board(n)
        except BoardError as e:
            print("error:", e)
            status = 1
            continue
        arch = b["mpy"]["arch"] if b["mpy"] else "-"
        print(
            "%-15s %-11s %-9s %-7s heap %7d  flash budget %8d  %s"
            % (
                b["name"],
                b["runtime"],
                arch or "bytecode",
                b["flash"]["method"],
                b["budget"]["heap"],
                b["budget"]["flash"],
                b["description"],
            )
        )
    return status


if __name__ == "__main__":
    raise SystemExit(main())
