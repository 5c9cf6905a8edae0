"""edgebus device runtime (MicroPython and CPython). Entry point: firmware.main."""

VERSION = "0.1.0"


def mem():
    """(alloc, free) heap bytes, or (None, None) where gc cannot tell (CPython)."""
    import gc

    try:
        return gc.mem_alloc(), gc.mem_free()
    except AttributeError:
        return None, None


# Every device config key's default (firmware/README.md), in one table:
# (section, ((key, default), ...)) ("" the top level; "mqtt" the uplink keys an
# mqtt uplink reads); readers take values through opt(). A key not here
# defaults to off (None) or to the board's value (ctx.board: queues, uart).
# Tuples of constants, not dicts: a frozen build keeps them in flash, where a
# dict of dicts would be built in RAM at import (784 bytes of a 32-bit
# board's heap, resident); opt() is called at start-up and per reconnect, so a
# scan of a few pairs costs nothing that matters.
DEFAULTS = (
    (
        "",
        (
            ("health_period", 10),
            ("info_period", 60),
            ("watchdog_ms", 0),
            ("reboot_after", 0),
            ("allow_identity_change", False),
        ),
    ),
    # 10 s backoff cap: after an outage the device is back within 10 s of its
    # broker or line, which the default spool outlasts (10 s at 20 readings/s).
    (
        "uplink",
        (
            ("backoff_min", 0.5),
            ("backoff_max", 10),
            ("reopen_after", 60),
            ("poll_ms", 5),
            ("failover_after", 3),
            ("failback", True),
            ("probe_every", 30),
        ),
    ),
    ("mqtt", (("port", 1883), ("prefix", "edgebus"), ("keepalive", 30), ("connect_timeout", 10))),
    (
        "link",
        (
            ("heartbeat", 5.0),
            ("handshake_timeout", 5.0),
            ("max_pending", 4),
            ("spool_policy", "drop_oldest"),
            ("journal_bytes", 262144),
            ("status", False),
            ("seal", "auto"),
            ("exports", (("sensor/#", ""), ("sys/#", ""))),
            ("imports", (("cmd/#", ""),)),
            ("export_calls", (("sys/#", ""),)),
            ("import_calls", (("host/#", ""),)),
        ),
    ),
    (
        "network",
        (("driver", "network"), ("join_timeout", 20), ("backoff_min", 1), ("backoff_max", 30)),
    ),
    # duty cycle (firmware/sleep.py): "every" has no default (it turns it on)
    ("sleep", (("awake", 30), ("linger", 1.0))),
    # NTP every hour (a board's RTC drifts seconds a day), a failed query again after 5 s, doubling
    ("time", (("every", 3600), ("retry", 5), ("rtc", "machine"))),
)


def opt(d, section, key):
    """Key's value in d (a section of the config, or a gateway's overlay of
    it), else its default in DEFAULTS (KeyError: a key with no default)."""
    if key in d:
        return d[key]
    for s, pairs in DEFAULTS:
        if s == section:
            for k, v in pairs:
                if k == key:
                    return v
    raise KeyError(key)


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
    except OSError:  # filesystems whose rename does not replace (FAT)
        os.remove(path)
        os.rename(tmp, path)
