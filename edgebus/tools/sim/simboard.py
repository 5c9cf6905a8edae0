"""The MicroPython unix port as a board: its REPL on a pseudo-terminal.

usage: python -m edgebus.tools.sim.simboard [--dir DIR] [--heap BYTES]

Prints the port (``/dev/pts/N``) to give ``edgebus deploy --board unix --port``
or ``mpremote connect PORT resume ...``; files deployed land in DIR (the
process's working directory). Runs until Ctrl-C or until micropython exits.

micropython gets the pty *master* as stdin/stdout, the place where QEMU or a
USB-serial chip would sit, and the tools open the slave path like a serial
port. (With micropython on the slave, both would talk into the same end.)
"""

from __future__ import annotations

import argparse
import os
import pty
import signal
import subprocess
import sys
import tempfile
import time
import tty
from typing import NoReturn, Self

from edgebus.tools.boardkit import boards, mpybuild


class SimBoard:
    """A running `micropython` whose REPL is on a pty; `port` is the path to open."""

    def __init__(self, cwd: str, heap: int | None = None, exe: str | None = None) -> None:
        heap = heap or boards.load_board("unix")["budget"]["heap"]
        master, slave = pty.openpty()
        # Raw before micropython starts: it saves and restores the terminal mode
        # around its line editor, so the mode it finds is the one it keeps.
        tty.setraw(slave)
        self.port = os.ttyname(slave)
        self.cwd = cwd
        self.proc = subprocess.Popen(
            [exe or mpybuild.micropython(), "-X", "heapsize=%d" % heap],
            stdin=master,
            stdout=master,
            stderr=master,
            cwd=cwd,
            start_new_session=True,
        )  # no controlling tty, no Ctrl-C from our terminal
        os.close(master)
        # Held open for the board's life: with no slave open, reads on the
        # master fail with EIO between two tool connections.
        self._slave: int | None = slave

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self._slave is not None:
            os.close(self._slave)
            self._slave = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _interrupt(*_: object) -> NoReturn:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m edgebus.tools.sim.simboard", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--dir", help="the board's filesystem (default: a new temporary directory)")
    ap.add_argument("--heap", type=int, help="heap bytes (default: the unix board's budget)")
    a = ap.parse_args(argv)
    d = a.dir or tempfile.mkdtemp(prefix="edgebus-sim-")
    os.makedirs(d, exist_ok=True)
    # micropython is in its own session: stop it on SIGTERM too, not only on Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)
    with SimBoard(d, a.heap) as b:
        print("port %s  (micropython pid %d, files in %s)" % (b.port, b.proc.pid, d), flush=True)
        print("  edgebus deploy --board unix --port %s" % b.port, flush=True)
        try:
            while b.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        code = b.proc.poll()
    if code not in (None, -9):
        print("micropython exited with status %s" % code, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
