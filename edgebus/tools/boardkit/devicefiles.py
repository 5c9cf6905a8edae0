"""The device side's files on the host, wherever edgebus is installed: the
portable core (edgebus/ without its host parts), the device runtime
(firmware/) and the board manifests (boards/); and the runtime's modules
imported as a device imports them, as ``firmware``."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import edgebus

CORE_DIR = os.path.dirname(os.path.abspath(edgebus.__file__))
# What edgebus/ holds beside the portable core (links to the checkout's
# folders, copies in a wheel): the host packages and device/. None of it goes
# into a device bundle.
HOST_PARTS = ("bridge", "client", "tlog", "ingest", "tools", "device")
# A device's root as the host holds it: firmware/ and boards/ only, so that
# putting it on sys.path adds no other top-level name.
DEVICE_DIR = os.path.join(CORE_DIR, "device")
FIRMWARE_DIR = os.path.join(DEVICE_DIR, "firmware")
BOARDS_DIR = os.path.join(DEVICE_DIR, "boards")


def source_dir(name: str) -> str:
    """The directory of a package a device imports: edgebus (the core) or firmware."""
    return CORE_DIR if name == "edgebus" else os.path.join(DEVICE_DIR, name)


def prune(rel: str, dirs: list[str]) -> None:
    """In an os.walk over a tree, drop edgebus/'s host parts from ``dirs`` when
    ``rel``, the walked directory relative to the tree, is edgebus/."""
    if rel == "edgebus":
        dirs[:] = [d for d in dirs if d not in HOST_PARTS]


def firmware(module: str) -> ModuleType:
    """firmware.<module>, imported as on a device: DEVICE_DIR goes first on sys.path."""
    if DEVICE_DIR not in sys.path:
        sys.path.insert(0, DEVICE_DIR)
    return importlib.import_module("firmware." + module)


LOADER = "firmware.loader"  # the default entry: a device's main.py is its source


def main_py(entry: str = LOADER) -> bytes:
    """A device's main.py, run at boot (boards run it only as source): for the
    default entry the loader itself (firmware/loader.py), which chooses the
    bundle an update over the bus installed before any firmware module loads
    (firmware/README.md); for another module an import of it."""
    if entry == LOADER:
        with open(os.path.join(FIRMWARE_DIR, "loader.py"), "rb") as f:
            return f.read()
    return ("import %s  # written by edgebus\n" % entry).encode()
