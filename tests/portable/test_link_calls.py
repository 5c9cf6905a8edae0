"""Remote calls over the link, both directions (docs/protocol.md, Calls)."""

import asyncio

import edgebus
from tests.portable.linkkit import Joined, joined_with, synced, until
from tests.portable.support import araises, run

# Two buses and two links in one interpreter (64-bit unix port).
MPY_HEAP = "224K"  # two links and their calls; the link code is in the heap here


def test_call_host_to_device_reply_and_fail():
    async def main():
        async def handler(ep):
            async for req in ep:
                if req.payload == "bad":
                    req.fail({"why": "bad input"})
                else:
                    req.reply({"echo": req.payload, "kind": req.origin.kind})

        j, ep, task = await joined_with("sys/echo", handler)
        hc = j.host.connect()
        assert await hc.call("dev/dev1/sys/echo", 7) == {"echo": 7, "kind": "link"}
        e = await araises(edgebus.Failed, hc.call("dev/dev1/sys/echo", "bad"))
        assert e.reason == {"why": "bad input"}
        ep.unbind()
        await j.stop()

    run(main())


def test_call_device_to_host():
    async def main():
        j = Joined()
        hc = j.host.connect()
        ep = hc.bind("host/time")

        async def handler():
            async for req in ep:
                req.reply(["t", req.payload, req.origin.peer_node])

        _task = asyncio.create_task(handler())
        j.start()
        await until(lambda: synced(j) and ("host", "time") in j.dev.endpoints())
        assert await j.dev.connect().call("host/time", 1) == ["t", 1, "dev1"]
        ep.unbind()
        await j.stop()

    run(main())


def test_remote_unbound_endpoint_is_closed_no_route_and_routes_update():
    async def main():
        async def handler(ep):
            await ep.closed()

        j, ep, task = await joined_with("sys/gone", handler)
        hc = j.host.connect()
        ep.unbind()
        # Until the next ROUTES, the proxy is still bound: the device answers no_route.
        e = await araises(edgebus.CallError, hc.call("dev/dev1/sys/gone", 1))
        assert e.reason in ("no_route",) or isinstance(e, edgebus.NoRoute)
        await until(lambda: ("dev", "dev1", "sys", "gone") not in j.host.endpoints())
        await araises(edgebus.NoRoute, hc.call("dev/dev1/sys/gone", 1))
        await j.stop()

    run(main())


def test_timeout_propagates_deadline_and_abandons_remotely():
    async def main():
        held = []

        async def handler(ep):
            async for req in ep:
                held.append(req)  # never replies

        j, ep, task = await joined_with("sys/slow", handler)
        hc = j.host.connect()
        t0 = edgebus.now()
        await araises(edgebus.Timeout, hc.call("dev/dev1/sys/slow", 1, timeout=0.3))
        assert edgebus.now() - t0 < 1.0
        await until(lambda: held and held[0].done())  # the device's call timed out too
        assert held[0].deadline is not None
        assert held[0].reply("late") is False
        ep.unbind()
        await j.stop()

    run(main())
