"""``bridge/keys/rotate``: give a device a new key over its session
(`edgebus keys rotate NODE`; docs/bridge.md, "Keys: provisioning and rotation").

The bridge asks the device which key it holds (sys/key/set with null: its
kid), makes a key, stores it as pending (accepted from then on, so a reply
lost on the way cannot lock the device out), sends it wrapped under the
device's key (edgebus.link.keywrap), and on the device's answer makes it
current, the old one accepted for the grace period. A refusal (or no route)
forgets the new key; a timeout leaves it pending beside the old one, and the
next rotation settles which one the device holds. Local users reach it
through the ACL (bridge/acl.py): without an [[acl]] entry only root and the
bridge's own user may call it; the key never leaves the bridge.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

import edgebus
from edgebus.bridge.keystore import KeyStoreError, new_key
from edgebus.link import keywrap
from edgebus.link.handshake import kid

if TYPE_CHECKING:
    from edgebus import Request
    from edgebus.bridge.context import BridgeView

log = logging.getLogger("edgebus.bridge")

ROTATE = "bridge/keys/rotate"
DEVICE_TIMEOUT = 10.0  # s for each of the device's two answers
MAX_GRACE = 366 * 86400.0
NOT_SENT = ("no_route", "link_down", "full")  # a call's reasons for never reaching it


class Refused(Exception):
    """A rotation that did not happen (or whose outcome is unknown); says why."""


def _request(q: Any) -> tuple[str, float, float]:
    if not isinstance(q, dict) or not isinstance(q.get("node"), str):
        raise Refused('payload must be {"node": str, "grace": seconds, "timeout": seconds}')
    grace = q.get("grace", 86400)
    timeout = q.get("timeout", DEVICE_TIMEOUT)
    for name, v, lo, hi in (("grace", grace, 0, MAX_GRACE), ("timeout", timeout, 0.1, 600)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise Refused("%s must be between %g and %d seconds, got %r" % (name, lo, hi, v))
    return q["node"], float(grace), float(timeout)


async def _ask(
    bridge: BridgeView, node: str, payload: Any, timeout: float, pending: str | None = None
) -> Any:
    """The device's answer to sys/key/set; Refused saying why not. A pending
    key is forgotten when the request surely did not change the device."""
    topic = "dev/%s/sys/key/set" % node
    try:
        return await bridge.conn.call(topic, payload, timeout=timeout)
    except edgebus.CallError as e:
        r = e.reason
        if isinstance(e, edgebus.Failed):
            why = "device refused: %s" % (r,)
        elif isinstance(e, (edgebus.NoRoute, edgebus.Full)) or r in NOT_SENT:
            why = (
                "device offline: %s has no session with this bridge (or its firmware has "
                "no sys/key/set)" % node
                if r != "full"
                else "device busy: %s" % node
            )
        else:  # it may have taken the key: both stay accepted
            why = (
                "timeout: %s did not answer within %g s" % (node, timeout)
                if isinstance(e, edgebus.Timeout)
                else "the call to %s ended: %s" % (node, r)
            )
            if pending is not None:
                why += (
                    "; the new key (kid %s) stays accepted beside the old one until the "
                    "next rotation finds which one it holds" % kid(pending.encode())
                )
            raise Refused(why) from None
        if pending is not None:
            bridge.keystore.drop(node, pending)
        raise Refused(why) from None


async def rotate(bridge: BridgeView, node: str, grace: float, timeout: float) -> dict[str, Any]:
    """Rotate node's key; the outcome as a dict, or Refused."""
    store = bridge.keystore
    devices = {d.node: d.key for d in bridge.cfg.serial}
    if bridge.mqtt is not None:
        devices.update(dict.fromkeys(bridge.mqtt.links))  # also those the keystore holds
        devices.update(bridge.cfg.mqtt.keys if bridge.cfg.mqtt else {})
    if node not in devices:
        raise Refused(
            "unknown node %r: not a device of this bridge ([[serial]], "
            "[mqtt].devices, or a key file it has linked)" % node
        )
    held = (await _ask(bridge, node, None, timeout)).get("kid")
    try:
        if store.read(node) is None:  # the configuration's key: the keystore takes over
            if devices[node] is None:
                raise KeyStoreError("the key file of %s is gone" % node)
            store.write(node, {"key": devices[node].decode(), "since": int(time.time())})
        keys = store.accepted(node)
        rec = store.read(node)
    except (KeyStoreError, UnicodeDecodeError) as e:
        raise Refused("keystore: %s" % e) from None
    if keys is None or rec is None:  # its file went meanwhile
        raise Refused("keystore: the key file of %s is gone" % node)
    old = next((k for k in keys if kid(k.encode()) == held), None)
    if old is None:
        raise Refused("%s holds a key (kid %s) that this bridge does not accept" % (node, held))
    if old != rec["key"]:  # an earlier rotation's reply was lost: it landed
        store.commit(node, old, grace)
    new = new_key()
    store.pend(node, new)
    got = await _ask(
        bridge, node, keywrap.wrap(old.encode(), new, secrets.token_hex(8)), timeout, new
    )
    if got.get("kid") != kid(new.encode()):
        raise Refused(
            "%s answered kid %r, not the new key's %s; both stay accepted"
            % (node, got.get("kid"), kid(new.encode()))
        )
    store.commit(node, new, grace)
    return {
        "node": node,
        "kid": kid(new.encode()),
        "old_kid": held,
        "old_until": round(time.time() + grace, 3),
    }


async def serve(bridge: BridgeView) -> None:
    """Serve bridge/keys/rotate until cancelled, one rotation per node at a time."""
    busy = set()

    async def one(req: Request) -> None:
        try:
            node, grace, timeout = _request(req.payload)
            if node in busy:
                raise Refused("a rotation of %s is already running" % node)
            busy.add(node)
            try:
                req.reply(await rotate(bridge, node, grace, timeout))
            finally:
                busy.discard(node)
        except Refused as e:
            req.fail(str(e))
        except Exception as e:  # the keystore's disk, say: the caller hears why
            log.exception("key rotation failed")
            req.fail("key rotation failed: %s: %s" % (type(e).__name__, e))

    running = set()  # the event loop keeps only weak references to tasks
    async for req in bridge.conn.bind(ROTATE, queue_len=8):
        t = asyncio.ensure_future(one(req))
        running.add(t)
        t.add_done_callback(running.discard)
