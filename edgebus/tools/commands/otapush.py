"""`edgebus ota push` on the bus: one device's transfer through its
``sys/ota/op`` (begin, then the files in chunks with a few calls in flight,
but those it copies from what it holds, compressed where it decodes deflate
(otadelta); resumed with a new begin after a broken session or a chunk the
device did not take), its switch, the wait for its verdict in its retained ``sys/ota``,
and a wave of devices a few at a time under one progress bar. The contract
with the device: docs/protocol.md section 18."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import edgebus
from edgebus.backoff import Backoff
from edgebus.tools.commands import busclient as bc
from edgebus.tools.commands import otadelta as delta
from edgebus.tools.commands.otaplan import COMMITTED, FAILED, OP, ROLLED_BACK, Outcome
from edgebus.tools.commands.progress import progress, say
from edgebus.topic import key

if TYPE_CHECKING:
    from edgebus.tools.commands.otaplan import Bundle
    from edgebus.view import RetainedView

WINDOW = 3  # put calls in flight per device (the device serves 4 at once: link.max_pending)
TRIES = 6  # begins in a row that move no byte before a device is given up
MARGIN = 60.0  # s after trial_s for the verdict: a reboot, a session, the retained status
# A device's refusals that a new begin resolves: a chunk the device did not
# expect (one before it was lost), a file damaged in transit (it deleted it),
# a compressed chunk it could not decode or found no heap for (sent plain then),
# a heap at its edge that found no block for a moment (a board's 64 KB).
RESEND = ("out of order", "SHA-256 mismatch", "compressed chunk", "MemoryError")
MAILBOX = "bridge/mailbox"  # the bridge's, for devices asleep (bridge/mailbox.py)
# Why a call did not reach the device or its answer did not come back.
LINK_REASONS = {"timeout": "no answer in time", "no_route": "no route (device offline)"}


class Retry(Exception):
    """The session broke or the device lost the thread: begin again."""


class DeviceFailed(Exception):
    """The device refused, or could not be reached in time: the reason."""


def positions(have: Any, sizes: list[int]) -> list[int]:
    """Where each file resumes, from begin's ``have`` (what the device knows:
    only the manifest's bytes until it is complete); ValueError for a reply
    that is not a list of counts within the sizes."""
    if not isinstance(have, list) or not have or len(have) > len(sizes):
        raise ValueError("begin replied have=%r" % (have,))
    out = [0] * len(sizes)
    for i, n in enumerate(have):
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= sizes[i]:
            raise ValueError("begin replied have=%r for files of %r bytes" % (have, sizes))
        out[i] = n
    return out


class _Track:
    """One device's bytes on the wave's bar: only ever forward; ``sent`` is
    called once, when the device has them all or its push ended."""

    def __init__(self, bar: Any, sent: Callable[[], None]) -> None:
        self.bar, self.done = bar, 0
        self.wire = 0  # the bundle's bytes sent in puts, as sent (compressed or not)
        self.sent: Callable[[], None] | None = sent

    def to(self, done: int) -> bool:
        """Move to ``done`` if it is further; whether it was."""
        if done <= self.done:
            return False
        self.bar.update(done - self.done)
        self.done = done
        return True

    def finish(self, total: int) -> None:
        """The device's transfer is over: the bar at its share's end."""
        self.to(total)
        sent, self.sent = self.sent, None
        if sent is not None:
            sent()


class Pusher:
    """Pushes ``bundle`` over session ``s``; ``view`` holds the retained
    ``dev/+/sys/ota`` the verdicts are read from."""

    def __init__(
        self,
        s: bc.Session,
        bundle: Bundle,
        view: RetainedView,
        trial_s: float,
        timeout: float,
        full: bool = False,
        compress: bool = True,
    ) -> None:
        self.s, self.bundle, self.view = s, bundle, view
        self.trial_s, self.timeout = trial_s, timeout
        self.full, self.compress = full, compress  # --full, not --no-compress
        self.packer = delta.Packer(bundle.blobs)

    async def wave(self, nodes: list[str], parallel: int, desc: str) -> list[Outcome]:
        """Every node's outcome, ``parallel`` devices at a time; each line is
        printed as it comes."""
        bar = progress(self.bundle.total * len(nodes), desc)
        gate = asyncio.Semaphore(parallel)
        sending = [len(nodes)]

        def sent() -> None:
            # The bar closes when the last transfer ends, not at the last
            # trial's verdict: its rate is the transfer's.
            sending[0] -= 1
            if sending[0] == 0:
                bar.close()

        async def one(node: str) -> Outcome:
            async with gate:
                o = await self.push(node, _Track(bar, sent))
            bar.write(o.line())
            return o

        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(one(n)) for n in nodes]
        except* bc.Fail as eg:  # the bridge went away: the whole push ends
            raise eg.exceptions[0] from None
        finally:
            bar.close()
        return [t.result() for t in tasks]

    def status(self, node: str) -> Any:
        m = self.view.get(key("dev/%s/sys/ota" % node))
        return m.payload if m is not None else None

    async def push(self, node: str, track: _Track) -> Outcome:
        """The whole update of one device, to its verdict."""
        t0 = time.monotonic()
        sent = None
        try:
            if not isinstance(self.status(node), dict):
                raise DeviceFailed(
                    "no ota service (no retained dev/%s/sys/ota): its firmware predates "
                    "updates over the bus" % node
                )
            await self.transfer(node, track)
            track.finish(self.bundle.total)
            sent = time.monotonic() - t0
            before = self.status(node)
            note = await self.switch(node)
            kind, detail = await self.verdict(node, before, note)
        except DeviceFailed as e:
            kind, detail = FAILED, str(e)
        track.finish(self.bundle.total)  # the bar reaches its end whatever the outcome
        wire = (track.wire, self.bundle.total) if sent is not None else None
        return Outcome(node, kind, detail, time.monotonic() - t0, sent, wire)

    async def call(self, node: str, payload: Any) -> Any:
        """The reply of the device's ``sys/ota/op`` to an operation (a dict)
        or a chunk (bytes); Retry when the session broke or the device asks
        for a resend (RESEND), DeviceFailed when it refused."""
        what = payload["op"] if isinstance(payload, dict) else "put"
        topic = OP % node
        try:
            return await self.s.conn.call(topic, payload, timeout=self.timeout)
        except edgebus.Failed as e:
            # The device's refusals begin "ota: ", which the line says already.
            reason = bc.render(e.reason).removeprefix("ota: ")
            if any(r in reason for r in RESEND):
                raise Retry("%s: %s" % (what, reason)) from None
            raise DeviceFailed("%s: %s" % (what, reason)) from None
        except edgebus.CallError as e:
            if self.s.task is not None and self.s.task.done():
                raise bc.Fail(bc.GONE, "the bridge at %s went away" % self.s.path) from None
            if e.reason == "denied":
                raise DeviceFailed(
                    "denied: the bridge's ACL does not let you call %s" % topic
                ) from None
            raise Retry("%s: %s" % (what, LINK_REASONS.get(e.reason, e.reason))) from None

    async def transfer(self, node: str, track: _Track) -> None:
        """Every file on the device, resuming from what it has; DeviceFailed
        after TRIES tries in a row that moved nothing (each waits up to the
        timeout for the device's route, then begins)."""
        b = self.bundle
        back = Backoff(0.5, 8.0)
        idle = 0
        zok = self.compress  # off for good once the device could not decode a put
        while True:
            start = track.done
            try:
                await self.route(node)
                r = await self.call(
                    node,
                    {"op": "begin", "version": b.version, "hash": b.hash, "size": len(b.manifest)},
                )
                try:
                    pos = positions(r.get("have") if isinstance(r, dict) else None, b.sizes)
                except ValueError as e:
                    raise DeviceFailed(str(e)) from None
                can = delta.Caps(r, self.full, zok)
                big = delta.code_too_big(b.paths, b.sizes, can.heap) or delta.too_big(
                    b.sizes, pos, can.free
                )
                if big:
                    raise DeviceFailed(big)
                track.to(sum(pos))
                await self.send(node, pos, track, can)
                return
            except Retry as e:
                why = str(e)
                zok = zok and "compressed chunk" not in why  # plain from here on
            idle = 0 if track.done > start else idle + 1
            if idle >= TRIES:
                raise DeviceFailed("gave up after %d tries that moved nothing: %s" % (idle, why))
            await asyncio.sleep(back.next())

    async def route(self, node: str) -> None:
        """Wait for the device's endpoint to be reachable: at once, unless
        it is reconnecting (the timeout), or asleep as it announced (until
        its wake, then the timeout); Retry when it is not."""
        k = key(OP % node)
        wait, why = self.timeout, "no route to it for %g s" % self.timeout
        wake = None if k in self.s.bus.endpoints() else await self.wakes(node)
        if wake is not None:
            at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wake))
            say("%s: asleep until %s, waiting" % (node, at))
            wait += max(0.0, wake - time.time())
            why = "asleep until %s, no route %g s after" % (at, self.timeout)
        try:
            await self.s.until(lambda: k in self.s.bus.endpoints(), wait, "")
        except bc.Fail as e:
            if e.code != bc.UNREACHABLE:
                raise
            raise Retry(why) from None

    async def wakes(self, node: str) -> float | None:
        """When a device asleep as it announced wakes (Unix s), else None
        (down, or no duty-cycle device). The bridge's mailbox says: it holds
        a status call for the device until its wake (answered then, unread)
        and refuses one for a device that announced no sleep."""
        req = {"topic": OP % node, "value": {"op": "status"}, "wait": False}
        try:
            r = await self.s.conn.call(MAILBOX, req, timeout=self.timeout)
        except edgebus.CallError:  # not asleep, its mailbox full, or no mailbox
            return None
        w = r.get("wakes") if isinstance(r, dict) else None
        # A wake passed is a device overslept or awake without its route: down.
        return float(w) if isinstance(w, (int, float)) and w > time.time() else None

    async def send(self, node: str, pos: list[int], track: _Track, can: delta.Caps) -> None:
        """The manifest from ``pos`` on, then (where the device can) its
        copies of the files it holds, then the rest; ``pos`` and the bar
        follow the device's replies."""
        sizes = self.bundle.sizes
        await self.stream(node, pos, track, [0], can.wbits)
        if can.copy and any(s and not p for s, p in zip(sizes[1:], pos[1:])):
            try:
                await delta.copy(lambda p: self.call(node, p), sizes, pos)
            except ValueError as e:
                raise DeviceFailed(str(e)) from None
            track.to(sum(pos))
        await self.stream(node, pos, track, range(1, len(pos)), can.wbits)

    async def stream(
        self, node: str, pos: list[int], track: _Track, files: Any, wbits: int | None
    ) -> None:
        """The puts that complete ``files`` from ``pos``, WINDOW at a time."""
        flight: deque[tuple[asyncio.Future[Any], int, int]] = deque()

        async def settle() -> None:
            fut, i, end = flight.popleft()
            r = await fut
            nxt = r.get("next") if isinstance(r, dict) else None
            if nxt != end:
                raise Retry("file %d: the device is at %r, %d expected" % (i, nxt, end))
            pos[i] = end
            track.to(sum(pos))

        try:
            for i, end, data in self.packer.puts(files, pos, wbits):
                if len(flight) >= WINDOW:
                    await settle()
                track.wire += len(data) - (8 if data[0] & 0x80 else 6)
                flight.append((asyncio.ensure_future(self.call(node, data)), i, end))
            while flight:
                await settle()
        finally:
            for f, _, _ in flight:
                f.cancel()
            await asyncio.gather(*(f for f, _, _ in flight), return_exceptions=True)

    async def switch(self, node: str) -> str:
        """Ask the device to boot the bundle on trial. A reply lost to its
        reboot is no failure: the verdict tells (the note says so)."""
        try:
            await self.call(
                node, {"op": "switch", "hash": self.bundle.hash, "trial_s": self.trial_s}
            )
        except Retry as e:
            return "switch sent, no reply (%s); " % e
        return ""

    async def verdict(self, node: str, before: Any, note: str) -> tuple[str, str]:
        """COMMITTED or ROLLED_BACK (with the device's reason) as the device's
        retained sys/ota says; DeviceFailed when it says neither in time. A
        last_failure for this bundle counts once it is new: the trial was
        seen, or the failure or the count of rollbacks differs from before
        the switch (a bundle that failed before may crash again before its
        trial's status ever leaves the device)."""
        h = self.bundle.hash
        b = before if isinstance(before, dict) else {}
        old = (b.get("last_failure"), b.get("rollbacks"))
        seen = False
        wait = self.trial_s + MARGIN
        deadline = time.monotonic() + wait
        while True:
            v = self.view.version
            st = self.status(node)
            if isinstance(st, dict):
                run, trial = st.get("running") or {}, st.get("trial") or {}
                fail = st.get("last_failure")
                if run.get("hash") == h and st.get("state") == "committed":
                    return COMMITTED, self.bundle.version
                if trial.get("hash") == h and st.get("wdt") is False and not seen:
                    say(
                        "%s: on trial without a watchdog (its runtime has none): a hang is "
                        "not reset, and rolls back only at its next reset" % node
                    )
                seen = seen or h in (run.get("hash"), trial.get("hash"))
                new = seen or (fail, st.get("rollbacks")) != old
                if isinstance(fail, dict) and fail.get("hash") == h and new:
                    return ROLLED_BACK, str(fail.get("reason"))
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeviceFailed(
                    "%sno verdict within %g s of the switch (state %s)"
                    % (note, wait, st.get("state") if isinstance(st, dict) else "unknown")
                )
            try:
                if await asyncio.wait_for(self.view.changed(v), left) is None:
                    raise bc.Fail(bc.GONE, "the bridge at %s went away" % self.s.path)
            except TimeoutError:
                pass
