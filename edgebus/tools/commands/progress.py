"""A byte-count progress bar on stderr for the commands that move bundles and
images (deploy, flash, ota): tqdm when it is installed, else a text line."""

from __future__ import annotations

import sys
from typing import Any


class _TextProgress:
    """A plain progress line when tqdm is not installed."""

    def __init__(self, total: int, desc: str, unit: str) -> None:
        self.total, self.done, self.desc, self.tty = total, 0, desc, sys.stderr.isatty()
        self.closed = False
        self.unit = "bytes" if unit == "B" else unit

    def update(self, n: int) -> None:
        self.done += n
        if self.tty and not self.closed:
            pct = 100 * self.done // max(self.total, 1)
            bar = "#" * (pct // 5)
            sys.stderr.write(
                "\r%s [%-20s] %3d%% %d/%d %s"
                % (self.desc, bar, pct, self.done, self.total, self.unit)
            )
            sys.stderr.flush()

    def set_postfix_str(self, s: str) -> None:
        if not self.tty:
            sys.stderr.write("  %s\n" % s)

    def write(self, s: str, file: Any = None) -> None:
        """A line (on stdout by default) that the bar's line does not overrun."""
        if self.tty and not self.closed:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        print(s, file=file or sys.stdout, flush=True)
        self.update(0)

    def close(self) -> None:
        """End the bar's line; lines written after it print alone."""
        if self.tty and not self.closed:
            sys.stderr.write("\n")
        self.closed = True


def say(line: str) -> None:
    """A line on stderr, above a bar that may be drawing there."""
    try:
        from tqdm import tqdm
    except ImportError:
        print(("\r\x1b[K" if sys.stderr.isatty() else "") + line, file=sys.stderr, flush=True)
        return
    tqdm.write(line, file=sys.stderr)


def progress(total: int, desc: str = "deploy", unit: str = "B") -> Any:
    """A bar for ``total`` bytes (or other units): ``update(n)``, ``set_postfix_str(s)``,
    ``write(line, file=)`` (a line the bar does not overrun), ``close()``."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _TextProgress(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", file=sys.stderr)
