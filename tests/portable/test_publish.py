"""Publish fan-out to subscriptions (docs/api.md: Connection, Feeds)."""

import edgebus


def test_publish_fans_out_to_every_matching_subscription():
    bus = edgebus.Bus()
    a = bus.connect()
    b = bus.connect()
    s1 = a.subscribe("a/b")
    s2 = b.subscribe("a/+")
    s3 = b.subscribe("#")
    s4 = a.subscribe("a/c")
    p = [1]
    assert a.publish("a/b", p) is True
    for s in (s1, s2, s3):
        m = s.recv_nowait()
        assert m.topic == ("a", "b") and m.payload is p
        assert type(m) is edgebus.Message
        assert s.recv_nowait() is None
    assert s4.recv_nowait() is None


def test_publish_without_subscribers_returns_true():
    c = edgebus.Bus().connect()
    assert c.publish("nobody/here", 1) is True
    assert c.dropped() == 0


def test_order_is_kept_per_subscription():
    c = edgebus.Bus().connect()
    s = c.subscribe("n")
    for i in range(5):
        c.publish("n", i)
    assert [s.recv_nowait().payload for _ in range(5)] == [0, 1, 2, 3, 4]


def test_publish_is_not_retained():
    c = edgebus.Bus().connect()
    c.publish("t", 1)
    assert c.subscribe("t").recv_nowait() is None
    assert c.retained_view("t").snapshot() == []
    w = c.watch_retained("t")
    c.publish("t", 2)
    assert w.recv_nowait() is None


def test_closed_subscription_receives_nothing_more():
    c = edgebus.Bus().connect()
    s = c.subscribe("t")
    keep = c.subscribe("t")
    s.unsubscribe()
    c.publish("t", 1)
    assert s.recv_nowait() is None
    assert keep.recv_nowait().payload == 1
    assert s.dropped() == 0
