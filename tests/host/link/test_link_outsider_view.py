"""What someone without the key sees of an encrypted session (docs/security.md):
the handshake whole; of each frame after it, its length, its first byte (type
and flags) and its seal's counter. The sequence number and all else after the
first byte are encrypted."""

import asyncio

from edgebus.link import cipher, frame, wire
from tests.portable.linkkit import Joined, synced, until
from tests.portable.support import run

READINGS = 4


def test_an_outsider_reads_the_handshake_and_each_frames_first_byte_length_and_counter():
    assert cipher.BACKEND is not None, "CPython's tests need AES (the cryptography package)"

    async def main():
        enc = {"seal": "encrypt"}
        j = Joined(dev_kw=enc, host_kw=enc)
        seen = []  # the device's frame bodies, as they cross

        def tap(data):
            seen.append(bytes(frame.decode(data)))
            return data

        j.start()
        j.ta.writer.filter = tap
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
        await until(lambda: synced(j))
        for v in range(READINGS):
            j.dev.connect().publish("sensor/t", v)
        seqs = [
            (await asyncio.wait_for(sub.recv(), 3)).origin.extra["seq"] for _ in range(READINGS)
        ]
        rx_key = j.hl._seal[5]  # the host's key for what the device sends
        await j.stop()
        return seen, seqs, rx_key

    seen, seqs, rx_key = run(main())
    hs = [b for b in seen if b[0] & wire.TYPE_MASK <= wire.AUTH]
    t, _, hello, _ = wire.decode(hs[0])
    assert t == wire.HELLO
    assert hello["node"] == "dev1" and hello["sid"] and type(hello["ms"]) is int
    assert {"seal", "enc"} <= set(hello["caps"]) and len(hello["kid"]) == 8
    pubs = []
    sealed = [b for b in seen if b[0] & wire.TYPE_MASK > wire.AUTH]
    for i, b in enumerate(sealed):
        ctr = int.from_bytes(b[-12:-8], "big")
        assert ctr == i + 1  # in clear, one by one
        plain = b[:1] + cipher.ctr(rx_key, ctr, b[1:-12])  # what the host reads
        assert len(b) == len(plain) + 12  # no padding: the length tells the content's
        t, seq, obj, _ = wire.decode(plain)
        if t == wire.PUB and obj[0] == "sensor/t":
            assert b[0] == wire.PUB | wire.F_SEQ  # the type and "numbered", in clear
            pubs.append((seq, b[1:3], plain[1:3], b[1:-12], plain[1:]))
    assert [p[0] for p in pubs] == [s & 0xFFFF for s in seqs]
    # the number and all after the first byte are not on the wire as they are
    assert any(clear != hidden for _, clear, hidden, _, _ in pubs), pubs
    assert all(wire_rest != rest for _, _, _, wire_rest, rest in pubs)
    assert not any(b"sensor/t" in b for b in sealed)
