"""The emulated board for tests: the image built once per run (cached by its
inputs), booted in the real qemu-system-arm, its REPL read by pyserial."""
import os
import threading
import time

import pytest
import serial

from tests.conftest import ROOT
from tools import boards, firmware, qemuboard

BOARD = "qemu-mps2-an385"
TARBALL = os.path.join(os.path.dirname(ROOT), "shared", "micropython",
                       "micropython-1.28.0.tar.xz")


def source():
    """The MicroPython source the tests build from: $EDGEBUS_MICROPYTHON, else
    the tarball in ../shared beside the checkout; None when neither exists."""
    src = os.environ.get(firmware.ENV_SOURCE) or TARBALL
    return src if os.path.exists(src) else None


def build_image(heap=None):
    """(board, build.json dict); pytest.skip naming what is missing. heap:
    another GC heap than the board's budget (a separate cached image)."""
    board = boards.load_board(BOARD)
    src = source()
    if src is None:
        pytest.skip("no MicroPython source: set %s or put %s beside the checkout"
                    % (firmware.ENV_SOURCE, TARBALL))
    try:
        qemuboard.qemu_binary(board)
        firmware.check_toolchain("arm")
    except (qemuboard.QemuError, firmware.FirmwareError) as e:
        pytest.skip("the emulated board needs its toolchain (./do setup installs it): %s" % e)
    return board, firmware.build(board, src, heap=heap, log=lambda *a: None)


class Console:
    """The board's REPL UART, read in a thread into `text`."""

    def __init__(self, port):
        self.s = serial.serial_for_url(port, baudrate=115200, timeout=0.05)
        self.text = ""
        self._stop = False
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        while not self._stop:
            try:
                b = self.s.read(4096)
            except (serial.SerialException, OSError):
                return
            if b:
                self.text += b.decode(errors="replace")

    def wait_for(self, needle, timeout=20, start=0):
        """The index just after needle's first appearance at or after start."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            i = self.text.find(needle, start)
            if i >= 0:
                return i + len(needle)
            time.sleep(0.02)
        raise AssertionError("%r not seen on the REPL within %ss; it shows:\n%s"
                             % (needle, timeout, self.text[-3000:]))

    def write(self, data):
        self.s.write(data)

    def close(self):
        self._stop = True
        self._t.join(2)
        self.s.close()
