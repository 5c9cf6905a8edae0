"""The bridge daemon with real parts: MicroPython device processes on real ptys
(tools/sim/ptycable.py), pyserial on the bridge side, the telemetry log on disk,
unix-socket clients with their real credentials."""

import asyncio
import os

import pytest

import edgebus
from dev.harness.bridge import BridgeProcess
from dev.harness.process import run_module
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.client.local import attach_local
from edgebus.tools.commands.status import fetch, render
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import SPOOLED_DEVICE_HEAP, until, wait_until

DEVICE_HEAP = "192K"  # core + link (sealed) with its spool on the 64-bit unix port


@pytest.fixture
def device(link_device):
    return lambda tty, key, count: link_device(tty, key, count, heap=DEVICE_HEAP)


def _cfg(tmp_path, toml):
    path = tmp_path / "bridge.toml"
    path.write_text(toml)
    return path


def _serial_cfg(tmp_path, port, bridge="", log=None, node="dev-micropython", key="k1"):
    """A bridge config for one serial device on port: [bridge] with state_dir
    "state" and the lines in bridge, [log] with dir "log" and the lines in log
    (none without log)."""
    toml = '[bridge]\nstate_dir = "state"\n' + bridge
    if log is not None:
        toml += '[log]\ndir = "log"\n' + log
    toml += '[[serial]]\nnode = "%s"\nport = "%s"\nkey = "%s"\n' % (node, port, key)
    return _cfg(tmp_path, toml)


SOCKET = 'socket = "state/bridge.sock"\n'


def _daemon(path):
    """edgebus-bridge run on the config at path, to its end (a bad one: at once)."""
    return run_module("edgebus.bridge.daemon", "--config", path, timeout=60)


def _state_text(tmp_path):
    """The bridge's state file (state_dir "state"), or "" before its first save."""
    try:
        return (tmp_path / "state" / "links.json").read_text()
    except FileNotFoundError:
        return ""


async def _serial_up(b, node="dev-micropython"):
    """Bridge b's serial link to node once it has a session (15 s at most)."""
    lid = "serial:" + node
    await until(lambda: lid in b.links and b.links[lid].status == "up", 15)
    return b.links[lid]


def _records(log_dir):
    return [r for _, r in tlog.read_log(str(log_dir))]


def test_serial_device_to_telemetry_log_with_provenance(tmp_path, device):
    count = 60
    with PtyCable() as cable:
        cfg = bridge_config.load(
            _serial_cfg(
                tmp_path,
                cable.b,
                'node = "gw"\n' + SOCKET + "heartbeat = 0.5\n",
                'patterns = ["dev/#"]\n',
            )
        )
        dev = device(cable.a, "k1", count)

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            await until(lambda: b.appender and b.appender.appended >= count + 1, 15)
            st = await fetch(cfg.socket)
            text = render(st)
            b.stop()
            await t
            return st, text

        st, text = asyncio.run(main())
    link = st["links"]["serial:dev-micropython"]
    assert link["state"] == "up" and link["peer"] == "dev-micropython" and link["generation"] == 1
    assert "serial:dev-micropython" in text and "up" in text
    assert "syncs (every 20 ms at most, last " in text
    recs = _records(cfg.log_dir)
    counts = [r for r in recs if tuple(r["topic"]) == ("dev", "dev-micropython", "sensor", "count")]
    assert [r["payload"] for r in counts] == list(range(count))
    seqs = [r["seq"] for r in counts]
    assert seqs == list(range(seqs[0], seqs[0] + count))
    r = counts[0]
    assert r["link_id"] == "serial:dev-micropython" and r["peer_node"] == "dev-micropython"
    assert r["peer_sid"] == link["peer_sid"] and r["generation"] == 1
    assert r["origin_kind"] == "link" and r["ts_host"] > 0
    info = [r for r in recs if tuple(r["topic"][-2:]) == ("sys", "info")]
    assert info and info[0]["payload"]["impl"] == "micropython"
    dev.kill()


def test_unix_socket_credentials_reach_the_authoriser(tmp_path):
    uid = os.getuid()
    cfg = bridge_config.load(
        _cfg(
            tmp_path,
            f"""
[bridge]
socket = "s/bridge.sock"
state_dir = "s"
[[acl]]
uid = {uid}
read = ["app/#"]
write = ["app/mine/#"]
""",
        )
    )

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(lambda: os.path.exists(cfg.socket))
        seen = b.bus.connect(principal=("test",)).subscribe("app/#")
        client_bus = edgebus.Bus()
        link, task = await attach_local(client_bus, cfg.socket, node="app1")
        await until(lambda: link.status == "up")
        c = client_bus.connect()
        c.publish("app/other/x", 1)  # not allowed for this uid: refused, counted
        c.publish("app/mine/x", 2)  # allowed
        m = await asyncio.wait_for(seen.recv(), 3)
        assert m.topic == ("app", "mine", "x") and m.payload == 2
        p = m.origin.principal
        assert p == {"uid": uid, "gid": os.getgid(), "pid": os.getpid()}
        assert m.origin.kind == "link"
        host_link = [l for k, l in b.links.items() if k.startswith("local:")][0]
        await until(lambda: host_link.counters.get("denied", 0) == 1)
        assert "permission denied" in host_link.last_error
        await link.close()
        task.cancel()
        b.stop()
        await t

    asyncio.run(main())


def test_sigterm_flushes_and_seals_the_log(tmp_path, device):
    count = 40
    with PtyCable() as cable:
        path = _serial_cfg(
            tmp_path, cable.b, SOCKET + "heartbeat = 0.5\n", "segment_seconds = 3600\n"
        )
        br = BridgeProcess(str(tmp_path), toml=path).start()
        dev = device(cable.a, "k1", count)
        try:
            br.wait_status(lambda st: st["log"]["appended"] >= count + 1, 20)
            # Nothing is sealed yet (hour-long segments): only SIGTERM can seal it.
            assert tlog.list_segments(str(tmp_path / "log")) == []
            rc = br.stop(15)
        finally:
            br.close()
        out = br.log()
        assert rc == 0, out
        assert '"bridge stopped in ' in out
        recs = _records(tmp_path / "log")
        assert [r["payload"] for r in recs if r["topic"][-1] == "count"] == list(range(count))
        dev.kill()


def _durable_cfg(tmp_path, port):
    """A bridge process for dev-micropython on port: group commits every 20 ms,
    hour-long segments (so nothing is durable by a seal), a status socket."""
    return _serial_cfg(
        tmp_path, port, SOCKET + "heartbeat = 0.5\n", "segment_seconds = 3600\ncommit_ms = 20\n"
    )


def _bridge_process(tmp_path, path, run):
    """The bridge on the config at path, its output in tmp_path/run/bridge.log."""
    (tmp_path / run).mkdir()
    return BridgeProcess(str(tmp_path / run), toml=path).start()


def test_group_commit_survives_sigkill_and_restart_resumes_from_the_log(tmp_path, device):
    """Records the bridge has synced (group commit, hour-long segments, so no
    seal) survive a SIGKILL of the bridge; the restarted bridge reads the last
    logged seq of the device's boot back from the log and expects the next."""
    count = 40
    with PtyCable() as cable:
        path = _durable_cfg(tmp_path, cable.b)

        def synced(st):
            lg = st["log"]
            return lg["appended"] >= count + 1 and lg["unsynced"] == 0 and lg["syncs"] >= 1

        br = _bridge_process(tmp_path, path, "run1")
        dev = device(cable.a, "k1", count)
        try:
            st = br.wait_status(synced, 20, step=0.05)
            sid = st["links"]["serial:dev-micropython"]["peer_sid"]
            # The state file learns a new peer boot within 0.2 s (Bridge._persist_state).
            asyncio.run(until(lambda: sid in _state_text(tmp_path), 5))
            br.kill()
        finally:
            br.close()
        assert st["log"]["commit_ms"] == 20 and st["log"]["last_sync_ms"] is not None
        link = st["links"]["serial:dev-micropython"]
        os.unlink(br.sock)
        br = _bridge_process(tmp_path, path, "run2")
        try:
            wait_until(
                lambda: "bridge gateway running" in br.log(),
                60,
                "its start in " + br.logpath,
                procs=[br.proc],
            )
            rc = br.stop(15)
        finally:
            br.close()
        out = br.log()
        assert rc == 0, out
        recs = _records(tmp_path / "log")
        counts = [r for r in recs if r["topic"][-1] == "count"]
        assert [r["payload"] for r in counts] == list(range(count))  # all survived the kill
        last = max(
            r["seq"] for r in recs if r["peer_sid"] == link["peer_sid"] and r["seq"] is not None
        )
        assert (
            "serial:dev-micropython resumes peer boot %s after seq %d in the log "
            "(rx_next %d, " % (link["peer_sid"], last, last + 1)
        ) in out, out
        dev.kill()


def test_bridge_sigkilled_mid_stream_loses_and_doubles_nothing(tmp_path, link_device, monkeypatch):
    """Lossless delivery end to end: a MicroPython device streams over a pty into a
    bridge process that is SIGKILLed mid-stream; the device keeps what was not
    acknowledged (acknowledged = made durable by a group commit) and sends it
    again to the restarted bridge, which drops what its log already holds:
    every reading is in the log exactly once, and the resent ones say late.
    The device's spool holds the whole stream (28 bytes a frame), so that the
    time the bridge is away costs nothing (a smaller one would evict, and
    say so with a gap)."""
    count = 300
    monkeypatch.setenv("LINK_DEVICE_SPOOL", "12288")
    with PtyCable() as cable:
        path = _durable_cfg(tmp_path, cable.b)
        topic = ("dev", "dev-micropython", "sensor", "count")

        def midway(st):
            sid = st["links"].get("serial:dev-micropython", {}).get("peer_sid")
            return st["log"]["appended"] >= 60 and sid and sid in _state_text(tmp_path)

        br = _bridge_process(tmp_path, path, "run1")
        dev = link_device(cable.a, "k1", count, heap=SPOOLED_DEVICE_HEAP)
        try:
            br.wait_status(midway, 15, step=0.01)
            br.kill()
        finally:
            br.close()
        os.unlink(br.sock)
        cfg = bridge_config.load(path)

        async def second():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            await until(lambda: b.appender is not None, 10)
            first = {r["payload"] for r in _records(cfg.log_dir) if tuple(r["topic"]) == topic}
            seen = set()
            sub = b.bus.connect().subscribe("dev/+/sensor/count", queue_len=count + 16)

            def done():
                while (m := sub.recv_nowait()) is not None:
                    seen.add(m.payload)
                return first | seen >= set(range(count)) and b.appender.unsynced == 0

            await until(done, 30)
            b.stop()
            await t
            return first, b.links["serial:dev-micropython"].stats()

        first, link = asyncio.run(second())
    recs = [r for r in _records(cfg.log_dir) if tuple(r["topic"]) == topic]
    assert sorted(r["payload"] for r in recs) == list(range(count))  # once each
    assert first and len(first) < count  # killed mid-stream
    # The ones bridge 1 never logged: first those the device had published
    # before the new session (resent out of its spool: late, with the reading's
    # time), then what it published since.
    again = sorted((r for r in recs if r["payload"] not in first), key=lambda r: r["seq"])
    late = [r["extra"].get("late") is True for r in again]
    assert late[0] and late == sorted(late, reverse=True), late
    assert all(r["ts_device"] is not None for r in again)  # the reading's own time
    assert not any(r["extra"].get("late") for r in recs if r["payload"] in first)
    dev.kill()


@pytest.mark.parametrize("queue", [None, 100])
def test_socket_client_queue_holds_a_burst(tmp_path, queue):
    """[bridge] client_queue: a burst of 100 published at once reaches a
    socket client whole with 100; with the default 32 the oldest 68 go,
    counted on the client's link as dropped_out (its gap). Bodies up to the
    local frame limit reach it too (they were refused by a 2 KB spool)."""
    cfg = bridge_config.load(
        _cfg(
            tmp_path,
            '[bridge]\nsocket = "s/bridge.sock"\n'
            'state_dir = "s"\n' + ("client_queue = %d\n" % queue if queue else ""),
        )
    )
    assert cfg.client_queue == (queue or 32)

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(lambda: os.path.exists(cfg.socket))
        client_bus = edgebus.Bus()
        got = client_bus.connect().subscribe("app/#", queue_len=256)
        link, task = await attach_local(client_bus, cfg.socket, node="app1")
        await until(lambda: link.status == "up")
        host_link = [lk for k, lk in b.links.items() if k.startswith("local:")][0]
        await until(lambda: host_link.status == "up")
        pub = b.bus.connect(principal=("test",))
        for i in range(100):  # no await between: one burst for the feed
            pub.publish(("app", "burst"), i)
        want = 100 if queue else 32
        seen = []
        while len(seen) < want:
            seen.append((await asyncio.wait_for(got.recv(), 5)).payload)
        assert seen == list(range(100 - want, 100))
        assert host_link.counters.get("dropped_out", 0) == 100 - want
        # A body far over a board's spool (Link's default, 2 KB) and the
        # spool's old 8 KB entry limit: a local client gets it whole.
        for n in (3000, 60000):
            pub.publish(("app", "big"), "x" * n)
            assert len((await asyncio.wait_for(got.recv(), 5)).payload) == n
        assert "spool_refused" not in host_link.counters
        await link.close()
        task.cancel()
        b.stop()
        await t

    asyncio.run(main())
    bad = _cfg(tmp_path, "[bridge]\nclient_queue = 0\n")
    with pytest.raises(bridge_config.ConfigError, match="client_queue must be between 1"):
        bridge_config.load(bad)


def test_bad_config_is_a_clear_error(tmp_path):
    p = _cfg(tmp_path, '[[serial]]\nnode = "d"\nport = "/dev/x"\n')
    r = _daemon(p)
    assert r.returncode == 2 and "needs key or key_file" in r.stderr
    with pytest.raises(bridge_config.ConfigError, match="seal must be"):
        bridge_config.load(_cfg(tmp_path, '[bridge]\nseal = "yes"\n'))
    c = bridge_config.load(
        _cfg(
            tmp_path,
            '[bridge]\n[mqtt]\ndevices = [{node = "a", key = "k",'
            ' seal = "mac"}, {node = "b", key = "k"}]\n',
        )
    )
    assert c.seal == "auto" and c.seal_for("serial") == "mac" and c.seal_for("peer") == "encrypt"
    assert c.seal_for("mqtt", c.mqtt.seals.get("a")) == "mac"
    assert c.seal_for("mqtt", c.mqtt.seals.get("b")) == "encrypt"
    with pytest.raises(bridge_config.ConfigError, match=r"\[\[serial\]\] #1: seal must be"):
        bridge_config.load(
            _cfg(tmp_path, '[[serial]]\nnode = "d"\nport = "/dev/x"\nkey = "k"\nseal = "require"\n')
        )
    p.write_text('[bridge]\nnodes = "x"\n')
    r = _daemon(p)
    assert r.returncode == 2 and "unknown key 'nodes'" in r.stderr
    for bad, why in (
        ("-1", "commit_ms must be between 0"),
        ("20000", "and 10000 milliseconds"),
        ("nan", "got nan"),
        ('"20"', "commit_ms has the wrong type"),
    ):
        p.write_text('[log]\ndir = "log"\ncommit_ms = %s\n' % bad)
        r = _daemon(p)
        assert r.returncode == 2 and why in r.stderr, r.stderr
    assert bridge_config.parse({"log": {"commit_ms": 0}}).commit_ms == 0
    assert bridge_config.parse({}).commit_ms == bridge_config.DEFAULT_COMMIT_MS


def test_serial_port_vanishing_and_returning(tmp_path, device):
    """A USB unplug: the tty path disappears, the bridge retries with backoff,
    and when the port returns the same device boot resumes (same generation)."""
    with PtyCable() as cable:
        port = tmp_path / "ttyDEV"  # a stable name, like /dev/serial/by-id/...
        os.symlink(cable.b, port)
        cfg = bridge_config.load(_serial_cfg(tmp_path, port, "heartbeat = 0.3\n"))
        device(cable.a, "k1", 5)

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            link = await _serial_up(b)
            sid = link.peer_sid
            cable.unplug()
            os.unlink(port)
            await until(lambda: link.counters.get("port_errors", 0) >= 2, 10)
            assert link.status == "down" and "port" in link.last_error
            new = cable.replug()
            os.symlink(new, port)
            sessions = link.counters.get("sessions", 0)
            await until(lambda: link.status == "up" and link.counters["sessions"] > sessions, 20)
            assert link.peer_sid == sid and link.generation == 1
            b.stop()
            await t

        asyncio.run(main())


def test_device_restart_bumps_generation_persisted_across_bridge_restart(tmp_path, device):
    with PtyCable() as cable:
        cfg = bridge_config.load(_serial_cfg(tmp_path, cable.b, "heartbeat = 0.3\n"))

        async def session(b, expect_gen):
            t = asyncio.create_task(b.run())
            link = await _serial_up(b)
            await until(lambda: link.generation == expect_gen, 10)
            view = b.bus.connect().retained_view("dev/#")
            await until(lambda: view.get("dev/dev-micropython/sys/info") is not None)
            gen_origin = view.get("dev/dev-micropython/sys/info").origin.generation
            b.stop()
            await t
            return link.peer_sid, gen_origin

        d1 = device(cable.a, "k1", 1)
        sid1, g1 = asyncio.run(session(Bridge(cfg), 1))
        d1.kill()
        d1.wait()
        device(cable.a, "k1", 1)  # the device reboots: a new sid
        sid2, g2 = asyncio.run(session(Bridge(cfg), 2))  # a new bridge process too
        assert sid1 != sid2 and (g1, g2) == (1, 2)


def test_prometheus_metrics(tmp_path, caplog):
    import urllib.request

    from dev.broker import free_port

    port = free_port()
    cfg = bridge_config.load(
        _serial_cfg(
            tmp_path,
            "%s/no-such-tty" % tmp_path,
            'metrics = "127.0.0.1:%d"\n' % port,
            "",
            node="nowhere",
            key="k",
        )
    )

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(
            lambda: (
                "serial:nowhere" in b.links
                and b.links["serial:nowhere"].counters.get("port_errors", 0) >= 1
            )
        )
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=3).read()
        )
        b.stop()
        await t
        return body.decode()

    with caplog.at_level("INFO", logger="edgebus.bridge"):
        text = asyncio.run(main())
    # where to point Prometheus, said when the bridge starts
    assert "metrics for Prometheus at http://127.0.0.1:%d/metrics" % port in caplog.text
    assert 'edgebus_link_up{link="serial:nowhere",peer=""} 0.0' in text
    assert 'edgebus_link_events_total{counter="port_errors",link="serial:nowhere"}' in text
    assert "edgebus_bus_connections" in text
    assert "edgebus_log_syncs_total 0.0" in text and "edgebus_log_unsynced 0.0" in text


def test_a_fleet_of_links_in_status_pages_and_small_metrics(tmp_path):
    """1,000 configured devices (no broker: every link down): `edgebus status`
    gets them all over several replies that each fit the socket's frame; a
    summary and one link on request; /metrics has the fleet's totals and
    per-link series for metrics_links of them only."""
    import json
    import urllib.request

    from dev.broker import free_port
    from edgebus.bridge import status

    port = free_port()
    devices = ",\n".join('{node = "d%04d", key = "k"}' % i for i in range(1000))
    cfg = bridge_config.load(
        _cfg(
            tmp_path,
            f"""
[bridge]
state_dir = "state"
socket = "{tmp_path}/b.sock"
metrics = "127.0.0.1:{port}"
metrics_links = 5
[mqtt]
url = "mqtt://127.0.0.1:{free_port()}"
devices = [
{devices}
]
""",
        )
    )

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(lambda: os.path.exists(cfg.socket), 10)
        pages = [status.page(b, None)]
        while pages[-1]["next"] is not None:
            pages.append(status.page(b, {"from": pages[-1]["next"]}))
        st = await fetch(cfg.socket, 10)
        summary = await fetch(cfg.socket, 10, {"links": False})
        one = await fetch(cfg.socket, 10, {"link": "mqtt:d0042"})
        with pytest.raises(edgebus.CallError, match="no link"):
            await fetch(cfg.socket, 10, {"link": "mqtt:nobody"})
        # The askers' own links gone (a closing one is counted down a moment):
        # the fleet's totals in the scrape are the 1,000 devices' alone.
        await until(lambda: not any(k.startswith("local:") for k in b.links), 10)
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
        )
        b.stop()
        await t
        return pages, st, summary, one, body.decode()

    pages, st, summary, one, text = asyncio.run(main())
    assert len(pages) > 2 and all(len(json.dumps(p)) < 60000 for p in pages)
    ids = sorted(k for k in st["links"] if not k.startswith("local:"))  # and the asker's
    assert ids == ["mqtt:d%04d" % i for i in range(1000)]
    assert st["fleet"]["states"]["down"] == 1000
    assert summary["links"] == {} and "1000 down" in render(summary)
    assert list(one["links"]) == ["mqtt:d0042"]
    assert 'edgebus_links{state="down"} 1000.0' in text
    assert text.count("edgebus_link_up{") == 5


def test_one_task_ticks_many_links_and_a_failing_tick_stops_none(caplog):
    """tick_links drives the timers of links that do not tick themselves
    (heartbeats: each side learns its round trip from PONGs); a link whose
    tick raises is counted and logged once, and the others go on."""
    from edgebus.bridge.links.ticker import tick_links
    from edgebus.link.link import Link
    from edgebus.link.options import Options
    from edgebus.link.pipe import pair

    async def main():
        links = {}
        for i in range(3):
            o = Options(heartbeat=0.2, ticks=False)
            a = Link(edgebus.Bus(), "d%d" % i, key=b"k", role="initiator", opts=o)
            b = Link(edgebus.Bus(), "gw", key=b"k", role="responder", opts=o)
            links["d%d" % i], links["gw%d" % i] = a, b
        broken = links["d2"]

        def fail():
            raise RuntimeError("boom")

        broken.tick = fail
        tasks = []
        for i in range(3):
            ta, tb = pair()
            tasks += [
                asyncio.create_task(links["d%d" % i].run(ta)),
                asyncio.create_task(links["gw%d" % i].run(tb)),
            ]
        ticker = asyncio.create_task(tick_links(links, 0.2))
        try:
            await until(
                lambda: (
                    all(links[k].rtt is not None for k in ("d0", "gw0", "d1", "gw1"))
                    and broken.counters.get("tick_errors", 0) > 3
                ),
                20,
            )
        finally:
            for t in tasks + [ticker]:
                t.cancel()
            await asyncio.gather(*tasks, ticker, return_exceptions=True)
        return broken

    caplog.set_level("ERROR", "edgebus.bridge")
    broken = asyncio.run(main())
    assert broken.rtt is None and "boom" in broken.last_error
    assert [r.getMessage() for r in caplog.records] == ["d2:initiator: tick failed"]


def test_the_state_file_counts_each_new_generation(tmp_path):
    """A link's state is a dict that tells its file when a new peer boot's
    generation is set (the bridge saves the file soon after), and nothing
    else it writes (rx_next moves with every frame); it loads what it saved."""
    from edgebus.bridge.links.statefile import StateFile

    f = StateFile(str(tmp_path))
    st = f.for_link("mqtt:a")
    st["rx_next"] = 5
    assert f.generations == 0
    st["generation"] = st.get("generation", 0) + 1
    assert f.generations == 1 and f.for_link("mqtt:a") is st
    f.save()
    g = StateFile(str(tmp_path))
    assert g.for_link("mqtt:a") == {"rx_next": 5, "generation": 1} and g.generations == 0
    g.for_link("mqtt:a")["generation"] = 2
    assert g.generations == 1


def test_the_log_is_text_on_a_terminal_and_json_elsewhere(tmp_path):
    """--log-format auto: a person at a terminal reads lines, a collector
    (a file, journald) gets one JSON object a line."""
    import json
    import pty
    import select

    from dev.harness.bridge import daemon_module
    from dev.harness.process import ROOT, Process, env, python

    def started(name, stderr):
        toml = tmp_path / (name + ".toml")
        toml.write_text(
            '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\n'
            % (tmp_path / name, tmp_path / (name + ".sock"))
        )
        return Process(python(daemon_module(ROOT), "--config", toml), env=env(), stderr=stderr)

    master, slave = pty.openpty()
    filed = tmp_path / "stderr.txt"
    with open(filed, "wb") as f, started("tty", slave) as tty, started("file", f) as plain:
        os.close(slave)
        seen = b""

        def a_line():
            nonlocal seen
            if select.select([master], [], [], 0)[0]:
                seen += os.read(master, 4096)
            return b"\n" in seen

        wait_until(a_line, 60, "the bridge's first line on its terminal")
        wait_until(lambda: b"\n" in filed.read_bytes(), 60, "the bridge's first line in a file")
        assert tty.stop() == 0 and plain.stop() == 0
    os.close(master)
    first = seen.decode().splitlines()[0]
    assert not first.startswith("{") and " INFO " in first, first
    assert json.loads(filed.read_text().splitlines()[0])["level"] == "info"
