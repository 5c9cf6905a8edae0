"""The mailbox: calls held for devices in duty-cycle mode (firmware/sleep.py)
while they sleep, handed over when they wake.

A device about to sleep retains ``sys/sleep`` ({"ms": how long}); the bridge
sees it as ``dev/<node>/sys/sleep`` and holds the device asleep until its
link comes up again. While it is asleep, a call to one of its endpoints
fails at once with NoRoute (its routes went with its session), so a caller
puts it in the mailbox instead: ``bridge/mailbox`` with {"topic", "value",
"wait", "expiry" (optional, s, at most [mailbox] expiry)} (``edgebus call``
does so by itself when the device is asleep, and ``edgebus call --queue``
without waiting). The call is authorised as the
caller's own call to the topic would be ([[acl]] call). Held calls go to the
device as soon as its session is up and its routes are back, in the order
held; the reply goes to a caller still waiting, and every outcome is logged
and retained at ``bridge/mailbox/<node>``. Per device at most ``[mailbox]
entries`` calls and ``bytes`` of requests (JSON) are held, each for at most
``expiry`` s. Retained desired state (``dev/<node>/cmd/...``) needs no
mailbox: the device's link imports it with the session's snapshot.

Counters (stats()["counters"], the metrics' edgebus_mailbox_calls):
held: calls taken into a mailbox; delivered: handed to the device and
answered (a reply or the device's own failure); no_endpoint: dropped and
failed, the device awake with its routes and none for the call's topic (a
topic that is not an endpoint, such as the retained sys/info); refused_full: refused,
the device's mailbox at its bound; expired: dropped, the device not awake
within the expiry; refused_not_asleep: refused, the device has announced no
sleep since the bridge started (not a duty-cycle device: call it, or it is
down or unknown); denied: refused by the ACL. A duty-cycle device's calls are
held between its wakes and during them too (until its routes are back after
its session starts, and in the moment it goes to sleep), so a caller never
races its wake.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import edgebus
from edgebus import topic
from edgebus.link import routes

if TYPE_CHECKING:
    from edgebus import Request
    from edgebus.bridge.context import BridgeView
    from edgebus.link.link import Link

ENDPOINT = "bridge/mailbox"
OUTCOME = "bridge/mailbox/%s"  # retained: a device's mailbox and its last outcome
ANNOUNCE = "dev/+/sys/sleep"
TICK = 0.2  # s between looks at the links (wakes, deliveries, expiries)
COUNTERS = (
    "held",
    "delivered",
    "no_endpoint",
    "refused_full",
    "expired",
    "refused_not_asleep",
    "denied",
)

log = logging.getLogger("edgebus.bridge.mailbox")


class Entry:
    __slots__ = ("topic", "payload", "size", "expires", "req", "sending")

    def __init__(self, t: str, payload: Any, size: int, expires: float, req: Request | None):
        self.topic = t
        self.payload = payload
        self.size = size
        self.expires = expires
        self.req = req  # a caller waiting for the reply, or None (queued)
        self.sending = False


class Mailbox:
    def __init__(self, bridge: BridgeView) -> None:
        self.bridge = bridge
        cfg = bridge.cfg
        self.entries = cfg.mailbox_entries
        self.bytes = cfg.mailbox_bytes
        self.expiry = cfg.mailbox_expiry
        self.margin = cfg.mailbox_margin
        # node -> {"until": Unix s of the announced wake, "down": its link went down since}
        self.asleep: dict[str, dict[str, Any]] = {}
        self.sleepers: set[str] = set()  # every node that announced a sleep: duty-cycle devices
        self._keys: dict[str, str] = {}  # node -> its link's key in bridge.links, last seen
        self.boxes: dict[str, list[Entry]] = {}
        self.counters = dict.fromkeys(COUNTERS, 0)

    def link(self, node: str) -> Link | None:
        """The link of device ``node`` (a device link's peer is its node id).
        The ticker asks for every device asleep five times a second: the key
        found at the last scan is tried first, so a fleet is not scanned each
        time."""
        links = self.bridge.links
        lk = links.get(self._keys.get(node, ""))
        if lk is not None and lk.peer == node:
            return lk
        for k, lk in links.items():
            if lk.peer == node:
                self._keys[node] = k
                return lk
        return None

    def sleep_of(self, node: str | None) -> dict[str, Any] | None:
        """{"state": "asleep" or "overslept" (not back ``margin`` s after its
        wake: a fault), "until": Unix s} for a device asleep, else None."""
        a = self.asleep.get(node or "")
        if a is None:
            return None
        late = time.time() - a["until"] > self.margin
        return {"state": "overslept" if late else "asleep", "until": round(a["until"], 3)}

    def stats(self) -> dict[str, Any]:
        return {
            "asleep": {n: self.sleep_of(n) for n in sorted(self.asleep)},
            "held": {n: len(b) for n, b in sorted(self.boxes.items()) if b},
            "counters": dict(self.counters),
        }

    async def run(self) -> None:
        """Watch the announcements, serve bridge/mailbox, hand over and expire."""
        await asyncio.gather(self._watch(), self._serve(), self._ticker())

    async def _watch(self) -> None:
        w = self.bridge.conn.watch_retained(ANNOUNCE, queue_len=1024, replay=True)
        async for ev in w:
            if ev.op != "retain" or ev.topic is None:
                continue
            p = ev.payload
            ms = p.get("ms") if isinstance(p, dict) else None
            if type(ms) is not int or ms < 0:
                log.warning("mailbox: %s is not a sleep announcement: %r", ev.topic, p)
                continue
            node = str(ev.topic[1])
            self.sleepers.add(node)
            lk = self.link(node)
            # A device's word, bounded: none is "asleep", no fault, for longer
            # than a held call may wait.
            self.asleep[node] = {
                "until": time.time() + min(ms / 1000, self.expiry),
                "down": lk is None or lk.status != "up",
            }

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self.tick()

    def tick(self) -> None:
        now = time.time()
        for node, a in list(self.asleep.items()):
            lk = self.link(node)
            if lk is None or lk.status != "up":
                a["down"] = True
            elif a["down"]:
                del self.asleep[node]  # a new session: awake
        for node, box in self.boxes.items():
            for e in list(box):
                if e.expires <= now and not e.sending:
                    box.remove(e)
                    self.counters["expired"] += 1
                    why = "expired: %s did not wake within %.0f s" % (node, self.expiry)
                    if e.req is not None:
                        e.req.fail(why)
                    self._outcome(node, e, "expired", why)
            lk = self.link(node)
            # Up is enough: a call that meets the session's end (the BYE
            # after an announcement) is held again.
            if box and lk is not None and lk.status == "up":
                for e in box:
                    if not e.sending:
                        e.sending = True
                        asyncio.create_task(self._deliver(node, e))

    async def _deliver(self, node: str, e: Entry) -> None:
        try:
            v = await self.bridge.conn.call(e.topic, e.payload, timeout=10.0)
        except edgebus.NoRoute:
            lk = self.link(node)
            if lk is None or lk.status != "up" or not routes.count(lk):
                e.sending = False  # its routes are not back yet: the next tick
                return
            # Its routes are back and this is not among them: never an endpoint.
            what, v = "no_endpoint", "%s offers no endpoint %s" % (node, e.topic)
        except edgebus.Failed as err:
            what, v = "failed", err.reason
        except (edgebus.CallError, edgebus.BusError) as err:
            e.sending = False  # not answered (the session went again): held still
            log.info("mailbox: %s for %s not answered (%s): held", e.topic, node, err)
            return
        else:
            what = "replied"
        self.boxes[node].remove(e)
        self.counters["delivered" if what != "no_endpoint" else "no_endpoint"] += 1
        if e.req is not None:
            (e.req.reply if what == "replied" else e.req.fail)(v)
        self._outcome(node, e, what, v)

    def _outcome(self, node: str, e: Entry, what: str, v: Any) -> None:
        log.info("mailbox: %s for %s: %s: %.200r", e.topic, node, what, v)
        try:
            self.bridge.conn.retain(
                OUTCOME % node,
                {"held": len(self.boxes.get(node, ())), "topic": e.topic, what: v},
            )
        except (TypeError, ValueError):  # a reply of bytes: the log has it
            pass

    async def _serve(self) -> None:
        async for req in self.bridge.conn.bind(ENDPOINT, queue_len=16):
            try:
                r = self.hold(req)
            except ValueError as e:
                req.fail(str(e))
            else:
                if r is not None:
                    req.reply(r)

    def hold(self, req: Request) -> dict[str, Any] | None:
        """Take the call req asks for into its device's mailbox: the answer for
        a caller that does not wait, None for one that does (answered at
        delivery). ValueError says why it is refused."""
        q = req.payload
        if not isinstance(q, dict) or not isinstance(q.get("topic"), str):
            raise ValueError(
                'bridge/mailbox takes {"topic": str, "value": any, "wait": bool, "expiry": s}'
            )
        t = topic.norm(q["topic"])
        if len(t) < 3 or t[0] != "dev":
            raise ValueError("%s is not a device's endpoint (dev/NODE/...)" % q["topic"])
        node = str(t[1])
        auth = self.bridge.auth
        if auth is not None:
            ctx = {"principal": req.origin.principal, "action": "call", "topic": t, "extra": None}
            r = auth.allow(ctx)
            ok, why = r if isinstance(r, tuple) else (r, None)
            if not ok:
                self.counters["denied"] += 1
                raise ValueError("denied: %s" % (why or "no [[acl]] call right for this topic"))
        if node not in self.sleepers:
            self.counters["refused_not_asleep"] += 1
            raise ValueError(
                "%s is not asleep (it announced no sleep): call it directly, or it is down or "
                "unknown; nothing is held" % node
            )
        value = q.get("value")
        try:
            size = len(json.dumps(value))
        except TypeError:
            size = len(value) if isinstance(value, (bytes, bytearray)) else 0
        box = self.boxes.setdefault(node, [])
        used = sum(e.size for e in box)
        if len(box) >= self.entries or used + size > self.bytes:
            self.counters["refused_full"] += 1
            raise ValueError(
                "the mailbox of %s is full (%d calls, %d bytes held; [mailbox] entries %d, "
                "bytes %d): try again after its next wake"
                % (node, len(box), used, self.entries, self.bytes)
            )
        ex = q.get("expiry", self.expiry)
        if not isinstance(ex, (int, float)) or isinstance(ex, bool) or ex <= 0:
            raise ValueError("expiry must be a number of seconds above 0, got %r" % (ex,))
        expires = time.time() + min(ex, self.expiry)  # [mailbox] expiry bounds it
        wait = q.get("wait") is True
        box.append(Entry(q["topic"], value, size, expires, req if wait else None))
        self.counters["held"] += 1
        until = self.asleep[node]["until"] if node in self.asleep else time.time()  # awake
        log.info(
            "mailbox: %s held for %s (%d held), wakes at %.0f", q["topic"], node, len(box), until
        )
        if wait:
            return None
        return {"held": True, "node": node, "wakes": round(until, 3), "expires": round(expires, 3)}
