"""Relay: calls and publishes across several links, routes with paths and
priorities (docs/protocol.md, Relay)."""

import asyncio

import edgebus
from edgebus.link import routes
from tests.portable.linkkit import Joined, synced, until
from tests.portable.support import araises, run

# Up to four buses and six links in one interpreter (64-bit unix port).
MPY_HEAP = "320K"

# Small spools and queues: six links share the emulated board's 128 KB heap.
CALLS = {
    "exports": [],
    "imports": [],
    "export_calls": [("#", "")],
    "import_calls": [("#", "")],
    "spool": 512,
    "out_queue": 4,
}


def hop(a, na, b, nb, a_kw=None, b_kw=None):
    """Link bus a (node na, initiator) to bus b (node nb), calls both ways;
    each link's id names its peer, unique on its bus as a bridge's are."""
    ak = dict(CALLS, link_id="to-" + nb)
    ak.update(a_kw or {})
    bk = dict(CALLS, link_id="to-" + na)
    bk.update(b_kw or {})
    return Joined(dev_bus=a, host_bus=b, dev_node=na, host_node=nb, dev_kw=ak, host_kw=bk).start()


def offers(bus, k):
    r = routes.table(bus)["routes"].get(k)
    return [(o[0].peer_node, o[2]) for o in r.offers] if r else []


async def holding(ep, seen):
    async for req in ep:
        seen.append(req.payload)  # held: never answered


async def held_chain(topic, b_kw=None):
    """A - B - C, C owning ``topic`` and holding every request (their payloads
    in ``seen``); returns once A has the route: (a, ab, cb, seen, task)."""
    a, b, c = edgebus.Bus(), edgebus.Bus(), edgebus.Bus()
    seen = []
    task = asyncio.create_task(holding(c.connect().bind(topic, queue_len=4), seen))
    ab, cb = hop(a, "A", b, "B"), hop(c, "C", b, "B", b_kw=b_kw)
    await until(lambda: tuple(topic.split("/")) in a.endpoints())
    return a, ab, cb, seen, task


def test_a_call_crosses_two_links_and_the_path_names_each_bus():
    async def main():
        a, b, c = edgebus.Bus(), edgebus.Bus(), edgebus.Bus()
        ep = c.connect().bind("svc/echo", queue_len=4)

        async def echo():
            async for req in ep:
                o = req.origin
                req.reply([req.payload, o.kind, o.peer_node])

        task = asyncio.create_task(echo())
        ab, cb = hop(a, "A", b, "B"), hop(c, "C", b, "B")
        await until(lambda: ("svc", "echo") in a.endpoints())
        assert offers(a, ("svc", "echo")) == [("B", ["C", "B"])]
        assert await a.connect().call("svc/echo", 5) == [5, "link", "B"]
        assert ab.dl.stats()["proxies"] == 1 and cb.hl.stats()["proxies"] == 1
        ep.unbind()  # withdrawn at C: gone at B, then at A
        await until(lambda: ("svc", "echo") not in a.endpoints())
        await araises(edgebus.NoRoute, a.connect().call("svc/echo", 6))
        task.cancel()
        await ab.stop()
        await cb.stop()

    run(main(), virtual=True)


def test_a_deadline_that_runs_out_in_the_middle_hop_never_reaches_the_owner():
    async def main():
        # B holds one call to C at a time
        a, ab, cb, seen, task = await held_chain("svc/slow", b_kw={"max_pending": 1})
        ac = a.connect()
        first = asyncio.create_task(ac.call("svc/slow", 1, timeout=1.0))
        await until(lambda: seen == [1])
        # The second waits in B's proxy queue for the first: its time runs out there.
        await araises(edgebus.Timeout, ac.call("svc/slow", 2, timeout=0.3))
        await araises(edgebus.Timeout, first)
        await until(lambda: cb.hl.stats()["pending_calls"] == 0)
        c2 = asyncio.create_task(ac.call("svc/slow", 3, timeout=1.0))
        await until(lambda: seen == [1, 3])  # 2 never reached C
        c2.cancel()
        task.cancel()
        await ab.stop()
        await cb.stop()

    run(main(), virtual=True)


def test_a_loop_of_three_buses_settles_quiet_and_withdraws_everywhere():
    async def main():
        a, b, c = edgebus.Bus(), edgebus.Bus(), edgebus.Bus()
        ep = a.connect().bind("svc/x", queue_len=4)

        async def serve():
            async for req in ep:
                req.reply("from A")

        task = asyncio.create_task(serve())
        js = [hop(a, "A", b, "B"), hop(b, "B", c, "C"), hop(c, "C", a, "A")]
        k = ("svc", "x")
        await until(lambda: k in b.endpoints() and k in c.endpoints())
        await until(lambda: len(offers(b, k)) == 2 and len(offers(c, k)) == 2)
        # Each ranks the direct route first (fewer hops); none comes back to A.
        assert offers(b, k) == [("A", ["A"]), ("C", ["A", "C"])]
        assert offers(c, k) == [("A", ["A"]), ("B", ["A", "B"])]
        assert offers(a, k) == []
        links = [l for j in js for l in (j.dl, j.hl)]

        def sent():
            return [l.counters.get("routes_sent", 0) for l in links]

        before = sent()
        await asyncio.sleep(1.0)  # several ticks on every link
        assert sent() == before  # quiet: no ROUTES goes round the loop
        assert await c.connect().call("svc/x", None) == "from A"
        ep.unbind()
        await until(lambda: k not in b.endpoints() and k not in c.endpoints())
        await asyncio.sleep(0.6)  # no phantom route comes back
        assert k not in b.endpoints() and k not in c.endpoints()
        task.cancel()
        for j in js:
            await j.stop()

    run(main(), virtual=True)


def test_priority_picks_the_route_and_no_route_falls_through_to_the_next():
    async def main():
        h, x, y = edgebus.Bus(), edgebus.Bus(), edgebus.Bus()
        eps = {}
        tasks = []
        for name, bus in (("X", x), ("Y", y)):
            ep = eps[name] = bus.connect().bind("svc/job", queue_len=4)

            async def serve(ep=ep, name=name):
                async for req in ep:
                    req.reply(name)

            tasks.append(asyncio.create_task(serve()))
        jy = hop(y, "Y", h, "H")
        jx = hop(x, "X", h, "H", b_kw={"priority": 10})
        k = ("svc", "job")
        await until(lambda: len(offers(h, k)) == 2)
        assert [n for n, _ in offers(h, k)] == ["X", "Y"]
        hc = h.connect()
        assert await hc.call("svc/job", 1) == "X"
        eps["X"].unbind()  # X's ROUTES has not said so yet
        assert await hc.call("svc/job", 2) == "Y"
        assert jx.hl.counters.get("calls_fell_through") == 1
        assert jy.hl.counters.get("calls_out") == 1  # Y served only the fall-through
        for t in tasks:
            t.cancel()
        await jx.stop()
        await jy.stop()

    run(main(), virtual=True)


def test_a_route_that_vanishes_mid_call_fails_the_call_at_once():
    async def main():
        a, ab, cb, seen, task = await held_chain("svc/hold")
        call = asyncio.create_task(a.connect().call("svc/hold", 1, timeout=10))
        await until(lambda: seen == [1])
        await cb.stop()  # the C-B link goes mid-call
        e = await araises(edgebus.Closed, call)
        assert e.reason == "session_reset"
        await until(lambda: ("svc", "hold") not in a.endpoints())
        task.cancel()
        await ab.stop()

    run(main(), virtual=True)


def test_a_relayed_publish_names_where_it_entered_and_who_passed_it_on():
    async def main():
        a, b, c = edgebus.Bus(), edgebus.Bus(), edgebus.Bus()
        ab = hop(
            a, "A", b, "B", a_kw={"exports": [("sensor/#", "")]}, b_kw={"imports": [("#", "a")]}
        )
        cb = hop(c, "C", b, "B", a_kw={"imports": [("#", "")]}, b_kw={"exports": [("a/#", "")]})
        await until(lambda: synced(ab) and synced(cb))
        sub = c.connect().subscribe("a/#", queue_len=4)
        mid = b.connect().subscribe("a/#", queue_len=4)
        a.connect().publish("sensor/t", 21.5)
        m = await asyncio.wait_for(sub.recv(), 3)
        assert m.topic == ("a", "sensor", "t") and m.payload == 21.5
        assert m.origin.peer_node == "B"
        assert m.origin.extra["src"] == "A" and m.origin.extra["via"] == ["B"]
        # A's boot and number, as B received them, travel on beside src; seq
        # is C's own (the B-C link's number), as ever
        at_b = await asyncio.wait_for(mid.recv(), 3)
        assert m.origin.extra["src_sid"] == at_b.origin.peer_sid == ab.dl.sid
        assert m.origin.extra["src_seq"] == at_b.origin.extra["seq"]
        assert m.origin.extra["seq"] == cb.dl.state["rx_next"] - 1
        await ab.stop()
        await cb.stop()

    run(main(), virtual=True)


def test_a_publish_in_a_ring_of_buses_stops_and_never_returns_to_its_source():
    async def main():
        a, b, c = edgebus.Bus(), edgebus.Bus(), edgebus.Bus()
        data = {"exports": [("t/#", "")], "imports": [("t/#", "")]}
        js = [
            hop(a, "A", b, "B", data, data),
            hop(b, "B", c, "C", data, data),
            hop(c, "C", a, "A", data, data),
        ]
        for j in js:
            await until(lambda: synced(j))
        subs = [bus.connect().subscribe("t/#", queue_len=8) for bus in (a, b, c)]
        a.connect().publish("t/x", 1)
        await until(
            lambda: sum(l.counters.get("relay_loops", 0) for j in js for l in (j.dl, j.hl)) >= 2
        )
        await asyncio.sleep(0.3)  # time for anything still going round

        def drain(s):
            out = []
            m = s.recv_nowait()
            while m is not None:
                out.append((m.origin.peer_node, m.origin.extra and m.origin.extra.get("via")))
                m = s.recv_nowait()
            return out

        # A sees only its own publish; B and C once per path (no dedup in a
        # mesh: docs/protocol.md §7), and it goes no further.
        assert drain(subs[0]) == [(None, None)]
        assert sorted(drain(subs[1]), key=str) == [("A", None), ("C", ["C"])]
        assert sorted(drain(subs[2]), key=str) == [("A", None), ("B", ["B"])]
        for j in js:
            await j.stop()

    run(main(), virtual=True)
