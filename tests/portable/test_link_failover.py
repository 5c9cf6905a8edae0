"""A device link moving between two gateways (docs/protocol.md, "Failover"):
one Link, one sid, run over a transport to gateway A, then B, then A again.
Each gateway gets every number once from where it stands; what the other
gateway acknowledged meanwhile is not a gap (SYNCSTART's "acked"), while a
number no gateway got still is."""

import asyncio

import edgebus
from edgebus.link.link import Link
from edgebus.link.pipe import pair
from tests.portable.linkkit import KEY, until
from tests.portable.support import run

MPY_HEAP = "256K"  # two tests of three buses and three links each, in one interpreter


class _Gateways:
    def __init__(self, spool=2048):
        self.dev = edgebus.Bus()
        self.dl = Link(
            self.dev,
            "dev1",
            key=KEY,
            role="initiator",
            exports=[("sensor/#", "")],
            heartbeat=1.0,
            spool=spool,
        )
        self.gw = {}
        for name in ("a", "b"):
            bus = edgebus.Bus()
            link = Link(
                bus,
                "gw-" + name,
                key=KEY,
                role="responder",
                imports=[("#", "dev/{node}")],
                heartbeat=1.0,
            )
            sub = bus.connect().subscribe("dev/dev1/sensor/#", queue_len=128)
            self.gw[name] = (link, sub)
        self.c = self.dev.connect()
        self.n = 0

    async def over(self, name, count):
        """Publish count readings while on gateway name, until all are acknowledged."""
        h = self.gw[name][0]
        ta, tb = pair()
        tasks = [asyncio.create_task(self.dl.run(ta)), asyncio.create_task(h.run(tb))]
        await until(lambda: self.dl.status == "up" and h.status == "up")
        for _ in range(count):
            self.n += 1
            self.c.publish("sensor/n", self.n)
            await asyncio.sleep(0)
        await until(lambda: self.dl.spool_stats()["depth"] == 0)
        ta.close()
        for t in tasks:
            try:
                await t
            except Exception:
                pass

    def got(self, name):
        sub = self.gw[name][1]
        out = []
        while True:
            m = sub.recv_nowait()
            if m is None:
                return out
            out.append(m.origin.extra["seq"])


def test_what_the_other_gateway_acknowledged_is_no_gap():
    async def main():
        g = _Gateways()
        g.dl.start()
        await g.over("a", 10)
        await g.over("b", 10)
        await g.over("a", 10)
        a, b = g.gw["a"][0], g.gw["b"][0]
        assert g.got("a") == list(range(1, 11)) + list(range(21, 31))
        assert g.got("b") == list(range(11, 21))
        # B first saw this sid at 11 (no gap: it never had it before); A
        # resumed at 21, 11..20 having been acknowledged by B.
        assert a.counters.get("gaps", 0) == 0 and a.last_gap is None, a.counters
        assert a.counters["acked_elsewhere"] == 10
        assert b.counters.get("gaps", 0) == 0 and "acked_elsewhere" not in b.counters
        assert a.peer_sid == b.peer_sid == g.dl.sid

    run(main(), virtual=True)


def test_a_number_no_gateway_got_is_still_a_gap():
    async def main():
        g = _Gateways(spool=1024)
        g.dl.start()
        await g.over("a", 5)
        await g.over("b", 5)
        # Between gateways the small spool overflows: its oldest entries,
        # never sent anywhere, are lost (drop_oldest).
        for _ in range(80):
            g.n += 1
            g.c.publish("sensor/n", g.n)
            await asyncio.sleep(0)
        lost = g.dl.spool_stats()["evicted"]
        assert lost > 0
        await g.over("a", 0)
        a = g.gw["a"][0]
        assert g.got("a") == [1, 2, 3, 4, 5] + list(range(11 + lost, 91))
        assert a.counters["acked_elsewhere"] == 5
        assert a.last_gap == (11, 10 + lost) and a.counters["gaps"] == lost

    run(main(), virtual=True)
