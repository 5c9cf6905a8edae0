"""`edgebus keys`: device keys (docs/bridge.md, "Keys: provisioning and rotation").

rotate NODE: the running bridge gives the device a new key over its session
(bridge/rotation.py); new NODE: a key for a new device, into the keystore and
the device's config.json; list: what the keystore holds (never the keys)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.keystore import KeyStore, KeyStoreError, new_key
from edgebus.bridge.rotation import DEVICE_TIMEOUT, ROTATE
from edgebus.link.handshake import kid
from edgebus.tools.boardkit import devicefiles
from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse

    from edgebus.bridge.keystore import KeyStore

UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """Seconds from "90", "90s", "15m", "24h" or "7d" (argparse type)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not m:
        raise ValueError("a duration is a number with s, m, h or d after it, e.g. 24h")
    return float(m.group(1)) * UNITS[m.group(2)]


duration.__name__ = "duration"  # argparse names the type in its error


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    r = sub.add_parser("rotate", help="give NODE a new key over its session with the bridge")
    r.add_argument("node")
    r.add_argument(
        "--grace",
        type=duration,
        default=86400.0,
        help="how long the bridge still accepts the old key: 90s, 15m, 24h, 7d (default 24h)",
    )
    r.add_argument(
        "--timeout",
        "-t",
        type=float,
        default=DEVICE_TIMEOUT,
        help="seconds for each of the device's answers (%(default)s)",
    )
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    bc.add_socket(r)
    n = sub.add_parser("new", help="make the key of a new device")
    n.add_argument("node")
    n.add_argument(
        "--device-config",
        metavar="FILE",
        help="write the key into this device config.json (made from the example when missing)",
    )
    n.add_argument("--force", action="store_true", help="replace a key the keystore holds")
    _where(n)
    ls = sub.add_parser("list", help="the keystore's nodes, key ids, ages, previous keys")
    ls.add_argument("--json", action="store_true")
    _where(ls)


def _where(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keys",
        metavar="DIR",
        help="the keystore directory (default: the "
        "configuration's [bridge] keys, else %s)"
        % os.path.join(bridge_config.Config.state_dir, "keys"),
    )
    p.add_argument("--config", "-c", help="the bridge's configuration, for its keystore")


def _store(args: argparse.Namespace) -> KeyStore:
    return store_at(args.keys, args.config)


def store_at(keys: str | None, config: str | None) -> KeyStore:
    """The keystore: the directory keys, else the bridge configuration's, else the default."""
    if keys:
        return KeyStore(keys)
    if config:
        try:
            return KeyStore(bridge_config.keystore_dir(config))
        except bridge_config.ConfigError as e:
            raise bc.Fail(2, str(e)) from None
    return KeyStore(os.path.join(bridge_config.Config.state_dir, "keys"))


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


async def rotate(args: argparse.Namespace) -> None:
    q = {"node": args.node, "grace": args.grace, "timeout": args.timeout}
    try:
        async with bc.Session(bc.socket_path(args), route="dev/" + args.node) as s:
            r = await s.call(ROTATE, q, 2 * args.timeout + bc.ROUTE_WAIT)
    except bc.Fail as e:
        if args.json:
            bc.emit(json.dumps({"node": args.node, "ok": False, "error": str(e)}))
        raise
    if args.json:
        bc.emit(json.dumps(dict(r, ok=True)))
    else:
        bc.emit(
            "%s: new key kid %s; the old key (kid %s) is accepted until %s"
            % (r["node"], r["kid"], r["old_kid"], _when(r["old_until"]))
        )


def _device_config(path: str, node: str, key: str, force: bool) -> bool:
    """path's device config with key set (the example's when path is missing)."""
    src = (
        path
        if os.path.exists(path)
        else os.path.join(devicefiles.FIRMWARE_DIR, "config.example.json")
    )
    try:
        with open(src) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise bc.Fail(1, "%s: %s" % (src, e)) from None
    if src != path:
        cfg["node"] = node
    elif cfg.get("node") != node and not force:
        raise bc.Fail(
            1,
            "%s is the config of node %r, not %r (--force writes it anyway)"
            % (path, cfg.get("node"), node),
        )
    cfg["key"] = key
    write_secret(path, (json.dumps(cfg, indent=2) + "\n").encode())
    return src == path


def write_secret(path: str, data: bytes) -> None:
    """path holds data, written atomically and readable by its owner only
    (a device config holds the device's key)."""

    tlog.write_atomically(
        path, "%s.%d.tmp" % (path, os.getpid()), lambda f: f.write(data), mode=0o600
    )


def held(store: KeyStore, node: str, force: bool) -> str | None:
    """The kid of the key the keystore holds for node (None: none); bc.Fail
    when it holds one (or an unreadable file) and not force, or when node
    cannot name a key file (forced or not)."""
    store.file(node)
    try:
        old = store.read(node)
    except KeyStoreError as e:
        if not force:
            raise bc.Fail(1, "%s (--force replaces it)" % e) from None
        return "(unreadable)"
    if old is not None and not force:
        raise bc.Fail(
            1,
            "%s already has a key (kid %s) in %s; --force replaces it, and the "
            "device must get the new one too" % (node, kid(old["key"].encode()), store.path),
        )
    return None if old is None else kid(old["key"].encode())


def new(args: argparse.Namespace) -> None:
    store = _store(args)
    held(store, args.node, args.force)
    key = new_key()
    store.issue(args.node, key)
    k = kid(key.encode())
    print("%s: new key kid %s in %s" % (args.node, k, store.file(args.node)))
    if args.device_config:
        updated = _device_config(args.device_config, args.node, key, args.force)
        print(
            "%s %s with it; next: deploy it to the device (edgebus deploy --config %s)%s"
            % (
                "updated" if updated else "wrote",
                args.device_config,
                args.device_config,
                "" if updated else ", after setting its board and uplink",
            )
        )
    else:
        print(
            'the device\'s config.json needs "key": "%s" (or run again with '
            "--device-config FILE --force)" % key
        )
    print(
        "then list %s in the bridge's configuration ([[serial]] or [mqtt].devices, no key "
        "needed there: the keystore holds it) and reload the bridge (edgebus devices reload), "
        "unless [mqtt] keystore = true takes it as it is" % args.node
    )


def listing(args: argparse.Namespace) -> None:
    store = _store(args)
    now = time.time()
    rows: list[dict[str, Any]] = []
    for node in store.nodes():
        try:
            rec = store.read(node)
        except KeyStoreError as e:
            rows.append({"node": node, "error": str(e)})
            continue
        if rec is None:  # its file went meanwhile
            continue
        rows.append(
            {
                "node": node,
                "kid": kid(rec["key"].encode()),
                "since": rec.get("since"),
                "pending": [kid(e["key"].encode()) for e in rec.get("pending", [])],
                "previous": [
                    {
                        "kid": kid(e["key"].encode()),
                        "until": e.get("until"),
                        "expired": e.get("until", 0) <= now,
                    }
                    for e in rec.get("previous", [])
                ],
            }
        )
    if args.json:
        print(json.dumps(rows))
        return
    if not rows:
        print("no keys in %s" % store.path)
    for r in rows:
        if "error" in r:
            print("%-20s ERROR %s" % (r["node"], r["error"]))
            continue
        age = "%.1f d" % ((now - r["since"]) / 86400) if r.get("since") else "?"
        prev = ", ".join(
            "%s until %s%s" % (p["kid"], _when(p["until"]), " (expired)" if p["expired"] else "")
            for p in r["previous"]
        )
        print(
            "%-20s kid %s  age %s%s%s"
            % (
                r["node"],
                r["kid"],
                age,
                "  pending: " + ", ".join(r["pending"]) if r["pending"] else "",
                "  previous: " + prev if prev else "",
            )
        )


def run(args: argparse.Namespace) -> int:
    if args.action == "rotate":
        return bc.main("keys rotate", rotate(args))
    try:
        (new if args.action == "new" else listing)(args)
    except bc.Fail as e:
        print("edgebus keys %s: %s" % (args.action, e), file=sys.stderr)
        return e.code
    except (OSError, KeyStoreError) as e:
        print("edgebus keys %s: %s" % (args.action, e), file=sys.stderr)
        return 1
    return 0
