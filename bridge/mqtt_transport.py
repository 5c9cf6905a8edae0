"""The link transport of one MQTT device on the bridge's shared broker
connection (bridge/mqtt_links.py): the connection's reader hands it each
frame, which it queues in a plain list that the device's Link takes in one
batch; a send is a publish on the device's down topic."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from edgebus.link import frame

if TYPE_CHECKING:
    from edgebus.bridge.mqtt_conn import Connection


# Frames waiting for a device's link: past HIGH the connection stops reading
# (the broker and TCP hold the rest) until every device's queue is below it
# again; past LIMIT a frame is dropped and counted. Reading stops within the
# packet that crossed HIGH, so LIMIT is a safety net.
HIGH = 1024
LIMIT = 16384


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
    ``full`` is shared by the transports of one connection: the ones past
    HIGH, for which the connection has stopped reading."""

    def __init__(
        self, conn: Connection, down: str, max_len: int, full: set[DeviceTransport]
    ) -> None:
        self.conn = conn
        self.down = down
        self.max_len = max_len
        self.full = full
        self.pending: list[bytes] = []
        # The link's recv() waiting, else None: a future made per wait costs
        # less than an Event kept per device (its deque of waiters, ~0.6 KB).
        self.waiter: asyncio.Future[None] | None = None
        self.frames = Frames()
        self.closed = False
        self.bare = False  # the link's to set: its sealed session's peer takes bare bodies

    def deliver(self, payload: bytes | bytearray) -> None:
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
        n = len(q)
        if n >= HIGH:
            if n >= LIMIT:
                f.dropped += 1  # counted: the link sees the gap
                return
            self.full.add(self)
            self.conn.pause_reading()
        q.append(body)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def recv(self) -> list[bytes] | None:
        """Every body that arrived since the last call (None at the end)."""
        while not self.pending:
            if self.closed:
                return None
            self.waiter = w = asyncio.get_running_loop().create_future()
            try:
                await w
            finally:
                self.waiter = None
        out = self.pending
        self.pending = []
        full = self.full
        if full and self in full:
            full.discard(self)
            if not full:
                self.conn.resume_reading()
        return out

    async def send(self, body: bytes, tail: bytes | None = None) -> None:
        if self.closed:
            raise OSError("MQTT connection closed")
        await self.conn.publish(self.down, frame.message(body, self.max_len, tail, self.bare))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            w = self.waiter
            if w is not None and not w.done():
                w.set_result(None)
        full = self.full
        if self in full:  # its link reads no more: it must not hold the others
            full.discard(self)
            if not full:
                self.conn.resume_reading()

    def stats(self) -> dict[str, int]:
        return self.frames.stats()
