"""Retained replay to new subscriptions: matching and bounded (seed: retained replay)."""

import edgebus


def _drain(feed):
    out = []
    while True:
        m = feed.recv_nowait()
        if m is None:
            return out
        out.append(m.payload)


def test_new_subscription_gets_matching_retained_then_live():
    c = edgebus.Bus().connect()
    c.retain("a/1", 1)
    c.retain("a/2", 2)
    c.retain("b/1", 3)
    s = c.subscribe("a/+")
    assert sorted(_drain(s)) == [1, 2]
    c.publish("a/3", 4)
    assert _drain(s) == [4]


def test_replay_to_subscription_is_bounded_by_its_queue():
    bus = edgebus.Bus()
    c = bus.connect()
    for i in range(5):
        c.retain(("r", i), i)
    for full in ("drop_oldest", "reject_newest"):
        s = c.subscribe("r/+", queue_len=2, full=full)
        assert len(_drain(s)) == 2
    s = c.subscribe("r/+", queue_len=0)
    assert s.recv_nowait() is None
    assert bus.stats()["retained"] == 5


def test_replay_skips_removed_topics():
    c = edgebus.Bus().connect()
    c.retain("x", 1)
    c.retain("y", 2)
    c.unretain("x")
    assert _drain(c.subscribe("#")) == [2]
