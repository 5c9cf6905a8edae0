"""The bridge configuration's schema: every table, every key it takes and
what its value must be, in one table (SCHEMA) that parsing checks against
and tests walk (tests/host/bridge/test_bridge_config.py)."""

import os
from urllib.parse import urlparse

from edgebus import topic

LOG_QUEUE_RANGE = (64, 1048576)
MAX_COMMIT_MS = 10000
MAX_CLIENT_QUEUE = 65536
SEALS = ("auto", "encrypt", "mac", "offer", "off")


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key and why."""


class Key:
    """One key of a table: the types it takes and the kind of value it holds,
    which says what parse checks (and what a test feeds it to see it refused)."""

    def __init__(self, types, kind=None, lo=None, hi=None, unit="", note="", choices=()):
        self.types = types if isinstance(types, tuple) else (types,)
        self.kind = kind
        self.lo, self.hi = lo, hi  # RANGE: the bounds, both included
        self.unit, self.note = unit, note  # RANGE: words for the error
        self.choices = choices  # CHOICE


NUM = (int, float)
# The kinds of value (Key.kind); None: any value of the key's types.
TEXT = "text"  # a non-empty string
RANGE = "range"  # a number between lo and hi
CHOICE = "choice"  # one of the key's choices
DIR = "dir"  # a directory the bridge makes and writes in (prepare)
SOCKET = "socket"  # a unix socket the bridge makes, and its directory (prepare)
FILE = "file"  # a file the bridge reads (key_file at parse, tls_ca at prepare)
ADDRESS = "address"  # host:port
URL = "url"  # mqtt://host[:port] or mqtts://...
PATTERNS = "patterns"  # a list of topic patterns
RULES = "rules"  # a list of patterns or [pattern, prefix] pairs
TABLES = "tables"  # a list of inline tables (their own schema entry)
# sun_path: the longest unix socket path, with its closing NUL.
SOCKET_PATH_MAX = 107

_KEY = {"key": Key(str, TEXT), "key_file": Key(str, FILE)}
_SEAL = {"seal": Key(str, CHOICE, choices=SEALS)}

# Every table of the configuration and every key it takes; the label is how
# errors name it (an array's entries add " #N").
SCHEMA = {
    "bridge": (
        "[bridge]",
        {
            "node": Key(str, TEXT),
            "state_dir": Key(str, DIR),
            "keys": Key(str, DIR),
            "socket": Key(str, SOCKET),
            "metrics": Key(str, ADDRESS),
            "metrics_links": Key(int, RANGE, 0, 1000000, " links", " (0: fleet totals only)"),
            "heartbeat": Key(NUM, RANGE, 0.05, 3600, " seconds"),
            **_SEAL,
            "queue_len": Key(int, RANGE, 1, 1048576, " messages"),
            "client_queue": Key(int, RANGE, 1, MAX_CLIENT_QUEUE, " messages"),
            "relay_calls": Key(list, PATTERNS),
        },
    ),
    "log": (
        "[log]",
        {
            "dir": Key(str, DIR),
            "patterns": Key(list, PATTERNS),
            "segment_bytes": Key(int, RANGE, 4096, 1 << 40, " bytes"),
            "segment_seconds": Key(NUM, RANGE, 0.1, 7 * 86400, " seconds"),
            "retention_bytes": Key(int, RANGE, 0, 1 << 60, " bytes"),
            "retention_seconds": Key(NUM, RANGE, 0, 100 * 365 * 86400, " seconds"),
            "commit_ms": Key(
                NUM,
                RANGE,
                0,
                MAX_COMMIT_MS,
                " milliseconds",
                " (0: a sync point after every write)",
            ),
            "queue": Key(int, RANGE, LOG_QUEUE_RANGE[0], LOG_QUEUE_RANGE[1], " messages"),
        },
    ),
    "serial": (
        "[[serial]]",
        {
            "node": Key(str, TEXT),
            "port": Key(str, TEXT),
            "baud": Key(int, RANGE, 50, 20000000, " bits a second"),
            **_KEY,
            **_SEAL,
        },
    ),
    "mqtt": (
        "[mqtt]",
        {
            "url": Key(str, URL),
            "client_id": Key(str, TEXT),
            "username": Key(str),
            "password": Key(str),
            "tls_ca": Key(str, FILE),
            "prefix": Key(str, TEXT),
            "devices": Key(list, TABLES),
            "mirror": Key(list, PATTERNS),
            "keystore": Key(bool),
            "shard": Key(bool),
        },
    ),
    "mqtt.devices": ("[mqtt].devices", {"node": Key(str, TEXT), **_KEY, **_SEAL}),
    "peer": (
        "[[peer]]",
        {
            "node": Key(str, TEXT),
            **_KEY,
            "connect": Key(str, ADDRESS),
            "listen": Key(str, ADDRESS),
            "exports": Key(list, RULES),
            "imports": Key(list, RULES),
            "export_calls": Key(list, RULES),
            "import_calls": Key(list, RULES),
            "priority": Key(int, RANGE, -1000000, 1000000),
            "backoff_max": Key(NUM, RANGE, 0.1, 3600, " seconds"),
            **_SEAL,
        },
    ),
    "acl": (
        "[[acl]]",
        {
            "uid": Key(int, RANGE, 0, 2**32 - 2),
            "read": Key(list, PATTERNS),
            "write": Key(list, PATTERNS),
            "call": Key(list, PATTERNS),
            "serve": Key(list, PATTERNS),
        },
    ),
}


def label(name, i=None):
    """How errors name table ``name`` of SCHEMA (an array's entry: number i)."""
    label = SCHEMA[name][0]
    return label if i is None else "%s #%d" % (label, i + 1)


def _not_dir(path):
    """Why a directory cannot be made at path, or None: it is one, or the
    nearest part of it that exists is. Whether the bridge may write in it is
    prepare()'s to find (tools read a configuration without writing)."""
    p = path
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        return "%s is not a directory" % p
    return None


def address(v):
    """(host, port) of "host:port" ("[::1]:port" too), or None."""
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def _check(where, name, spec, v, base_dir):
    """v as key ``name`` of a table keeps it: checked against spec, a path
    resolved against base_dir; ConfigError naming where and name otherwise."""
    kind = spec.kind
    bad = None
    if kind == RANGE:
        if not spec.lo <= v <= spec.hi:  # false for nan too
            bad = "must be between %r and %r%s%s, got %r" % (
                spec.lo,
                spec.hi,
                spec.unit,
                spec.note,
                v,
            )
    elif kind in (TEXT, DIR, SOCKET, FILE, URL, ADDRESS) and not v:
        bad = "must not be empty"
    elif kind == CHOICE:
        if v not in spec.choices:
            bad = "must be one of %s, got %r" % (", ".join('"%s"' % c for c in spec.choices), v)
    elif kind in (DIR, SOCKET):
        v = os.path.normpath(os.path.join(base_dir, v))
        if kind == DIR:
            why = _not_dir(v)
        elif os.path.isdir(v):
            why = "%s is a directory" % v
        elif len(os.fsencode(v)) > SOCKET_PATH_MAX:
            why = "%s is longer than a unix socket's %d bytes" % (v, SOCKET_PATH_MAX)
        else:
            why = _not_dir(os.path.dirname(v))
        if why:
            bad = "%r cannot be made: %s" % (v, why)
    elif kind == ADDRESS:
        if address(v) is None:
            bad = "must be host:port, got %r" % (v,)
    elif kind == URL:
        u = urlparse(v)
        try:
            port = u.port
        except ValueError:
            port = 0
        if u.scheme not in ("mqtt", "mqtts") or not u.hostname or port == 0:
            bad = "must be mqtt://host[:port] or mqtts://host[:port], got %r" % (v,)
    elif kind == TABLES:
        if not all(isinstance(t, dict) for t in v):
            bad = "entries are tables ({key = value, ...}), got %r" % (v,)
    elif kind in (PATTERNS, RULES):
        out = []
        for r in v:
            if (
                kind == RULES
                and isinstance(r, list)
                and len(r) == 2
                and all(isinstance(x, str) for x in r)
            ):
                p = r
            elif isinstance(r, str):
                p = (r, "")
            else:
                p = None
            try:
                topic.pattern(p[0], "+", "#")
            except (TypeError, ValueError) as e:
                bad = "entries are topic patterns%s, got %r%s" % (
                    " or [pattern, prefix]" if kind == RULES else "",
                    r,
                    "" if p is None else " (%s)" % e,
                )
                break
            out.append(tuple(p) if kind == RULES else p[0])
        v = out
    if bad:
        raise ConfigError("%s: %s %s" % (where, name, bad))
    return v


def take(d, name, base_dir, i=None):
    """The keys of table d (SCHEMA[name], entry i of an array), each
    type-checked and checked by kind; unknown keys refused."""
    where = label(name, i)
    spec = SCHEMA[name][1]
    if not isinstance(d, dict):
        raise ConfigError("%s: must be a table, got %r" % (where, d))
    for k in d:
        if k not in spec:
            raise ConfigError(
                "%s: unknown key %r (known: %s)" % (where, k, ", ".join(sorted(spec)))
            )
    out = {}
    for k, s in spec.items():
        if k in d:
            v = d[k]
            if not isinstance(v, s.types) or isinstance(v, bool) and bool not in s.types:
                raise ConfigError("%s: %s has the wrong type (%s)" % (where, k, type(v).__name__))
            out[k] = _check(where, k, s, v, base_dir)
    return out
