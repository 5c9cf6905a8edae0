"""Slow consumers and clock jumps (the reliability suite).

Slow consumers: publishers never block, every loss is counted on the feed
that lost it, memory stays bounded (tracemalloc, generous bound). Ring
semantics themselves: tests/portable/test_queue_policies.py and
test_queue_rendezvous.py.
Clock jumps: a device's wall clock set back an hour and forward a day
mid-stream; ordering and loss detection rest on sequence numbers, so
nothing changes on the host."""

import asyncio
import time
import tracemalloc

import edgebus
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import until
from tests.portable.linkkit import Joined, synced


def test_slow_consumers_never_block_publishers_and_drops_are_counted_per_feed(rel):
    n = rel.n(100000, 2000000)
    bus = edgebus.Bus(q_length=64)
    pub = bus.connect(principal="pub")
    stuck = bus.connect(principal="stuck")
    slow = stuck.subscribe("s/#", queue_len=64)  # never reads
    tiny = stuck.subscribe("s/a/#", queue_len=4, full="reject_newest")  # never reads
    watch = stuck.watch_retained("s/#", queue_len=8)  # never reads
    fast = bus.connect().subscribe("s/#", queue_len=1024)
    got = 0
    tracemalloc.start()
    base = None
    worst = 0.0
    t0 = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        pub.publish(("s", "a" if i & 1 else "b", i & 255), i)  # returns at once, always
        if i % 97 == 0:
            pub.retain(("s", "r", i & 15), i)
        worst = max(worst, time.perf_counter() - t)
        while True:  # the fast reader keeps up
            m = fast.recv_nowait()
            if m is None:
                break
            got += 1
        if i == 1000:
            base = tracemalloc.get_traced_memory()[0]
    elapsed = time.perf_counter() - t0
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    retains = len(range(0, n, 97))
    assert got == n + retains and fast.dropped() == 0  # a retain is a message too
    assert slow.dropped() == n + retains - 64  # drop_oldest: all but the last 64
    assert tiny.dropped() == n // 2 - 4  # reject_newest: all but the first 4
    assert watch.dropped() == retains - 8
    assert stuck.dropped() == slow.dropped() + tiny.dropped() + watch.dropped()
    assert grown < 1024 * 1024, grown  # bounded: no per-message growth
    rel.record(
        "fault: slow consumers on the host bus",
        n,
        publishes_per_s=round(n / elapsed),
        worst_publish_ms=round(worst * 1000, 3),
        dropped_slow=slow.dropped(),
        dropped_tiny=tiny.dropped(),
        dropped_watch=watch.dropped(),
        memory_growth_bytes=grown,
    )


def test_slow_link_loses_only_what_it_counts(rel):
    """A device publishing faster than its line drains: the link's spool (and
    its export observer before it) overflows, each loss spends a sequence
    number, and the host sees exactly that many as gaps; the device's
    publisher never waits."""
    n = rel.n(3000, 30000)

    async def main():
        j = Joined(dev_kw={"out_queue": 16}).start()
        await until(lambda: synced(j))
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=n)
        c = j.dev.connect()
        for i in range(n):
            c.publish("sensor/x", i)
            if i % 200 == 0:
                await asyncio.sleep(0)  # the line gets a moment now and then
        c.publish("sensor/x", "end")
        got = []
        while True:
            m = await asyncio.wait_for(sub.recv(), 5)
            if m.payload == "end":
                break
            got.append(m.payload)
        # lost in the export observer (before the spool) or evicted from the spool
        dropped = j.dl.counters.get("dropped_out", 0) + j.dl.counters.get("spool_dropped", 0)
        assert dropped > 0 and got == sorted(set(got))
        assert len(got) + dropped == n and j.hl.counters.get("gaps", 0) == dropped
        await j.stop()
        return dropped

    dropped = asyncio.run(main())
    rel.record(
        "fault: slow link (device spool overflow)", n, dropped_out=dropped, gaps_on_host=dropped
    )


def test_device_clock_jumps_do_not_break_ordering(tmp_path, rel, rel_device):
    rate = 100
    count = rel.n(600, 3000)
    with PtyCable() as cable:
        cfg = bridge_config.parse(
            {
                "bridge": {"state_dir": str(tmp_path / "state"), "heartbeat": 0.5},
                "log": {"dir": str(tmp_path / "log"), "segment_seconds": 1},
                "serial": [{"node": "d1", "port": cable.b, "key": "k1"}],
            }
        )

        async def main():
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            c = b.bus.connect()
            sub = c.subscribe("dev/d1/sensor/n", queue_len=count)
            dev = rel_device(cable.a, "k1", "d1", rate, count, "b1")
            await until(lambda: "serial:d1" in b.links and b.links["serial:d1"].status == "up", 30)
            link = b.links["serial:d1"]
            for jump in (-3600, 86400, -86400 * 365):
                await until(
                    lambda: (
                        link.counters.get("imported", 0)
                        >= count // 4 * (1 + [-3600, 86400, -86400 * 365].index(jump))
                    ),
                    30,
                )
                c.publish("dev/d1/cmd/clock", {"offset_s": jump})
            got = []
            while len(got) < count:
                got.append(await asyncio.wait_for(sub.recv(), 10))
            b.stop()
            await task
            dev.kill()
            return got, link

        got, link = asyncio.run(main())
    ts = [m.payload["t"] for m in got]
    backs = sum(1 for a, b2 in zip(ts, ts[1:]) if b2 < a)
    assert backs >= 2  # the device's clock did go back
    assert [m.payload["i"] for m in got] == list(range(count))
    seqs = [m.origin.extra["seq"] for m in got]
    assert seqs == list(range(seqs[0], seqs[0] + count))
    assert link.counters.get("gaps", 0) == 0 and link.counters.get("duplicates", 0) == 0
    recs = [r for _, r in tlog.read_log(str(tmp_path / "log")) if r["topic"][-1] == "n"]
    assert [r["seq"] for r in recs] == seqs  # the log's order is the device's order
    rel.record(
        "fault: device wall clock jumps (-1 h, +1 day, -1 year)",
        3,
        messages=count,
        clock_went_back=backs,
        gaps=0,
        out_of_order=0,
    )
