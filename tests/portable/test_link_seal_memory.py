"""Encrypted sessions on a small heap: a frame is encrypted in place in the
one buffer it is copied into (MicroPython), and a MemoryError holds the
writer on its frame rather than sending the next ones out of order."""

import asyncio
import gc

from edgebus.link import cipher, seal, wire
from tests.portable.linkkit import Joined, synced, until
from tests.portable.support import run

MPY_HEAP = "256K"  # two links, their pipes and route tables

ENC = {"seal": "encrypt"}


async def _encrypted():
    j = Joined(dev_kw=ENC, host_kw=ENC).start()
    await until(lambda: synced(j))
    assert seal.encrypted(j.dl) and seal.encrypted(j.hl)
    return j


def _body(n):
    return bytes([wire.PUB]) + bytes((i * 7 + 3) & 0xFF for i in range(n - 1))


def test_bodies_of_every_length_open_as_sealed_and_a_fresh_one_stays():
    if cipher.BACKEND is None:
        return

    async def main():
        j = await _encrypted()
        room = j.dl.opts.max_len - seal.TAIL
        for n in (1, 2, 16, 17, 18, 128, 129, 130, 900, room):
            body = _body(n)
            x, t = seal.out(j.dl, body)
            assert len(x) == n and (n < 17 or bytes(x[1:]) != body[1:])
            assert bytes(seal.opened(j.hl, bytes(x) + bytes(t))) == body
        # fresh (close()'s BYE while the writer sends): its own buffers
        x, t = seal.out(j.dl, _body(300), True)
        kept = bytes(x) + bytes(t)
        seal.out(j.dl, _body(400))
        assert bytes(x) + bytes(t) == kept
        assert bytes(seal.opened(j.hl, kept)) == _body(300)
        await j.stop()

    run(main())


def test_encrypting_a_longer_body_takes_one_copy_of_it_more():
    if cipher.BACKEND is None or not hasattr(gc, "mem_alloc"):
        return  # CPython: copies and big integers, faster there (cipher.INPLACE)

    async def main():
        j = await _encrypted()
        used = []
        for n in (200, 900):
            body = _body(n)
            seal.out(j.dl, body)  # warm: nothing made once per link counts
            gc.collect()
            gc.disable()
            a = gc.mem_alloc()
            seal.out(j.dl, body)
            used.append(gc.mem_alloc() - a)
            gc.enable()
        assert used[1] <= used[0] + 700 + 64, used  # eight copies before
        await j.stop()

    run(main())


def test_a_frame_that_fails_to_seal_goes_again_before_the_next():
    async def main():
        j, sub = await _joined()
        real = seal.out
        fails = [5]

        def out(link, body, fresh=False):  # no heap for a large frame, five times
            if link is j.dl and body is not None and len(body) > 300 and fails[0]:
                fails[0] -= 1
                real(link, body, fresh)  # a counter spent, as when AES fails midway
                raise MemoryError("memory allocation failed")
            return real(link, body, fresh)

        seal.out = out
        try:
            c = j.dev.connect()
            c.publish("sensor/big", "x" * 500)
            for i in range(3):
                c.publish("sensor/small", i)
            got = await _received(sub, 4)
        finally:
            seal.out = real
        assert got == ["x" * 500, 0, 1, 2]
        assert fails[0] == 0 and j.dl.counters["memory_errors"] == 5
        assert j.hl.counters.get("out_of_order", 0) == 0
        assert j.hl.counters.get("resends_asked", 0) == 0
        await j.stop()

    run(main())


def test_a_frame_that_fails_to_send_goes_again_before_the_next():
    async def main():
        j, sub = await _joined()
        real = j.ta.send
        fails = [3]

        async def send(body, tail=None):  # no heap to frame a large one, three times
            if len(body) > 300 and fails[0]:
                fails[0] -= 1
                raise MemoryError("memory allocation failed")
            await real(body, tail)

        j.ta.send = send
        c = j.dev.connect()
        c.publish("sensor/big", "y" * 500)
        c.publish("sensor/small", 1)
        got = await _received(sub, 2)
        assert got == ["y" * 500, 1]
        assert fails[0] == 0 and j.dl.counters["memory_errors"] == 3
        assert j.hl.counters.get("out_of_order", 0) == 0
        await j.stop()

    run(main())


async def _joined():
    """The pair, encrypted where this runtime has AES, and a feed of the device's readings."""
    j = await _encrypted() if cipher.BACKEND is not None else await _sealed()
    return j, j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)


async def _received(sub, n):
    got = []  # a loop: MicroPython has no await in a comprehension
    for _ in range(n):
        got.append((await asyncio.wait_for(sub.recv(), 5)).payload)
    return got


async def _sealed():
    # a build without AES (the emulated board): sealed, not encrypted
    j = Joined(dev_kw={"seal": "mac"}, host_kw={"seal": "mac"}).start()
    await until(lambda: synced(j))
    return j
