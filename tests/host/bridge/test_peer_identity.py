"""Relayed readings keep their device's identity in a site's log ([[peer]]
``relays``), a gateway SIGKILLed with readings its site never acknowledged
gives them again from its log, and a link's gap is logged with its reason
(bridge/gaps)."""

import asyncio
import json
import os

import edgebus
from dev.broker import free_port
from dev.harness.bridge import BridgeProcess
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.link.link import Link
from edgebus.link.stream import StreamTransport
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import SPOOLED_DEVICE_HEAP, until
from tests.portable.linkkit import KEY, Joined, synced

PEER_KEY = "site-gateway-key"
DEV = "dev-micropython"
COUNT = ("dev", DEV, "sensor", "count")


def _records(log_dir, topic=None):
    recs = [r for _, r in tlog.read_log(str(log_dir))]
    return recs if topic is None else [r for r in recs if tuple(r["topic"]) == topic]


async def logged_all(bridge, sub, want):
    """Once ``sub`` (on bridge's bus) has had every payload in ``want`` and the
    bridge's log has synced what it took (30 s at most)."""
    seen = set()

    def done():
        while (m := sub.recv_nowait()) is not None:
            seen.add(m.payload)
        return seen >= want and bridge.appender.unsynced == 0

    await until(done, 30)


def site_config(tmp_path, port, relays):
    return bridge_config.parse(
        {
            "bridge": {"node": "site", "state_dir": str(tmp_path / "site"), "heartbeat": 0.5},
            "log": {"dir": str(tmp_path / "site" / "log"), "commit_ms": 20},
            "peer": [
                {
                    "node": "gw",
                    "key": PEER_KEY,
                    "listen": "127.0.0.1:%d" % port,
                    "imports": ["dev/#"],
                    "relays": relays,
                }
            ],
        }
    )


def gateway_toml(tmp_path, tty, port):
    """The gateway: one serial device, a log (group commits, hour-long
    segments: nothing durable by a seal), a [[peer]] dialling the site."""
    gw = tmp_path / "gw"
    gw.mkdir()
    path = gw / "gw.toml"
    path.write_text(
        '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\nheartbeat = 0.5\n'
        '[log]\ndir = "%s"\nsegment_seconds = 3600\ncommit_ms = 20\n'
        '[[serial]]\nnode = "%s"\nport = "%s"\nkey = "k1"\n'
        '[[peer]]\nnode = "site"\nkey = "%s"\nconnect = "127.0.0.1:%d"\nbackoff_max = 0.5\n'
        'exports = ["dev/#"]\n' % (gw, gw / "bridge.sock", gw / "log", DEV, tty, PEER_KEY, port)
    )
    return path


def test_a_gateway_killed_with_readings_unacknowledged_resends_them_under_the_device(
    tmp_path, link_device, monkeypatch
):
    """device -> gateway -> site. The gateway streams a MicroPython device's
    readings into its log while its site is away, and is SIGKILLed mid-stream:
    what its peer link held for the site is gone with it, but its log holds
    it. Restarted (the site up now), it gives the site every reading it had
    acknowledged to the device, and the site logs each under the device's
    node, boot and number with via = ["gw"]."""
    count = 300
    monkeypatch.setenv("LINK_DEVICE_SPOOL", "12288")  # the whole stream: no eviction
    port = free_port()
    with PtyCable() as cable:
        path = gateway_toml(tmp_path, cable.b, port)
        (tmp_path / "run1").mkdir()
        br = BridgeProcess(str(tmp_path / "run1"), toml=path).start()
        dev = link_device(cable.a, "k1", count, heap=SPOOLED_DEVICE_HEAP)
        try:
            # acknowledged to the device: logged and synced (group commit)
            br.wait_status(
                lambda st: st["log"]["appended"] >= 60 and st["log"]["unsynced"] == 0,
                20,
                step=0.01,
            )
            br.kill()
        finally:
            br.close()
        os.unlink(br.sock)
        gw_log = tmp_path / "gw" / "log"
        cfg = bridge_config.load(path)

        async def second():
            site = Bridge(site_config(tmp_path, port, [DEV]))
            st = asyncio.create_task(site.run())
            await until(lambda: site.appender is not None, 10)
            sub = site.bus.connect().subscribe("dev/+/sensor/count", queue_len=2 * count)
            gw = Bridge(cfg)
            gt = asyncio.create_task(gw.run())
            await until(lambda: gw.appender is not None, 10)  # the crashed segment sealed
            first = _records(gw_log, COUNT)  # the killed run's: sealed at the restart
            await logged_all(site, sub, set(range(count)))
            # the site's last acknowledgements (after its log's commit) reach the gateway
            await until(lambda: gw.links["peer:site"].spool_stats()["depth"] == 0, 10)
            gw.stop()
            await gt
            site.stop()
            await st
            return first, site.appender.stats()

        first, stats = asyncio.run(second())
        dev.kill()
    # Killed (mid-stream, or on a loaded machine once the stream was in) with
    # the site away: all of these reached it from the log alone.
    assert first
    gw_recs = {r["payload"]: r for r in _records(gw_log, COUNT)}
    site_recs = _records(tmp_path / "site" / "log", COUNT)
    assert {r["payload"] for r in site_recs} == set(range(count))
    # Every reading the gateway acknowledged before the kill reached the site
    # (from its log: its peer link's spool died with it) ...
    assert {(r["peer_sid"], r["seq"]) for r in first} <= {
        (r["peer_sid"], r["seq"]) for r in site_recs
    }
    # ... and every row at the site is the device's: node, boot, number.
    for r in site_recs:
        g = gw_recs[r["payload"]]
        assert (r["peer_node"], r["peer_sid"], r["seq"]) == (DEV, g["peer_sid"], g["seq"]), r
        assert r["link_id"] == "peer:gw" and r["extra"]["via"] == ["gw"]
    assert stats["relayed_unvouched"] == 0 and stats["relayed_vouched"] >= count
    # What the site acknowledged, kept for the next restart: the device boot up to its last reading
    marks = json.loads((tmp_path / "gw" / "relayed-site.json").read_text())
    sid = first[0]["peer_sid"]
    assert [DEV, sid, max(r["seq"] for r in gw_recs.values())] in marks["acked"]
    assert marks["since"] == [0, 0]  # the first run's log was empty: nothing before it


def test_a_site_killed_mid_stream_loses_nothing_its_gateway_had(tmp_path, link_device, monkeypatch):
    """The site acknowledges its gateway only what its log made durable, and a
    restarted site expects the gateway's next number after the last one its
    log holds of that peer boot (though logged under the devices): a site
    SIGKILLed mid-stream ends with every reading the gateway had, once."""
    # A stream long enough that the kill below lands in it on a loaded machine
    # (with 300, CI's site had logged them all before the kill), held whole.
    count = 900
    monkeypatch.setenv("LINK_DEVICE_SPOOL", "36864")
    port = free_port()
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    site_toml = site_dir / "site.toml"
    site_toml.write_text(
        '[bridge]\nnode = "site"\nstate_dir = "%s"\nsocket = "%s"\nheartbeat = 0.5\n'
        '[log]\ndir = "%s"\nsegment_seconds = 3600\ncommit_ms = 20\n'
        '[[peer]]\nnode = "gw"\nkey = "%s"\nlisten = "127.0.0.1:%d"\nimports = ["dev/#"]\n'
        'relays = ["%s"]\n'
        % (site_dir, site_dir / "bridge.sock", site_dir / "log", PEER_KEY, port, DEV)
    )
    with PtyCable() as cable:
        gw = BridgeProcess(str(tmp_path), toml=gateway_toml(tmp_path, cable.b, port)).start()
        site = BridgeProcess(str(site_dir), toml=site_toml).start()
        dev = link_device(cable.a, "k1", count, heap="256K")
        try:
            site.wait_status(lambda st: st["log"]["appended"] >= 60, 20, step=0.01)
            site.kill()
            site.close()
            os.unlink(site.sock)

            async def second():
                b = Bridge(bridge_config.load(site_toml))
                t = asyncio.create_task(b.run())
                await until(lambda: b.appender is not None, 10)
                first = {r["payload"] for r in _records(site_dir / "log", COUNT)}
                sub = b.bus.connect().subscribe("dev/+/sensor/count", queue_len=2 * count)
                await logged_all(b, sub, set(range(count)) - first)
                b.stop()
                await t
                return first

            first = asyncio.run(second())
        finally:
            gw.close()
            site.close()
            dev.kill()
    recs = _records(site_dir / "log", COUNT)
    assert first and len(first) < count  # killed mid-stream
    assert sorted(r["payload"] for r in recs) == list(range(count))  # once each
    assert {r["peer_node"] for r in recs} == {DEV}


def test_a_site_takes_a_gateway_s_claim_only_for_the_devices_it_relays(tmp_path):
    """A gateway that says its readings come from a device it may not relay
    for (its [[peer]] relays at the site) has them logged under its own
    identity, counted; a device it may relay for keeps its claim."""
    port = free_port()

    async def main():
        site = Bridge(site_config(tmp_path, port, ["dev1"]))
        st = asyncio.create_task(site.run())
        await until(lambda: site.appender is not None, 10)
        bus = edgebus.Bus()
        gw = Link(bus, "gw", key=PEER_KEY.encode(), role="initiator", exports=[("dev/#", "")])
        for _ in range(200):  # 10 s for the site to listen (its start's last step)
            try:
                r, w = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.05)
        t = asyncio.create_task(gw.run(StreamTransport(r, w, 65536)))
        await until(lambda: gw.status == "up", 10)
        c = bus.connect()
        for node in ("dev1", "dev2"):  # as a hostile gateway would: its own words
            x = {"src": node, "src_sid": "s-" + node, "src_seq": 7, "hop_sid": "forged"}
            c.publish(("dev", node, "t"), 1, x)
        await until(lambda: site.appender.appended >= 2 and site.appender.unsynced == 0, 10)
        stats = site.appender.stats()
        await gw.close()
        await t
        site.stop()
        await st
        return stats

    stats = asyncio.run(main())
    recs = {r["topic"][1]: r for r in _records(tmp_path / "site" / "log") if r["topic"][0] == "dev"}
    assert (recs["dev1"]["peer_node"], recs["dev1"]["peer_sid"], recs["dev1"]["seq"]) == (
        "dev1",
        "s-dev1",
        7,
    )
    assert recs["dev2"]["peer_node"] == "gw" and recs["dev2"]["seq"] != 7
    assert recs["dev2"]["extra"]["src"] == "dev2"  # kept, as the gateway said it
    # the peer boot a number belongs to is the site's word alone
    assert recs["dev1"]["extra"]["hop_sid"] == recs["dev2"]["peer_sid"]
    assert "hop_sid" not in recs["dev2"]["extra"]
    assert stats["relayed_vouched"] == 1 and stats["relayed_unvouched"] == 1


async def _gateway(tmp_path):
    """A gateway Bridge with a log, running, and a device link to dev1 added
    as the bridge adds a device's: (the bridge, its task, the link)."""
    cfg = bridge_config.parse(
        {
            "bridge": {"node": "gw", "state_dir": str(tmp_path / "gw")},
            "log": {"dir": str(tmp_path / "gw" / "log"), "commit_ms": 20},
        }
    )
    b = Bridge(cfg)
    t = asyncio.create_task(b.run())
    await until(lambda: b.appender is not None, 10)
    hl = Link(b.bus, "gw", key=KEY, role="responder", link_id="test:dev1", peer="dev1",
              opts=b.link_options.make("device", imports=[("#", "dev/{node}")]))  # fmt: skip
    b.add_link(hl)
    return b, t, hl


def test_a_gap_is_logged_with_its_reason(tmp_path):
    """A device whose spool overflows while its line is down loses the oldest
    readings (evicted, said at the next session): the bridge logs one
    bridge/gaps record with the numbers and why = "evicted"."""

    async def main():
        b, t, hl = await _gateway(tmp_path)
        j = Joined(dev_kw={"spool": 512}, host_bus=b.bus, host_link=hl).start()
        c = j.dev.connect()
        await until(lambda: synced(j), 10)
        c.publish("sensor/n", -1)
        await until(lambda: j.dl.spool_stats()["depth"] == 0, 10)  # acknowledged
        await j.stop()  # the line goes down
        for n in range(100):  # ~30-byte entries: the ring holds ~16
            c.publish("sensor/n", n)
            await asyncio.sleep(0)
        j.start()
        await until(lambda: j.dl.spool_stats()["depth"] == 0 and hl.counters.get("gaps"), 10)
        await until(lambda: b.appender.unsynced == 0 and not b.appender.queued(), 10)
        stats = (hl.counters["gaps"], hl.last_gap, j.dl.sid)
        await j.stop()
        b.stop()
        await t
        return stats

    n, last_gap, sid = asyncio.run(main())
    gaps = _records(tmp_path / "gw" / "log", ("bridge", "gaps"))
    assert [r["payload"] for r in gaps] == [
        {"node": "dev1", "sid": sid, "first": last_gap[0], "last": last_gap[1], "why": "evicted"}
    ]
    assert last_gap[1] - last_gap[0] + 1 == n and gaps[0]["peer_node"] is None


def test_a_device_cannot_claim_to_relay_another(tmp_path):
    """A device (or a local client) is no relay: the relay claims in its
    frames (src, src_sid, src_seq, via) are dropped on the way in, so a
    gateway neither logs nor relays its readings under another identity."""

    async def main():
        b, t, hl = await _gateway(tmp_path)
        j = Joined(host_bus=b.bus, host_link=hl).start()
        await until(lambda: synced(j), 10)
        forged = {"src": "victim", "src_sid": "v-1", "src_seq": 5, "via": ["gw-x"], "hop_sid": "h"}
        j.dev.connect().publish("sensor/n", 1, forged)
        await until(lambda: b.appender.appended >= 1 and b.appender.unsynced == 0, 10)
        await j.stop()
        b.stop()
        await t

    asyncio.run(main())
    (rec,) = _records(tmp_path / "gw" / "log", ("dev", "dev1", "sensor", "n"))
    assert rec["peer_node"] == "dev1" and rec["payload"] == 1
    assert not {"src", "src_sid", "src_seq", "via", "hop_sid"} & set(rec["extra"]), rec["extra"]
