"""edgebus flash --board B --port P --firmware FILE: write a MicroPython firmware image.

ESP boards go through esptool: a read-only chip check first (esptool connects
with the manifest's --chip and refuses another chip), an optional erase, then
write-flash at the manifest's offset. RP2 boards take a UF2 file copied to
their USB drive (RPI-RP2, mounted when BOOTSEL is held at power-up).
An emulated board (flash.method "qemu") is "flashed" by booting the image in
QEMU (tools/sim/qemuboard.py): ``--config`` writes the device config into the
board's littlefs image first, and the command prints the link UART's port for
a bridge ``[[serial]]`` entry, then runs the board until Ctrl-C.
``--dry-run`` prints the exact commands and runs nothing.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

from edgebus.tools.boardkit import boards, executables

if TYPE_CHECKING:
    import argparse

UF2_MAGIC0, UF2_MAGIC1, UF2_MAGIC_END = 0x0A324655, 0x9E5D5157, 0x0AB16F30
UF2_FLAG_FAMILY = 0x2000
# Chip ids in the ESP32-family image header (esptool's IMAGE_CHIP_ID values).
ESP_IMAGE_CHIPS = {
    0: "ESP32",
    2: "ESP32-S2",
    5: "ESP32-C3",
    9: "ESP32-S3",
    12: "ESP32-C2",
    13: "ESP32-C6",
    16: "ESP32-H2",
    18: "ESP32-P4",
    20: "ESP32-C61",
    23: "ESP32-C5",
}


class FlashError(Exception):
    """A problem the user must fix; the message says how."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", required=True, metavar="B", help="board name or manifest path")
    p.add_argument("--port", metavar="P", help="serial port of an ESP board, e.g. /dev/ttyUSB0")
    p.add_argument(
        "--firmware",
        required=True,
        metavar="FILE",
        help="MicroPython image: .bin for ESP boards, .uf2 for RP2",
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument(
        "--baud", type=int, help="esptool baud rate for erase and write (default: the manifest's)"
    )
    p.add_argument(
        "--erase",
        action="store_true",
        help="erase the whole flash first (ESP; wipes the filesystem too)",
    )
    p.add_argument("--drive", metavar="DIR", help="RP2: the mounted RPI-RP2 drive (default: found)")
    q = p.add_argument_group("emulated boards (qemu)")
    q.add_argument("--config", metavar="FILE", help="device config written to /config.json")
    q.add_argument(
        "--state",
        metavar="DIR",
        help="where the board's flash image lives (default: build/<board>/state)",
    )
    q.add_argument(
        "--uart",
        default="pty",
        metavar="pty|tcp:PORT",
        help="the link UART (UART1) on the host (default: pty)",
    )
    q.add_argument(
        "--repl",
        default="stdio",
        metavar="stdio|pty|tcp:PORT",
        help="the REPL UART (UART0) (default: stdio, this terminal)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        board = boards.load_board(args.board)
        if board["flash"]["method"] == "qemu":
            return boot_emulated(board, args)
        flash(
            board,
            args.firmware,
            port=args.port,
            baud=args.baud,
            erase=args.erase,
            dry_run=args.dry_run,
            drive=args.drive,
        )
    except (boards.BoardError, FlashError) as e:
        print("edgebus flash: error: %s" % e, file=sys.stderr)
        return 1
    return 0


def boot_emulated(board: dict[str, Any], args: argparse.Namespace) -> int:
    """edgebus flash for an emulated board: config into its flash, then boot it."""
    import json

    from edgebus.tools.sim import qemuboard

    state = args.state or os.path.join("build", board["name"], "state")
    try:
        config = None
        if args.config:
            try:
                with open(args.config) as f:
                    config = json.load(f)
            except (OSError, ValueError) as e:
                raise FlashError("--config %s: %s" % (args.config, e)) from None
        qb = qemuboard.QemuBoard(board, args.firmware, state, repl=args.repl, uart=args.uart)
        if args.dry_run:
            print("cd %s && %s" % (shlex.quote(state), shlex.join(qb.argv)))
            return 0
        qemuboard.prepare_flash(board, state, qemuboard.device_files(board, config))
        qb.start(stdio=args.repl == "stdio")
    except qemuboard.QemuError as e:
        raise FlashError(str(e)) from None
    print(
        "edgebus flash: %s running (flash image %s)"
        % (board["name"], os.path.join(state, "flash.img")),
        file=sys.stderr,
    )
    if qb.repl_port:
        print(
            "  REPL:      %s  (mpremote connect %s)" % (qb.repl_port, qb.repl_port), file=sys.stderr
        )
    print(
        '  link UART: %s  (bridge: [[serial]] port = "%s")' % (qb.uart_port, qb.uart_port),
        file=sys.stderr,
    )
    try:
        qb.proc.wait()  # type: ignore[union-attr]  # started above
    except KeyboardInterrupt:
        pass
    finally:
        qb.close()
    return 0


def flash(
    board: dict[str, Any],
    firmware: str,
    port: str | None = None,
    baud: int | None = None,
    erase: bool = False,
    dry_run: bool = False,
    drive: str | None = None,
    log: Callable[[str], None] = print,
) -> Sequence[tuple[str, Sequence[str | None]]]:
    method = board["flash"]["method"]
    if method == "none":
        raise FlashError(
            "board %s has no firmware image to flash (it runs %s on the %s "
            "port): build and deploy the bundle instead"
            % (board["name"], board["runtime"], board["firmware"]["port"])
        )
    if not os.path.isfile(firmware):
        raise FlashError(
            "--firmware %s: no such file (download it from %s)"
            % (firmware, board["firmware"].get("url") or "micropython.org")
        )
    if method == "esptool":
        return flash_esp(board, firmware, port, baud, erase, dry_run, log)
    if erase:
        raise FlashError(
            "--erase is not possible over UF2: copy flash_nuke.uf2 first "
            "(https://datasheets.raspberrypi.com/soft/flash_nuke.uf2)"
        )
    return flash_uf2(board, firmware, drive, dry_run, port, log)


# -- ESP through esptool


def esptool_commands(
    board: dict[str, Any],
    port: str,
    firmware: str,
    esptool: list[str],
    baud: int | None = None,
    erase: bool = False,
) -> list[tuple[str, list[str]]]:
    """[(step, argv)]: chip check, optional erase, write; esptool is the argv
    prefix that runs it (executables.command)."""
    fl = board["flash"]
    common = ["--chip", fl["chip"], "--port", port]
    fast = common + ["--baud", str(baud or fl["baud"])]
    cmds = [("chip check", esptool + common + ["--after", "no-reset", "read-mac"])]
    if erase:
        cmds.append(("erase", esptool + fast + ["erase-flash"]))
    cmds.append(
        (
            "write",
            esptool
            + fast
            + ["write-flash"]
            + fl["write_args"]
            + ["0x%x" % fl["firmware_offset"], firmware],
        )
    )
    return cmds


def check_esp_image(board: dict[str, Any], path: str) -> None:
    """Refuse a file that is not an ESP image for this board's chip."""
    fl = board["flash"]
    with open(path, "rb") as f:
        head = f.read(16)
    size = os.path.getsize(path)
    if head[:4] == b"UF2\n":
        raise FlashError(
            "%s is a UF2 image (RP2 boards); %s needs the .bin from %s"
            % (path, board["name"], board["firmware"].get("url"))
        )
    if not head or head[0] != 0xE9:
        raise FlashError(
            "%s does not look like an ESP firmware image (first byte %s, expected "
            "0xE9); download the .bin for %s from %s"
            % (
                path,
                "0x%02x" % head[0] if head else "missing",
                board["name"],
                board["firmware"].get("url"),
            )
        )
    want = fl["image_chip_id"]
    if want is not None and len(head) >= 14:
        got = head[12] | head[13] << 8
        if got != want:
            raise FlashError(
                "%s is an image for %s, not %s (%s): use the firmware for this board"
                % (
                    path,
                    ESP_IMAGE_CHIPS.get(got, "chip id %d" % got),
                    board["name"],
                    ESP_IMAGE_CHIPS.get(want, want),
                )
            )
    room = boards.flash_size_bytes(fl["size"]) - fl["firmware_offset"]
    if size > room:
        raise FlashError(
            "%s is %d bytes, more than the %d bytes of %s flash after 0x%x"
            % (path, size, room, fl["size"], fl["firmware_offset"])
        )


def flash_esp(
    board: dict[str, Any],
    firmware: str,
    port: str | None,
    baud: int | None,
    erase: bool,
    dry_run: bool,
    log: Callable[[str], None],
) -> list[tuple[str, list[str]]]:
    if not port:
        raise FlashError(
            "--port is required for %s (esptool talks to its ROM bootloader "
            "over the USB serial port, e.g. /dev/ttyUSB0)" % board["name"]
        )
    check_esp_image(board, firmware)
    try:
        esptool = executables.command("esptool")
    except executables.ToolNotFound as e:
        raise FlashError(str(e)) from None
    cmds = esptool_commands(board, port, firmware, esptool, baud, erase)
    if dry_run:
        for step, argv in cmds:
            log("# %s\n%s" % (step, shlex.join(argv)))
        return cmds
    if port.startswith("/") and not os.path.exists(port):
        raise FlashError("port %s does not exist: is the board plugged in?" % port)
    for step, argv in cmds:
        log("# %s: %s" % (step, shlex.join(argv)))
        sys.stdout.flush()  # before esptool's own output
        if step == "chip check":
            r = subprocess.run(argv, capture_output=True, text=True)
            if r.returncode != 0:
                raise FlashError(_esptool_failure(board, port, r.stdout + r.stderr))
            m = re.search(r"Chip (?:type:|is)\s*(.+)", r.stdout)
            log("chip check: %s" % (m.group(1).strip() if m else "ok"))
            continue
        if subprocess.run(argv).returncode != 0:
            raise FlashError("esptool %s failed (its output is above)" % step)
    log(
        "flashed %s: the board resets into MicroPython; next: edgebus deploy --board %s "
        "--port %s" % (firmware, board["name"], port)
    )
    return cmds


def _esptool_failure(board: dict[str, Any], port: str, out: str) -> str:
    m = re.search(r"This chip is (\S+), not (\S+)", out)
    if m:
        got = re.sub(r"[^a-z0-9]", "", m.group(1).lower())
        match = [
            n for n in boards.list_boards() if boards.load_board(n)["flash"].get("chip") == got
        ]
        return "wrong board: the chip on %s is %s, not %s%s" % (
            port,
            m.group(1),
            board["flash"]["chip"],
            "; use --board " + " or ".join(match) if match else "",
        )
    if re.search(r"could not open port|Could not exclusively lock|Resource busy", out, re.I):
        return (
            "cannot open %s: missing, busy (close mpremote, screen, serial monitors) or "
            "no permission (dialout group)\n%s" % (port, _tail(out))
        )
    if re.search(r"Failed to connect|No serial data received", out, re.I):
        return (
            "no answer from the %s ROM bootloader on %s: hold BOOT (IO0) while pressing "
            "EN/RESET, check the cable (data, not charge-only) and retry\n%s"
            % (board["flash"]["chip"], port, _tail(out))
        )
    return "chip check failed on %s:\n%s" % (port, _tail(out))


def _tail(out: str, n: int = 6) -> str:
    return "\n".join("  | " + l for l in out.strip().splitlines()[-n:])


# -- RP2 through UF2


def check_uf2(board: dict[str, Any], path: str) -> None:
    """Refuse a file that is not a UF2 image for this board's chip family."""
    import struct

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        block = f.read(512)
    if len(block) < 512 or size % 512:
        ok = False
    else:
        m0, m1, flags, _addr, _n, _no, _nb, family = struct.unpack("<8I", block[:32])
        ok = (
            m0 == UF2_MAGIC0
            and m1 == UF2_MAGIC1
            and struct.unpack("<I", block[508:512])[0] == UF2_MAGIC_END
        )
    if not ok:
        raise FlashError(
            "%s is not a UF2 image; %s needs the .uf2 from %s"
            % (path, board["name"], board["firmware"].get("url"))
        )
    want = board["flash"]["uf2_family_id"]
    if flags & UF2_FLAG_FAMILY and family != want:
        raise FlashError(
            "%s is a UF2 image for family 0x%08x, not 0x%08x (%s): use the "
            "firmware for this board" % (path, family, want, board["name"])
        )


def _mount_points(mounts: str) -> list[str]:
    try:
        with open(mounts) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    # /proc/mounts escapes spaces and the like as \\040 (octal).
    return [
        re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), l.split()[1])
        for l in lines
        if len(l.split()) > 1
    ]


def find_uf2_drive(
    label: str, mounts: str = "/proc/mounts", extra: list[str] | None = None
) -> str | None:
    """The mounted UF2 drive whose INFO_UF2.TXT names Board-ID `label`, or None."""
    cands = _mount_points(mounts) + (
        extra
        if extra is not None
        else glob.glob("/media/*/" + label)
        + glob.glob("/run/media/*/" + label)
        + ["/Volumes/" + label]
    )
    for c in dict.fromkeys(cands):
        if _is_uf2_drive(c, label):
            return c
    return None


def _is_uf2_drive(path: str, label: str) -> bool:
    try:
        with open(os.path.join(path, "INFO_UF2.TXT"), errors="replace") as f:
            return re.search(r"^Board-ID:\s*%s\s*$" % re.escape(label), f.read(), re.M) is not None
    except OSError:
        return False


def flash_uf2(
    board: dict[str, Any],
    firmware: str,
    drive: str | None,
    dry_run: bool,
    port: str | None,
    log: Callable[[str], None],
    mounts: str = "/proc/mounts",
    extra: list[str] | None = None,
) -> list[tuple[str, list[str | None]]]:
    check_uf2(board, firmware)
    label = board["flash"]["drive_label"]
    if drive:
        if not _is_uf2_drive(drive, label):
            raise FlashError(
                "--drive %s is not a mounted %s drive (no INFO_UF2.TXT with "
                "Board-ID: %s)" % (drive, label, label)
            )
    else:
        drive = find_uf2_drive(label, mounts, extra)
    if dry_run:
        log("# copy the UF2 image to the %s drive; the board reboots into MicroPython" % label)
        log(shlex.join(["cp", firmware, (drive or "<%s drive>" % label) + "/"]))
        if not drive:
            log("# note: no %s drive is mounted now" % label)
        return [("copy", ["cp", firmware, drive])]
    if not drive:
        hint = ("run `mpremote connect %s bootloader`, or " % port) if port else ""
        raise FlashError(
            "no %s drive is mounted: %shold BOOTSEL while plugging the %s in, let the desktop "
            "mount the drive (or mount it yourself), then retry, or pass --drive DIR"
            % (label, hint, board["name"])
        )
    _copy_to_drive(firmware, drive, log)
    log(
        "copied: the board reboots into MicroPython and its drive disappears; next: "
        "edgebus deploy --board %s --port <its serial port>" % board["name"]
    )
    return [("copy", ["cp", firmware, drive])]


def _copy_to_drive(firmware: str, drive: str, log: Callable[[str], None]) -> None:
    """The UF2 image copied onto the board's drive, with a progress bar."""
    dest = os.path.join(drive, os.path.basename(firmware))
    total = os.path.getsize(firmware)
    log("# copy %s to %s" % (firmware, dest))
    from edgebus.tools.commands.progress import progress

    bar = progress(total, "flash")
    try:
        with open(firmware, "rb") as src, open(dest, "wb") as dst:
            while True:
                chunk = src.read(64 * 1024)
                if not chunk:
                    break
                dst.write(chunk)
                bar.update(len(chunk))
            dst.flush()
            try:
                os.fsync(dst.fileno())
            except OSError:
                pass  # the board may already be rebooting: the drive is gone
    except OSError as e:
        raise FlashError("copying to %s failed: %s" % (drive, e.strerror or e)) from None
    finally:
        bar.close()
