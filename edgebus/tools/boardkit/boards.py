"""Board manifests: load and validate ``boards/<name>.json`` (fields: boards/README.md).

``load_board(name)`` returns the manifest as a dict with hex strings ("0x1000")
turned into ints; every problem a user can make in a manifest raises
``BoardError`` naming the file, the field and what was expected. The fields'
shapes are the JSON Schema's (manifest_schema); what ties fields together is
checked here.
"""

from __future__ import annotations

import difflib
import json
import os
from typing import Any

from edgebus.tools.boardkit import devicefiles, manifest_schema

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


def validate(data: Any, name: str | None = None, source: str = "manifest") -> dict[str, Any]:
    """Check a parsed manifest; returns it normalised. `name` is the expected
    board name (the file's stem). Errors are prefixed with `source`."""
    try:
        try:
            b = manifest_schema.check(data)
        except manifest_schema.ManifestError as e:
            raise BoardError(str(e)) from None
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
