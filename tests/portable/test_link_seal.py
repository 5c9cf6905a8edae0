"""Sealed sessions (docs/protocol.md section 17): every frame after AUTH
carries a counter and a tag; a forged, replayed or foreign frame is refused
and counted, nothing in it is acted on, and the session stays up. Old peers
still link unless a side requires the seal; a stripped seal is caught."""

import asyncio
import binascii
import json

import edgebus
from edgebus.link import cipher, frame, seal, wire
from edgebus.link.link import Link
from tests.portable.linkkit import Joined, sealed, synced, until
from tests.portable.support import run

# Two or four links per test, their pipes and route tables; 256K failed once
# (MemoryError) once the link's code grew on the unix port, where it sits in the heap.
MPY_HEAP = "288K"


async def _flowing(**kw):
    j = Joined(**kw).start()
    sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
    await until(lambda: synced(j))
    return j, sub


def _refused(link, what, before, n=1):
    return link.counters.get(what, 0) == before + n and link.status == "up"


def test_every_frame_after_auth_is_sealed_and_data_flows():
    async def main():
        seen = []
        j = Joined()

        def tap(data):
            b = frame.decode(data)
            if b is not None:
                seen.append(b)
            return data

        j.start()
        j.ta.writer.filter = tap
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
        await until(lambda: synced(j))
        j.dev.connect().publish("sensor/t", 21)
        m = await asyncio.wait_for(sub.recv(), 3)
        assert m.payload == 21 and m.origin.extra["seq"] == 1
        assert [b[0] for b in seen[:2]] == [wire.HELLO, wire.AUTH]
        wire.decode(seen[1])  # AUTH: no seal
        # after it, every frame ends with counter 1, 2, 3, ... and a tag
        ctrs = [int.from_bytes(bytes(b[-12:-8]), "big") for b in seen[2:]]
        assert ctrs == list(range(1, len(seen) - 1))
        types = [b[0] & wire.TYPE_MASK for b in seen[2:]]  # clear even when encrypted
        assert wire.PUB in types and wire.SYNCSTART in types
        assert j.dl.counters.get("forged", 0) == j.hl.counters.get("forged", 0) == 0
        await j.stop()

    run(main(), virtual=True)


def test_a_flipped_tag_bit_a_replay_and_a_foreign_frame_are_refused():
    async def main():
        j, sub = await _flowing()
        other, _ = await _flowing()  # same key, another session
        hl = j.hl
        n = hl.state["rx_next"]
        j.dl.tx_seq = n + 1  # the device skips the number we forge with
        good = sealed(j.dl, wire.encode(wire.PUB, ["sensor/f", 7], n))
        flipped = bytearray(good)
        flipped[-1] ^= 0x01
        f0 = hl.counters.get("forged", 0)
        hl.feed(flipped)
        assert _refused(hl, "forged", f0) and hl.state["rx_next"] == n
        hl.feed(sealed(other.dl, wire.encode(wire.PUB, ["sensor/f", 8], n)))
        assert _refused(hl, "forged", f0, 2) and hl.state["rx_next"] == n
        assert sub.recv_nowait() is None
        hl.feed(good)  # the genuine frame itself is taken
        assert (await asyncio.wait_for(sub.recv(), 3)).payload == 7
        r0 = hl.counters.get("replayed", 0)
        hl.feed(good)  # again: its tag holds, its counter is old
        assert _refused(hl, "replayed", r0) and sub.recv_nowait() is None
        assert hl.counters.get("duplicates", 0) == 0  # refused before the data layer
        await j.stop()
        await other.stop()

    run(main(), virtual=True)


def test_forged_control_frames_free_nothing_and_end_nothing():
    async def main():
        # durable: the host acknowledges only what its owner confirms, so the
        # device's readings wait in its spool for an ACK
        j, sub = await _flowing(host_kw={"durable": True})
        other, _ = await _flowing()
        dl, hl = j.dl, j.hl
        dc = j.dev.connect()
        for i in range(3):
            dc.publish("sensor/s", i)
            await asyncio.wait_for(sub.recv(), 3)
        depth = dl.spool_stats()["depth"]
        assert depth == 3
        n = hl.state["rx_next"]
        for t, obj, to in (
            (wire.ACK, 10**6, dl),
            (wire.RESEND, 1, dl),
            (wire.SKIP, n + 5, hl),
            (wire.BYE, {"reason": "x"}, hl),
            (wire.BYE, {"reason": "x"}, dl),
            (wire.ERROR, {"code": "protocol", "msg": "x"}, hl),
        ):
            for forged in (
                wire.encode(t, obj),  # no seal at all
                sealed(other.hl if to is dl else other.dl, wire.encode(t, obj)),
            ):
                f0 = to.counters.get("forged", 0)
                to.feed(forged)
                assert _refused(to, "forged", f0), (wire.NAMES[t], to.counters)
        assert dl.spool_stats()["depth"] == depth  # nothing freed
        assert dl.counters.get("resends", 0) == 0 and dl.counters.get("retransmitted", 0) == 0
        assert hl.state["rx_next"] == n and hl.counters.get("gaps", 0) == 0
        assert dl.counters["sessions"] == 1 and hl.counters["sessions"] == 1
        # the genuine ACK frees them
        hl.acknowledge(hl.rx_mark())
        await until(lambda: dl.spool_stats()["depth"] == 0)
        await j.stop()
        await other.stop()

    run(main(), virtual=True)


def test_an_unsealed_error_to_the_initiator_is_refused_and_the_peer_asked():
    async def main():
        # The PING must be answered within min(2 s, heartbeat): the longest
        # grace, as one loaded MicroPython process runs both ends (real time).
        j, sub = await _flowing(hb=3.0)
        dl = j.dl
        dl.rtt = None
        f0 = dl.counters.get("forged", 0)
        dl.feed(wire.encode(wire.ERROR, {"code": "no_session", "msg": "x"}))
        assert _refused(dl, "forged", f0)
        await until(lambda: dl.rtt is not None)  # its PING answered, sealed: the peer is there
        assert dl.status == "up" and dl.counters["sessions"] == 1
        await j.stop()

    run(main(), virtual=True)


def test_an_old_peer_links_unsealed_only_where_the_other_side_offers():
    async def main():
        j, sub = await _flowing(dev_kw={"seal": "off"}, host_kw={"seal": "offer"})
        assert j.hl._seal is None and j.dl._seal is None
        j.dev.connect().publish("sensor/o", 1)
        assert (await asyncio.wait_for(sub.recv(), 3)).payload == 1
        await j.stop()
        j = Joined(dev_kw={"seal": "off"}).start()  # the default: "auto", a seal required
        await until(lambda: j.hl.counters.get("seal_refused", 0) >= 1)
        assert j.hl.status != "up" and j.dl.status != "up"
        assert j.dl.last_error and "seal_required" in j.dl.last_error
        await j.stop()

    run(main(), virtual=True)


def _no_aes():
    """True on a build without AES (the emulated board), after checking that
    asking it to encrypt is refused, saying why."""
    if cipher.BACKEND is not None:
        return False
    try:
        Link(edgebus.Bus(), "x", key=b"k", seal="encrypt")
    except ValueError as e:
        assert "AES" in str(e)
        return True
    raise AssertionError("a runtime without AES accepted seal='encrypt'")


def _tapped(**kw):
    """Joined links whose device-to-host frames are recorded as they cross."""
    seen = []

    def tap(data):
        seen.append(data)
        return data

    j = Joined(**kw).start()
    j.ta.writer.filter = tap
    return j, seen


def test_the_keystream_is_aes_128_ctr_on_every_backend():
    """A known answer from CTR mode itself (the cryptography package's
    CTR, counter block = frame counter then zeros): each backend, whatever
    way it makes the keystream, gives these bytes, over three blocks."""
    if _no_aes():
        return
    out = cipher.ctr(cipher.key(bytes(range(16))), 0x01020304, bytes(range(40)))
    assert binascii.hexlify(out) == (
        b"ce17dd0ed624192eb2696dcfbbcc381b95c620229eac7c9265534c629cf2c92f1dc9d53f6a019c87"
    )
    assert cipher.ctr(cipher.key(bytes(16)), 1, b"") == b""


def test_an_encrypted_session_hides_what_it_carries():
    if _no_aes():
        return

    async def main():
        enc = {"seal": "encrypt"}
        j, seen = _tapped(dev_kw=enc, host_kw=enc)
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
        await until(lambda: synced(j))
        assert seal.encrypted(j.dl) and seal.encrypted(j.hl)
        j.dev.connect().publish("sensor/secret", "plain-reading-4711")
        m = await asyncio.wait_for(sub.recv(), 3)
        assert m.payload == "plain-reading-4711"
        wire_bytes = b"".join(seen)
        assert b"plain-reading" not in wire_bytes and b"sensor/secret" not in wire_bytes
        # a bit flipped in the ciphertext: refused by the tag, nothing decrypted
        n = j.hl.state["rx_next"]
        j.dl.tx_seq = n + 1
        good = bytearray(sealed(j.dl, wire.encode(wire.PUB, ["sensor/f", 7], n)))
        good[3] ^= 0x01
        f0 = j.hl.counters.get("forged", 0)
        j.hl.feed(good)
        assert _refused(j.hl, "forged", f0) and sub.recv_nowait() is None
        await j.stop()
        mac = {"seal": "mac"}  # on both sides: readable, but sealed
        j, seen = _tapped(dev_kw=mac, host_kw=mac)
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
        await until(lambda: synced(j))
        assert j.dl._seal is not None and not seal.encrypted(j.dl)
        j.dev.connect().publish("sensor/secret", "plain-reading-4711")
        await asyncio.wait_for(sub.recv(), 3)
        assert b"plain-reading-4711" in b"".join(seen)
        await j.stop()

    run(main(), virtual=True)


def test_a_side_that_must_encrypt_refuses_a_peer_that_only_seals():
    if _no_aes():
        return

    async def main():
        for dev, host, refuser in (("mac", "encrypt", "hl"), ("encrypt", "mac", "dl")):
            j = Joined(dev_kw={"seal": dev}, host_kw={"seal": host}).start()
            await until(lambda: getattr(j, refuser).counters.get("seal_refused", 0) >= 1)
            assert j.hl.status != "up" and j.dl.counters.get("sessions", 0) == 0
            await j.stop()
        for dev in ("offer", "auto"):  # each encrypts where the peer asks
            j, sub = await _flowing(dev_kw={"seal": dev}, host_kw={"seal": "encrypt"})
            assert seal.encrypted(j.dl)
            await j.stop()
        j, sub = await _flowing(dev_kw={"seal": "auto"}, host_kw={"seal": "mac"})
        assert j.dl._seal is not None and not seal.encrypted(j.dl)
        await j.stop()

    run(main(), virtual=True)


def _strip_seal(kind, cap=wire.CAP_SEAL):
    """A man in the middle: removes ``cap`` from the caps of ``kind`` frames."""

    def f(data):
        b = frame.decode(data)
        if b is None or b[0] != kind:
            return data
        obj = json.loads(b[1:])
        obj["caps"] = [c for c in obj["caps"] if c != cap]
        return frame.encode(wire.encode(kind, obj), frame.MAX_LEN, True)

    return f


def test_a_seal_stripped_from_either_side_of_the_handshake_is_caught():
    async def main():
        offer = {"seal": "offer"}
        caps = (wire.CAP_SEAL,) if cipher.BACKEND is None else (wire.CAP_SEAL, wire.CAP_ENC)
        for kind, cap in [(k, c) for c in caps for k in (wire.HELLO, wire.HELLO_ACK)]:
            j = Joined(dev_kw=offer, host_kw=offer)
            j.start()
            (j.ta if kind == wire.HELLO else j.tb).writer.filter = _strip_seal(kind, cap)
            await until(
                lambda: (
                    j.hl.counters.get("auth_failures", 0) >= 1
                    or j.dl.counters.get("auth_failures", 0) >= 1
                )
            )
            assert j.hl.status != "up" and j.dl.counters.get("sessions", 0) == 0
            if kind == wire.HELLO and cap == wire.CAP_SEAL:  # the initiator's seal mark
                assert j.hl.counters.get("downgrades", 0) >= 1
            await j.stop()

    run(main(), virtual=True)


def test_word_that_a_sealed_peer_is_gone_is_checked_not_obeyed():
    """Anyone on a broker can publish a presence "offline": in a sealed
    session the link PINGs and keeps the session when the peer answers
    sealed; a peer that answers nothing loses it within min(2 s, heartbeat).
    Unsealed, the word ends the session at once."""

    async def main():
        j, _ = await _flowing(hb=2.0)
        assert j.dl._seal is not None
        n = j.dl.counters["sessions"]
        j.dl.peer_presence(False)  # the peer is alive and answers
        await until(lambda: j.dl.counters.get("peer_offline") == 1)
        rx = j.dl.counters.get("frames_in", 0)
        await until(lambda: j.dl.counters.get("frames_in", 0) > rx, 3)  # its PONG
        await asyncio.sleep(2.5)  # past the check's 2 s: still up
        assert j.dl.status == "up" and j.dl.counters["sessions"] == n
        j.tasks[1].cancel()  # now it is gone: nothing answers
        j.dl.peer_presence(False)
        # ended by the check (2 s), well before the liveness timeout (3 heartbeats: 6 s)
        await until(lambda: j.dl.status != "up", 4.5)
        j.ta.close()
        await asyncio.gather(*j.tasks, return_exceptions=True)
        j, _ = await _flowing(hb=0.5, dev_kw={"seal": "off"}, host_kw={"seal": "off"})
        assert j.dl._seal is None
        j.dl.peer_presence(False)
        assert j.dl.status != "up" and j.dl.counters.get("session_ends") == 1
        await j.stop()

    run(main(), virtual=True)
