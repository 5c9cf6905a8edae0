"""Transports for a Link: byte streams carrying COBS frames.

A transport has ``async recv()`` -> list of frame bodies (None at the end),
``async send(body, tail=None)`` (``tail``: a seal, framed after the body),
``close()`` and ``stats()``. Message transports (MQTT)
implement the same four with one frame per message (see frame.decode).
An in-process pair for tests is in ``pipe`` (a device never loads it).
"""

from .. import compat
from .frame import BLOCK, MAX_LEN, FrameReader, blocks, encode


def _reader(frames, max_len):
    # A device reopening its uplink passes the same FrameReader each time: its
    # buffers are allocated once per boot, not once per reconnection on a heap
    # that fragmentation may have left without 2 KB in one piece.
    if frames is None:
        return FrameReader(max_len)
    frames.reset()
    return frames


class StreamTransport:
    """Frames over an asyncio (reader, writer) pair: TCP, unix sockets, serial."""

    def __init__(self, reader, writer, max_len=MAX_LEN, chunk=256, frames=None):
        self.reader = reader
        self.writer = writer
        self.frames = _reader(frames, max_len)
        self.max_len = max_len
        self.chunk = chunk
        self.closed = False

    async def recv(self):
        if self.closed:
            return None
        try:
            data = await self.reader.read(self.chunk)
        except OSError:
            data = None
        if not data:
            self.closed = True
            return None
        return self.frames.feed(data)

    async def send(self, body, tail=None):
        if self.closed:
            raise OSError("transport closed")
        # A delimiter before every frame too: the rest of a frame cut short on
        # the line then ends there, and only that frame is lost, not the next.
        self.writer.write(encode(body, self.max_len, True, tail))
        await self.writer.drain()

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                compat.close_stream(self.writer)
            except OSError:
                pass

    def stats(self):
        return self.frames.stats()


async def open_tcp(host, port, max_len=MAX_LEN):
    """A StreamTransport over a TCP connection."""
    r, w = await compat.asyncio.open_connection(host, port)
    return StreamTransport(r, w, max_len)


class PolledTransport:
    """Frames over a file-like object read by polling: a tty opened raw with
    VMIN=0 on the unix port, or a machine.UART on a board. ``read(n)`` must
    return what is there (b'' or None when nothing) without blocking; reads
    then never stall the scheduler. ``frames``: a FrameReader to reuse."""

    def __init__(self, f, max_len=MAX_LEN, poll_ms=5, chunk=256, frames=None):
        self.f = f
        self.frames = _reader(frames, max_len)
        self.max_len = max_len
        self.poll_ms = poll_ms
        self.chunk = chunk
        self.closed = False
        self._buf = bytearray(BLOCK)
        self._bmv = memoryview(self._buf)

    async def recv(self):
        while not self.closed:
            try:
                data = self.f.read(self.chunk)
            except OSError:
                data = None
            if data:
                return self.frames.feed(data)
            await compat.asyncio.sleep(self.poll_ms / 1000)
        return None

    async def send(self, body, tail=None):
        if self.closed:
            raise OSError("transport closed")
        # Block by block through one small buffer (frame.blocks, leading
        # delimiter as in StreamTransport): a board needs no frame-sized
        # block of heap per frame sent. body may be a view into the spool:
        # should the line stall and the spool evict this very entry
        # meanwhile (counted, spool_evicted), the frame ends with a bad CRC
        # and the receiver's RESEND gets a SKIP: a counted gap, as for any
        # entry evicted before it was acknowledged.
        buf = self._buf
        mv = self._bmv
        for k in blocks(body, buf, self.max_len, True, tail):
            n = 0
            while n < k:  # a UART or tty may take part of a write, or none
                try:
                    w = self.f.write(mv[n:k])
                except OSError as e:
                    if e.args and e.args[0] == 11:  # EAGAIN: the line's buffer is full
                        w = None
                    else:
                        raise
                if not w:
                    await compat.asyncio.sleep(self.poll_ms / 1000)
                    continue
                n += w

    def close(self):
        self.closed = True

    def stats(self):
        return self.frames.stats()
