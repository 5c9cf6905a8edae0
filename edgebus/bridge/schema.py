"""The bridge configuration's schema: every table, every key it takes and
what its value must be, in one table (SCHEMA) that the JSON Schema is made
from (schema_doc), parsing checks against (schema_check) and tests walk
(tests/host/bridge/test_bridge_config.py); and each kind's own check."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from edgebus import topic

if TYPE_CHECKING:
    from typing import Callable

    # A kind's check: (the value the table keeps, why it is refused or None).
    Checked = tuple[Any, str | None]

LOG_QUEUE_RANGE = (64, 1048576)
MAX_COMMIT_MS = 10000
MAX_CLIENT_QUEUE = 65536
SEALS = ("auto", "encrypt", "mac", "offer", "off")
MAX_WORKERS = 64  # [bridge] workers: processes (bridge/split.py)


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key and why."""


class Key:
    """One key of a table: the types it takes and the kind of value it holds,
    which says what parse checks (and what a test feeds it to see it refused)."""

    def __init__(
        self,
        types: type | tuple[type, ...],
        kind: str | None = None,
        lo: float | None = None,
        hi: float | None = None,
        unit: str = "",
        note: str = "",
        choices: tuple[str, ...] = (),
    ) -> None:
        self.types = types if isinstance(types, tuple) else (types,)
        self.kind = kind
        self.lo, self.hi = lo, hi  # RANGE: the bounds, both included
        self.unit, self.note = unit, note  # RANGE: words for the error
        self.choices = choices  # CHOICE


NUM = (int, float)
# The kinds of value (Key.kind); None: any value of the key's types.
TEXT = "text"  # a non-empty string
NODE = "node"  # a node id: a topic level (no "/", "+", "#" or NUL)
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
# a link's own word on pacing (docs/protocol.md section 11): false lets a peer
# without acknowledgements and a send window link
_PACED = {"paced": Key(bool)}

# Every table of the configuration and every key it takes; the label is how
# errors name it (an array's entries add " #N").
SCHEMA = {
    "bridge": (
        "[bridge]",
        {
            "node": Key(str, NODE),
            "state_dir": Key(str, DIR),
            "keys": Key(str, DIR),
            "socket": Key(str, SOCKET),
            "metrics": Key(str, ADDRESS),
            "metrics_links": Key(int, RANGE, 0, 1000000, " links", " (0: fleet totals only)"),
            "heartbeat": Key(NUM, RANGE, 0.05, 3600, " seconds"),
            **_SEAL,
            **_PACED,
            "queue_len": Key(int, RANGE, 1, 1048576, " messages"),
            "client_queue": Key(int, RANGE, 1, MAX_CLIENT_QUEUE, " messages"),
            "relay_calls": Key(list, PATTERNS),
            "workers": Key(int, RANGE, 1, MAX_WORKERS, " processes"),
            "worker_hang": Key(NUM, RANGE, 2, 3600, " seconds"),
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
            "min_free_bytes": Key(int, RANGE, 0, 1 << 60, " bytes", " (0: no warning)"),
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
            "node": Key(str, NODE),
            "port": Key(str, TEXT),
            "baud": Key(int, RANGE, 50, 20000000, " bits a second"),
            **_KEY,
            **_SEAL,
            **_PACED,
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
    "mqtt.devices": ("[mqtt].devices", {"node": Key(str, NODE), **_KEY, **_SEAL, **_PACED}),
    "peer": (
        "[[peer]]",
        {
            "node": Key(str, NODE),
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
            **_PACED,
            "relays": Key(list, PATTERNS),
        },
    ),
    # what one device may take of the bridge (bridge/links/quota.py)
    "quota": (
        "[quota]",
        {
            "readings": Key(NUM, RANGE, 1, 10000000, " readings a second"),
            "bytes": Key(int, RANGE, 1024, 1 << 30, " bytes a second"),
            "burst": Key(NUM, RANGE, 1, 3600, " seconds"),
            "retained": Key(int, RANGE, 0, 10000000, " facts", " (0: none)"),
            "mute": Key(bool),
        },
    ),
    # held calls for devices asleep (bridge/mailbox.py)
    "mailbox": (
        "[mailbox]",
        {
            "entries": Key(int, RANGE, 0, 100000, " calls", " (0: no mailbox)"),
            "bytes": Key(int, RANGE, 0, 1 << 30, " bytes"),
            "expiry": Key(NUM, RANGE, 1, 365 * 86400, " seconds"),
            "margin": Key(NUM, RANGE, 0, 86400, " seconds"),
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


# Each top-level table and what it must be: a table, or an array of tables.
TOP: dict[str, type] = {
    "acl": list,
    "bridge": dict,
    "log": dict,
    "mailbox": dict,
    "mqtt": dict,
    "peer": list,
    "quota": dict,
    "serial": list,
}


def label(name: str, i: int | None = None) -> str:
    """How errors name table ``name`` of SCHEMA (an array's entry: number i)."""
    label = SCHEMA[name][0]
    return label if i is None else "%s #%d" % (label, i + 1)


def _not_dir(path: str) -> str | None:
    """Why a directory cannot be made at path, or None: it is one, or the
    nearest part of it that exists is. Whether the bridge may write in it is
    prepare()'s to find (tools read a configuration without writing)."""
    p = path
    while not os.path.exists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        return "%s is not a directory" % p
    return None


def address(v: str) -> tuple[str, int] | None:
    """(host, port) of "host:port" ("[::1]:port" too), or None."""
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def _range(spec: Key, v: float, base_dir: str) -> Checked:
    assert spec.lo is not None and spec.hi is not None  # a RANGE key has both bounds
    if spec.lo <= v <= spec.hi:  # false for nan too
        return v, None
    return v, "must be between %r and %r%s%s, got %r" % (spec.lo, spec.hi, spec.unit, spec.note, v)


def _choice(spec: Key, v: str, base_dir: str) -> Checked:
    if v in spec.choices:
        return v, None
    return v, "must be one of %s, got %r" % (", ".join('"%s"' % c for c in spec.choices), v)


def _path(spec: Key, v: str, base_dir: str) -> Checked:
    """A DIR or SOCKET path, resolved: refused when the bridge could not make it."""
    v = os.path.normpath(os.path.join(base_dir, v))
    if spec.kind == DIR:
        why = _not_dir(v)
    elif os.path.isdir(v):
        why = "%s is a directory" % v
    elif len(os.fsencode(v)) > SOCKET_PATH_MAX:
        why = "%s is longer than a unix socket's %d bytes" % (v, SOCKET_PATH_MAX)
    else:
        why = _not_dir(os.path.dirname(v))
    return v, None if why is None else "%r cannot be made: %s" % (v, why)


def _address(spec: Key, v: str, base_dir: str) -> Checked:
    if address(v) is not None:
        return v, None
    return v, "must be host:port, got %r" % (v,)


def _url(spec: Key, v: str, base_dir: str) -> Checked:
    u = urlparse(v)
    try:
        port = u.port
    except ValueError:
        port = 0
    if u.scheme in ("mqtt", "mqtts") and u.hostname and port != 0:
        return v, None
    return v, "must be mqtt://host[:port] or mqtts://host[:port], got %r" % (v,)


def _node(spec: Key, v: str, base_dir: str) -> Checked:
    # A node id is one level of topics (dev/<node>/..., edgebus/<node>/...) on the
    # bus and the broker: a separator or a wildcard would reach other nodes' topics.
    if any(c in v for c in "/+#\x00"):
        return v, "must be one topic level, without '/', '+', '#' or NUL, got %r" % (v,)
    return v, None


def _tables(spec: Key, v: list[Any], base_dir: str) -> Checked:
    if all(isinstance(t, dict) for t in v):
        return v, None
    return v, "entries are tables ({key = value, ...}), got %r" % (v,)


def _rule(r: Any, pairs: bool) -> tuple[str, str] | None:
    """(pattern, prefix) of an entry: a pattern (prefix ""), or with pairs a
    [pattern, prefix] pair; None when it is neither."""
    if pairs and isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r):
        return r[0], r[1]
    if isinstance(r, str):
        return r, ""
    return None


def _patterns(spec: Key, v: list[Any], base_dir: str) -> Checked:
    """PATTERNS as a list of patterns, RULES as (pattern, prefix) pairs."""
    pairs = spec.kind == RULES
    what = "entries are topic patterns%s, got %%r%%s" % (" or [pattern, prefix]" if pairs else "")
    out: list[Any] = []
    for r in v:
        p = _rule(r, pairs)
        if p is None:
            return v, what % (r, "")
        try:
            topic.pattern(p[0], "+", "#")
        except (TypeError, ValueError) as e:
            return v, what % (r, " (%s)" % e)
        out.append(p if pairs else p[0])
    return out, None


# Each kind's check (a kind not here takes any value of its key's types).
_CHECKS: dict[str, Callable[[Key, Any, str], Checked]] = {
    RANGE: _range,
    NODE: _node,
    CHOICE: _choice,
    DIR: _path,
    SOCKET: _path,
    ADDRESS: _address,
    URL: _url,
    TABLES: _tables,
    PATTERNS: _patterns,
    RULES: _patterns,
}
# The kinds whose value must not be empty (checked before the kind's check).
_NOT_EMPTY = (TEXT, NODE, DIR, SOCKET, FILE, URL, ADDRESS)


def check(where: str, name: str, spec: Key, v: Any, base_dir: str) -> Any:
    """v as key ``name`` of a table keeps it: checked against spec, a path
    resolved against base_dir; ConfigError naming where and name otherwise."""
    bad: str | None = None
    if spec.kind in _NOT_EMPTY and not v:
        bad = "must not be empty"
    elif spec.kind in _CHECKS:
        v, bad = _CHECKS[spec.kind](spec, v, base_dir)
    if bad:
        raise ConfigError("%s: %s %s" % (where, name, bad))
    return v
