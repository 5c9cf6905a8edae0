"""An in-process byte pipe: two StreamTransports joined in memory through
real frame bytes, for tests and benchmarks (kept apart from ``stream`` so a
device does not load it)."""

from .. import compat
from .frame import MAX_LEN
from .stream import StreamTransport


class _PipeEnd:
    """One end of an in-process byte pipe with the asyncio stream interface."""

    def __init__(self):
        self.buf = bytearray()
        self.ev = compat.Event()
        self.eof = False
        self.peer = None
        self.filter = None  # callable(bytes) -> bytes: lets tests damage the line

    async def read(self, n):
        while not self.buf and not self.eof:
            self.ev.clear()
            await self.ev.wait()
        data = bytes(self.buf[:n])
        self.buf = self.buf[n:]
        return data

    def write(self, data):
        p = self.peer
        if p.eof:
            raise OSError("pipe closed")
        if self.filter is not None:
            data = self.filter(bytes(data))
        p.buf += data
        p.ev.set()

    async def drain(self):
        await compat.asyncio.sleep(0)

    def close(self):
        for e in (self, self.peer):
            e.eof = True
            e.ev.set()


def pair(max_len=MAX_LEN, other=None):
    """Two StreamTransports joined in memory through real frame bytes; the
    second reads frames up to ``other`` bytes when given (a peer whose
    max_len differs), else ``max_len``."""
    a = _PipeEnd()
    b = _PipeEnd()
    a.peer = b
    b.peer = a
    return StreamTransport(a, a, max_len), StreamTransport(b, b, other or max_len)
