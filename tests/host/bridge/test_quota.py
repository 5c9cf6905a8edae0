"""What one device may take of the bridge (bridge/links/quota.py): a device
that floods past its window is muted for a while, longer each time (Mutes); an
honest device never is. A device is held to its readings and bytes a second
(Quota): what is over waits in its spool, nothing is lost. Real Links, with
their counters moved as their receive path moves them, and a given clock; and
a real bridge with its log, two CPython devices on ptys."""

import asyncio

import serial_asyncio

import edgebus
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.bridge.links.quota import (
    FORGIVE,
    MUTE_AT,
    MUTE_FIRST,
    MUTE_MAX,
    Mutes,
    Quota,
    Watch,
)
from edgebus.link.link import Link
from edgebus.link.stream import StreamTransport
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import until


def _links(*nodes):
    bus = edgebus.Bus()
    return {n: Link(bus, "gw", link_id="mqtt:" + n, peer=n, status=False) for n in nodes}


def test_an_honest_device_past_its_window_now_and_then_is_never_muted():
    links = _links("honest")
    m = Mutes()
    for i in range(100):  # a window shrunk under it, every check: 256 frames past it
        links["honest"].count("over_window", 256)
        assert m.check(links, now=i * 0.25) == ([], [])
    assert m.until == {} and "muted" not in links["honest"].counters


def test_a_flood_is_muted_for_longer_each_time_and_forgiven_after_a_while():
    links = _links("evil", "honest")
    m = Mutes()
    assert m.check(links, now=0.0) == ([], [])
    links["evil"].count("over_share", MUTE_AT)
    assert m.check(links, now=0.25) == (["evil"], [])
    assert m.until == {"evil": 0.25 + MUTE_FIRST}
    links["evil"].count("over_window", 10 * MUTE_AT)  # what was on its way: no new mute
    assert m.check(links, now=1.0) == ([], [])
    assert m.check(links, now=0.25 + MUTE_FIRST) == ([], ["evil"])
    links["evil"].count("over_window", MUTE_AT)
    t = 1 + MUTE_FIRST
    assert m.check(links, now=t) == (["evil"], [])
    assert m.until["evil"] == t + 2 * MUTE_FIRST  # doubled
    for _ in range(10):  # doubling stops at MUTE_MAX
        t = m.until["evil"]
        assert m.check(links, now=t)[1] == ["evil"]
        links["evil"].count("over_window", MUTE_AT)
        m.check(links, now=t + 0.25)
    assert m.until["evil"] - (t + 0.25) == MUTE_MAX
    t = m.until["evil"]
    m.check(links, now=t)
    links["evil"].count("over_window", MUTE_AT)
    m.check(links, now=t + FORGIVE + 1)
    assert m.until["evil"] == t + FORGIVE + 1 + MUTE_FIRST  # forgiven: from the start
    assert links["evil"].counters["muted"] == 13
    assert "muted" not in links["honest"].counters


def test_a_device_gone_from_the_bridge_is_unmuted_and_forgotten():
    links = _links("evil")
    m = Mutes()
    m.check(links, now=0.0)
    links["evil"].count("over_share", MUTE_AT)
    assert m.check(links, now=0.25) == (["evil"], [])
    assert m.check({}, now=0.5) == ([], ["evil"])
    assert m.until == {}
    # back with a new link (its counters from zero): no delta from the old one's
    links = _links("evil")
    assert m.check(links, now=0.75) == ([], [])


def test_a_frame_bigger_than_the_bytes_bucket_waits_for_it_full_and_no_longer():
    links = _links("big", "small")
    big, small = links["big"], links["small"]
    q = Quota(1000, 1.0, 1000)  # 1,000 readings and 1,000 bytes a second, 1 s saved up
    assert not q.over(big, 400, now=0.0)  # 600 bytes left
    assert q.over(big, 5000, now=0.0)  # more than the bucket holds: it needs it full
    assert big.counters["over_bytes"] == 1 and "over_quota" not in big.counters
    assert q.over(big, 0, now=0.3)  # may it come now? 900 bytes: not yet (nothing counted)
    assert big.counters["over_bytes"] == 1
    assert not q.over(big, 0, now=0.4)  # full: it may
    assert not q.over(big, 5000, now=0.4)  # and is taken, the whole bucket
    assert q.over(big, 1, now=0.4)  # empty: even a byte waits
    assert big.counters["over_bytes"] == 2
    for i in range(10):  # the other device's bucket is its own
        assert not q.over(small, 90, now=0.4 + i * 0.1)
    assert small.counters == {}
    q.forget("mqtt:big")
    assert not q.over(big, 1000, now=0.4)  # a new bucket: full


def test_the_readings_quota_counts_frames_whatever_their_size():
    link = _links("d")["d"]
    q = Quota(2, 1.0)  # two readings a second, no bytes quota
    assert not q.over(link, 1 << 20, now=0.0) and not q.over(link, 1 << 20, now=0.0)
    assert q.over(link, 10, now=0.0) and link.counters == {"over_quota": 1}
    assert not q.over(link, 0, now=0.5)  # a reading back: the held one may come
    assert not q.over(link, 10, now=0.5)
    assert q.over(link, 10, now=0.5) and link.counters == {"over_quota": 2}


async def _device(port, node, key):
    """A CPython device link on the tty ``port``: (its bus's connection, its link)."""
    bus = edgebus.Bus()
    link = Link(
        bus, node, key=key, exports=[("sensor/#", "")], spool=1 << 16, out_queue=64, status=False
    )
    r, w = await serial_asyncio.open_serial_connection(url=port, baudrate=115200)
    task = asyncio.create_task(link.run(StreamTransport(r, w)))
    return bus.connect(), link, task


def test_a_device_of_large_readings_is_held_to_its_bytes_quota_and_loses_nothing(tmp_path):
    """[quota] bytes = 4096 a second, a bucket of 1 s: a device sending 20
    readings of ~850 bytes (17 KB) is held (over_bytes) for about 3 s, and
    every one of its readings is in the log, once and in order; a device of
    small readings beside it is never held."""
    n, pad = 20, "x" * 800
    with PtyCable() as cable_big, PtyCable() as cable_small:
        cfg = bridge_config.parse(
            {
                "bridge": {"node": "gw", "state_dir": str(tmp_path / "state"), "heartbeat": 0.5},
                "log": {"dir": str(tmp_path / "log"), "patterns": ["dev/#"]},
                "quota": {"bytes": 4096, "burst": 1},
                "serial": [
                    {"node": "big", "port": cable_big.b, "key": "k-big"},
                    {"node": "small", "port": cable_small.b, "key": "k-small"},
                ],
            }
        )

        async def main():
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            devs = [
                await _device(cable_big.a, "big", b"k-big"),
                await _device(cable_small.a, "small", b"k-small"),
            ]
            await until(lambda: all(d[1].status == "up" for d in devs), 15, "both devices up")
            t0 = asyncio.get_running_loop().time()
            for i in range(n):
                devs[0][0].publish("sensor/blob", {"i": i, "pad": pad})
                devs[1][0].publish("sensor/t", {"i": i})
            # acknowledged by a bridge with a log: durable in it
            await until(
                lambda: all(d[1].tx_acked == d[1].tx_seq > n for d in devs), 30, "all acknowledged"
            )
            took = asyncio.get_running_loop().time() - t0
            links = {k: b.links["serial:" + k] for k in ("big", "small")}
            said = Watch().check(links.values())
            b.stop()
            await task
            for _c, link, t in devs:
                await link.close()
                t.cancel()
            return took, {k: dict(v.counters) for k, v in links.items()}, said

        took, counters, said = asyncio.run(main())
    assert counters["big"].get("over_bytes", 0) >= 1 and counters["big"].get("held", 0) >= 1
    assert took >= 2.0, took  # 17 KB less a 4 KB bucket at 4 KB/s: ~3 s at least
    for k in ("over_bytes", "over_quota", "held"):
        assert counters["small"].get(k, 0) == 0, counters["small"]
    assert len(said) == 1 and "device big" in said[0], said
    assert "frames over its bytes quota, held" in said[0], said
    recs = [r for _, r in tlog.read_log(str(tmp_path / "log"))]
    for node, topic in (("big", "blob"), ("small", "t")):
        key = ("dev", node, "sensor", topic)
        got = [r["payload"]["i"] for r in recs if tuple(r["topic"]) == key]
        assert got == list(range(n)), (node, got)
