"""Feed close methods and reasons (docs/api.md: Feeds)."""

import edgebus


def _check(feed, close, reason, bus, key):
    assert feed.why() is None
    n = bus.stats()[key]
    assert close() is True
    assert feed.why() == reason
    assert bus.stats()[key] == n - 1
    assert close() is True and feed.close() is True
    assert feed.why() == reason


def test_subscription_close_reasons():
    bus = edgebus.Bus()
    c = bus.connect()
    s = c.subscribe("t")
    assert s.kind == "subscription"
    _check(s, s.close, "closed", bus, "subscriptions")
    s = c.subscribe("t")
    _check(s, s.unsubscribe, "unsubscribed", bus, "subscriptions")
    s = c.subscribe("t")
    _check(s, lambda: c.unsubscribe(s), "unsubscribed", bus, "subscriptions")


def test_watch_close_reasons():
    bus = edgebus.Bus()
    c = bus.connect()
    w = c.watch_retained("t")
    _check(w, w.close, "closed", bus, "retained_watches")
    w = c.watch_retained("t")
    _check(w, w.unwatch, "unwatched", bus, "retained_watches")
    w = c.watch_retained("t")
    _check(w, lambda: c.unwatch_retained(w), "unwatched", bus, "retained_watches")


def test_endpoint_close_reasons():
    bus = edgebus.Bus()
    c = bus.connect()
    e = c.bind("t")
    assert e.kind == "endpoint"
    _check(e, e.close, "closed", bus, "endpoints")
    e = c.bind("t")
    _check(e, e.unbind, "unbound", bus, "endpoints")
    e = c.bind("t")
    _check(e, lambda: c.unbind(e), "unbound", bus, "endpoints")


def test_disconnect_closes_every_feed_with_disconnected():
    bus = edgebus.Bus()
    c = bus.connect()
    feeds = [c.subscribe("a"), c.watch_retained("b"), c.bind("c"), c.retained_view("d")]
    c.disconnect()
    for f in feeds:
        assert f.why() == "disconnected"
        assert f.close() is True and f.why() == "disconnected"
    s = bus.stats()
    assert s["subscriptions"] == 0 and s["retained_watches"] == 0
    assert s["endpoints"] == 0 and s["retained_views"] == 0


def test_feed_stats_and_dropped():
    c = edgebus.Bus().connect()
    for f in (c.subscribe("a"), c.watch_retained("b"), c.bind("c")):
        st = f.stats()
        assert type(st) is dict and st["kind"] == f.kind
        assert f.dropped() == 0
    assert type(c.retained_view("d").stats()) is dict
