"""Device config: load, validate, merge, save atomically (firmware/README.md).

Loaded only while needed (firmware.transient/unload): at boot and for each
sys/config/set.
"""
import json
from firmware import ConfigError, write_atomic

_NUM = (int, float)
# section -> {key: (types, required)}; None for a section means a leaf key.
TOP = {
    "node": ((str,), True),
    "key": ((str, type(None)), False),
    "board": ((str,), False),
    "uplink": ((dict,), True),
    "link": ((dict,), False),
    "queues": ((dict,), False),
    "services": ((list,), False),
    "health_period": (_NUM, False),
    "info_period": (_NUM, False),
    "watchdog_ms": ((int,), False),
    "allow_identity_change": ((bool,), False),
}
SECTIONS = {
    "uplink": {"kind": ((str,), True), "port": ((str, int), False), "baud": ((int,), False),
               "tx": ((int,), False), "rx": ((int,), False), "poll_ms": ((int,), False),
               "backoff_min": (_NUM, False), "backoff_max": (_NUM, False),
               "reopen_after": (_NUM, False),
               # mqtt: the broker (port above is its TCP port), topic prefix, login
               "host": ((str,), False), "prefix": ((str,), False), "user": ((str,), False),
               "password": ((str,), False), "keepalive": ((int,), False),
               # failover: gateways overlay the keys above, the first is the primary
               "gateways": ((list,), False), "failover_after": (_NUM, False),
               "failback": ((bool,), False), "probe_every": (_NUM, False)},
    "link": {"heartbeat": (_NUM, False), "handshake_timeout": (_NUM, False),
             "out_queue": ((int,), False), "max_pending": ((int,), False),
             "spool": ((int,), False), "spool_policy": ((str,), False),
             "exports": ((list,), False), "imports": ((list,), False),
             "export_calls": ((list,), False), "import_calls": ((list,), False),
             # the flash spool: a directory (boards: under /; unix: the working dir)
             "journal": ((str, type(None)), False), "journal_bytes": ((int,), False)},
    "queues": {"bus": ((int,), False), "full": ((str,), False)},
}
IDENTITY = ("node", "key", "allow_identity_change")
UPLINKS = ("uart", "mqtt")


def _tname(ts):
    return " or ".join(["null" if t is type(None) else t.__name__ for t in ts])


def _check(d, schema, where):
    for k in d:
        if k not in schema:
            raise ConfigError("unknown key %s%s (known: %s)"
                              % (where, k, ", ".join(sorted(schema))))
    for k, (ts, req) in schema.items():
        if req and k not in d:
            raise ConfigError("missing key %s%s" % (where, k))
    for k, (ts, req) in schema.items():
        if k not in d:
            continue
        v = d[k]
        # bool is an int subclass in CPython: never accept it for a number
        if type(v) not in ts or (type(v) is bool and bool not in ts):
            raise ConfigError("%s%s must be %s, not %s"
                              % (where, k, _tname(ts), type(v).__name__))


def validate(cfg):
    """Raise ConfigError with a clear message, or return cfg."""
    if type(cfg) is not dict:
        raise ConfigError("the config must be a JSON object")
    _check(cfg, TOP, "")
    for sec, schema in SECTIONS.items():
        if sec in cfg:
            _check(cfg[sec], schema, sec + ".")
    if not cfg["node"] or "/" in cfg["node"] or "+" in cfg["node"] or "#" in cfg["node"]:
        raise ConfigError("node must be a non-empty id without '/', '+' or '#'")
    if cfg["uplink"]["kind"] not in UPLINKS:
        raise ConfigError("uplink.kind must be one of %s, not %r"
                          % (", ".join(UPLINKS), cfg["uplink"]["kind"]))
    u = cfg["uplink"]
    if "gateways" in u or "failover_after" in u or "probe_every" in u:
        __import__("firmware.failover").failover.check_config(u, _check, SECTIONS["uplink"])
    elif u["kind"] == "mqtt" and not u.get("host"):
        raise ConfigError("uplink.host is required for an mqtt uplink (the broker's address)")
    q = cfg.get("queues", {})
    if q.get("full", "drop_oldest") not in ("drop_oldest", "reject_newest"):
        raise ConfigError("queues.full must be 'drop_oldest' or 'reject_newest'")
    for sec, k in (("queues", "bus"), ("link", "out_queue"), ("link", "max_pending")):
        v = cfg.get(sec, {}).get(k)
        if v is not None and not 1 <= v <= 1024:
            raise ConfigError("%s.%s must be between 1 and 1024, not %d" % (sec, k, v))
    lk = cfg.get("link", {})
    if lk.get("spool_policy", "drop_oldest") not in ("drop_oldest", "drop_newest"):
        raise ConfigError("link.spool_policy must be 'drop_oldest' or 'drop_newest'")
    if not 1024 <= lk.get("spool", 1024) <= 1048576:
        raise ConfigError("link.spool (bytes) must be between 1024 and 1048576, not %d"
                          % lk["spool"])
    for k in ("exports", "imports", "export_calls", "import_calls"):
        n = 3 if k == "exports" else 2
        for r in lk.get(k, ()):
            if type(r) is not list or not 2 <= len(r) <= n or type(r[0]) is not str \
                    or type(r[1]) is not str:
                raise ConfigError("link.%s entries must be [pattern, prefix%s] strings"
                                  % (k, ", class" if n == 3 else ""))
            if len(r) == 3 and r[2] not in ("reliable", "latest"):
                raise ConfigError("link.exports class must be 'reliable' or 'latest', not %r"
                                  % (r[2],))
    j = cfg.get("link", {}).get("journal")
    if j is not None and (not j or ".." in j.split("/") or len(j) > 64):
        raise ConfigError("link.journal must be a directory name without '..' (at most 64 "
                          "characters), not %r; null turns the flash spool off" % j)
    jb = cfg.get("link", {}).get("journal_bytes")
    if jb is not None and not 16384 <= jb <= 16777216:
        raise ConfigError("link.journal_bytes must be between 16384 (4 flash blocks) and "
                          "16777216, not %d" % jb)
    for s in cfg.get("services", ()):
        if type(s) is dict:
            if type(s.get("module")) is not str:
                raise ConfigError("a service given as an object needs \"module\": a string")
        elif type(s) is not str:
            raise ConfigError("services entries must be module names or objects")
    return cfg


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
                    new[k].pop(k2, None)   # null removes a key: its default applies
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
