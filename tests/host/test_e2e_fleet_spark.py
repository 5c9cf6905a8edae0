"""End to end: simulated MicroPython devices -> MQTT -> bridge -> telemetry log
-> `edgebus ingest --once` -> table -> `edgebus report`, with the broker
killed mid-stream and started again.

Real parts only: mosquitto (dev/broker.py), the real firmware on the real
MicroPython unix port over MQTT (tools/fleet.py), the real bridge (its MQTT
links and telemetry appender), the ingest job and the report on a local Spark.

What the devices say they sent comes from the devices themselves: every
sys/health carries ``uplink.sent`` (sequenced data frames the device handed to
its transport) and ``uplink.tx_seq`` (its next sequence number); those health
messages travel the same path into the table, so each one is a claim about
the rows before it that the table must honour exactly.  Frames a device writes
in the instant after the broker died, before it notices, are lost (MQTT QoS 0;
the device cannot know): they fall inside the outage gap, which the report
must show.
"""
import argparse
import asyncio
import json
import os
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from bridge import config as bridge_config  # noqa: E402
import tlog  # noqa: E402
from bridge.daemon import Bridge  # noqa: E402
from tests.conftest import until  # noqa: E402
from tests.host.sparkkit import make_session  # noqa: E402
from dev.broker import Mosquitto  # noqa: E402
from tools.fleet import Fleet  # noqa: E402

# Spark, mosquitto and the fleet's micropython devices start in the test body.
pytestmark = [pytest.mark.spark, pytest.mark.mosquitto, pytest.mark.micropython]

DEVICES = 4
OUTAGE_S = 1.5


def _health(m):
    p = m.payload
    return {"seq": m.origin.extra["seq"], "sessions": p["link"]["sessions"],
            "sent": p["uplink"]["sent"], "tx_seq": p["uplink"]["tx_seq"]}


async def _run_pipeline(cfg, broker, nodes):
    """Run the bridge; kill the broker mid-stream and start it again.
    Returns (t_killed, t_restarting): host times bracketing the outage."""
    b = Bridge(cfg)
    task = asyncio.create_task(b.run())
    c = b.bus.connect(principal="test")
    sub = c.subscribe("dev/+/sys/health", queue_len=256)
    seen = {n: [] for n in nodes}          # health payloads, as the bridge got them

    async def collect():
        async for m in sub:
            seen[m.topic[1]].append(_health(m))
    collector = asyncio.create_task(collect())

    def each(pred, k=1):
        return lambda: all(sum(1 for h in seen[n] if pred(h)) >= k for n in nodes)
    try:
        # Stream: every device up and past a few health reports (data flowing).
        await until(each(lambda h: h["sessions"] == 1 and h["sent"] >= 10, 2), 40)
        broker.stop()                      # SIGKILL: no goodbye to anyone
        t_killed = time.time()
        await asyncio.sleep(OUTAGE_S)      # the devices keep publishing meanwhile
        t_restarting = time.time()
        await asyncio.to_thread(broker.start)
        # Every device back (its second link session, the same boot) and
        # streaming for a few more health reports.
        try:
            await until(each(lambda h: h["sessions"] == 2, 3), 40)
        except AssertionError:
            raise AssertionError({n: seen[n][-3:] for n in nodes})
    finally:
        collector.cancel()
        b.stop()
        await task                         # seals the log: everything appended is durable
    return t_killed, t_restarting


def _ingest(spark, log, table, ckpt):
    from ingest import job

    args = argparse.Namespace(log=log, table=table, checkpoint=ckpt, once=True,
                              watermark=job.DEFAULT_WATERMARK, trigger_interval=5.0,
                              max_records_per_trigger=None, max_bytes_per_trigger=None,
                              master=None)
    q = job.start(spark, args)
    q.awaitTermination()
    assert q.exception() is None


def test_fleet_to_table_counts_match_devices_and_broker_outage_shows_as_gaps(tmp_path):
    out = tmp_path / "e2e"
    log_dir, table, ckpt = str(out / "tlog"), str(out / "table"), str(out / "ckpt")
    with Mosquitto() as broker, Fleet(out / "fleet", mqtt=DEVICES,
                                      broker=("127.0.0.1", broker.port),
                                      period=0.2, health_period=0.5) as fleet:
        nodes = [d["node"] for d in fleet.devices]
        fleet.start()
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        cfg = bridge_config.parse(dict(parts, **{
            "bridge": {"node": "e2e-gateway", "state_dir": str(out / "state"),
                       "heartbeat": 1.0},
            "log": {"dir": log_dir, "patterns": ["dev/#"], "segment_seconds": 2}}))
        t_killed, t_restarting = asyncio.run(_run_pipeline(cfg, broker, nodes))

    # The log itself: several sealed segments, nothing corrupt, no record twice
    # (so that the ingest job's dedup cannot be hiding duplicates).
    stats = tlog.ReadStats()
    logged = {n: [] for n in nodes}
    for _pos, r in tlog.read_log(log_dir, stats=stats, decode_payload=False):
        assert r["peer_node"] in logged, r
        logged[r["peer_node"]].append(r)
    assert stats.clean and len(tlog.list_segments(log_dir)) >= 2, stats
    for n in nodes:
        keys = [(r["peer_sid"], r["seq"]) for r in logged[n] if r["seq"] is not None]
        assert len(keys) == len(set(keys)), "%s: a record logged twice" % n

    from ingest.report import format_report, read_table, summarize

    spark = make_session()
    try:
        _ingest(spark, log_dir, table, ckpt)
        rows = read_table(spark, table).select(
            "peer_node", "peer_sid", "generation", "seq", "topic", "payload",
            "ts_host").collect()
        summary = summarize(spark, table)
    finally:
        spark.stop()
    text = format_report(summary, table)
    print(text)

    sessions = {s["peer_node"]: s for s in summary["sessions"]}
    assert sorted(sessions) == sorted(nodes) and len(summary["sessions"]) == DEVICES
    assert summary["corrupt"] == {"regions": [], "missing": []}
    for n in nodes:
        mine = [r for r in rows if r["peer_node"] == n]
        # Ingest lost and repeated nothing: the table is the log.
        assert len(mine) == len(logged[n])
        assert {(r["peer_sid"], r["seq"]) for r in mine} == \
            {(r["peer_sid"], r["seq"]) for r in logged[n]}
        # One boot: one session id and generation across the broker restart.
        assert {(r["peer_sid"], r["generation"]) for r in mine} == \
            {(sessions[n]["peer_sid"], 1)}
        seqs = sorted(r["seq"] for r in mine if r["seq"] is not None)
        assert len(seqs) == len(set(seqs))
        health = sorted(
            ({"seq": r["seq"], "ts_host": r["ts_host"], **json.loads(r["payload"])}
             for r in mine if r["topic"] == "dev/%s/sys/health" % n), key=lambda h: h["seq"])
        before = [h for h in health if h["link"]["sessions"] == 1]
        after = [h for h in health if h["link"]["sessions"] == 2]
        assert len(before) >= 2 and len(after) >= 3, (n, len(before), len(after))

        def rows_in(lo, hi):
            return sum(1 for s in seqs if lo <= s < hi)

        # While the broker was up, the table holds exactly what the device
        # says it sent: up to its last report before the outage...
        b1 = before[-1]["uplink"]
        assert b1["sent"] >= 10
        assert rows_in(1, b1["tx_seq"]) == b1["sent"], (n, b1)
        # ...and between its first and last reports after it.
        a2, last = after[0]["uplink"], after[-1]["uplink"]
        assert last["sent"] > a2["sent"]
        assert rows_in(a2["tx_seq"], last["tx_seq"]) == last["sent"] - a2["sent"], \
            (n, a2, last)

        # The outage is in the report as a gap of this session, and only there.
        s = sessions[n]
        assert s["gaps"], "%s: the outage left no gap in the report" % n
        assert s["missing"] == (s["seq_max"] - s["seq_min"] + 1) - len(seqs)
        assert s["seq_min"] == 1
        for first, last_missing in s["gaps"]:
            assert b1["tx_seq"] <= first and last_missing < a2["tx_seq"], (n, s["gaps"])
            before_gap = max(r["ts_host"] for r in mine if r["seq"] == first - 1)
            after_gap = min(r["ts_host"] for r in mine if r["seq"] == last_missing + 1)
            assert before_gap < t_killed and after_gap > t_restarting, (n, first, last_missing)
        # The device's own account of the outage: what it published while the
        # broker was down it dropped at reconnection (each drop spends a seq
        # number it never sent, so it is part of the gap).  Any other missing
        # number is a frame it wrote into the dead connection before noticing.
        unsent = a2["tx_seq"] - 1 - a2["sent"]
        assert 1 <= unsent <= s["missing"]
        lost_in_flight = a2["sent"] - rows_in(1, a2["tx_seq"])
        assert lost_in_flight == s["missing"] - unsent
        assert 0 <= lost_in_flight <= 2, (n, lost_in_flight)
        print("%s: sent %d, rows %d, gap %s (%d dropped by the device while offline, "
              "%d written into the dead connection)" % (
                  n, last["sent"], rows_in(1, last["tx_seq"]), s["gaps"], unsent,
                  lost_in_flight))
        # The printed report names the gap.
        first, last_missing = s["gaps"][0]
        gap_text = "%d" % first if first == last_missing else "%d..%d" % (first, last_missing)
        line = [x for x in text.splitlines() if x.startswith(n + " ") and s["peer_sid"] in x]
        assert len(line) == 1 and gap_text in line[0], (gap_text, line)
