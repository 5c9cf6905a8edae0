"""The emulated board for tests: the image built once per run (cached by its
inputs), booted in the real qemu-system-arm, its REPL read by pyserial."""

import os

import pytest

from edgebus.tools.boardkit import boards, firmware
from edgebus.tools.sim import qemuboard
from edgebus.tools.sim.qemuboard import Console  # noqa: F401 (the tests' REPL reader)
from tests.conftest import TARBALL

BOARD = "qemu-mps2-an385"


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
        pytest.skip(
            "no MicroPython source: set %s or put %s beside the checkout"
            % (firmware.ENV_SOURCE, TARBALL)
        )
    try:
        qemuboard.qemu_binary(board)
        firmware.check_toolchain("arm")
    except (qemuboard.QemuError, firmware.FirmwareError) as e:
        pytest.skip("the emulated board needs its toolchain (./do setup installs it): %s" % e)
    return board, firmware.build(board, src, heap=heap, log=lambda *a: None)
