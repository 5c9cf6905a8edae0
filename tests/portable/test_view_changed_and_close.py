"""RetainedView changed()/close (docs/api.md: RetainedView, Precise edge cases: Views)."""

import asyncio

import edgebus
from tests.portable.support import run, settle


def test_changed_is_immediate_when_version_differs():
    async def main():
        c = edgebus.Bus().connect()
        v = c.retained_view("#")
        c.retain("a", 1)
        n = await asyncio.wait_for(v.changed(v.version - 1), 0.5)
        assert n == v.version

    run(main())


def test_changed_waits_for_a_change():
    async def main():
        bus = edgebus.Bus()
        c = bus.connect()
        v = c.retained_view("a")
        seen = v.version
        t = asyncio.create_task(v.changed(seen))
        await settle()
        assert not t.done()
        c.retain("b", 1)
        await settle()
        assert not t.done()
        bus.connect().retain("a", 1)
        await settle()
        assert t.done()
        assert await t == v.version and v.version != seen

    run(main())


def test_changed_on_closed_view_returns_none():
    async def main():
        c = edgebus.Bus().connect()
        v = c.retained_view("#")
        t = asyncio.create_task(v.changed(v.version))
        await settle()
        assert v.close() is True
        await settle()
        assert t.done() and await t is None
        c.retain("a", 1)
        # Close wins even though last_seen differs.
        assert await v.changed(v.version - 1) is None
        assert v.why() == "closed"
        assert await v.closed() == "closed"

    run(main())


def test_closed_view_stops_updating_and_leaves_stats():
    bus = edgebus.Bus()
    c = bus.connect()
    v = c.retained_view("#")
    assert bus.stats()["retained_views"] == 1 and c.stats()["retained_views"] == 1
    assert v.why() is None
    v.close()
    assert v.close() is True and v.why() == "closed"
    n = v.version
    c.retain("a", 1)
    assert v.version == n and v.get("a") is None
    assert bus.stats()["retained_views"] == 0 and c.stats()["retained_views"] == 0


def test_view_closes_on_disconnect_and_closed_waits():
    async def main():
        c = edgebus.Bus().connect()
        v = c.retained_view("#")
        t = asyncio.create_task(v.closed())
        await settle()
        assert not t.done()
        c.disconnect()
        await settle()
        assert t.done() and await t == "disconnected"
        assert v.why() == "disconnected"
        assert await v.changed(0) is None
        assert v.close() is True and v.why() == "disconnected"

    run(main())
