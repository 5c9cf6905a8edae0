"""Device config: load, validate, merge, save atomically (firmware/README.md).

Loaded only while needed (firmware.transient/unload): at boot and for each
sys/config/set.
"""

import json

from firmware import ConfigError, opt, write_atomic

# section -> {key: kinds}: one letter per accepted type (s str, i int, n number,
# b bool, d object, l list, 0 null), upper case when the key is required.
# Strings, not tuples of types: frozen into a board's flash they cost no heap,
# where tuples were built at each load (~1.5 KB of the ~2 KB this module took
# on the 32-bit board during a sys/config/set).
TOP = {
    "node": "S",
    "key": "s0",
    "board": "s",
    "uplink": "D",
    "link": "d",
    "queues": "d",
    "services": "l",
    "health_period": "n",
    "info_period": "n",
    "watchdog_ms": "i",
    "reboot_after": "n",
    "allow_identity_change": "b",
    "network": "d",
    "sleep": "d",
    "time": "d",
}
SECTIONS = {
    "uplink": {
        "kind": "S",
        "port": "si",
        "baud": "i",
        "tx": "i",
        "rx": "i",
        "poll_ms": "i",
        "backoff_min": "n",
        "backoff_max": "n",
        "reopen_after": "n",
        # mqtt: the broker (port above is its TCP port), topic prefix, login
        "host": "s",
        "prefix": "s",
        "user": "s",
        "password": "s",
        "keepalive": "i",
        "connect_timeout": "n",
        "tls": "d",
        # failover: gateways overlay the keys above, the first is the primary
        "gateways": "l",
        "failover_after": "n",
        "failback": "b",
        "probe_every": "n",
    },
    "link": {
        "heartbeat": "n",
        "handshake_timeout": "n",
        "out_queue": "i",
        "max_pending": "i",
        "spool": "i",
        "spool_policy": "s",
        "exports": "l",
        "imports": "l",
        "export_calls": "l",
        "import_calls": "l",
        # the flash spool: a directory (boards: under /; unix: the working dir)
        "journal": "s0",
        "journal_bytes": "i",
        "status": "b",
        "seal": "s",
    },
    "queues": {"bus": "i", "full": "s"},
    # a WiFi station joined before the uplink (firmware/wifi.py); absent: none
    "network": {
        "ssid": "S",
        "password": "s0",
        "driver": "s",
        "join_timeout": "n",
        "backoff_min": "n",
        "backoff_max": "n",
    },
    # duty cycle (firmware/sleep.py); absent: always on
    "sleep": {"every": "N", "awake": "n", "linger": "n"},
    # the time step: NTP and the RTC (firmware/clock.py); absent: none
    "time": {"ntp": "s0", "every": "n", "retry": "n", "rtc": "s"},
}
# uplink.tls (firmware/uplink_mqtt.py): files on the device
TLS = {"ca": "s", "cert": "s", "key": "s", "server_name": "s"}
IDENTITY = ("node", "key", "allow_identity_change")
# The key of config.example.json: accepted only by the simulator (the
# MicroPython unix port), never by a real device, where anyone who read the
# example could take the device's place.
EXAMPLE_KEY = "change-me"
UPLINKS = ("uart", "mqtt")
_KINDS = "sinbdl0"
_NAMES = ("str", "int", "int or float", "bool", "dict", "list", "null")


def _ok(v, kinds):
    t = type(v)
    # bool is an int subclass in CPython: never accept it for a number
    for c in kinds.lower():
        if (
            c == "s"
            and t is str
            or c == "i"
            and t is int
            or c == "n"
            and t in (int, float)
            or c == "b"
            and t is bool
            or c == "d"
            and t is dict
            or c == "l"
            and t is list
            or c == "0"
            and v is None
        ):
            return True
    return False


def _check(d, schema, where):
    for k in d:
        if k not in schema:
            raise ConfigError(
                "unknown key %s%s (known: %s)" % (where, k, ", ".join(sorted(schema)))
            )
    for k in schema:
        if k not in d:
            if schema[k] < "a":  # an upper-case letter: required
                raise ConfigError("missing key %s%s" % (where, k))
        elif not _ok(d[k], schema[k]):
            raise ConfigError(
                "%s%s must be %s, not %s"
                % (
                    where,
                    k,
                    " or ".join(_NAMES[_KINDS.index(c)] for c in schema[k].lower()),
                    type(d[k]).__name__,
                )
            )


def _simulator():
    import sys

    return sys.implementation.name == "micropython" and sys.platform == "linux"


def validate(cfg):
    """Raise ConfigError with a clear message, or return cfg."""
    if type(cfg) is not dict:
        raise ConfigError("the config must be a JSON object")
    _check(cfg, TOP, "")
    if cfg.get("key") == EXAMPLE_KEY and not _simulator():
        raise ConfigError(
            "key is the example's %r: give each device a key of its own (e.g. "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(32))')" % EXAMPLE_KEY
        )
    for sec, schema in SECTIONS.items():
        if sec in cfg:
            _check(cfg[sec], schema, sec + ".")
    if not cfg["node"] or "/" in cfg["node"] or "+" in cfg["node"] or "#" in cfg["node"]:
        raise ConfigError("node must be a non-empty id without '/', '+' or '#'")
    _uplink(cfg["uplink"])
    q = cfg.get("queues", {})
    if q.get("full") not in (None, "drop_oldest", "reject_newest"):  # None: the board's
        raise ConfigError("queues.full must be 'drop_oldest' or 'reject_newest'")
    for sec, k in (("queues", "bus"), ("link", "out_queue"), ("link", "max_pending")):
        v = cfg.get(sec, {}).get(k)
        if v is not None and not 1 <= v <= 1024:
            raise ConfigError("%s.%s must be between 1 and 1024, not %d" % (sec, k, v))
    lk = cfg.get("link", {})
    _link(lk)
    seal(cfg)
    j = lk.get("journal")
    if j is not None and (not j or ".." in j.split("/") or len(j) > 64):
        raise ConfigError(
            "link.journal must be a directory name without '..' (at most 64 "
            "characters), not %r; null turns the flash spool off" % j
        )
    jb = lk.get("journal_bytes")
    if jb is not None and not 16384 <= jb <= 16777216:
        raise ConfigError(
            "link.journal_bytes must be between 16384 (4 flash blocks) and 16777216, not %d" % jb
        )
    _services(cfg.get("services", ()))
    _reboot_after(cfg)
    if "sleep" in cfg:
        _sleep(cfg["sleep"], j)
    t = cfg.get("time", {})
    if opt(t, "time", "every") < 15 or opt(t, "time", "retry") <= 0:
        raise ConfigError("time.every must be at least 15 s and time.retry above 0")
    return cfg


def _reboot_after(cfg):
    """0 (never), or long enough for the uplink to come back on its own; a
    duty cycle's wake is bounded by sleep.awake already."""
    r = cfg.get("reboot_after")
    if not r:
        return
    if not 10 <= r <= 604800:
        raise ConfigError(
            "reboot_after must be 0 (never) or between 10 and 604800 s, not %r" % (r,)
        )
    if "sleep" in cfg:
        raise ConfigError("reboot_after does not go with sleep: each wake ends after sleep.awake s")


def _sleep(s, journal):
    """Duty cycle: bounds, and the flash journal that keeps what a wake
    leaves unacknowledged (RAM does not survive deep sleep)."""
    for k, lo in (("every", 1), ("awake", 1), ("linger", 0)):
        if k in s and not lo <= s[k] <= 86400:
            raise ConfigError("sleep.%s must be between %d and 86400 s, not %r" % (k, lo, s[k]))
    if not journal:
        raise ConfigError(
            "sleep needs link.journal (a directory for the flash journal): deep sleep "
            "clears RAM, so what a wake leaves unacknowledged would be lost"
        )


def _uplink(u):
    """Check the uplink section beyond its keys' types: kind, broker, failover, TLS."""
    if u["kind"] not in UPLINKS:
        raise ConfigError("uplink.kind must be one of %s, not %r" % (", ".join(UPLINKS), u["kind"]))
    if "gateways" in u or "failover_after" in u or "probe_every" in u:
        __import__("firmware.failover").failover.check_config(u, _check, SECTIONS["uplink"])
    elif u["kind"] == "mqtt" and not u.get("host"):
        raise ConfigError("uplink.host is required for an mqtt uplink (the broker's address)")
    if "tls" in u:
        _check(u["tls"], TLS, "uplink.tls.")
        if ("cert" in u["tls"]) != ("key" in u["tls"]):
            raise ConfigError(
                "uplink.tls.cert and uplink.tls.key go together (the device's "
                "certificate and its private key)"
            )


def _link(lk):
    """Check the link section's spool and its export/import rules."""
    if opt(lk, "link", "spool_policy") not in ("drop_oldest", "drop_newest"):
        raise ConfigError("link.spool_policy must be 'drop_oldest' or 'drop_newest'")
    if "spool" in lk and not 1024 <= lk["spool"] <= 1048576:  # absent: the board's
        raise ConfigError(
            "link.spool (bytes) must be between 1024 and 1048576, not %d" % lk["spool"]
        )
    for k in ("exports", "imports", "export_calls", "import_calls"):
        n = 3 if k == "exports" else 2
        for r in lk.get(k, ()):
            if (
                type(r) is not list
                or not 2 <= len(r) <= n
                or type(r[0]) is not str
                or type(r[1]) is not str
            ):
                raise ConfigError(
                    "link.%s entries must be [pattern, prefix%s] strings"
                    % (k, ", class" if n == 3 else "")
                )
            if len(r) == 3 and r[2] not in ("reliable", "latest"):
                raise ConfigError(
                    "link.exports class must be 'reliable' or 'latest', not %r" % (r[2],)
                )


def _services(services):
    """Check the services list: module names, or objects that name one."""
    for s in services:
        if type(s) is dict:
            if type(s.get("module")) is not str:
                raise ConfigError('a service given as an object needs "module": a string')
        elif type(s) is not str:
            raise ConfigError("services entries must be module names or objects")


def seal(cfg):
    """Check link.seal (docs/protocol.md 17; "auto", the default, is
    resolved by firmware/uplink.py): "encrypt" needs AES in this build."""
    s = opt(cfg.get("link", {}), "link", "seal")
    if s not in ("auto", "encrypt", "mac", "offer", "off"):
        raise ConfigError("link.seal must be auto, encrypt, mac, offer or off, not %r" % (s,))
    from edgebus.link import cipher

    if s == "encrypt" and cipher.BACKEND is None:
        raise ConfigError(
            "link.seal encrypt needs AES, and this build has no cryptolib: "
            "use mac (frames authenticated, not hidden)"
        )


def load(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("cannot read %s: %s" % (path, e))
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ConfigError("%s is not valid JSON: %s" % (path, e))
    return validate(cfg)


def merge(cfg, change, allow_identity=False):
    """A new config: cfg with change applied (sections merged one level deep),
    validated. Raises ConfigError."""
    if type(change) is not dict or not change:
        raise ConfigError("config/set takes a non-empty object of changes")
    if not allow_identity:
        for k in IDENTITY:
            if k in change:
                raise ConfigError("%s cannot be changed remotely on this device" % k)
    new = {}
    for k, v in cfg.items():
        new[k] = dict(v) if type(v) is dict else v
    for k, v in change.items():
        if k in SECTIONS and type(v) is dict and type(new.get(k)) is dict:
            for k2, v2 in v.items():
                if v2 is None:
                    new[k].pop(k2, None)  # null removes a key: its default applies
                else:
                    new[k][k2] = v2
        elif v is None and not TOP.get(k, (0, False))[1]:
            new.pop(k, None)
        else:
            new[k] = v
    return validate(new)


def save(path, cfg):
    """Write cfg atomically: a temp file, then rename over the old one."""
    write_atomic(path, json.dumps(cfg))
