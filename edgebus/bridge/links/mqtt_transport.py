"""The link transport of one MQTT device on the bridge's shared broker
connection (bridge/links/mqtt.py): the connection's reader hands it each
frame, which it queues in a plain list that the device's Link takes in one
batch; a send is a publish on the device's down topic."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

from edgebus.link import frame

if TYPE_CHECKING:
    from edgebus.bridge.links.mqtt_conn import Connection


# Frames waiting for the links of one connection, over all its devices: past
# HIGH the connection stops reading (the broker and TCP hold the rest) until
# the backlog is down to half: a load that every device shares. One device
# may have at most SHARE waiting (its window is at most 256: bridge/telemetry
# WINDOW_MAX); past it its frames are dropped and counted on its link
# (over_share), so a device that floods gets its share of the bridge and no
# more, and never stops the others' reading. A link takes at most BATCH at a
# turn, then lets the other links have theirs.
HIGH = 32768
SHARE = 512
BATCH = 64


class Backlog:
    """The frames waiting over the device transports of one connection, and
    whether that stopped its reading."""

    __slots__ = ("conn", "queued", "paused", "stopped")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.queued = 0
        self.paused = False
        self.stopped = False  # the bridge is stopping: reading never resumes

    def add(self) -> None:
        self.queued += 1
        if self.queued >= HIGH and not self.paused:
            self.paused = True
            self.conn.pause_reading()

    def taken(self, n: int) -> None:
        self.queued -= n
        if self.paused and self.queued <= HIGH // 2 and not self.stopped:
            self.paused = False
            self.conn.resume_reading()


class Frames:
    """A device transport's frame counters (a stream's FrameReader counts the
    same, but holds a frame's buffer, 1 KB a device, that messages never need):
    messages refused as longer than a frame of max_len (``oversize``), or as
    damaged (``crc_errors``), and frames dropped past LIMIT (``dropped``)."""

    __slots__ = ("frames", "crc_errors", "oversize", "dropped")

    def __init__(self) -> None:
        self.frames = self.crc_errors = self.oversize = self.dropped = 0

    def stats(self) -> dict[str, int]:
        return {
            "frames": self.frames,
            "crc_errors": self.crc_errors,
            "oversize": self.oversize,
            "dropped": self.dropped,
        }


def oversize(msg: bytes | bytearray, max_len: int) -> bool:
    """Whether a message frame.unmessage refused holds a body longer than
    max_len (docs/protocol.md 1: counted as oversize, as a stream's reader
    does, not as damage): a bare body (0x00 first) past it, a frame past the
    longest encoding of one, or a good frame that decodes past it."""
    if len(msg) and msg[0] == 0:
        return len(msg) - 1 > max_len
    n = len(msg) - (1 if len(msg) and msg[-1] == 0 else 0)
    if n > frame.max_encoded_len(max_len):
        return True
    body = frame.decode(msg, n)  # room for whatever n bytes decode to
    return body is not None and len(body) > max_len


class DeviceTransport:
    """The link transport of one device: bodies arrive through a list the
    connection's reader fills; sends are publishes on the device's down topic.
    ``backlog`` is shared by the transports of one connection; ``count`` is
    the device's link's Link.count, for the frames dropped past its share."""

    def __init__(
        self,
        conn: Connection,
        down: str,
        max_len: int,
        backlog: Backlog,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.conn = conn
        self.down = down
        self.max_len = max_len
        self.backlog = backlog
        self.count = count
        self.pending: list[bytes] = []
        # The link's recv() waiting, else None: a future made per wait costs
        # less than an Event kept per device (its deque of waiters, ~0.6 KB).
        self.waiter: asyncio.Future[None] | None = None
        self.frames = Frames()
        self.closed = False
        self.bare = False  # the link's to set: its sealed session's peer takes bare bodies
        self._turns = False  # the last recv() took a full batch: let the others run first
        # The flood watch's (bridge/links/quota.py Mutes): messages since its last
        # pass, on_flood() called when they reach flood_at (0: never; it may
        # raise the mark), and whether the device is muted (its frames still
        # on their way are dropped here, counted muted_dropped, undecoded).
        self.recent = 0
        self.flood_at = 0
        self.on_flood: Callable[[], None] | None = None
        self.muted = False

    def deliver(self, payload: bytes | bytearray) -> None:
        self.recent += 1
        if self.recent == self.flood_at and self.on_flood is not None:
            self.on_flood()
        if self.muted:
            if self.count is not None:
                self.count("muted_dropped")
            return
        body = frame.unmessage(payload, self.max_len)
        f = self.frames
        if body is None:
            if oversize(payload, self.max_len):
                f.oversize += 1
            else:
                f.crc_errors += 1
            return
        f.frames += 1
        q = self.pending
        if len(q) >= SHARE:
            f.dropped += 1  # the link sees the hole and asks again, or its device floods
            if self.count is not None:
                self.count("over_share")
            return
        q.append(body)
        self.backlog.add()
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def recv(self) -> list[bytes] | None:
        """At most BATCH bodies that arrived since the last call (None at the
        end). After a full batch the other links' tasks run first."""
        if self._turns:
            await asyncio.sleep(0)
        while not self.pending:
            if self.closed:
                return None
            self.waiter = w = asyncio.get_running_loop().create_future()
            try:
                await w
            finally:
                self.waiter = None
        q = self.pending
        if len(q) > BATCH:
            out, self.pending = q[:BATCH], q[BATCH:]
        else:
            out, self.pending = q, []
        self._turns = len(out) == BATCH
        self.backlog.taken(len(out))
        return out

    async def send(self, body: bytes, tail: bytes | None = None) -> None:
        if self.closed:
            raise OSError("MQTT connection closed")
        await self.conn.publish(self.down, frame.message(body, self.max_len, tail, self.bare))

    def send_nowait(self, body: bytes, tail: bytes | None = None) -> bool:
        """Publish now (Link.send_now) unless the socket's buffer is full
        (False: the link's writer sends it, waiting for room)."""
        if self.closed:
            raise OSError("MQTT connection closed")
        return self.conn.publish_nowait(
            self.down, frame.message(body, self.max_len, tail, self.bare)
        )

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            w = self.waiter
            if w is not None and not w.done():
                w.set_result(None)
        q, self.pending = self.pending, []  # its link reads no more: not the others' backlog
        self.backlog.taken(len(q))

    def drop_pending(self) -> int:
        """Drop what waits for the link (the bridge is stopping): how many."""
        q, self.pending = self.pending, []
        self.backlog.queued -= len(q)
        return len(q)

    def stats(self) -> dict[str, int]:
        return self.frames.stats()
