"""The disconnect full policy (sbus's flood control): a feed that cannot keep
up closes with reason "overflow", counted (docs/api.md: Feeds)."""

import asyncio

import edgebus
from tests.portable.support import flooded, run, settle


def test_disconnect_closes_the_feed_and_counts():
    bus, pub, c, s = flooded("disconnect")
    assert s.why() == "overflow" and s.stats()["full"] == "disconnect"
    # What was queued before the overflow can still be drained.
    assert [s.recv_nowait().payload, s.recv_nowait().payload] == [0, 1]
    assert s.recv_nowait() is None
    st = bus.stats()
    assert st["overflows"] == 1 and st["dropped"] == 1 and st["subscriptions"] == 0
    assert c.stats()["subscriptions"] == 0 and not c.is_disconnected()


def test_overflow_mid_delivery_skips_no_other_subscriber():
    # Three feeds share one pattern; the first closes while the bus delivers.
    bus = edgebus.Bus()
    c = bus.connect()
    strict = c.subscribe("a/+", queue_len=1, full="disconnect")
    others = [c.subscribe("a/+", queue_len=4), c.subscribe("a/+", queue_len=4)]
    c.publish("a/x", 1)
    c.publish("a/x", 2)
    c.publish("a/x", 3)
    assert strict.why() == "overflow"
    for o in others:
        assert [o.recv_nowait().payload for _ in range(3)] == [1, 2, 3]
    assert bus.stats()["subscriptions"] == 2 and bus.stats()["overflows"] == 1


def test_watch_and_rendezvous_disconnect():
    bus = edgebus.Bus(full="disconnect")
    c = bus.connect()
    w = c.watch_retained("r/#", queue_len=1)
    c.retain("r/1", 1)
    c.retain("r/2", 2)
    assert w.why() == "overflow" and w.stats()["full"] == "disconnect"
    rv = c.subscribe("z", queue_len=0)  # rendezvous: nobody waiting is full
    c.publish("z", 1)
    assert rv.why() == "overflow" and bus.stats()["overflows"] == 2


def test_a_waiting_receiver_sees_the_close():
    async def main():
        bus = edgebus.Bus()
        c = bus.connect()
        s = c.subscribe("t", queue_len=1, full="disconnect")
        got = []

        async def reader():
            got.append(await s.closed())

        t = asyncio.create_task(reader())
        await settle()
        c.publish("t", 1)
        c.publish("t", 2)
        await settle()
        assert got == ["overflow"]
        await t

    run(main())
