"""Helpers shared by the end-to-end tests that run devices, bridges and the
ingest job (test_e2e_fleet_spark.py, test_e2e_failover.py, test_e2e_shard.py)."""

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

from dev.harness.bridge import BridgeProcess
from edgebus import tlog


def progress(log_dir, nodes):
    """{node: highest seq in a sealed segment of the log} (0 before the first)."""
    top = {n: 0 for n in nodes}
    for (link_id, _sid), seq in tlog.last_seqs(log_dir, max_bytes=None).items():
        node = link_id.split(":", 1)[1]
        if node in top:
            top[node] = max(top[node], seq)
    return top


def ingest_once(spark, log, table, ckpt):
    """`edgebus ingest --once` of log (a directory or a list of them) into table."""
    from edgebus.ingest import job

    args = argparse.Namespace(
        log=job.log_dirs(log),
        table=table,
        checkpoint=ckpt,
        once=True,
        watermark=job.DEFAULT_WATERMARK,
        trigger_interval=5.0,
        max_records_per_trigger=None,
        max_bytes_per_trigger=None,
        master=None,
    )
    q = job.start(spark, args)
    q.awaitTermination()
    assert q.exception() is None
    return args


def audit_says_nothing_lost(spark, args, rows):
    """The delivery audit of the table args (ingest_once's) wrote, refreshed
    as the job does: no number missing, and each device boot's received count
    the numbers its rows hold."""
    from pyspark.sql import functions as F

    from edgebus.ingest import audit

    audit.refresh(spark, args)
    got = {
        (r["peer_node"], r["peer_sid"]): (r["received"], r["missing"])
        for r in spark.read.parquet(audit.audit_dir(args.table, None))
        .groupBy("peer_node", "peer_sid")
        .agg(F.sum("received").alias("received"), F.sum("missing").alias("missing"))
        .collect()
    }
    want = {}
    for r in rows:
        if r["seq"] is not None:
            want.setdefault((r["peer_node"], r["peer_sid"]), set()).add(r["seq"])
    assert got == {k: (len(v), 0) for k, v in want.items()}, got


def once_each(rows, summary, nodes):
    """Assert that the table (rows with peer_node, peer_sid, seq; summary:
    edgebus.ingest.report.summarize's) holds one history per device of ``nodes``,
    whatever gateway carried each reading: every number from 1 to the last
    exactly once, no hole and no copy, no gap. Returns {node: its
    sequenced rows}."""
    sessions = {s["peer_node"]: s for s in summary["sessions"]}
    assert sorted(sessions) == sorted(nodes) and len(summary["sessions"]) == len(nodes)
    out = {}
    for n in nodes:
        mine = out[n] = [r for r in rows if r["peer_node"] == n and r["seq"] is not None]
        assert {r["peer_sid"] for r in mine} == {sessions[n]["peer_sid"]}
        seqs = sorted(r["seq"] for r in mine)
        assert seqs == list(range(1, seqs[-1] + 1)), (
            n,
            sorted(set(range(1, seqs[-1] + 1)) - set(seqs)),
        )
        s = sessions[n]
        assert not s["gaps"] and s["missing"] == 0, (n, s)
    return out


def past(log_dir, nodes, floor, by):
    """progress() once this log holds, for every device, a number ``by`` past
    floor[node]; else False."""
    now = progress(log_dir, nodes)
    return all(now[n] >= floor[n] + by for n in nodes) and now


def reported(log_dir, nodes, **want):
    """True once this log holds, for every device, a sys/health whose uplink
    part has the ``want`` values (strings: equal; numbers: at least)."""
    seen = set()
    for _pos, r in tlog.read_log(log_dir):
        n = r["peer_node"]
        if n in nodes and r["topic"] == ("dev", n, "sys", "health"):
            p = r["payload"]
            up = (json.loads(p) if type(p) in (str, bytes) else p).get("uplink", {})
            if all(
                up.get(k) == v if type(v) is str else (up.get(k) or 0) >= v for k, v in want.items()
            ):
                seen.add(n)
    return seen == set(nodes)


def gateway_bridge(out, name, links, heartbeat=1.0, keys=None):
    """A bridge process named ``name`` (its gateway name in the log) in
    out/name, with its own state, status socket and telemetry log, joining the
    devices of the TOML fragment ``links``, whose keys are in the keystore
    ``keys`` (default: its own, in its state); returns (BridgeProcess, log dir)."""
    d = out / name
    d.mkdir(parents=True)
    sock = d / "bridge.sock"
    if len(str(sock)) > 100:
        # A unix socket's path holds 107 bytes, and pytest's tmp paths grow
        # with its run number: a short one of its own, unique to this path.
        sock = Path(tempfile.gettempdir()) / (
            "eb-%s.sock" % hashlib.sha1(str(sock).encode()).hexdigest()[:12]
        )
    toml = d / "bridge.toml"
    toml.write_text(
        '[bridge]\nnode = "%s"\nstate_dir = "%s"\nsocket = "%s"\nkeys = "%s"\nheartbeat = %r\n'
        '[log]\ndir = "%s"\npatterns = ["dev/#"]\nsegment_seconds = 1\n\n%s'
        % (
            name,
            d / "state",
            sock,
            keys or d / "state" / "keys",
            heartbeat,
            d / "tlog",
            links,
        )
    )
    return BridgeProcess(str(d), toml=str(toml)), str(d / "tlog")
