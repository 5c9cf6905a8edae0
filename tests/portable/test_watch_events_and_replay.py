"""Retained watches: lifecycle events and replay (docs/api.md: Delivered values, Feeds)."""

import edgebus


def _ops(w):
    out = []
    while True:
        ev = w.recv_nowait()
        if ev is None:
            return out
        out.append((ev.op, ev.topic, ev.payload))


def test_watch_sees_retain_and_unretain_not_publish():
    c = edgebus.Bus().connect()
    w = c.watch_retained("cfg/#")
    assert w.kind == "retained_watch"
    c.publish("cfg/a", 0)
    c.retain("cfg/a", 1)
    c.retain("other", 2)
    c.unretain("cfg/a")
    assert _ops(w) == [("retain", ("cfg", "a"), 1), ("unretain", ("cfg", "a"), None)]


def test_watch_without_replay_ignores_existing_values():
    c = edgebus.Bus().connect()
    c.retain("cfg/a", 1)
    w = c.watch_retained("cfg/#")
    assert w.recv_nowait() is None


def test_replay_sends_current_values_then_replay_done():
    c = edgebus.Bus().connect()
    c.retain("cfg/a", 1)
    c.retain("cfg/b", 2)
    c.retain("x", 3)
    w = c.watch_retained("cfg/+", replay=True)
    evs = []
    for _ in range(3):
        evs.append(w.recv_nowait())
    assert sorted([(e.op, e.topic, e.payload) for e in evs[:2]]) == [
        ("retain", ("cfg", "a"), 1),
        ("retain", ("cfg", "b"), 2),
    ]
    assert evs[0].origin.conn_id == c.conn_id
    d = evs[2]
    assert d.op == "replay_done" and d.topic is None and d.payload is None
    assert d.origin.kind == "bus"
    c.retain("cfg/a", 4)
    assert _ops(w) == [("retain", ("cfg", "a"), 4)]
    assert w.why() is None


def test_replay_done_with_nothing_retained():
    c = edgebus.Bus().connect()
    w = c.watch_retained("#", replay=True)
    assert _ops(w) == [("replay_done", None, None)]


def test_unretain_of_absent_topic_still_notifies():
    c = edgebus.Bus().connect()
    w = c.watch_retained("a/+")
    v = c.retained_view("a/+")
    v0 = v.version
    assert c.unretain("a/missing") is True
    ev = w.recv_nowait()
    assert ev.op == "unretain" and ev.topic == ("a", "missing") and ev.payload is None
    assert v.version == v0
