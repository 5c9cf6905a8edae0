"""CPython's memory of routes and string topics (edgebus/memo_cpython.py): past
its limits a bus delivers the same, and a subscription change is seen at once."""

import edgebus
from edgebus import memo_cpython


def _drain(sub):
    out = []
    while (m := sub.recv_nowait()) is not None:
        out.append(m.topic)
    return out


def test_past_the_remembered_routes_every_topic_is_still_delivered(monkeypatch):
    monkeypatch.setattr(memo_cpython, "ROUTES", 2)
    bus = edgebus.Bus(q_length=64)
    c = bus.connect()
    all_ = c.subscribe("dev/+/temp")
    one = c.subscribe(("dev", 3, "#"))
    for _ in range(2):
        for i in range(5):
            c.publish(("dev", i, "temp"), i)
    assert len(bus._subs.routes) == 2  # two remembered, the others walked
    assert _drain(all_) == [("dev", i, "temp") for i in range(5)] * 2
    assert _drain(one) == [("dev", 3, "temp")] * 2


def test_a_long_topic_is_delivered_and_not_remembered():
    bus = edgebus.Bus(q_length=8)
    c = bus.connect()
    s = c.subscribe("dev/#")
    long_ = ("dev", "n1", "x" * (memo_cpython.SHORT + 1))
    for _ in range(2):
        c.publish(long_, 1)
        c.publish(("dev", "n1", "temp"), 2)
    assert _drain(s) == [long_, ("dev", "n1", "temp")] * 2
    assert list(bus._subs.routes) == [("dev", "n1", "temp")]


def test_a_new_or_ended_subscription_changes_the_next_publish_s_route():
    bus = edgebus.Bus(q_length=8)
    c = bus.connect()
    first = c.subscribe("a/b")
    c.publish("a/b", 1)
    late = c.subscribe("a/+")
    c.publish("a/b", 2)
    first.unsubscribe()
    c.publish("a/b", 3)
    assert [m.payload for m in [first.recv_nowait(), first.recv_nowait()]] == [1, 2]
    assert [late.recv_nowait().payload, late.recv_nowait().payload] == [2, 3]
    assert late.recv_nowait() is None


def test_a_string_topic_s_key_is_remembered_and_bad_ones_still_refused(monkeypatch):
    monkeypatch.setattr(memo_cpython, "KEYS", 3)
    bus = edgebus.Bus(q_length=64)
    c = bus.connect()
    s = c.subscribe("#")
    for i in range(10):  # five topics through three remembered keys
        c.publish("t/%d" % (i % 5), i)
    assert _drain(s) == [("t", "%d" % (i % 5)) for i in range(10)]
    c.publish("t/0", 0)
    c.publish("t/0", 1)
    a, b = s.recv_nowait(), s.recv_nowait()
    assert a.topic is b.topic  # the same key object: not split again
    for bad in ("", b"t/0", None):
        for _ in range(2):  # refused the second time too: nothing remembered
            try:
                c.publish(bad, 1)
            except (TypeError, ValueError):
                continue
            raise AssertionError("publish(%r) was taken" % (bad,))
