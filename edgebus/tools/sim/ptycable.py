"""A simulated serial cable: two pseudo-terminals joined by a relay.

Each end is a real tty path (``a`` for the device side, ``b`` for the host
side) that programs open as they would a UART or /dev/ttyUSB0. The relay
copies bytes both ways and can cut the line, restore it, or add noise, so
tests and demos exercise real ptys and real serial code. It stands in for
the physical cable only: everything on either end is the real software.
"""

from __future__ import annotations

import os
import pty
import random
import select
import termios
import threading
import tty
from typing import Self


class PtyCable:
    """Two ptys joined by a relay thread; ``a`` and ``b`` are the tty paths."""

    def __init__(self, baud: int | None = None) -> None:
        self._ma, self._sa = pty.openpty()
        self._mb: int | None
        self._sb: int | None
        self._mb, self._sb = pty.openpty()
        self._lock = threading.Lock()
        for fd in (self._sa, self._sb):
            self._raw(fd)
        self.a = os.ttyname(self._sa)
        self.b = os.ttyname(self._sb)
        self.baud = baud  # bytes are paced to this rate when set
        self.connected = True
        self.noise = 0.0  # probability that a relayed byte is corrupted
        self.bytes = {"a_to_b": 0, "b_to_a": 0, "lost": 0, "corrupted": 0}
        self._rng = random.Random(1234)
        self._stop = False
        self._t = threading.Thread(target=self._run, name="ptycable", daemon=True)
        self._t.start()

    def unplug(self) -> None:
        """Side b's tty disappears, as a USB serial adapter does when pulled:
        its holders get an I/O error and the path stops existing."""
        with self._lock:
            mb, sb = self._mb, self._sb
            self._mb = self._sb = None
        for fd in (mb, sb):
            if fd is not None:  # unplugged already
                os.close(fd)

    def replug(self) -> str:
        """Side b comes back as a new tty (a new path, as after a re-plug)."""
        mb, sb = pty.openpty()
        self._raw(sb)
        with self._lock:
            self._mb, self._sb = mb, sb
            self.b = os.ttyname(sb)
        return self.b

    @staticmethod
    def _raw(fd: int) -> None:
        tty.setraw(fd)
        attrs = termios.tcgetattr(fd)
        attrs[6][termios.VMIN] = 0  # a read returns what is there: polled readers
        attrs[6][termios.VTIME] = 0
        termios.tcsetattr(fd, termios.TCSANOW, attrs)

    def cut(self) -> None:
        """Disconnect: bytes written on either side are lost until restore()."""
        self.connected = False

    def restore(self) -> None:
        self.connected = True

    def _relay(self, src: int, dst: int, key: str) -> None:
        try:
            # Paced: small reads, each delivered after its time on the wire.
            data = os.read(src, 64 if self.baud else 4096)
        except OSError:
            return
        if not data:
            return
        if not self.connected:
            self.bytes["lost"] += len(data)
            return
        if self.noise:
            b = bytearray(data)
            for i in range(len(b)):
                if self._rng.random() < self.noise:
                    b[i] ^= 1 << self._rng.randrange(8)
                    self.bytes["corrupted"] += 1
            data = bytes(b)
        if self.baud:  # 8N1: 10 bits on the line per byte
            threading.Event().wait(len(data) * 10 / self.baud)
        self.bytes[key] += len(data)
        view = memoryview(data)
        while view:
            try:
                n = os.write(dst, view)
            except OSError:  # the other side was unplugged meanwhile
                self.bytes["lost"] += len(view)
                return
            view = view[n:]

    def _run(self) -> None:
        while not self._stop:
            with self._lock:
                ma, mb = self._ma, self._mb
            fds = [ma] + ([mb] if mb is not None else [])
            try:
                r, _, _ = select.select(fds, [], [], 0.05)
            except (OSError, ValueError):
                continue  # side b was unplugged under us
            if ma in r:
                if mb is None:
                    self._drain(ma)
                else:
                    self._relay(ma, mb, "a_to_b")
            if mb is not None and mb in r:
                self._relay(mb, ma, "b_to_a")

    def _drain(self, fd: int) -> None:
        try:
            self.bytes["lost"] += len(os.read(fd, 4096))
        except OSError:
            pass

    def close(self) -> None:
        self._stop = True
        self._t.join(1)
        for fd in (self._ma, self._sa, self._mb, self._sb):
            if fd is None:
                continue
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
