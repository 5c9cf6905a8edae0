"""End to end: simulated MicroPython devices -> MQTT -> bridge -> telemetry log
-> `edgebus ingest --once` -> table -> `edgebus report`, with the broker
killed mid-stream and started again.

Real parts only: mosquitto (dev/broker.py), the real firmware on the real
MicroPython unix port over MQTT (tools/fleet.py), the real bridge (its MQTT
links and telemetry appender), the ingest job and the report on a local Spark.

What the devices say they spent comes from the devices themselves: every
sys/health carries ``uplink.tx_seq`` (its next sequence number); those health
messages travel the same path into the table.  With acknowledged delivery
(docs/protocol.md section 14) the table must hold every number below the last
report's exactly once: what was published during the outage, and the frames
written into the dead connection before the device noticed, come out of the
spool later (flagged late), so the report shows no gap.
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


def test_fleet_to_table_holds_every_reading_once_through_a_broker_outage(tmp_path):
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
            "ts_host", "ts_device", "late").collect()
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

        # Lossless (issue #13): every number the device spent up to its last
        # report is in the table exactly once; the broker outage left no hole.
        last = after[-1]["uplink"]
        assert seqs == list(range(1, seqs[-1] + 1)), \
            (n, sorted(set(range(1, seqs[-1] + 1)) - set(seqs)))
        assert seqs[-1] >= last["tx_seq"] - 1
        s = sessions[n]
        assert not s["gaps"] and s["missing"] == 0, (n, s)
        # What was published during the outage came out of the spool later:
        # flagged late, with the device's own time of the reading.
        late = [r for r in mine if r["late"]]
        assert late, "%s: nothing was spooled through the outage" % n
        for r in mine:
            if r["seq"] is not None:      # numbered frames (a snapshot's facts carry no time)
                assert r["ts_device"] is not None and r["ts_device"] <= r["ts_host"] + 1.0, r
        for r in late:                    # taken before it could be sent
            assert r["ts_device"] < r["ts_host"], r
        # ...and some were taken while the broker was down
        assert any(t_killed <= r["ts_device"] <= t_restarting for r in late), n
        print("%s: %d rows, seq 1..%d without a hole, %d delivered late out of the spool"
              % (n, len(mine), seqs[-1], len(late)))
