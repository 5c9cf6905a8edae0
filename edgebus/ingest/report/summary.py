"""`edgebus report`: what the fleet sent, from the table `edgebus ingest` writes.

    edgebus report --table DIR [--audit DIR] [--plot FILE.png] [--master URL]

Prints per-device message counts, sessions, generations seen and last-seen
time; per session (peer_node, peer_sid) its seq range and the missing seq
ranges (gaps); what ingest skipped as corrupt; with a delivery audit table
(edgebus.ingest.report.audit), per device boot what was late, missing and
why, duplicated, and one line for the whole.  --plot writes a PNG of each
boot's deliveries and their latency (edgebus.ingest.report.plot).
:func:`summarize` returns the same as data.
"""

from __future__ import annotations

import datetime
import os
import sys
from typing import TYPE_CHECKING, Any, Iterable

from edgebus.ingest.report.tables import read_table, text_table

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import SparkSession

LOCAL = "(local)"  # how rows without a peer_node (host traffic) are shown
MAX_GAPS_SHOWN = 12


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", required=True, help="the table directory edgebus ingest writes")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="write a PNG of each device boot's deliveries (on time, late, missing) "
        "and their latency",
    )
    p.add_argument(
        "--audit",
        metavar="DIR",
        help="the delivery audit table (default: the table's directory + '.audit')",
    )
    p.add_argument("--master", help="Spark master URL (default: local[*])")


def summarize(spark: SparkSession, table: str) -> dict[str, Any]:
    """The report as data.

    {"rows", "first", "last" (ts_host seconds or None),
     "devices": [{"peer_node", "messages", "sessions", "generations", "first_seen",
                  "last_seen"}],
     "sessions": [{"peer_node", "peer_sid", "generations", "messages", "snapshot",
                   "seq_min", "seq_max", "missing", "gaps": [(first, last), ...]}],
     "corrupt": {"regions": [...], "missing": [...]}}
    Devices and sessions are sorted by name; peer_node None is local traffic.
    A session's "snapshot" counts its messages without a seq number: retained
    facts as a session start's snapshot delivered them (protocol.md, SYNC)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from edgebus.ingest.corruption import corrupt_report

    df = read_table(spark, table)
    tot = df.agg(
        F.count(F.lit(1)).alias("n"), F.min("ts_host").alias("lo"), F.max("ts_host").alias("hi")
    ).first()
    assert tot is not None  # for mypy: an aggregate without groups has one row
    devices = [
        {
            "peer_node": r["peer_node"],
            "messages": r["messages"],
            "sessions": r["sessions"],
            "generations": sorted(r["generations"]),
            "first_seen": r["first_seen"],
            "last_seen": r["last_seen"],
        }
        for r in df.groupBy("peer_node")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.countDistinct("peer_sid").alias("sessions"),
            F.collect_set("generation").alias("generations"),
            F.min("ts_host").alias("first_seen"),
            F.max("ts_host").alias("last_seen"),
        )
        .collect()
    ]
    devices.sort(key=lambda d: (d["peer_node"] is None, d["peer_node"] or ""))

    dev = df.where(F.col("peer_node").isNotNull() & F.col("peer_sid").isNotNull())
    sess = {
        (r["peer_node"], r["peer_sid"]): {
            "peer_node": r["peer_node"],
            "peer_sid": r["peer_sid"],
            "generations": sorted(r["generations"]),
            "messages": r["messages"],
            "snapshot": r["messages"] - r["numbered"],
            "seq_min": r["seq_min"],
            "seq_max": r["seq_max"],
            "missing": 0,
            "gaps": [],
        }
        for r in dev.groupBy("peer_node", "peer_sid")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.count("seq").alias("numbered"),
            F.collect_set("generation").alias("generations"),
            F.min("seq").alias("seq_min"),
            F.max("seq").alias("seq_max"),
        )
        .collect()
    }
    # A gap is a run of seq numbers missing between two received ones.
    seqs = dev.where(F.col("seq").isNotNull()).select("peer_node", "peer_sid", "seq").distinct()
    w = Window.partitionBy("peer_node", "peer_sid").orderBy("seq")
    gaps = (
        seqs.withColumn("next", F.lead("seq").over(w))
        .where(F.try_subtract(F.col("next"), F.col("seq")) > 1)
        .select(
            "peer_node",
            "peer_sid",
            (F.col("seq") + 1).alias("first"),
            (F.col("next") - 1).alias("last"),
        )
    )
    for r in gaps.collect():
        s = sess[(r["peer_node"], r["peer_sid"])]
        s["gaps"].append((r["first"], r["last"]))
        s["missing"] += r["last"] - r["first"] + 1
    sessions = [sess[k] for k in sorted(sess)]
    for s in sessions:
        s["gaps"].sort()
    return {
        "rows": tot["n"],
        "first": tot["lo"],
        "last": tot["hi"],
        "devices": devices,
        "sessions": sessions,
        "corrupt": corrupt_report(os.path.join(os.path.abspath(table), "_corrupt")),
    }


def _utc(ts: float | None) -> str:
    if ts is None:
        return "-"
    return (
        datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[
            :-3
        ]
        + "Z"
    )


def _gens(gs: Iterable[int]) -> str:
    return ",".join(str(g) for g in gs) or "-"


def format_report(s: dict[str, Any], table: str) -> str:
    """The printed report for a summarize() result."""
    ndev = sum(d["peer_node"] is not None for d in s["devices"])
    out = [
        "edgebus report: %s" % table,
        "%d messages from %d device%s, %s .. %s"
        % (s["rows"], ndev, "" if ndev == 1 else "s", _utc(s["first"]), _utc(s["last"])),
        "",
    ]
    out.append(
        text_table(
            ["device", "messages", "sessions", "generations", "last seen (UTC)"],
            [
                [
                    d["peer_node"] or LOCAL,
                    d["messages"],
                    d["sessions"],
                    _gens(d["generations"]),
                    _utc(d["last_seen"]),
                ]
                for d in s["devices"]
            ],
        )
    )
    out.append("")
    out.append(
        "sessions (messages: numbered, +N from session-start snapshots, which carry no "
        "seq; missing seq = gaps between received seq numbers):"
    )
    rows = []
    for x in s["sessions"]:
        gaps = ", ".join(
            "%d" % a if a == b else "%d..%d" % (a, b) for a, b in x["gaps"][:MAX_GAPS_SHOWN]
        )
        if len(x["gaps"]) > MAX_GAPS_SHOWN:
            gaps += ", ... (%d more)" % (len(x["gaps"]) - MAX_GAPS_SHOWN)
        seq = "-" if x["seq_min"] is None else "%d..%d" % (x["seq_min"], x["seq_max"])
        n = x["messages"] - x["snapshot"]
        rows.append(
            [
                x["peer_node"],
                x["peer_sid"],
                _gens(x["generations"]),
                "%d+%d" % (n, x["snapshot"]) if x["snapshot"] else n,
                seq,
                x["missing"],
                gaps or "none",
            ]
        )
    out.append(
        text_table(["device", "session", "generation", "messages", "seq", "missing", "gaps"], rows)
        if rows
        else "  (no device sessions)"
    )
    bad = s["corrupt"]
    if bad["regions"] or bad["missing"]:
        out.append("")
        out.append(
            "skipped by ingest: %d corrupt log region(s), %d missing segment range(s)"
            % (len(bad["regions"]), len(bad["missing"]))
        )
        for r in bad["regions"][:MAX_GAPS_SHOWN]:
            out.append("  %s @ %d: %s" % (r["file"], r["offset"], r["reason"]))
        for a, b in bad["missing"][:MAX_GAPS_SHOWN]:
            out.append("  segments %d..%d missing" % (a, b))
    return "\n".join(out)


def _human(seconds: float) -> str:
    if seconds % 86400 == 0:
        return "%d d" % (seconds // 86400)
    if seconds % 3600 == 0:
        return "%d h" % (seconds // 3600)
    if seconds % 60 == 0:
        return "%d min" % (seconds // 60)
    return "%g s" % seconds


def run(args: argparse.Namespace) -> int:
    table = os.path.abspath(args.table)
    if not os.path.isdir(table):
        print(
            "edgebus report: no table at %s (run edgebus ingest first)" % args.table,
            file=sys.stderr,
        )
        return 2
    from edgebus.ingest.audit import audit_dir
    from edgebus.ingest.report.audit import format_audit, summarize_audit
    from edgebus.ingest.report.plot import plot_audit
    from edgebus.ingest.session import session

    spark = session(args.master, app="edgebus-report", source=False)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        s = summarize(spark, table)
        print(format_report(s, args.table))
        a = summarize_audit(spark, table, audit_dir(table, args.audit))
        if a is not None:
            print("\n" + format_audit(a))
        if args.plot:
            width = plot_audit(spark, table, args.plot)
            if width is None:
                print("\nplot: nothing to plot (no numbered device readings)")
            else:
                print(
                    "\nplot: %s (each boot's readings on time, late, missing; %s bins)"
                    % (args.plot, _human(width))
                )
    finally:
        spark.stop()
    return 0
