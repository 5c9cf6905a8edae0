"""End to end: simulated MicroPython devices -> MQTT -> bridge -> telemetry log
-> `edgebus ingest --once` -> table -> `edgebus report`, through the faults of
lossless delivery in one run: the broker SIGKILLed, then the bridge SIGKILLed, then
both at once, each restarted after an outage.

Real parts only: mosquitto (dev/broker.py), the real firmware on the real
MicroPython unix port over MQTT (tools/sim/fleet.py), the bridge as its own
process (`python -m edgebus.bridge.daemon`, killed as a power cut would), the ingest
job and the report on a local Spark.

What the devices say they spent comes from the devices themselves: every
sys/health carries ``uplink.tx_seq`` (its next sequence number); those health
messages travel the same path into the table.  With acknowledged delivery
(docs/protocol.md section 14) the table must hold every number below the last
report's exactly once: what was published during each outage, and what the
killed bridge had received but not yet made durable, come out of the devices'
spools later (flagged late), so the report shows no gap.
"""

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from dev.broker import Mosquitto  # noqa: E402
from dev.harness.bridge import BridgeProcess  # noqa: E402
from edgebus import tlog  # noqa: E402
from edgebus.tools.boardkit import devicefiles  # noqa: E402
from edgebus.tools.sim.fleet import Fleet, bridge_toml  # noqa: E402
from tests.host.e2e.e2ekit import audit_says_nothing_lost, ingest_once, progress  # noqa: E402

# Spark, mosquitto and the fleet's micropython devices start in the test body.
pytestmark = [pytest.mark.spark, pytest.mark.mosquitto, pytest.mark.micropython]

DEVICES = 3
PERIOD = 0.05  # 20 readings/s per device
OUTAGES = {"broker": 3.0, "bridge": 2.0, "both": 2.0}  # seconds down
# The default RAM spool (16 KB on the unix board) holds ~11 s of 20 readings/s
# with a ~0.9 KB sys/health every 10 s; a report every 2 s leaves ~8 s, more
# than each outage below plus the device's reconnect backoff (<= 2 s).
HEALTH_S = 2.0
ADVANCE = 60  # readings each device must get through after a fault


def _advance(log_dir, nodes, by, what, timeout=60):
    """Wait until every device's log has moved ``by`` numbers past now."""
    base = progress(log_dir, nodes)
    deadline = time.monotonic() + timeout
    while True:
        now = progress(log_dir, nodes)
        if all(now[n] >= base[n] + by for n in nodes):
            return now
        assert time.monotonic() < deadline, "after the %s fault: %r -> %r" % (what, base, now)
        time.sleep(0.3)


def test_fleet_to_table_holds_every_reading_once_through_broker_and_bridge_kills(spark, tmp_path):
    out = tmp_path / "e2e"
    log_dir, table, ckpt = str(out / "tlog"), str(out / "table"), str(out / "ckpt")
    windows = {}  # fault -> (host time killed, host time restarting)
    with (
        Mosquitto() as broker,
        Fleet(
            out / "fleet",
            mqtt=DEVICES,
            broker=("127.0.0.1", broker.port),
            period=PERIOD,
            health_period=HEALTH_S,
        ) as fleet,
    ):
        nodes = [d["node"] for d in fleet.devices]
        toml = out / "bridge.toml"
        toml.write_text(
            '[bridge]\nnode = "e2e-gateway"\nstate_dir = "%s"\nkeys = "%s"\nheartbeat = 1.0\n'
            '[log]\ndir = "%s"\npatterns = ["dev/#"]\nsegment_seconds = 1\n\n%s'
            % (
                out / "state",
                fleet.keys,
                log_dir,
                bridge_toml(fleet.bridge_config(("127.0.0.1", broker.port))),
            )
        )
        bridge = BridgeProcess(str(out), toml=str(toml))
        try:
            fleet.start()
            bridge.start()
            _advance(log_dir, nodes, ADVANCE, "start")
            for fault, down in OUTAGES.items():
                if fault in ("bridge", "both"):
                    bridge.kill()  # SIGKILL: no goodbye, records not yet synced lost
                if fault in ("broker", "both"):
                    broker.stop()  # SIGKILL
                t_killed = time.time()
                time.sleep(down)  # the devices keep publishing meanwhile
                windows[fault] = (t_killed, time.time())
                if fault in ("broker", "both"):
                    broker.start()
                if fault in ("bridge", "both"):
                    bridge.start()
                _advance(log_dir, nodes, ADVANCE + int(down / PERIOD), fault)
            assert bridge.stop(30) == 0, Path(bridge.logpath).read_text()  # SIGTERM seals the log
        finally:
            bridge.close()

    # The log itself: nothing corrupt, no record twice (so that the ingest
    # job's dedup cannot be hiding duplicates).
    stats = tlog.ReadStats()
    logged = {n: [] for n in nodes}
    for _pos, r in tlog.read_log(log_dir, stats=stats, decode_payload=False):
        assert r["peer_node"] in logged, r
        logged[r["peer_node"]].append(r)
    assert stats.clean, stats
    for n in nodes:
        keys = [(r["peer_sid"], r["seq"]) for r in logged[n] if r["seq"] is not None]
        assert len(keys) == len(set(keys)), "%s: a record logged twice" % n

    from edgebus.ingest.report import format_report, read_table, summarize

    args = ingest_once(spark, log_dir, table, ckpt)
    rows = (
        read_table(spark, table)
        .select(
            "peer_node",
            "peer_sid",
            "generation",
            "seq",
            "topic",
            "payload",
            "ts_host",
            "ts_device",
            "late",
            "gateway",
        )
        .collect()
    )
    summary = summarize(spark, table)
    from pyspark.sql import functions as F

    from edgebus.ingest.helpers import with_bundle

    # Which code produced each reading: its boot's sys/info says.
    t = read_table(spark, table)
    code = (
        with_bundle(t.filter(F.col("topic").endswith("/sensor/temp")), info=t)
        .select("bundle_version", "bundle_hash")
        .distinct()
        .collect()
    )
    text = format_report(summary, table)
    print(text)
    # Through a broker kill and a bridge kill: the audit counts nothing lost.
    audit_says_nothing_lost(spark, args, rows)

    # The fleet runs the factory modules: every reading's boot names them.
    version = devicefiles.firmware("main").VERSION
    assert [tuple(r) for r in code] == [(version, None)], code
    # The bridge names itself in its log: every row says which gateway logged it.
    assert {r["gateway"] for r in rows} == {"e2e-gateway"}
    sessions = {s["peer_node"]: s for s in summary["sessions"]}
    assert sorted(sessions) == sorted(nodes) and len(summary["sessions"]) == DEVICES
    assert summary["corrupt"] == {"regions": [], "missing": []}
    for n in nodes:
        mine = [r for r in rows if r["peer_node"] == n]
        # Ingest lost and repeated nothing: the table is the log.
        assert len(mine) == len(logged[n])
        assert {(r["peer_sid"], r["seq"]) for r in mine} == {
            (r["peer_sid"], r["seq"]) for r in logged[n]
        }
        # One boot: one session id and one generation through every fault
        # (the restarted bridge keeps the generation in its state directory).
        assert {(r["peer_sid"], r["generation"]) for r in mine} == {(sessions[n]["peer_sid"], 1)}
        seqs = sorted(r["seq"] for r in mine if r["seq"] is not None)
        assert len(seqs) == len(set(seqs))
        health = sorted(
            (
                {"seq": r["seq"], **json.loads(r["payload"])}
                for r in mine
                if r["topic"] == "dev/%s/sys/health" % n
            ),
            key=lambda h: h["seq"],
        )
        # Lossless: every number the device spent up to its last
        # report is in the table exactly once; no fault left a hole.
        assert seqs == list(range(1, seqs[-1] + 1)), (
            n,
            sorted(set(range(1, seqs[-1] + 1)) - set(seqs)),
        )
        assert seqs[-1] >= health[-1]["uplink"]["tx_seq"] - 1
        s = sessions[n]
        assert not s["gaps"] and s["missing"] == 0, (n, s)
        # What was published during each outage came out of the spool later:
        # flagged late, with the device's own time of the reading.
        late = [r for r in mine if r["late"]]
        for r in mine:
            if r["seq"] is not None:  # numbered frames (a snapshot's facts carry no time)
                assert r["ts_device"] is not None and r["ts_device"] <= r["ts_host"] + 1.0, r
        for r in late:  # taken before it could be sent
            assert r["ts_device"] < r["ts_host"], r
        for fault, (t0, t1) in windows.items():
            assert any(t0 <= r["ts_device"] <= t1 for r in late), (n, fault)
        print(
            "%s: %d rows, seq 1..%d without a hole, %d delivered late out of the spool"
            % (n, len(mine), seqs[-1], len(late))
        )
