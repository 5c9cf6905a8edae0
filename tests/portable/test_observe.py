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
