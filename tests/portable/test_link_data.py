"""The link (docs/protocol.md): session, data with provenance, sequence numbers."""

import asyncio

from tests.portable.linkkit import Joined, sealed, synced, until, up
from tests.portable.support import run

# Two buses, two links and their frames in one interpreter: ~70 KB of code on
# the 64-bit unix port before any test data.
MPY_HEAP = (
    "224K"  # two sealed links (HMAC state, two digests a frame): 192K ran out once under load
)


def test_handshake_then_publish_with_link_provenance():
    async def main():
        j = Joined().start()
        await until(lambda: up(j))
        sub = j.host.connect().subscribe("dev/+/sensor/#")
        j.dev.connect().publish("sensor/temp", 21.5, extra={"ts": 123})
        m = await asyncio.wait_for(sub.recv(), 2)
        assert m.topic == ("dev", "dev1", "sensor", "temp") and m.payload == 21.5
        o = m.origin
        assert o.kind == "link" and o.link_id == j.hl.link_id and o.peer_node == "dev1"
        assert o.peer_sid == j.dl.sid and o.generation == 1
        assert o.extra["ts"] == 123 and o.extra["seq"] >= 1  # sender's seq kept
        await j.stop()

    run(main())


def test_sequence_numbers_increase_and_binary_payloads_cross():
    async def main():
        j = Joined().start()
        await until(lambda: synced(j))
        sub = j.host.connect().subscribe("dev/dev1/sensor/raw")
        c = j.dev.connect()
        for i in range(5):
            c.publish("sensor/raw", bytes([0, i, 255]))
        seqs = []
        for i in range(5):
            m = await asyncio.wait_for(sub.recv(), 2)
            assert m.payload == bytes([0, i, 255])
            seqs.append(m.origin.extra["seq"])
        assert seqs == list(range(seqs[0], seqs[0] + 5))
        assert j.hl.counters.get("gaps", 0) == 0
        await j.stop()

    run(main())


def test_remote_cannot_forge_provenance_or_leave_its_prefix():
    async def main():
        j = Joined(dev_kw={"exports": [("#", "")]}).start()
        await until(lambda: synced(j))
        hc = j.host.connect()
        sub = hc.subscribe("#")
        # 'extra' claiming trusted fields or a seq stays in extra; seq is overwritten
        j.dev.connect().publish("x/y", 1, extra={"link_id": "forged", "kind": "local", "seq": -5})
        m = await asyncio.wait_for(sub.recv(), 2)
        while m.topic[0] == "link":  # the host link's own status
            m = await asyncio.wait_for(sub.recv(), 2)
        assert m.topic == ("dev", "dev1", "x", "y")  # always under the mapped prefix
        assert m.origin.kind == "link" and m.origin.link_id == j.hl.link_id
        assert m.origin.extra["seq"] > 0 and m.origin.extra["link_id"] == "forged"
        await j.stop()

    run(main())


def test_local_only_topics_never_cross_and_loop_guard():
    async def main():
        j = Joined(
            dev_kw={"exports": [("#", "")], "imports": [("#", "")]},
            host_kw={"exports": [("dev/{node}/#", "dev/{node}")]},
        ).start()
        await until(lambda: synced(j))
        seen = j.host.connect().subscribe("dev/#", queue_len=32)
        dc = j.dev.connect()
        dc.publish("local/secret", 1)
        dc.retain("link/fake", 2)
        dc.publish("sensor/ok", 3)
        m = await asyncio.wait_for(seen.recv(), 2)
        assert m.topic == ("dev", "dev1", "sensor", "ok")
        # The host exports dev/dev1/# back to the device: what came from the
        # device must not return to it (loop guard).
        await asyncio.sleep(0.2)
        assert seen.recv_nowait() is None
        assert j.dl.counters.get("imported", 0) == 0
        await j.stop()

    run(main())


def _lose_one_frame(j):
    """Drop the device's next frame on the line, once."""
    state = {"drop": True}

    def lose(data):
        if state["drop"] and data.find(b"\x00") >= 0:
            state["drop"] = False
            return b"\x00"
        return data

    j.ta.writer.filter = lose


def test_frame_lost_in_flight_is_sent_again_in_order():
    async def main():
        j = Joined().start()
        await until(lambda: synced(j))
        c = j.dev.connect()
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
        c.publish("sensor/a", 0)
        await asyncio.wait_for(sub.recv(), 2)
        _lose_one_frame(j)
        c.publish("sensor/a", 1)
        await asyncio.sleep(0.1)
        c.publish("sensor/a", 2)
        got = []
        for _ in range(2):  # a loop: MicroPython has no await in comprehensions
            got.append((await asyncio.wait_for(sub.recv(), 3)).payload)
        assert got == [1, 2]
        assert j.hl.counters.get("gaps", 0) == 0
        assert j.hl.counters.get("resends_asked", 0) >= 1 and j.dl.counters.get("resends", 0) >= 1
        assert j.dl.counters.get("retransmitted", 0) >= 1
        await until(lambda: j.dl.stats()["spool"]["depth"] == 0)  # all acknowledged
        await j.stop()

    run(main())


def test_gap_counted_when_frames_are_lost_without_acks():
    async def main():
        j = Joined(dev_kw={"ack": False}).start()  # a peer without the capability
        await until(lambda: synced(j))
        assert not j.dl.stats()["acking"] and not j.hl.stats()["acking"]
        c = j.dev.connect()
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
        c.publish("sensor/a", 0)
        await asyncio.wait_for(sub.recv(), 2)
        _lose_one_frame(j)
        c.publish("sensor/a", 1)
        await asyncio.sleep(0.1)
        c.publish("sensor/a", 2)
        m = await asyncio.wait_for(sub.recv(), 2)
        assert m.payload == 2
        assert j.hl.counters.get("gaps") == 1 and j.hl.last_gap[0] == j.hl.last_gap[1]
        assert j.hl.stats()["counters"]["gaps"] == 1
        await j.stop()

    run(main())


def test_a_numbered_frame_that_passes_its_crc_but_does_not_decode_is_asked_for_again():
    from edgebus.link import wire

    async def main():
        j = Joined().start()
        await until(lambda: synced(j))
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=8)
        dc = j.dev.connect()
        dc.publish("sensor/a", 1)
        await asyncio.wait_for(sub.recv(), 3)
        hl = j.hl
        n = hl.state["rx_next"]
        asked = hl.counters.get("resends_asked", 0)
        # what noise beating the CRC looks like: the expected number, a body that
        # does not decode (the real frame is still in the device's spool)
        bad = wire.encode(wire.PUB, ["sensor/b", 2], n)[:3] + b"[{"
        hl.feed(sealed(j.dl, bad))
        assert hl.state["rx_next"] == n and hl.counters["resends_asked"] == asked + 1
        dc.publish("sensor/b", 2)
        m = await asyncio.wait_for(sub.recv(), 3)
        assert m.payload == 2 and m.origin.extra["seq"] == n
        assert hl.counters.get("gaps", 0) == 0
        # undecodable again: the number is spent, and the loss is a counted gap
        n += 1
        hl.feed(sealed(j.dl, wire.encode(wire.PUB, ["sensor/c", 3], n)[:3] + b"[{"))
        hl.feed(sealed(j.dl, wire.encode(wire.PUB, ["sensor/c", 3], n)[:3] + b"[{"))
        assert hl.state["rx_next"] == n + 1 and hl.counters["gaps"] == 1
        await j.stop()

    run(main())


def test_a_peer_retains_at_most_max_retained_facts():
    """Each retained fact costs the receiver memory for good: past
    its max_retained option a new one is refused (retained_refused); the peer's own
    facts are still updated and removed, and what it removes makes room."""

    from tests.portable.linkkit import Joined, synced, until
    from tests.portable.support import run

    async def main():
        j = Joined(host_kw={"max_retained": 3})
        j.start()
        await until(lambda: synced(j))
        c = j.dev.connect()
        base = len(j.hl._retained or ())  # what the snapshot brought (sys/...)
        for i in range(6 - base):
            c.retain("sensor/r%d" % i, i)
        await until(lambda: j.hl.counters.get("retained_refused", 0) >= 1)
        view = j.host.connect().retained_view("dev/dev1/#")
        assert len(view) == 3, list(view.snapshot())
        assert j.hl.status == "up"
        c.unretain("sensor/r0")  # room for one more
        c.retain("sensor/r1", "updated")  # its own: always taken

        def value(t):
            m = view.get("dev/dev1/sensor/" + t)
            return None if m is None else m.payload

        await until(lambda: value("r1") == "updated")
        c.retain("sensor/new", 1)
        await until(lambda: value("new") == 1)
        assert len(view) == 3
        await j.stop()

    run(main())
