"""What `edgebus ota push` sends one device (docs/protocol.md section 18):
the puts that carry the bundle's bytes, plain or raw deflate in the window
the device decodes, the files the device copies from what it holds instead
(op copy), what its begin says it can, and the check that the bundle fits its
flash before a byte is sent."""

from __future__ import annotations

import struct
import zlib
from typing import Any, Awaitable, Callable, Iterable, Iterator

CHUNK = 768  # data bytes per put: with its header and the frame's, under 1024
ZBIT = 0x8000  # a put's file index with this bit carries raw deflate
ZDATA = CHUNK - 2  # a compressed put's data: its header is 2 bytes longer
ZRAW = 4096  # raw bytes a compressed put decodes to at most: a short call
WBITS = 10  # the window the host compresses with at most (1 KB on the device)


class Caps:
    """What the device's begin reply says it can: ``copy`` (op copy), ``wbits``
    (the deflate window it decodes; None: it takes plain puts only),
    ``free`` (bytes free on its flash), ``heap`` (its whole GC heap; None:
    it did not say, as CPython does not). A device whose
    firmware predates these says none of them: it gets every byte, plain."""

    def __init__(self, reply: Any, full: bool = False, compress: bool = True) -> None:
        r = reply if isinstance(reply, dict) else {}
        self.copy = r.get("copy") is True and not full
        w = r.get("deflate")
        self.wbits: int | None = None
        if isinstance(w, int) and not isinstance(w, bool) and 9 <= w <= 15 and compress:
            self.wbits = min(w, WBITS)
        self.free = _count(r.get("free"))
        self.heap = _count(r.get("heap"))


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def too_big(sizes: list[int], pos: list[int], free: int | None) -> str | None:
    """Why the bundle cannot fit the device's flash (the bytes it still needs,
    copied or sent, against those free), or None. Raw bytes: on littlefs a
    file takes whole blocks, so the true need is larger, never smaller."""
    need = sum(s - p for s, p in zip(sizes, pos))
    if free is None or need <= free:
        return None
    return "does not fit its flash: the bundle needs %d more bytes, %d are free" % (need, free)


def code_too_big(paths: list[str], sizes: list[int], heap: int | None) -> str | None:
    """Why the bundle's trial could never start on the device, or None: its
    code (.mpy and .py files), which loads into the GC heap where frozen
    modules ran from flash, is larger than the whole heap (a 64 KB board and
    a 120 KB bundle: sent, it would crawl at the heap's edge for minutes and
    roll back at its first import)."""
    code = sum(s for p, s in zip(paths, sizes) if p.endswith((".mpy", ".py")))
    if heap is None or code <= heap:
        return None
    return (
        "its code cannot load: the bundle's modules take %d bytes and its whole heap is %d; "
        "freeze them into its firmware (edgebus firmware build) or give it more heap" % (code, heap)
    )


def chunks(sizes: list[int], start: list[int], size: int = CHUNK) -> Iterator[tuple[int, int, int]]:
    """(file index, offset, length) of the plain puts that complete every
    file from ``start``, in order; an empty file gets one empty put."""
    for i, total in enumerate(sizes):
        off = start[i]
        if total == 0 and off == 0:
            yield i, 0, 0
        while off < total:
            n = min(size, total - off)
            yield i, off, n
            off += n


def deflate(data: bytes, wbits: int) -> bytes:
    """data as raw deflate whose references reach back at most 2**wbits bytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, -wbits, 9)
    return c.compress(data) + c.flush()


class Packer:
    """A bundle's puts, each compressed once for every device of a push."""

    def __init__(self, blobs: list[bytes]) -> None:
        self.blobs = blobs
        self.cache: dict[tuple[int, int, int], tuple[bytes, int]] = {}

    def put(self, i: int, off: int, wbits: int | None) -> tuple[bytes, int]:
        """(a put's payload, the raw bytes of file i from off it carries):
        deflate when it carries more than a plain put (the most raw bytes
        whose deflate fits ZDATA), else plain."""
        blob = self.blobs[i]
        plain = min(CHUNK, len(blob) - off)
        if wbits is None or plain == 0:
            return struct.pack(">HI", i, off) + blob[off : off + plain], plain
        k = (i, off, wbits)
        if k not in self.cache:
            top = min(ZRAW, len(blob) - off)
            z = deflate(blob[off : off + top], wbits)
            best = (top, z) if len(z) <= ZDATA else (plain, b"")
            lo, hi = plain + 1, top - 1
            while lo <= hi and best[0] < top:  # deflate grows with its input, near enough
                mid = (lo + hi) // 2
                z = deflate(blob[off : off + mid], wbits)
                if len(z) <= ZDATA:
                    best, lo = (mid, z), mid + 1
                else:
                    hi = mid - 1
            n, z = best
            if n <= plain:  # deflate carries no more than a plain put
                self.cache[k] = (struct.pack(">HI", i, off) + blob[off : off + plain], plain)
            else:
                self.cache[k] = (struct.pack(">HIH", i | ZBIT, off, n) + z, n)
        return self.cache[k]

    def puts(
        self, files: Iterable[int], start: list[int], wbits: int | None
    ) -> Iterator[tuple[int, int, bytes]]:
        """(file index, the offset the put ends at, its payload) for every
        put that completes ``files`` from ``start``; an empty file gets one."""
        for i in files:
            off = start[i]
            if not self.blobs[i] and off == 0:
                yield i, 0, struct.pack(">HI", i, 0)
            while off < len(self.blobs[i]):
                data, n = self.put(i, off, wbits)
                off += n
                yield i, off, data


async def copy(
    call: Callable[[dict[str, Any]], Awaitable[Any]], sizes: list[int], pos: list[int]
) -> int:
    """The device copies what it can of the files it has no byte of (op
    copy, a call per COPY_BYTES it reads); ``pos`` marks those it copied
    complete. The bytes copied; ValueError for a reply out of the contract."""
    n, got, at = len(sizes) - 1, 0, 1
    while True:
        r = await call({"op": "copy", "from": at})
        done = r.get("copied") if isinstance(r, dict) else None
        nxt = r.get("next") if isinstance(r, dict) else None
        if not isinstance(done, list) or not all(
            isinstance(i, int) and at <= i <= n and not pos[i] for i in done
        ):
            raise ValueError("copy replied %r" % (r,))
        for i in done:
            pos[i] = sizes[i]
            got += sizes[i]
        if nxt is None:
            return got
        if not isinstance(nxt, int) or not at < nxt <= n:
            raise ValueError("copy replied %r" % (r,))
        at = nxt
