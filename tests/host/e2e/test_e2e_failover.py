"""End to end, gateway failover (docs/protocol.md "Failover"):
real-firmware MicroPython devices configured with a primary and a backup
gateway, each gateway its own mosquitto and its own bridge process with its
own telemetry log. The primary bridge is SIGKILLed mid-stream: the devices
hear nothing for failover_after heartbeats, move to the backup and go on
there with the same boot (sid) and sequence; the primary comes back, a probe
finds it alive and the devices fail back. Then the same with the primary's
broker SIGKILLed (the devices' opens fail: silence too). Then `edgebus ingest` of both logs
into one table: every sequence number 1..N exactly once per device boot, and
the gateway column names both gateways.

Waits are for conditions (a log's progress), never fixed sleeps.
"""

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from dev.broker import Mosquitto  # noqa: E402
from dev.harness.mqtt import retained  # noqa: E402
from edgebus import tlog  # noqa: E402
from edgebus.tools.sim.fleet import Fleet, bridge_toml  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.host.e2e.e2ekit import (  # noqa: E402
    audit_says_nothing_lost,
    gateway_bridge,
    ingest_once,
    once_each,
    past,
    progress,
    reported,
)

pytestmark = [pytest.mark.spark, pytest.mark.mosquitto, pytest.mark.micropython]

DEVICES = 2
PERIOD = 0.05  # 20 readings/s per device, steady through every move
HEARTBEAT = 1.0  # device and bridges
FAILOVER_AFTER = 2  # heartbeats of silence before a move: 2 s
PROBE_EVERY = 2.0  # seconds between probes of the primary while away
ADVANCE = 30  # readings each device must get through a gateway per phase
GATEWAYS = ("gw-a", "gw-b")


def _to_backup(logs, nodes, fault, moves):
    """fault(), then wait until the backup's log holds ADVANCE numbers past
    where the primary's stood and a sys/health through it counts ``moves``;
    returns the backup's progress."""
    at = progress(logs["gw-a"], nodes)
    fault()
    on_b = wait_until(
        lambda: past(logs["gw-b"], nodes, at, ADVANCE),
        30,
        lambda: "no move to the backup: a %r, b %r" % (at, progress(logs["gw-b"], nodes)),
    )
    wait_until(
        lambda: reported(logs["gw-b"], nodes, gateway="gw-b", moves=moves),
        30,
        "no sys/health through the backup says it moved (%d)" % moves,
    )
    return on_b


def _back_to_primary(logs, nodes, on_b, repair, failbacks):
    """repair(), then wait until the primary's log holds ADVANCE numbers past
    where the backup's stood and a sys/health through it counts ``failbacks``."""
    repair()
    wait_until(
        lambda: past(logs["gw-a"], nodes, on_b, ADVANCE),
        30,
        lambda: (
            "no failback: a %r, b %r"
            % (progress(logs["gw-a"], nodes), progress(logs["gw-b"], nodes))
        ),
    )
    wait_until(
        lambda: reported(logs["gw-a"], nodes, gateway="gw-a", failbacks=failbacks),
        30,
        "no sys/health through the primary says it failed back (%d)" % failbacks,
    )


def test_primary_killed_devices_fail_over_and_back_and_the_table_has_every_reading_once(
    spark, tmp_path
):
    t_start = time.monotonic()
    out = tmp_path / "failover"
    logs = {g: str(out / g / "tlog") for g in GATEWAYS}
    table, ckpt = str(out / "table"), str(out / "ckpt")
    with Mosquitto() as broker_a, Mosquitto() as broker_b:
        uplink = {
            "gateways": [
                {"name": "gw-a", "host": "127.0.0.1", "port": broker_a.port},
                {"name": "gw-b", "host": "127.0.0.1", "port": broker_b.port},
            ],
            "failover_after": FAILOVER_AFTER,
            "failback": True,
            "probe_every": PROBE_EVERY,
        }
        with Fleet(
            out / "fleet",
            mqtt=DEVICES,
            broker=("127.0.0.1", broker_a.port),
            period=PERIOD,
            health_period=1.0,
            link={"heartbeat": HEARTBEAT},
            uplink=uplink,
        ) as fleet:
            nodes = [d["node"] for d in fleet.devices]
            a, _ = gateway_bridge(
                out,
                "gw-a",
                bridge_toml(fleet.bridge_config(("127.0.0.1", broker_a.port))),
                HEARTBEAT,
                keys=fleet.keys,
            )
            b, _ = gateway_bridge(
                out,
                "gw-b",
                bridge_toml(fleet.bridge_config(("127.0.0.1", broker_b.port))),
                HEARTBEAT,
                keys=fleet.keys,
            )
            zero = {n: 0 for n in nodes}
            try:
                a.start()
                b.start()
                # Both bridges up before the devices boot (else they would
                # rightly start on the backup): each says online on its broker.
                for broker in (broker_a, broker_b):
                    wait_until(
                        lambda: (
                            (retained(broker.port, "edgebus/_bridge", 1.0) or (None,))[0]
                            == b"online"
                        ),
                        30,
                        "a bridge is not up",
                    )
                fleet.start()
                # 1. On the primary.
                wait_until(
                    lambda: past(logs["gw-a"], nodes, zero, ADVANCE), 30, "primary: no progress"
                )
                assert progress(logs["gw-b"], nodes) == zero  # the backup is idle
                # 2. The primary's bridge dies as a power cut would; its broker
                # stays, so the devices see its last will, then silence.
                t_kill = time.monotonic()
                on_b = _to_backup(logs, nodes, a.kill, moves=1)
                moved_s = time.monotonic() - t_kill
                # 3. The primary returns: the devices' probe finds its presence
                # online and they go back, the sequence going on there.
                _back_to_primary(logs, nodes, on_b, a.start, failbacks=1)
                # The primary resumed each boot where the backup left it: what
                # the backup acknowledged meanwhile is no gap on its link.
                for n in nodes:
                    st = wait_until(lambda: a.link(n), 30, "no status from the primary")
                    c = st["counters"]
                    assert st["peer_sid"] and c.get("gaps", 0) == 0, (n, st)
                    assert c.get("acked_elsewhere", 0) >= ADVANCE, (n, c)
                # 4. Now the primary's broker dies (SIGKILL): the devices'
                # connections end and their opens fail, which is silence too.
                on_b = _to_backup(logs, nodes, broker_a.stop, moves=3)
                # 5. The broker returns, the primary bridge reconnects and says
                # it is online: the devices' probe sees it, they go back.
                _back_to_primary(logs, nodes, on_b, broker_a.start, failbacks=2)
                assert a.stop(30) == 0, Path(a.logpath).read_text()  # SIGTERM seals the logs
                assert b.stop(30) == 0, Path(b.logpath).read_text()
            finally:
                a.close()
                b.close()
    print(
        "the backup's log %d numbers past the primary's within %.1f s of the kill"
        % (ADVANCE, moved_s)
    )

    # Each log alone: clean, no record twice; together they may share what
    # the primary had made durable but not yet acknowledged when it died.
    logged = {g: {n: [] for n in nodes} for g in GATEWAYS}
    for g in GATEWAYS:
        stats = tlog.ReadStats()
        for _pos, r in tlog.read_log(logs[g], stats=stats, decode_payload=False):
            assert r["peer_node"] in nodes, r
            logged[g][r["peer_node"]].append(r)
        assert stats.clean, (g, stats)
        for n in nodes:
            keys = [(r["peer_sid"], r["seq"]) for r in logged[g][n] if r["seq"] is not None]
            assert len(keys) == len(set(keys)), "%s: %s logged a record twice" % (g, n)

    from edgebus.ingest.report import format_report, read_table, summarize

    t0 = time.monotonic()
    args = ingest_once(spark, [logs[g] for g in GATEWAYS], table, ckpt)
    t_ingest = time.monotonic() - t0
    rows = (
        read_table(spark, table)
        .select("peer_node", "peer_sid", "generation", "seq", "topic", "payload", "late", "gateway")
        .collect()
    )
    summary = summarize(spark, table)
    print(format_report(summary, table))
    print(
        "devices and bridges %.1f s; Spark: session + ingest %.1f s, all %.1f s"
        % (t0 - t_start, t_ingest, time.monotonic() - t0)
    )

    # One history per device boot, whatever gateway carried each reading:
    # every number once, though the moves resent the unacknowledged tail.
    table_rows = once_each(rows, summary, nodes)
    audit_says_nothing_lost(spark, args, rows)
    for n in nodes:
        mine = table_rows[n]
        seqs = sorted(r["seq"] for r in mine)
        # Both gateways carried readings of this boot, and the primary both
        # before the move and after the failback.
        by_gw = {g: sorted(r["seq"] for r in mine if r["gateway"] == g) for g in GATEWAYS}
        assert by_gw["gw-a"] and by_gw["gw-b"], (n, {g: len(v) for g, v in by_gw.items()})
        assert by_gw["gw-a"][0] < by_gw["gw-b"][0] and by_gw["gw-a"][-1] > by_gw["gw-b"][-1]
        # What the device says it sent: its last sys/health in the table
        # names its next number, the gateway it was on and the moves.
        health = sorted(
            (
                {"seq": r["seq"], **json.loads(r["payload"])}
                for r in mine
                if r["topic"] == "dev/%s/sys/health" % n
            ),
            key=lambda h: h["seq"],
        )
        up = health[-1]["uplink"]
        assert seqs[-1] >= up["tx_seq"] - 1
        assert up["gateway"] == "gw-a" and up["moves"] == 4 and up["failbacks"] == 2, up
        assert {h["uplink"]["gateway"] for h in health} == set(GATEWAYS)
        both = set(r["seq"] for r in logged["gw-a"][n]) & set(r["seq"] for r in logged["gw-b"][n])
        sent = sum(len(logged[g][n]) for g in GATEWAYS)
        print(
            "%s: seq 1..%d once each in the table; logged %d (gw-a %d, gw-b %d, %d in both); "
            "moves %d, failbacks %d"
            % (
                n,
                seqs[-1],
                sent,
                len(by_gw["gw-a"]),
                len(by_gw["gw-b"]),
                len(both),
                up["moves"],
                up["failbacks"],
            )
        )
