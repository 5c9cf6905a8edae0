"""The bridge's configuration: one TOML file, validated with clear errors.

Every section is optional; what is missing takes the default below, so an
empty file (or none) is a valid configuration of a bridge with no links.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import tempfile
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgebus import topic
from edgebus.bridge.keystore import KeyStore, KeyStoreError
from edgebus.bridge.schema import SEALS, TOP, ConfigError, address, label  # noqa: F401 (SEALS, ConfigError: this module's API too)
from edgebus.bridge.schema_check import take
from edgebus.client.local import STATE_DIR
from edgebus.link import cipher
from edgebus.tlog import LogError

if TYPE_CHECKING:
    from typing import Iterator

# The annotated example configuration, installed with the package.
EXAMPLE = str(importlib.resources.files("edgebus.bridge") / "example.toml")


# The log's group commit period (dev/bench/log_bench.py measured it: BENCHMARKS.md).
DEFAULT_COMMIT_MS = 20
# The log's queue (messages): its room up to high water is shared among the
# durable links as their windows (flow.py), so it is sized for a fleet:
# 65,536 gives each of 5,000 devices 8 frames ahead of its last ACK.
DEFAULT_LOG_QUEUE = 65536
CLIENT_QUEUE = 32  # messages per feed a local socket client gets by default
# How often the log seals its active segment: what readers (Spark) can see is
# at most this old, plus the ingest job's trigger (docs/spark.md, fresh rows).
DEFAULT_SEGMENT_SECONDS = 10.0


@dataclass
class Device:
    """A device joined over a serial port."""

    node: str
    port: str
    key: bytes | None  # None: the keystore holds it
    baud: int = 115200
    seal: str | None = None  # None: [bridge] seal
    paced: bool | None = None  # None: [bridge] paced


@dataclass
class Mqtt:
    """The MQTT broker that devices reach the bridge through."""

    url: str = "mqtt://127.0.0.1:1883"
    client_id: str = "edgebus-bridge"
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    prefix: str = "edgebus"  # frames on <prefix>/<node>/up and .../down
    keys: dict = field(default_factory=dict)  # node -> key (bytes; None: in the keystore)
    seals: dict = field(default_factory=dict)  # node -> seal, where the device sets its own
    paced: dict = field(default_factory=dict)  # node -> paced, where the device sets its own
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
    # (i, n): this process is worker i of n (bridge/split.py), holding the
    # devices that hash to it, from the keystore too; None: every device.
    part: tuple | None = None


@dataclass
class Peer:
    """Another bridge joined over TCP ([[peer]]): dialled at ``connect`` or
    awaited at ``listen`` (each a (host, port)); rules as a Link's."""

    node: str
    key: bytes | None  # None: the keystore holds it
    connect: tuple | None = None
    listen: tuple | None = None
    exports: list = field(default_factory=list)
    imports: list = field(default_factory=list)
    export_calls: list = field(default_factory=list)
    import_calls: list = field(default_factory=list)
    priority: int = 0
    backoff_max: float = 10.0
    seal: str | None = None  # None: [bridge] seal
    paced: bool | None = None  # None: [bridge] paced
    # devices (node patterns, + and #) whose identity this peer's relayed
    # readings may carry into the log (bridge/links/relay.py); none: its own
    relays: list = field(default_factory=list)


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
    keys: str | None = None  # the keystore (bridge/keystore.py); None: <state_dir>/keys
    socket: str | None = None  # unix socket for local processes and `edgebus status`
    metrics: str | None = None  # "host:port" for Prometheus /metrics
    metrics_links: int = 100  # per-link series for at most this many (trouble first)
    log_dir: str | None = None  # telemetry log; None: no log
    log_patterns: list = field(default_factory=lambda: ["dev/#"])
    segment_bytes: int = 64 * 1024 * 1024
    segment_seconds: float = DEFAULT_SEGMENT_SECONDS
    retention_bytes: int | None = None
    retention_seconds: float | None = None
    # The log warns (a line, status, metrics) while its disk has fewer bytes
    # free; None: 4 segments' worth, room to seal and start anew; 0: never.
    min_free_bytes: int | None = None
    commit_ms: float = DEFAULT_COMMIT_MS  # group commit: a sync point at most this often
    log_queue: int = DEFAULT_LOG_QUEUE  # messages waiting for the log's writer, at most
    heartbeat: float = 5.0
    # Sealed sessions on every keyed link (docs/protocol.md section 17), per
    # link kind unless a [[serial]], [mqtt].devices or [[peer]] entry says:
    # "auto" (by threat: "encrypt" over MQTT and TCP, where anyone on the
    # broker or the path reads along; "mac" on a serial line), "encrypt",
    # "mac" (every frame authenticated, readable), "offer" (sealed where the
    # peer offers it: old peers link unsealed), "off".
    seal: str = "auto"
    # Device and [[peer]] links refuse a peer that does not offer
    # acknowledgements and a send window (one such device slowed every other
    # 100x), unless this or its entry's `paced` is false.
    paced: bool = True
    # [quota] (bridge/links/quota.py): per device, readings a second it may take
    # (sustained; a bucket of quota_burst seconds' worth), bytes of numbered
    # frames a second likewise (a device of few but large readings; times 3,600:
    # the most it adds to the log in an hour), and retained facts.
    quota_readings: float = 1000.0
    quota_bytes: int = 262144  # 256 KiB/s: a sensor sends ~2 KB/s (20 readings of ~100 B)
    quota_burst: float = 10.0
    quota_retained: int = 1000
    # an MQTT device that floods goes unread for a while (bridge/links/quota.py Mutes)
    quota_mute: bool = True
    queue_len: int = 64
    # Per local socket client (the shell commands, attach_local): how many
    # messages each of its export feeds holds while the client reads; beyond
    # it the oldest go, counted as the client's gap (the command's exit 9).
    client_queue: int = CLIENT_QUEUE
    serial: list = field(default_factory=list)  # [Device]
    mqtt: Mqtt | None = None
    acl: list = field(
        default_factory=list
    )  # [Acl]; a uid without one: nothing (but root, the bridge's own)
    peers: list = field(default_factory=list)  # [Peer]: other bridges over TCP
    # Host-bus endpoints offered to every device link, so a device can call
    # another device's action through the bridge (e.g. "dev/+/sys/config/get").
    relay_calls: list = field(default_factory=list)
    # [mailbox] (bridge/mailbox.py): calls held for a device asleep, per
    # device at most mailbox_entries calls and mailbox_bytes of JSON requests,
    # each for mailbox_expiry s; a device not back mailbox_margin s after its
    # announced wake is reported down again (overslept).
    mailbox_entries: int = 16
    mailbox_bytes: int = 16384
    mailbox_expiry: float = 86400.0
    mailbox_margin: float = 60.0
    # Processes the MQTT fleet is split among (bridge/split.py, workers.py);
    # ``worker``: which of them this process is (None: the only one, or the
    # supervisor). Set by the supervisor's command line, never by the file.
    workers: int = 1
    worker: int | None = None
    # A worker whose event loop shows no sign of life this long is killed and
    # started again (bridge/workers.py).
    worker_hang: float = 30.0

    def paced_for(self, own: bool | None = None) -> bool:
        """Whether a device or peer link whose entry says ``own`` (None: the
        [bridge] default) refuses a peer without acknowledgements and a window."""
        return self.paced if own is None else own

    def seal_for(self, kind: str, own: str | None = None) -> str:
        """The seal mode of a link of ``kind`` ("serial", "mqtt", "peer")
        whose entry says ``own`` (None: the [bridge] default)."""
        s = own or self.seal
        if s == "auto":
            return "mac" if kind == "serial" else "encrypt"
        return s


def _key(d: dict[str, Any], where: str, store: KeyStore) -> bytes | None:
    """The inline key or key_file's; None when neither is given and the
    keystore holds the node's key (which overrides both anyway)."""
    if "key" in d:
        return d["key"].encode()
    if "key_file" in d:
        try:
            with open(d["key_file"], "rb") as f:
                return f.read().strip()
        except OSError as e:
            raise ConfigError("%s: key_file %s: %s" % (where, d["key_file"], e.strerror)) from None
    try:
        if store.read(d.get("node", "")) is not None:
            return None
    except KeyStoreError as e:
        raise ConfigError("%s: %s" % (where, e)) from None
    raise ConfigError(
        "%s: needs key or key_file (the device's shared key), or a key in the "
        "keystore %s (edgebus keys new NODE)" % (where, store.path)
    )


def _peer(d: Any, i: int, store: KeyStore, base_dir: str) -> Peer:
    where = label("peer", i)
    pp = take(d, "peer", base_dir, i)
    if "node" not in pp:
        raise ConfigError("%s: node is required (the other bridge's node id)" % where)
    if ("connect" in pp) == ("listen" in pp):
        raise ConfigError(
            "%s: give connect (this bridge dials) or listen (the peer dials "
            "here), not both or neither" % where
        )
    peer = Peer(
        pp["node"],
        _key(pp, where, store),
        priority=pp.get("priority", 0),
        backoff_max=pp.get("backoff_max", 10.0),
        seal=_seal(pp, where),
        paced=pp.get("paced"),
    )
    for name in ("connect", "listen"):
        if name in pp:
            setattr(peer, name, address(pp[name]))
    for name in ("exports", "imports", "export_calls", "import_calls", "relays"):
        if name in pp:
            setattr(peer, name, pp[name])
    return peer


def _seal(d: dict[str, Any], where: str) -> str | None:
    """The table's seal mode (None when it names none); one the runtime can make."""
    s = d.get("seal")
    if s == "encrypt" and cipher.BACKEND is None:
        raise ConfigError(
            '%s: seal "encrypt" needs the cryptography package (pip install cryptography)' % where
        )
    return s


def _keys_dir(b: dict[str, Any], base_dir: str) -> str:
    """The keystore directory the [bridge] table ``b`` names, resolved."""
    return os.path.normpath(
        os.path.join(
            base_dir, b.get("keys") or os.path.join(b.get("state_dir") or Config.state_dir, "keys")
        )
    )


def _nodes_unique(items: list[Any], name: str) -> None:
    nodes = [x.node for x in items]
    if len(set(nodes)) != len(nodes):
        raise ConfigError("%s: node ids must be unique, got %s" % (label(name), nodes))


# [log] key -> the Config attribute it sets.
_LOG = {
    "dir": "log_dir",
    "patterns": "log_patterns",
    "queue": "log_queue",
    "segment_bytes": "segment_bytes",
    "segment_seconds": "segment_seconds",
    "retention_bytes": "retention_bytes",
    "retention_seconds": "retention_seconds",
    "min_free_bytes": "min_free_bytes",
    "commit_ms": "commit_ms",
}


def _check_tables(top: dict[str, Any]) -> None:
    """Refuse an unknown top-level table, or one of the wrong shape."""
    for k, v in top.items():
        if k not in TOP:
            raise ConfigError("config: unknown table %r (known: %s)" % (k, ", ".join(sorted(TOP))))
        if not isinstance(v, TOP[k]):
            raise ConfigError(
                "%s: must be %s"
                % (label(k), "an array of tables ([[%s]])" % k if TOP[k] is list else "a table")
            )


def _device(d: Any, i: int, store: KeyStore, base_dir: str) -> Device:
    """The [[serial]] entry number i."""
    s = take(d, "serial", base_dir, i)
    where = label("serial", i)
    for k in ("node", "port"):
        if k not in s:
            raise ConfigError("%s: %s is required" % (where, k))
    return Device(
        s["node"],
        s["port"],
        _key(s, where, store),
        s.get("baud", 115200),
        _seal(s, where),
        s.get("paced"),
    )


def _mqtt(d: Any, node: str, store: KeyStore, base_dir: str) -> Mqtt:
    """The [mqtt] table of the bridge ``node``, with its devices' keys and seals."""
    m = take(d, "mqtt", base_dir)
    mq = Mqtt(**{k: v for k, v in m.items() if k not in ("devices",)})
    if mq.shard and "client_id" not in m:
        # Shards on one broker need client ids of their own: a second
        # client with the same id would take the connection over.
        mq.client_id = "edgebus-bridge-" + node
    for i, dev in enumerate(m.get("devices", [])):
        where = label("mqtt.devices", i)
        dd = take(dev, "mqtt.devices", base_dir, i)
        if "node" not in dd:
            raise ConfigError("%s: node is required" % where)
        mq.keys[dd["node"]] = _key(dd, where, store)
        if "seal" in dd:
            mq.seals[dd["node"]] = _seal(dd, where)
        if "paced" in dd:
            mq.paced[dd["node"]] = dd["paced"]
    return mq


# A device's endpoints that change its code or its key: only the bridge calls
# them (edgebus ota, edgebus keys rotate), never another device through a relay.
PRIVATE_CALLS = ("sys/ota/op", "sys/key/set")


def _relay_safe(patterns: list[str]) -> None:
    """Refuse relay_calls that would let one device call another's PRIVATE_CALLS."""
    for p in patterns:
        pk = topic.pattern(p, "+", "#")[1]
        node = pk[1] if len(pk) > 1 and isinstance(pk[1], str) else "x"
        for c in PRIVATE_CALLS:
            if topic.matches(pk, topic.key("dev/%s/%s" % (node, c))):
                raise ConfigError(
                    "[bridge] relay_calls: %r would let a device call another device's %s "
                    "(its code or its key: only the bridge may); list the actions to relay, "
                    "e.g. dev/+/sys/config/get" % (p, c)
                )


def parse(data: dict[str, Any], base_dir: str = ".") -> Config:
    """A Config from a parsed TOML document (a dict); paths resolved against base_dir."""
    top = data
    _check_tables(top)
    b = take(top.get("bridge", {}), "bridge", base_dir)
    _seal(b, "[bridge]")
    cfg = Config(**b)
    _relay_safe(cfg.relay_calls)
    cfg.keys = _keys_dir(b, base_dir)
    cfg.state_dir = os.path.normpath(os.path.join(base_dir, cfg.state_dir))
    store = KeyStore(cfg.keys)
    if "log" in top:
        for k, v in take(top["log"], "log", base_dir).items():
            setattr(cfg, _LOG[k], v)
    for k, v in take(top.get("mailbox", {}), "mailbox", base_dir).items():
        setattr(cfg, "mailbox_" + k, v)
    for k, v in take(top.get("quota", {}), "quota", base_dir).items():
        setattr(cfg, "quota_" + k, v)
    for i, d in enumerate(top.get("serial", [])):
        cfg.serial.append(_device(d, i, store, base_dir))
    _nodes_unique(cfg.serial, "serial")
    if "mqtt" in top:
        cfg.mqtt = _mqtt(top["mqtt"], cfg.node, store, base_dir)
    for i, d in enumerate(top.get("peer", [])):
        cfg.peers.append(_peer(d, i, store, base_dir))
    _nodes_unique(cfg.peers, "peer")
    for i, a in enumerate(top.get("acl", [])):
        aa = take(a, "acl", base_dir, i)
        if "uid" not in aa:
            raise ConfigError("%s: uid is required" % label("acl", i))
        cfg.acl.append(Acl(**aa))
    workers(cfg, cfg.workers)
    return cfg


def workers(cfg: Config, n: int) -> Config:
    """cfg run as ``n`` worker processes (bridge/split.py); ConfigError
    where it cannot be: they split the [mqtt] devices, so one is needed."""
    if n > 1 and cfg.mqtt is None:
        raise ConfigError(
            "[bridge] workers = %d: workers split the [mqtt] devices, and this "
            "configuration has no [mqtt] (serial ports and peers are one process's)" % n
        )
    cfg.workers = n
    return cfg


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError("%s: %s" % (path, e.strerror)) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("%s: not valid TOML: %s" % (path, e)) from None
    except RecursionError:  # tomllib recurses per level of nesting
        raise ConfigError("%s: not valid TOML: nested too deeply" % path) from None


def load(path: str, n: int | None = None) -> Config:
    """A Config from a TOML file; ConfigError with the file named on any
    problem. ``n``: run as that many workers whatever the file says (a
    worker's own part of it: split.load)."""
    data = _read(path)
    try:
        cfg = parse(data, os.path.dirname(os.path.abspath(path)))
        if n is not None:
            workers(cfg, n)
    except ConfigError as e:
        raise ConfigError("%s: %s" % (path, e)) from None
    return cfg


@contextlib.contextmanager
def blame(where: str, key: str, value: Any, what: str) -> Iterator[None]:
    """Turn what a step of the bridge's start raises over this key's value
    (a directory it cannot make, an address it cannot bind, a log another
    writer holds) into the ConfigError that names it: "WHERE: KEY VALUE: WHAT: why"."""
    try:
        yield
    except (OSError, ValueError, LogError) as e:
        raise ConfigError(
            "%s: %s %s: %s: %s" % (where, key, value, what, getattr(e, "strerror", None) or e)
        ) from None


def prepare(cfg: Config) -> None:
    """Make the directories cfg names and prove the bridge can write in them
    and read its files (the daemon's first step; a tool that reads a
    configuration makes nothing): ConfigError naming the key otherwise."""
    made = [
        ("[bridge]", "state_dir", cfg.state_dir, cfg.state_dir, None),
        ("[bridge]", "keys", cfg.keys, cfg.keys, 0o700),
        ("[log]", "dir", cfg.log_dir, cfg.log_dir, None),
        ("[bridge]", "socket", cfg.socket, cfg.socket and os.path.dirname(cfg.socket), None),
    ]
    for where, key, value, d, mode in made:
        if d is None:  # the key is not set
            continue
        with blame(where, key, value, "cannot make it or write in it"):
            os.makedirs(d, **({} if mode is None else {"mode": mode}), exist_ok=True)
            with tempfile.TemporaryFile(dir=d):  # can write there (a read-only mount: no)
                pass
    if cfg.mqtt is not None and cfg.mqtt.tls_ca:
        with blame("[mqtt]", "tls_ca", cfg.mqtt.tls_ca, "cannot read it"):
            with open(cfg.mqtt.tls_ca, "rb"):
                pass


def keystore_dir(path: str) -> str:
    """The keystore directory of the configuration at ``path``, read without
    the rest of it (whose devices may still lack their keys)."""
    b = _read(path).get("bridge", {})
    if (
        not isinstance(b, dict)
        or not isinstance(b.get("keys", ""), str)
        or not isinstance(b.get("state_dir", ""), str)
    ):
        raise ConfigError("%s: [bridge]: keys and state_dir must be strings" % path)
    return _keys_dir(b, os.path.dirname(os.path.abspath(path)))
