"""Acknowledged delivery over a link (docs/protocol.md, "Acknowledgements"):
the spool keeps readings through outages, losses are said, never silent."""

import asyncio

from tests.portable.linkkit import Joined, sealed, synced, until
from tests.portable.support import run

MPY_HEAP = "256K"  # eight tests with two links each, run in one interpreter


async def _flowing(**kw):
    """Joined links, synced: (j, a host subscription to the device's
    sensor/#, a device connection)."""
    j = Joined(**kw).start()
    sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=64)
    c = j.dev.connect()
    await until(lambda: synced(j))
    return j, sub, c


def _recv_all(sub):
    out = []
    while True:
        m = sub.recv_nowait()
        if m is None:
            return out
        out.append(m)


def test_readings_before_the_first_session_arrive_late_with_their_time():
    async def main():
        j = Joined()
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=64)
        c = j.dev.connect()
        j.dl.start()  # the device boots; no line yet
        for n in range(20):
            c.publish("sensor/n", n)
            await asyncio.sleep(0)
        j.start()
        await until(lambda: synced(j))
        c.publish("sensor/n", 20)  # live
        got = []
        while len(got) < 21:
            got.append(await asyncio.wait_for(sub.recv(), 3))
        assert [m.payload for m in got] == list(range(21))
        assert [m.origin.extra["seq"] for m in got] == list(range(1, 22))
        assert all(m.origin.extra.get("late") for m in got[:20])
        assert "late" not in got[20].origin.extra
        for m in got:
            assert type(m.origin.extra["ts"]) is float and m.origin.extra["ts"] > 1.5e9
        assert j.hl.counters.get("gaps", 0) == 0 and j.hl.counters.get("duplicates", 0) == 0
        await until(lambda: j.dl.spool_stats()["depth"] == 0)
        assert j.dl.counters["acked"] == 21
        await j.stop()

    run(main(), virtual=True)


def test_outage_longer_than_the_spool_loses_exactly_the_overflow():
    async def main():
        j = Joined(dev_kw={"spool": 512}).start()
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=256)
        c = j.dev.connect()
        await until(lambda: synced(j))
        await j.stop()  # the line goes down
        for n in range(100):  # ~30-byte entries: the ring holds ~16
            c.publish("sensor/n", n)
            await asyncio.sleep(0)
        dropped = j.dl.counters.get("spool_dropped", 0)
        assert dropped > 0
        j.start()
        await until(lambda: j.dl.spool_stats()["depth"] == 0 and j.dl.status == "up")
        got = _recv_all(sub)
        while len(got) < 100 - dropped:
            got.append(await asyncio.wait_for(sub.recv(), 3))
        # the newest survive, in order; exactly the evicted are missing and counted
        assert [m.payload for m in got] == list(range(dropped, 100))
        assert j.hl.counters.get("gaps", 0) == dropped
        assert j.dl.spool_stats()["dropped_unsent"] == dropped
        await j.stop()

    run(main(), virtual=True)


def test_peer_without_the_capability_links_and_drops_what_waited_as_before():
    async def main():
        j, sub, c = await _flowing(host_kw={"ack": False})
        assert not j.dl.stats()["acking"]
        c.publish("sensor/n", 1)
        assert (await asyncio.wait_for(sub.recv(), 3)).payload == 1
        await j.stop()
        c.publish("sensor/n", 2)  # while down: dropped at the next session
        j.start()
        await until(lambda: j.hl.counters.get("syncs", 0) >= 2)
        c.publish("sensor/n", 3)
        m = await asyncio.wait_for(sub.recv(), 3)
        assert m.payload == 3 and j.hl.counters.get("gaps") == 1
        assert j.dl.counters.get("dropped_down") == 1
        assert j.hl.counters.get("unknown_type", 0) == 0  # no ACK/SKIP sent to it
        await until(lambda: j.dl.spool_stats()["depth"] == 0)  # nothing kept for it
        await j.stop()

    run(main(), virtual=True)


def test_durable_receiver_acknowledges_only_what_its_owner_confirms():
    async def main():
        j, sub, c = await _flowing(host_kw={"durable": True})
        for n in range(5):
            c.publish("sensor/n", n)
        for _ in range(5):
            await asyncio.wait_for(sub.recv(), 3)
        mark = j.hl.rx_mark()
        assert mark == (j.dl.sid, j.dl.tx_seq)
        await asyncio.sleep(0.2)
        assert j.dl.spool_stats()["depth"] == 5  # delivered, not yet durable: kept
        j.hl.acknowledge(mark)
        await until(lambda: j.dl.spool_stats()["depth"] == 0)
        assert j.dl.counters["acked"] == 5
        # a mark from another peer boot changes nothing
        j.hl.acknowledge(("another-sid", 99))
        assert j.dl.counters["acked"] == 5
        await j.stop()

    run(main(), virtual=True)


def test_a_frame_waiting_for_its_first_ack_is_not_sent_again_at_once():
    # the tail timeout runs from the send, not from an ACK that never came yet
    # (a burst's start: the bridge benchmark saw ~5% of each burst sent twice)
    async def main():
        j = Joined(host_kw={"durable": True}).start()  # acknowledges when told
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=8)
        c = j.dev.connect()
        await until(lambda: synced(j))
        c.publish("sensor/n", 1)
        await asyncio.wait_for(sub.recv(), 3)
        assert j.dl.spool_stats()["depth"] == 1 and j.dl.spool_stats()["unsent"] == 0
        j.dl.tick()
        assert j.dl.counters.get("ack_timeouts", 0) == 0
        await asyncio.sleep(0.1)
        assert j.dl.counters.get("retransmitted", 0) == 0
        assert j.hl.counters.get("duplicates", 0) == 0
        j.hl.acknowledge(j.hl.rx_mark())
        await until(lambda: j.dl.spool_stats()["depth"] == 0)
        await j.stop()

    run(main(), virtual=True)


def test_unsendable_reading_is_skipped_out_loud_and_nothing_is_asked_again():
    async def main():
        j, sub, c = await _flowing()
        c.publish("sensor/n", 1)
        c.publish("sensor/n", "x" * 2000)  # larger than a frame may be
        c.publish("sensor/n", 3)
        got = []
        while len(got) < 2:
            got.append((await asyncio.wait_for(sub.recv(), 3)).payload)
        assert got == [1, 3]
        assert j.dl.counters.get("oversize_out") == 1
        assert j.hl.counters.get("gaps") == 1
        assert j.hl.counters.get("resends_asked", 0) == 0
        await j.stop()

    run(main(), virtual=True)


def test_a_numbered_frame_that_does_not_decode_is_asked_for_once_then_a_counted_gap():
    async def main():
        j, sub, c = await _flowing()
        c.publish("sensor/n", 1)
        await asyncio.wait_for(sub.recv(), 3)
        # what the device's json made of a value JSON cannot hold: bad JSON, good CRC
        s = j.dl.tx_seq
        j.dl.tx_seq = s + 1
        j.hl.feed(sealed(j.dl, bytes([11 | 0x40, s >> 8, s & 0xFF]) + b'["n",{bad'))
        c.publish("sensor/n", 3)
        assert (await asyncio.wait_for(sub.recv(), 3)).payload == 3
        assert j.hl.counters.get("bad_frames") == 1
        # asked for again once (noise may have beaten the CRC); the device has
        # no such frame to send, so the number is a gap: counted, never silent
        assert j.hl.counters.get("resends_asked", 0) == 1
        assert j.hl.counters.get("gaps", 0) == 1 and j.hl.state["rx_next"] == s + 2
        await j.stop()

    run(main(), virtual=True)


def test_late_acks_bring_no_copies_while_data_flows_and_a_silent_tail_goes_again():
    async def main():
        j, sub, c = await _flowing(host_kw={"durable": True})
        # 3 s of data and no ACK (the owner has not confirmed a sync point):
        # a receiver behind on its log gets no copies
        for n in range(30):
            c.publish("sensor/n", n)
            await asyncio.sleep(0.1)
        assert j.dl.counters.get("ack_timeouts", 0) == 0
        assert j.hl.counters.get("duplicates", 0) == 0
        # then a pause: the unacknowledged tail goes again (it could have
        # been lost with nothing after it to say so), dropped there as copies
        await until(lambda: j.dl.counters.get("ack_timeouts", 0) == 1, 5)
        await until(lambda: j.hl.counters.get("duplicates", 0) == 30, 3)
        # still silent: the next try waits twice as long
        await asyncio.sleep(1.0)
        assert j.dl.counters["ack_timeouts"] == 1
        j.hl.acknowledge(j.hl.rx_mark())
        await until(lambda: j.dl.spool_stats()["depth"] == 0)
        got = [m.payload for m in _recv_all(sub)]
        assert got == list(range(30))
        await j.stop()

    run(main(), virtual=True)
