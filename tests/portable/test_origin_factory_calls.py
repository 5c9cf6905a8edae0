"""origin_factory calls and a raising factory (docs/api.md: Precise edge cases: Origins)."""

import asyncio

import edgebus
from tests.portable.support import araises, raises, run


def test_callable_factory_is_called_for_every_operation():
    calls = []

    def factory():
        calls.append(1)
        return {"generation": len(calls)}

    async def main():
        c = edgebus.Bus().connect(origin_factory=factory)
        s = c.subscribe("#")
        c.publish("t", 0)
        c.retain("t", 0)
        c.unretain("t")
        ep = c.bind("rpc")
        t = asyncio.create_task(c.call("rpc", 0))
        req = await ep.recv()
        assert req.origin.generation == 4 and len(calls) == 4
        req.reply(0)
        await t
        assert s.recv_nowait().origin.generation == 1
        assert s.recv_nowait().origin.generation == 2
        assert len(calls) == 4

    run(main())


class Boom(Exception):
    pass


def _boom():
    raise Boom()


def test_raising_factory_propagates_and_nothing_happens():
    bus = edgebus.Bus()
    good = bus.connect()
    good.retain("t", "old")
    bad = bus.connect(origin_factory=_boom)
    s = good.subscribe("t")
    s.recv_nowait()
    w = good.watch_retained("t")
    v = good.retained_view("t")
    n = v.version
    raises(Boom, bad.publish, "t", 1)
    raises(Boom, bad.retain, "t", 2)
    raises(Boom, bad.retain, "new", 2)
    raises(Boom, bad.unretain, "t")
    assert s.recv_nowait() is None and w.recv_nowait() is None
    assert v.version == n and v.get("t").payload == "old"
    assert bus.stats()["retained"] == 1


def test_raising_factory_on_call_sends_nothing():
    async def main():
        bus = edgebus.Bus()
        ep = bus.connect().bind("rpc")
        bad = bus.connect(origin_factory=_boom)
        await araises(Boom, bad.call("rpc", 1))
        assert ep.recv_nowait() is None and ep.stats()["queued"] == 0

    run(main())


def test_factory_must_return_a_dict():
    c = edgebus.Bus().connect(origin_factory=lambda: "nope")
    s = c.subscribe("t")
    raises(TypeError, c.publish, "t", 1)
    assert s.recv_nowait() is None
