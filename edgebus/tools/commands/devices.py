"""`edgebus devices`: the MQTT devices of running bridges (docs/bridge.md, "Running
10,000 devices on one or several bridges").

reload: the bridge reads its configuration and keystore again and links,
releases or re-links devices to match (bridge/reload.py; SIGHUP does the
same). move NODE --from A.toml --to B.toml: a device whose key file is in
bridge A's keystore goes to bridge B, both reachable from this host: A
releases it first (BYE, no link, no subscription), then its key file goes
into B's keystore and B takes it, so no moment has both answering it."""

from __future__ import annotations

import json
import os
import shutil
from typing import TYPE_CHECKING, Any

from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.keystore import KeyStore, KeyStoreError
from edgebus.bridge.reload import CALL_TIMEOUT, RELOAD
from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse

    from edgebus.bridge.config import Config
    from edgebus.bridge.keystore import KeyStore


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    r = sub.add_parser("reload", help="the bridge reads its devices and keystore again")
    r.add_argument("--json", action="store_true", help="print the changes as JSON")
    bc.add_socket(r)
    m = sub.add_parser(
        "move", help="move NODE from bridge A to bridge B (its key file from A's keystore to B's)"
    )
    m.add_argument("node")
    m.add_argument(
        "--from",
        dest="src",
        required=True,
        metavar="A.toml",
        help="the configuration of the bridge that holds NODE now",
    )
    m.add_argument(
        "--to",
        dest="dst",
        required=True,
        metavar="B.toml",
        help="the configuration of the bridge that takes it",
    )


async def reload_devices(sock: str) -> Any:
    """The bridge at sock reads its devices and keystore again: its changes
    (a bridge of several workers: each worker does, and the changes are
    summed; bridge/workers.py)."""
    async with bc.Session(sock) as s:
        r = await s.call(RELOAD, None, CALL_TIMEOUT + bc.ROUTE_WAIT)
        sup = (await s.call("bridge/status", {"links": False}, bc.ROUTE_WAIT)).get("workers")
    for other in (sup or {}).get("sockets", [])[1:]:
        async with bc.Session(other) as s:
            more = await s.call(RELOAD, None, CALL_TIMEOUT + bc.ROUTE_WAIT)
        r["devices"] += more["devices"]
        for k in ("added", "removed", "changed"):
            r[k] = sorted(r[k] + more[k])
    return r


def changes_line(r: dict[str, Any]) -> str:
    return "%d device(s); added: %s; removed: %s; changed: %s" % (
        r["devices"],
        *(", ".join(r[k]) or "none" for k in ("added", "removed", "changed")),
    )


async def reload(args: argparse.Namespace) -> None:
    r = await reload_devices(bc.socket_path(args))
    bc.emit(json.dumps(r) if args.json else changes_line(r))


def _bridge(path: str) -> tuple[Config, KeyStore, str]:
    """(Config, KeyStore, socket) of the bridge configured at path."""
    try:
        cfg = bridge_config.load(path)
    except bridge_config.ConfigError as e:
        raise bc.Fail(2, str(e)) from None
    if cfg.mqtt is None or not cfg.socket:
        raise bc.Fail(2, "%s: a bridge with [mqtt] and a [bridge] socket moves devices" % path)
    assert cfg.keys is not None  # for mypy: load() resolves it
    return cfg, KeyStore(cfg.keys), cfg.socket


async def move(args: argparse.Namespace) -> None:
    node = args.node
    a, a_keys, a_sock = _bridge(args.src)
    b, b_keys, b_sock = _bridge(args.dst)
    assert a.mqtt is not None and b.mqtt is not None  # for mypy: _bridge checked
    for cfg, path in ((a, args.src), (b, args.dst)):
        if node in cfg.mqtt.keys:  # type: ignore[union-attr]  # (checked above)
            raise bc.Fail(
                1,
                "%s lists %s in [mqtt].devices: move that entry by hand (remove "
                "it there, reload, add it to the other, reload); this command moves "
                "key files" % (path, node),
            )
    if not b.mqtt.keystore:
        raise bc.Fail(
            1, "%s: [mqtt] keystore = true is needed to take devices from its keystore" % args.dst
        )
    if os.path.realpath(a_keys.path) == os.path.realpath(b_keys.path):
        raise bc.Fail(1, "both bridges use the keystore %s: each shard needs its own" % a_keys.path)
    try:
        if a_keys.read(node) is None:
            raise bc.Fail(1, "%s has no key file in %s" % (node, a_keys.path))
        if b_keys.read(node) is not None:
            raise bc.Fail(1, "%s already has a key file in %s" % (node, b_keys.path))
    except KeyStoreError as e:
        raise bc.Fail(1, str(e)) from None
    src, dst = a_keys.file(node), b_keys.file(node)
    os.makedirs(b_keys.path, mode=0o700, exist_ok=True)
    stage = os.path.join(b_keys.path, ".%s.json.moving" % node)  # not a node's name
    shutil.copy2(src, stage)
    os.unlink(src)
    try:
        r = await reload_devices(a_sock)
    except bc.Fail:
        tlog.rename_durably(stage, src)  # A holds it still: as it was
        raise
    bc.emit(
        "%s: released by %s (%s)"
        % (
            node,
            a.node,
            "its session ended, no link or subscription left; what it logged stays in its log"
            if node in r["removed"]
            else "it held no link",
        )
    )
    tlog.rename_durably(stage, dst)
    try:
        r = await reload_devices(b_sock)
    except bc.Fail as e:
        raise bc.Fail(
            e.code,
            "%s: its key is in %s's keystore, which takes it at its next "
            "reload: %s" % (node, b.node, e),
        ) from None
    bc.emit(
        "%s: taken by %s; the device resends what %s had not acknowledged" % (node, b.node, a.node)
    )


def run(args: argparse.Namespace) -> int:
    return bc.main("devices " + args.action, (reload if args.action == "reload" else move)(args))
