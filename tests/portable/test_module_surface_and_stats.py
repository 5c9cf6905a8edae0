"""Module surface, bus.stats() and the clock (docs/api.md: Module surface, Bus, Time)."""

import asyncio

import edgebus
from tests.portable.support import run


def test_module_surface():
    for name in (
        "Bus",
        "literal",
        "Origin",
        "Message",
        "RetainedEvent",
        "Request",
        "BusError",
        "Denied",
        "Disconnected",
        "CallError",
        "NoRoute",
        "Full",
        "Closed",
        "Timeout",
        "Failed",
        "now",
    ):
        assert hasattr(edgebus, name), name
    for name in ("Denied", "Disconnected", "CallError"):
        assert issubclass(getattr(edgebus, name), edgebus.BusError)
    for name in ("NoRoute", "Full", "Closed", "Timeout", "Failed"):
        assert issubclass(getattr(edgebus, name), edgebus.CallError)
    assert issubclass(edgebus.BusError, Exception)


def test_bus_stats():
    bus = edgebus.Bus(q_length=4, full="reject_newest", s_wild="*", m_wild=">")
    st = bus.stats()
    assert st["connections"] == 0 and st["dropped"] == 0
    assert st["queue_len"] == 4 and st["full_policy"] == "reject_newest"
    assert st["s_wild"] == "*" and st["m_wild"] == ">"
    assert st["retained_watches"] == 0 and st["retained_views"] == 0
    assert st["endpoints"] == 0
    c = bus.connect()
    c.derive()
    w = c.watch_retained(">")
    c.retained_view(">")
    c.bind("e")
    st = bus.stats()
    assert st["connections"] == 2 and st["retained_watches"] == 1
    assert st["retained_views"] == 1 and st["endpoints"] == 1
    w.close()
    assert bus.stats()["retained_watches"] == 0


def test_now_is_monotonic_seconds():
    async def main():
        a = edgebus.now()
        b = edgebus.now()
        assert b >= a
        await asyncio.sleep(0.1)
        d = edgebus.now() - b
        assert 0.08 <= d < 1.0

    run(main())


def test_endpoints_lists_the_bound_topic_keys():
    bus = edgebus.Bus()
    assert bus.endpoints() == []
    c = bus.connect()
    a = c.bind("dev/a")
    c.bind(("dev", 2))
    assert sorted(bus.endpoints(), key=str) == [("dev", "a"), ("dev", 2)]
    assert ("dev", "a") in bus.endpoints() and ("dev", "b") not in bus.endpoints()
    bus.endpoints().clear()  # a new list: the registry is not touched
    assert len(bus.endpoints()) == 2 == bus.stats()["endpoints"]
    a.unbind()
    assert bus.endpoints() == [("dev", 2)]
    c.disconnect()
    assert bus.endpoints() == []
