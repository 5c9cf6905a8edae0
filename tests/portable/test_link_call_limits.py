"""Remote calls over the link: limits and failures (docs/protocol.md, Calls)."""

import asyncio

import edgebus
from tests.portable.linkkit import joined_with, until
from tests.portable.support import araises, run

# Two buses and two links in one interpreter (64-bit unix port), the link's
# code on the heap: a heap at the edge fails the 1,100-byte reply's allocation
# rather than the test, so this one keeps 10% above the edge.
MPY_HEAP = "240K"  # the link code is in the heap here (the .mpy), not in flash


def test_busy_when_pending_calls_reach_the_cap():
    async def main():
        async def handler(ep):
            await ep.closed()  # holds requests, never takes them

        j, ep, task = await joined_with("sys/hold", handler, host_kw={"max_pending": 1})
        hc = j.host.connect()
        first = asyncio.create_task(hc.call("dev/dev1/sys/hold", 1, timeout=2))
        await until(lambda: j.hl.stats()["pending_calls"] == 1)  # forwarded
        second = asyncio.create_task(hc.call("dev/dev1/sys/hold", 2, timeout=2))
        await asyncio.sleep(0.05)
        assert not second.done()  # queued in the proxy: the cap holds it back
        assert j.hl.stats()["pending_calls"] == 1
        await araises(edgebus.Full, hc.call("dev/dev1/sys/hold", 3))  # refused at once
        first.cancel()
        second.cancel()
        ep.unbind()
        await j.stop()

    run(main())


def test_pending_call_fails_session_reset_when_the_session_ends():
    async def main():
        async def handler(ep):
            await ep.closed()

        j, ep, task = await joined_with("sys/hold", handler)
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

        j, ep, task = await joined_with("sys/big", handler)
        hc = j.host.connect()
        e = await araises(edgebus.Failed, hc.call("dev/dev1/sys/big", "big"))
        assert "too large" in e.reason
        assert await hc.call("dev/dev1/sys/big", "small") == "x"  # still working
        assert j.dl.counters.get("oversize_out") == 1
        ep.unbind()
        await j.stop()

    run(main())
