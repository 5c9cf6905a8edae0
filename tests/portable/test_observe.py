"""conn.observe(): publishes and retained changes in one ordered feed."""

import edgebus
from edgebus import Message, RetainedEvent
from tests.portable.support import raises


def test_observer_sees_publish_retain_unretain_in_order():
    bus = edgebus.Bus()
    c = bus.connect()
    o = c.observe("a/#", queue_len=8)
    c.publish("a/1", 1)
    c.retain("a/2", 2)
    c.publish("b/1", 9)
    c.unretain("a/2")
    got = [o.recv_nowait() for _ in range(3)]
    assert o.recv_nowait() is None
    assert type(got[0]) is Message and got[0].payload == 1
    assert type(got[1]) is RetainedEvent and got[1].op == "retain" and got[1].topic == ("a", "2")
    assert type(got[2]) is RetainedEvent and got[2].op == "unretain"
    assert o.kind == "observer"


def test_observer_bounded_and_counted():
    bus = edgebus.Bus()
    c = bus.connect()
    o = c.observe("#", queue_len=2)
    for i in range(5):
        c.publish("t", i)
    assert o.dropped() == 3 and c.dropped() == 3
    assert [o.recv_nowait().payload, o.recv_nowait().payload] == [3, 4]
    assert bus.stats()["observers"] == 1
    o.close()
    assert bus.stats()["observers"] == 0 and o.why() == "closed"
    c.publish("t", 5)
    assert o.recv_nowait() is None


def test_observer_authorised_as_subscribe_and_watch():
    seen = []

    def auth(ctx):
        seen.append(ctx["action"])
        return ctx["action"] != "watch_retained"

    bus = edgebus.Bus(authoriser=auth)
    c = bus.connect()
    raises(edgebus.Denied, c.observe, "#")
    assert seen == ["subscribe", "watch_retained"]
    assert bus.stats()["observers"] == 0


def test_extra_taken_from_another_origin_is_copied_whole():
    # Forwarding origin.extra as a new extra (as a bridge does) keeps every key.
    bus = edgebus.Bus()
    c = bus.connect()
    s = c.subscribe("#")
    c.publish("a", 1, extra={"ts": 5, "k": "v"})
    m = s.recv_nowait()
    c.publish("b", 2, extra=m.origin.extra)
    assert s.recv_nowait().origin.extra == {"ts": 5, "k": "v"}


def test_wake_on_sets_the_event_for_every_accepted_item():
    import asyncio

    async def main():
        bus = edgebus.Bus()
        c = bus.connect()
        ev = asyncio.Event()
        subs = [c.subscribe("a"), c.subscribe("b", queue_len=1, full="reject_newest")]
        for s in subs:
            s.wake_on(ev)
        c.publish("b", 1)
        assert ev.is_set()
        ev.clear()
        c.publish("b", 2)  # rejected: nothing new to wake for
        assert not ev.is_set() and subs[1].dropped() == 1
        c.publish("a", 3)
        await asyncio.wait_for(ev.wait(), 1)
        assert subs[0].recv_nowait().payload == 3 and subs[1].recv_nowait().payload == 1

    asyncio.run(main())
