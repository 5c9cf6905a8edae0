"""The bridge's configuration: one TOML file, validated with clear errors.

Every section is optional; what is missing takes the default below, so an
empty file (or none) is a valid configuration of a bridge with no links.
"""
import importlib.resources
import os
import tomllib
from dataclasses import dataclass, field

from edgebus.bridge.keystore import KeyStore, KeyStoreError
from edgebus.client.local import STATE_DIR
from edgebus.link import cipher

# The annotated example configuration, installed with the package.
EXAMPLE = os.fspath(importlib.resources.files("edgebus.bridge") / "example.toml")


# The log's group commit period (dev/bench/log_bench.py measured it: BENCHMARKS.md).
DEFAULT_COMMIT_MS = 20
# The log's queue (messages): its room up to high water is shared among the
# durable links as their windows (telemetry.py), so it is sized for a fleet:
# 65,536 gives each of 5,000 devices 8 frames ahead of its last ACK.
DEFAULT_LOG_QUEUE = 65536
LOG_QUEUE_RANGE = (64, 1048576)
MAX_COMMIT_MS = 10000
CLIENT_QUEUE = 32        # messages per feed a local socket client gets by default
MAX_CLIENT_QUEUE = 65536
# How often the log seals its active segment: what readers (Spark) can see is
# at most this old, plus the ingest job's trigger (docs/spark.md, fresh rows).
DEFAULT_SEGMENT_SECONDS = 10.0
SEALS = ("auto", "encrypt", "mac", "offer", "off")


class ConfigError(ValueError):
    """A configuration that cannot run; the message says which key and why."""


@dataclass
class Device:
    """A device joined over a serial port."""
    node: str
    port: str
    key: bytes | None          # None: the keystore holds it
    baud: int = 115200
    seal: str | None = None              # None: [bridge] seal


@dataclass
class Mqtt:
    """The MQTT broker that devices reach the bridge through."""
    url: str = "mqtt://127.0.0.1:1883"
    client_id: str = "edgebus-bridge"
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    prefix: str = "edgebus"              # frames on <prefix>/<node>/up and .../down
    keys: dict = field(default_factory=dict)   # node -> key (bytes; None: in the keystore)
    seals: dict = field(default_factory=dict)  # node -> seal, where the device sets its own
    mirror: list = field(default_factory=list)  # host-bus patterns mirrored as plain MQTT
    # Devices not in `devices` link too when the keystore holds their key
    # (`edgebus keys new`), from their first frame on: no restart, and no
    # bridge memory for a device until it comes.
    keystore: bool = False
    # One shard of several bridges on this broker: subscribe to this bridge's
    # devices' topics only (its list, and with keystore every node with a key
    # file: no arrival on a first frame, a reload takes new ones), and never
    # say "offline" on the presence topic the shards share.
    shard: bool = False


@dataclass
class Peer:
    """Another bridge joined over TCP ([[peer]]): dialled at ``connect`` or
    awaited at ``listen`` (each a (host, port)); rules as a Link's."""
    node: str
    key: bytes | None          # None: the keystore holds it
    connect: tuple | None = None
    listen: tuple | None = None
    exports: list = field(default_factory=list)
    imports: list = field(default_factory=list)
    export_calls: list = field(default_factory=list)
    import_calls: list = field(default_factory=list)
    priority: int = 0
    backoff_max: float = 10.0
    seal: str | None = None              # None: [bridge] seal


@dataclass
class Acl:
    """What a local (unix socket) user may do; patterns use + and #."""
    uid: int
    read: list = field(default_factory=list)
    write: list = field(default_factory=list)
    call: list = field(default_factory=list)
    serve: list = field(default_factory=list)


@dataclass
class Config:
    node: str = "gateway"
    state_dir: str = STATE_DIR
    keys: str | None = None              # the keystore (bridge/keystore.py); None: <state_dir>/keys
    socket: str | None = None            # unix socket for local processes and `edgebus status`
    metrics: str | None = None           # "host:port" for Prometheus /metrics
    metrics_links: int = 100             # per-link series for at most this many (trouble first)
    log_dir: str | None = None           # telemetry log; None: no log
    log_patterns: list = field(default_factory=lambda: ["dev/#"])
    segment_bytes: int = 64 * 1024 * 1024
    segment_seconds: float = DEFAULT_SEGMENT_SECONDS
    retention_bytes: int | None = None
    retention_seconds: float | None = None
    commit_ms: float = DEFAULT_COMMIT_MS    # group commit: a sync point at most this often
    log_queue: int = DEFAULT_LOG_QUEUE      # messages waiting for the log's writer, at most
    heartbeat: float = 5.0
    # Sealed sessions on every keyed link (docs/protocol.md section 17), per
    # link kind unless a [[serial]], [mqtt].devices or [[peer]] entry says:
    # "auto" (by threat: "encrypt" over MQTT and TCP, where anyone on the
    # broker or the path reads along; "mac" on a serial line), "encrypt",
    # "mac" (every frame authenticated, readable), "offer" (sealed where the
    # peer offers it: old peers link unsealed), "off".
    seal: str = "auto"
    queue_len: int = 64
    # Per local socket client (the shell commands, attach_local): how many
    # messages each of its export feeds holds while the client reads; beyond
    # it the oldest go, counted as the client's gap (the command's exit 9).
    client_queue: int = CLIENT_QUEUE
    serial: list = field(default_factory=list)   # [Device]
    mqtt: Mqtt | None = None
    acl: list = field(default_factory=list)      # [Acl]; a uid without one: nothing (but root, the bridge's own)
    peers: list = field(default_factory=list)    # [Peer]: other bridges over TCP
    # Host-bus endpoints offered to every device link, so a device can call
    # another device's action through the bridge (e.g. "dev/+/sys/config/get").
    relay_calls: list = field(default_factory=list)

    def seal_for(self, kind, own=None):
        """The seal mode of a link of ``kind`` ("serial", "mqtt", "peer")
        whose entry says ``own`` (None: the [bridge] default)."""
        s = own or self.seal
        if s == "auto":
            return "mac" if kind == "serial" else "encrypt"
        return s


def _key(d, where, store):
    """The inline key or key_file's; None when neither is given and the
    keystore holds the node's key (which overrides both anyway)."""
    if "key" in d:
        k = d["key"]
        if not isinstance(k, str) or not k:
            raise ConfigError("%s: key must be a non-empty string" % where)
        return k.encode()
    if "key_file" in d:
        try:
            with open(d["key_file"], "rb") as f:
                return f.read().strip()
        except OSError as e:
            raise ConfigError("%s: key_file %s: %s" % (where, d["key_file"], e.strerror))
    try:
        if store.read(d.get("node", "")) is not None:
            return None
    except KeyStoreError as e:
        raise ConfigError("%s: %s" % (where, e))
    raise ConfigError("%s: needs key or key_file (the device's shared key), or a key in the "
                      "keystore %s (edgebus keys new NODE)" % (where, store.path))


def _take(d, where, spec):
    """Type-check known keys of a table and refuse unknown ones."""
    for k in d:
        if k not in spec:
            raise ConfigError("%s: unknown key %r (known: %s)" % (where, k, ", ".join(sorted(spec))))
    out = {}
    for k, types in spec.items():
        if k in d:
            v = d[k]
            if not isinstance(v, types) or isinstance(v, bool) and bool not in (
                    types if isinstance(types, tuple) else (types,)):
                raise ConfigError("%s: %s has the wrong type (%s)" % (where, k, type(v).__name__))
            out[k] = v
    return out


NUM = (int, float)


def _address(v, where, name):
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("%s: %s must be host:port, got %r" % (where, name, v))
    return host.strip("[]"), int(port)


def _rules(v, where, name):
    """[(pattern, prefix)] from a list of patterns or [pattern, prefix] pairs."""
    out = []
    for r in v:
        if isinstance(r, str) and r:
            out.append((r, ""))
        elif isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r):
            out.append((r[0], r[1]))
        else:
            raise ConfigError("%s: %s entries are patterns or [pattern, prefix], got %r"
                              % (where, name, r))
    return out


def _peer(d, where, store):
    pp = _take(d, where, {"node": str, "key": str, "key_file": str, "connect": str,
                          "listen": str, "exports": list, "imports": list,
                          "export_calls": list, "import_calls": list, "priority": int,
                          "backoff_max": NUM, "seal": str})
    if "node" not in pp:
        raise ConfigError("%s: node is required (the other bridge's node id)" % where)
    if ("connect" in pp) == ("listen" in pp):
        raise ConfigError("%s: give connect (this bridge dials) or listen (the peer dials "
                          "here), not both or neither" % where)
    peer = Peer(pp["node"], _key(d, where, store), priority=pp.get("priority", 0),
                backoff_max=pp.get("backoff_max", 10.0), seal=_seal(pp, where))
    for name in ("connect", "listen"):
        if name in pp:
            setattr(peer, name, _address(pp[name], where, name))
    for name in ("exports", "imports", "export_calls", "import_calls"):
        setattr(peer, name, _rules(pp.get(name, []), where, name))
    return peer


def _seal(d, where):
    """The table's seal mode, checked (None when it names none)."""
    s = d.get("seal")
    if s is not None and s not in SEALS:
        raise ConfigError("%s: seal must be one of %s, got %r"
                          % (where, ", ".join('"%s"' % m for m in SEALS), s))
    if s == "encrypt" and cipher.BACKEND is None:
        raise ConfigError("%s: seal \"encrypt\" needs the cryptography package "
                          "(pip install cryptography)" % where)
    return s


def _keys_dir(b, base_dir):
    """The keystore directory the [bridge] table ``b`` names, resolved."""
    return os.path.normpath(os.path.join(base_dir, b.get("keys") or os.path.join(
        b.get("state_dir") or Config.state_dir, "keys")))


def parse(data, base_dir="."):
    """A Config from a parsed TOML document (a dict)."""
    top = _take(data, "config", {"bridge": dict, "log": dict, "serial": list, "mqtt": dict,
                                 "acl": list, "peer": list})
    b = _take(top.get("bridge", {}), "[bridge]", {
        "node": str, "state_dir": str, "keys": str, "socket": str, "metrics": str,
        "metrics_links": int, "heartbeat": NUM,
        "seal": str, "queue_len": int, "client_queue": int, "relay_calls": list})
    _seal(b, "[bridge]")
    if not 0 <= b.get("metrics_links", 0) <= 1000000:
        raise ConfigError("[bridge]: metrics_links must be between 0 (fleet totals only) and "
                          "1000000 links, got %r" % (b["metrics_links"],))
    if not 1 <= b.get("client_queue", CLIENT_QUEUE) <= MAX_CLIENT_QUEUE:
        raise ConfigError("[bridge]: client_queue must be between 1 and %d messages, got %r"
                          % (MAX_CLIENT_QUEUE, b["client_queue"]))
    for p in b.get("relay_calls", ()):
        if not isinstance(p, str) or not p:
            raise ConfigError("[bridge]: relay_calls must be topic patterns (strings), got %r"
                              % (p,))
    cfg = Config(**b)
    cfg.keys = _keys_dir(b, base_dir)
    store = KeyStore(cfg.keys)
    if "log" in top:
        lg = _take(top["log"], "[log]", {
            "dir": str, "patterns": list, "segment_bytes": int, "segment_seconds": NUM,
            "retention_bytes": int, "retention_seconds": NUM, "commit_ms": NUM,
            "queue": int})
        cfg.log_dir = lg.get("dir")
        c = lg.get("commit_ms", cfg.commit_ms)
        if not 0 <= c <= MAX_COMMIT_MS:
            raise ConfigError("[log]: commit_ms must be between 0 (a sync point after every "
                              "write) and %d milliseconds, got %r" % (MAX_COMMIT_MS, c))
        q = lg.get("queue", DEFAULT_LOG_QUEUE)
        if not LOG_QUEUE_RANGE[0] <= q <= LOG_QUEUE_RANGE[1]:
            raise ConfigError("[log]: queue must be between %d and %d messages, got %r"
                              % (LOG_QUEUE_RANGE + (q,)))
        cfg.log_queue = q
        for k in ("segment_bytes", "segment_seconds", "retention_bytes", "retention_seconds",
                  "commit_ms"):
            if k in lg:
                setattr(cfg, k, lg[k])
        if "patterns" in lg:
            cfg.log_patterns = lg["patterns"]
    for i, d in enumerate(top.get("serial", [])):
        where = "[[serial]] #%d" % (i + 1)
        s = _take(d, where, {"node": str, "port": str, "baud": int, "key": str, "key_file": str,
                             "seal": str})
        for k in ("node", "port"):
            if k not in s:
                raise ConfigError("%s: %s is required" % (where, k))
        cfg.serial.append(Device(s["node"], s["port"], _key(d, where, store),
                                 s.get("baud", 115200), _seal(s, where)))
    nodes = [d.node for d in cfg.serial]
    if len(set(nodes)) != len(nodes):
        raise ConfigError("[[serial]]: node ids must be unique, got %s" % nodes)
    if "mqtt" in top:
        m = _take(top["mqtt"], "[mqtt]", {
            "url": str, "client_id": str, "username": str, "password": str, "tls_ca": str,
            "prefix": str, "devices": list, "mirror": list, "keystore": bool, "shard": bool})
        mq = Mqtt(**{k: v for k, v in m.items() if k not in ("devices",)})
        if mq.shard and "client_id" not in m:
            # Shards on one broker need client ids of their own: a second
            # client with the same id would take the connection over.
            mq.client_id = "edgebus-bridge-" + cfg.node
        for i, d in enumerate(m.get("devices", [])):
            where = "[mqtt].devices #%d" % (i + 1)
            dd = _take(d, where, {"node": str, "key": str, "key_file": str, "seal": str})
            if "node" not in dd:
                raise ConfigError("%s: node is required" % where)
            mq.keys[dd["node"]] = _key(d, where, store)
            if "seal" in dd:
                mq.seals[dd["node"]] = _seal(dd, where)
        cfg.mqtt = mq
    for i, d in enumerate(top.get("peer", [])):
        cfg.peers.append(_peer(d, "[[peer]] #%d" % (i + 1), store))
    nodes = [p.node for p in cfg.peers]
    if len(set(nodes)) != len(nodes):
        raise ConfigError("[[peer]]: node ids must be unique, got %s" % nodes)
    for i, a in enumerate(top.get("acl", [])):
        where = "[[acl]] #%d" % (i + 1)
        aa = _take(a, where, {"uid": int, "read": list, "write": list, "call": list,
                              "serve": list})
        if "uid" not in aa:
            raise ConfigError("%s: uid is required" % where)
        cfg.acl.append(Acl(**aa))
    for name in ("state_dir", "socket", "log_dir"):
        v = getattr(cfg, name)
        if v is not None and not os.path.isabs(v):
            setattr(cfg, name, os.path.normpath(os.path.join(base_dir, v)))
    if cfg.metrics is not None:
        host, _, port = cfg.metrics.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("[bridge]: metrics must be host:port, got %r" % cfg.metrics)
    return cfg


def _read(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError("%s: %s" % (path, e.strerror))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("%s: not valid TOML: %s" % (path, e))


def load(path):
    """A Config from a TOML file; ConfigError with the file named on any problem."""
    data = _read(path)
    try:
        return parse(data, os.path.dirname(os.path.abspath(path)))
    except ConfigError as e:
        raise ConfigError("%s: %s" % (path, e))


def keystore_dir(path):
    """The keystore directory of the configuration at ``path``, read without
    the rest of it (whose devices may still lack their keys)."""
    b = _read(path).get("bridge", {})
    if not isinstance(b, dict) or not isinstance(b.get("keys", ""), str) \
            or not isinstance(b.get("state_dir", ""), str):
        raise ConfigError("%s: [bridge]: keys and state_dir must be strings" % path)
    return _keys_dir(b, os.path.dirname(os.path.abspath(path)))

