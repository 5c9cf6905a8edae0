"""Single- and multi-level wildcards (docs/api.md: Topics)."""

import edgebus
from tests.portable.support import raises


def _pair(**kw):
    bus = edgebus.Bus(**kw)
    c = bus.connect()
    return bus, c


def test_single_level_wildcard_matches_one_token():
    _, c = _pair()
    sub = c.subscribe("a/+/c")
    c.publish("a/b/c", 1)
    c.publish("a/c", 2)
    c.publish("a/b/x/c", 3)
    c.publish("a/b/c/d", 4)
    c.publish(("a", 5, "c"), 5)
    assert sub.recv_nowait().payload == 1
    assert sub.recv_nowait().payload == 5
    assert sub.recv_nowait() is None


def test_multi_level_wildcard_matches_parent_and_below():
    _, c = _pair()
    sub = c.subscribe("a/#")
    allsub = c.subscribe("#")
    for t in ("a", "a/b", "a/b/c", "b", "ab"):
        c.publish(t, t)
    got = []
    while True:
        m = sub.recv_nowait()
        if m is None:
            break
        got.append(m.payload)
    assert got == ["a", "a/b", "a/b/c"]
    assert allsub.stats()["queued"] == 5


def test_multi_level_wildcard_last_only():
    _, c = _pair()
    raises(ValueError, c.subscribe, "a/#/b")
    raises(ValueError, c.subscribe, "#/a")
    raises(ValueError, c.watch_retained, "#/#")
    raises(ValueError, c.retained_view, "a/#/+")
    assert c.stats()["subscriptions"] == 0
    # A literal '#' may sit anywhere.
    sub = c.subscribe(("a", edgebus.literal("#"), "b"))
    c.publish("a/#/b", 1)
    assert sub.recv_nowait().payload == 1


def test_bad_wildcard_settings():
    raises(TypeError, edgebus.Bus, s_wild=None)
    raises(TypeError, edgebus.Bus, m_wild=1.5)
    raises(ValueError, edgebus.Bus, s_wild="x", m_wild="x")


def test_retained_queries_use_the_same_wildcards():
    _, c = _pair()
    for t in ("a", "a/b", "a/b/c", "b/x"):
        c.retain(t, t)
    v = c.retained_view("a/#")
    assert [m.payload for m in v.snapshot()] == ["a", "a/b", "a/b/c"]
    assert [m.payload for m in c.retained_view("+/x").snapshot()] == ["b/x"]
    assert c.subscribe("a/#").stats()["queued"] == 3
    w = c.watch_retained("a/#")
    c.retain("a", 1)
    c.retain("b", 2)
    assert w.recv_nowait().topic == ("a",)
    assert w.recv_nowait() is None
