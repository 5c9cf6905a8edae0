"""Rules for a disconnected connection (docs/api.md: Precise edge cases: Connections)."""

import edgebus
from tests.portable.support import araises, raises, run


def test_operations_on_a_disconnected_connection_raise():
    async def main():
        bus = edgebus.Bus()
        c = bus.connect(principal="p")
        assert c.disconnect() is True and c.disconnect() is True
        assert c.is_disconnected() is True
        for fn, args in (
            (c.publish, ("t", 1)),
            (c.retain, ("t", 1)),
            (c.unretain, ("t",)),
            (c.subscribe, ("t",)),
            (c.watch_retained, ("t",)),
            (c.retained_view, ("t",)),
            (c.bind, ("t",)),
            (c.derive, ()),
        ):
            e = raises(edgebus.Disconnected, fn, *args)
            assert isinstance(e, edgebus.BusError)
        await araises(edgebus.Disconnected, c.call("t", 1))
        assert bus.stats()["retained"] == 0

    run(main())


def test_what_still_works_after_disconnect():
    bus = edgebus.Bus()
    c = bus.connect(principal="p")
    s = c.subscribe("t", queue_len=0)
    c.publish("t", 1)  # dropped: nobody waiting
    w = c.watch_retained("t")
    ep = c.bind("rpc")
    v = c.retained_view("t")
    c.disconnect()
    assert c.principal == "p" and c.dropped() == 1
    st = c.stats()
    assert st["dropped"] == 1 and st["subscriptions"] == 0 and st["endpoints"] == 0
    assert st["retained_watches"] == 0 and st["retained_views"] == 0
    assert s.close() is True and c.unsubscribe(s) is True and s.unsubscribe() is True
    assert c.unwatch_retained(w) is True and w.unwatch() is True
    assert c.unbind(ep) is True and ep.unbind() is True
    assert v.close() is True
    for f in (s, w, ep, v):
        assert f.why() == "disconnected"


def test_connection_stats_counts():
    c = edgebus.Bus().connect()
    st = c.stats()
    for k in ("dropped", "subscriptions", "endpoints", "retained_watches", "retained_views"):
        assert st[k] == 0
    s = c.subscribe("a")
    c.subscribe("b")
    c.watch_retained("c")
    c.retained_view("d")
    c.bind("e")
    st = c.stats()
    assert (st["subscriptions"], st["retained_watches"], st["retained_views"], st["endpoints"]) == (
        2,
        1,
        1,
        1,
    )
    s.close()
    assert c.stats()["subscriptions"] == 1
