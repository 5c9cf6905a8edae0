"""edgebus device runtime (MicroPython and CPython). Entry point: firmware.main."""
VERSION = "0.1.0"


def mem():
    """(alloc, free) heap bytes, or (None, None) where gc cannot tell (CPython)."""
    import gc
    try:
        return gc.mem_alloc(), gc.mem_free()
    except AttributeError:
        return None, None


class ConfigError(ValueError):
    """A device config (or a change to it) that cannot be used; says why."""


def transient(name):
    """Import module name for one job; pair with unload(name) when done.

    The config validator (firmware.config) is needed at boot and on
    sys/config/set only: unloaded between uses, its code (about 8 KB of heap on
    the unix port) is not resident while the device runs.
    """
    return __import__(name, None, None, ("_",))


def unload(name):
    """Forget module name so the GC can free its code (see transient)."""
    import sys
    sys.modules.pop(name, None)
    pkg, _, leaf = name.rpartition(".")
    p = sys.modules.get(pkg)
    if p is not None and leaf in p.__dict__:
        delattr(p, leaf)


def write_atomic(path, text):
    """Write a file whole or not at all: a temp file, then rename over the old one.
    The device's own, not the host's (tlog.write_atomically): MicroPython has
    no os.fsync nor a directory to fsync; littlefs and FAT commit on close."""
    import os
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    try:
        os.rename(tmp, path)
    except OSError:   # filesystems whose rename does not replace (FAT)
        os.remove(path)
        os.rename(tmp, path)
