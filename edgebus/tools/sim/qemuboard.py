"""An emulated board: a firmware image booted in QEMU, its UARTs on the host.

``QemuBoard(board, image, state)`` runs ``qemu-system-<system> -machine M``
with the image, UART0 (the REPL) and UART1 (the link) each on a pty or a TCP
port, and the board's flash a littlefs image file in ``state`` (QEMU's
working directory: the firmware reaches ``flash.img`` there through
semihosting). ``repl_port`` and ``uart_port`` are what pyserial, mpremote or a
bridge ``[[serial]]`` entry open: ``/dev/pts/N`` or ``socket://127.0.0.1:P``.
The board runs until ``close()``; ``machine.reset()`` resets it in place
(same ports), as the power stays on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from typing import Any, Iterable, Self

from edgebus.tools.boardkit import boards, devicefiles, lfsimage

FLASH_IMAGE = "flash.img"
APT = "apt-get install -y --no-install-recommends qemu-system-arm"


class QemuError(Exception):
    """A problem the user must fix; the message says how."""


def qemu_binary(board: dict[str, Any]) -> str:
    name = "qemu-system-" + board["flash"]["system"]
    exe = shutil.which(name)
    if exe is None:
        raise QemuError("%s not found: install it, e.g. (Debian/Ubuntu, as root) %s" % (name, APT))
    return exe


def _serial(spec: str) -> tuple[str, str | None]:
    """A --repl/--uart value -> (qemu -serial argument, port for the host or None)."""
    if spec == "pty":
        return "pty", None  # the path comes from QEMU's output
    if spec in ("stdio", "null"):
        return spec, None
    if spec.startswith("file:"):
        return spec, None  # output only, into a file (a device log)
    if spec.startswith("/dev/"):
        return spec, spec  # a host tty (e.g. one end of a cable)
    m = re.fullmatch(r"tcp:(\d+)", spec)
    if m:
        return (
            "tcp:127.0.0.1:%s,server=on,wait=off" % m.group(1),
            "socket://127.0.0.1:%s" % m.group(1),
        )
    raise QemuError("%r: expected pty, tcp:PORT, a /dev/ tty path, file:PATH, stdio or null" % spec)


def device_files(
    board: dict[str, Any], config: str | None = None, main: str | None = devicefiles.LOADER
) -> dict[str, bytes]:
    """The files edgebus flash puts on the board's filesystem: the config, the
    board manifest the runtime reads (board.json) and main.py (the loader)."""
    files = boards.runtime_files(board)
    if config is not None:
        files["config.json"] = json.dumps(config).encode()
    if main:
        files["main.py"] = devicefiles.main_py(main)
    return files


def prepare_flash(board: dict[str, Any], state: str, files: dict[str, bytes]) -> str:
    """Create state/flash.img if needed and write files into it; returns its path."""
    os.makedirs(state, exist_ok=True)
    img = os.path.join(state, FLASH_IMAGE)
    lfsimage.write(
        img, files, boards.flash_size_bytes(board["flash"]["size"]), board["budget"]["fs_block"]
    )
    return img


class QemuBoard:
    def __init__(
        self,
        board: dict[str, Any],
        image: str,
        state: str,
        repl: str = "pty",
        uart: str = "pty",
        extra: Iterable[str] = (),
    ) -> None:
        if board["flash"]["method"] != "qemu":
            raise QemuError("board %s is not an emulated board" % board["name"])
        if not os.path.isfile(image):
            raise QemuError(
                "%s: no such firmware image (edgebus firmware build --board %s)"
                % (image, board["name"])
            )
        os.makedirs(state, exist_ok=True)
        (r_arg, self.repl_port), (u_arg, self.uart_port) = _serial(repl), _serial(uart)
        self.argv = [
            qemu_binary(board),
            "-machine",
            board["flash"]["machine"],
            "-nographic",
            "-monitor",
            "null",
            "-semihosting",
            "-kernel",
            os.path.abspath(image),
            "-serial",
            r_arg,
            "-serial",
            u_arg,
        ] + list(extra)
        self.state = state
        self.log_path = os.path.join(state, "qemu.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self._ptys = [i for i, a in enumerate((r_arg, u_arg)) if a == "pty"]

    def start(self, timeout: float = 30, stdio: bool = False) -> Self:
        """Start QEMU; returns once the host-side ports are known."""
        self._log = open(self.log_path, "wb")
        out = None if stdio else self._log
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.state,
            stdin=None if stdio else subprocess.DEVNULL,
            stdout=out,
            stderr=self._log,
            start_new_session=not stdio,
        )
        deadline = time.monotonic() + timeout
        while self._ptys:
            # QEMU names the pty it made for each serial port in its output.
            with open(self.log_path, errors="replace") as f:
                found = dict(
                    (int(n), p)
                    for p, n in re.findall(
                        r"char device redirected to (\S+) \(label serial(\d)\)", f.read()
                    )
                )
            if all(i in found for i in self._ptys):
                self.repl_port = found.get(0, self.repl_port)
                self.uart_port = found.get(1, self.uart_port)
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                with open(self.log_path, errors="replace") as f:
                    raise QemuError("QEMU did not start: %s" % f.read().strip())
            time.sleep(0.02)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Console:
    """The board's REPL UART, read in a thread into `text`."""

    def __init__(self, port: str) -> None:
        import serial  # pyserial: only this reader needs it

        self._errors = (serial.SerialException, OSError)
        self.s = serial.serial_for_url(port, baudrate=115200, timeout=0.05)
        self.text = ""
        self._stop = False
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        while not self._stop:
            try:
                b = self.s.read(4096)
            except self._errors:
                return
            if b:
                self.text += b.decode(errors="replace")

    def wait_for(self, needle: str, timeout: float = 20, start: int = 0) -> int:
        """The index just after needle's first appearance at or after start."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            i = self.text.find(needle, start)
            if i >= 0:
                return i + len(needle)
            time.sleep(0.02)
        raise AssertionError(
            "%r not seen on the REPL within %ss; it shows:\n%s"
            % (needle, timeout, self.text[-3000:])
        )

    def wait_line(self, needle: str, timeout: float = 20, start: int = 0) -> tuple[str, int]:
        """(line, end): the whole line holding needle, once its newline has arrived
        (the UART delivers a line in pieces), and the index after it."""
        i = self.wait_for(needle, timeout, start)
        end = self.wait_for("\n", timeout, i)
        return self.text[self.text.rfind("\n", 0, i) + 1 : end].rstrip(), end

    def write(self, data: bytes) -> None:
        self.s.write(data)

    def close(self) -> None:
        self._stop = True
        self._t.join(2)
        self.s.close()
