"""Remote calls over the link, both directions (docs/protocol.md, Calls)."""
import asyncio
import edgebus
from tests.portable.support import run, araises
from tests.portable.linkkit import Joined, until, synced

# Two buses and two links in one interpreter (64-bit unix port).
MPY_HEAP = "160K"


async def _joined_with(handler_topic, handler, **kw):
    j = Joined(**kw)
    dc = j.dev.connect()
    ep = dc.bind(handler_topic, queue_len=4)
    task = asyncio.create_task(handler(ep))
    j.start()
    await until(lambda: synced(j) and ("dev", "dev1") + tuple(handler_topic.split("/")) in j.host._eps)
    return j, ep, task


def test_call_host_to_device_reply_and_fail():
    async def main():
        async def handler(ep):
            async for req in ep:
                if req.payload == "bad":
                    req.fail({"why": "bad input"})
                else:
                    req.reply({"echo": req.payload, "kind": req.origin.kind})
        j, ep, task = await _joined_with("sys/echo", handler)
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
        task = asyncio.create_task(handler())
        j.start()
        await until(lambda: synced(j) and ("host", "time") in j.dev._eps)
        assert await j.dev.connect().call("host/time", 1) == ["t", 1, "dev1"]
        ep.unbind()
        await j.stop()
    run(main())


def test_remote_unbound_endpoint_is_closed_no_route_and_routes_update():
    async def main():
        async def handler(ep):
            await ep.closed()
        j, ep, task = await _joined_with("sys/gone", handler)
        hc = j.host.connect()
        ep.unbind()
        # Until the next ROUTES, the proxy is still bound: the device answers no_route.
        e = await araises(edgebus.CallError, hc.call("dev/dev1/sys/gone", 1))
        assert e.reason in ("no_route",) or isinstance(e, edgebus.NoRoute)
        await until(lambda: ("dev", "dev1", "sys", "gone") not in j.host._eps)
        await araises(edgebus.NoRoute, hc.call("dev/dev1/sys/gone", 1))
        await j.stop()
    run(main())


def test_timeout_propagates_deadline_and_abandons_remotely():
    async def main():
        held = []

        async def handler(ep):
            async for req in ep:
                held.append(req)        # never replies
        j, ep, task = await _joined_with("sys/slow", handler)
        hc = j.host.connect()
        t0 = edgebus.now()
        await araises(edgebus.Timeout, hc.call("dev/dev1/sys/slow", 1, timeout=0.3))
        assert edgebus.now() - t0 < 1.0
        await until(lambda: held and held[0].done())   # the device's call timed out too
        assert held[0].deadline is not None
        assert held[0].reply("late") is False
        ep.unbind()
        await j.stop()
    run(main())


def test_busy_when_pending_calls_reach_the_cap():
    async def main():
        async def handler(ep):
            await ep.closed()                # holds requests, never takes them
        j, ep, task = await _joined_with("sys/hold", handler,
                                         host_kw={"max_pending": 1})
        hc = j.host.connect()
        first = asyncio.create_task(hc.call("dev/dev1/sys/hold", 1, timeout=2))
        await until(lambda: j.hl.stats()["pending_calls"] == 1)       # forwarded
        second = asyncio.create_task(hc.call("dev/dev1/sys/hold", 2, timeout=2))
        await asyncio.sleep(0.05)
        assert not second.done()          # queued in the proxy: the cap holds it back
        assert j.hl.stats()["pending_calls"] == 1
        await araises(edgebus.Full, hc.call("dev/dev1/sys/hold", 3))   # refused at once
        first.cancel()
        second.cancel()
        ep.unbind()
        await j.stop()
    run(main())


def test_pending_call_fails_session_reset_when_the_session_ends():
    async def main():
        async def handler(ep):
            await ep.closed()
        j, ep, task = await _joined_with("sys/hold", handler)
        hc = j.host.connect()
        call = asyncio.create_task(hc.call("dev/dev1/sys/hold", 1, timeout=5))
        await until(lambda: j.hl.stats()["pending_calls"] == 1)
        await j.stop()
        e = await araises(edgebus.Closed, call)
        assert e.reason == "session_reset"
        ep.unbind()
    run(main())


def test_oversize_reply_fails_clearly_and_the_link_goes_on():
    async def main():
        async def handler(ep):
            async for req in ep:
                req.reply("x" * (1100 if req.payload == "big" else 1))
        j, ep, task = await _joined_with("sys/big", handler)
        hc = j.host.connect()
        e = await araises(edgebus.Failed, hc.call("dev/dev1/sys/big", "big"))
        assert "too large" in e.reason
        assert await hc.call("dev/dev1/sys/big", "small") == "x"     # still working
        assert j.dl.counters.get("oversize_out") == 1
        ep.unbind()
        await j.stop()
    run(main())
