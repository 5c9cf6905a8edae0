"""The report's summary of the ingest table, as data (:func:`summarize`) and
as text (:func:`format_report`): per-device message counts, sessions,
generations seen and last-seen time; per session (peer_node, peer_sid) its
seq range and the missing seq ranges (gaps); what ingest skipped as corrupt.
"""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, Any, Iterable

from edgebus.ingest.report.tables import read_table, text_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LOCAL = "(local)"  # how rows without a peer_node (host traffic) are shown
# origin_kind of what a local process published on the bridge's unix socket (the
# shell, the text mode): a host client's, no device's (docs/telemetry-log.md 3).
HOST_CLIENT = "socket"
MAX_GAPS_SHOWN = 12


def summarize(spark: SparkSession, table: str) -> dict[str, Any]:
    """The report as data.

    {"rows", "first", "last" (ts_host seconds or None), "host_clients",
     "devices": [{"peer_node", "messages", "sessions", "generations", "first_seen",
                  "last_seen"}],
     "sessions": [{"peer_node", "peer_sid", "generations", "messages", "snapshot",
                   "seq_min", "seq_max", "missing", "gaps": [(first, last), ...]}],
     "corrupt": {"regions": [...], "missing": [...]}}
    Devices and sessions are sorted by name; peer_node None is local traffic.
    A session's "snapshot" counts its messages without a seq number: retained
    facts as a session start's snapshot delivered them (protocol.md, SYNC).
    "host_clients" counts the messages local processes published through the
    bridge's socket (origin_kind HOST_CLIENT)."""
    from pyspark.sql import functions as F

    from edgebus.ingest.corruption import corrupt_report

    df = read_table(spark, table)
    tot = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.min("ts_host").alias("lo"),
        F.max("ts_host").alias("hi"),
        F.count(F.when(F.col("origin_kind") == HOST_CLIENT, 1)).alias("clients"),
    ).first()
    assert tot is not None  # for mypy: an aggregate without groups has one row
    return {
        "rows": tot["n"],
        "first": tot["lo"],
        "last": tot["hi"],
        "host_clients": tot["clients"],
        "devices": _devices(df),
        "sessions": _sessions(df),
        "corrupt": corrupt_report(os.path.join(os.path.abspath(table), "_corrupt")),
    }


def _devices(df: DataFrame) -> list[dict[str, Any]]:
    """Per device (peer_node; None for local traffic, last) its counts and times."""
    from pyspark.sql import functions as F

    return by_name(
        device_row(
            r["peer_node"],
            r["messages"],
            r["sessions"],
            r["generations"],
            r["first_seen"],
            r["last_seen"],
        )
        for r in df.groupBy("peer_node")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.countDistinct("peer_sid").alias("sessions"),
            F.collect_set("generation").alias("generations"),
            F.min("ts_host").alias("first_seen"),
            F.max("ts_host").alias("last_seen"),
        )
        .collect()
    )


def device_row(
    node: str | None,
    messages: int,
    sessions: int,
    generations: Iterable[Any],
    first: float | None,
    last: float | None,
) -> dict[str, Any]:
    """summarize()'s entry for a device (either reader's figures)."""
    return {
        "peer_node": node,
        "messages": messages,
        "sessions": sessions,
        "generations": sorted(g for g in generations if g is not None),
        "first_seen": first,
        "last_seen": last,
    }


def by_name(devices: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Devices by name, local traffic (no peer_node) last."""
    return sorted(devices, key=lambda d: (d["peer_node"] is None, d["peer_node"] or ""))


def session_row(
    node: str,
    sid: str,
    generations: Iterable[Any],
    messages: int,
    numbered: int,
    lo: int | None,
    hi: int | None,
) -> dict[str, Any]:
    """summarize()'s entry for a session, its gaps still to be added."""
    return {
        "peer_node": node,
        "peer_sid": sid,
        "generations": sorted(g for g in generations if g is not None),
        "messages": messages,
        "snapshot": messages - numbered,
        "seq_min": lo,
        "seq_max": hi,
        "missing": 0,
        "gaps": [],
    }


def _sessions(df: DataFrame) -> list[dict[str, Any]]:
    """Per device session (peer_node, peer_sid), sorted, its counts, seq range
    and the gaps in it."""
    from pyspark.sql import functions as F

    dev = df.where(F.col("peer_node").isNotNull() & F.col("peer_sid").isNotNull())
    sess = {
        (r["peer_node"], r["peer_sid"]): session_row(
            r["peer_node"],
            r["peer_sid"],
            r["generations"],
            r["messages"],
            r["numbered"],
            r["seq_min"],
            r["seq_max"],
        )
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
    for r in _gaps(dev).collect():
        s = sess[(r["peer_node"], r["peer_sid"])]
        s["gaps"].append((r["first"], r["last"]))
        s["missing"] += r["last"] - r["first"] + 1
    sessions = [sess[k] for k in sorted(sess)]
    for s in sessions:
        s["gaps"].sort()
    return sessions


def _gaps(dev: DataFrame) -> DataFrame:
    """Per session, each run of seq numbers missing between two received ones
    (first, last)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    seqs = dev.where(F.col("seq").isNotNull()).select("peer_node", "peer_sid", "seq").distinct()
    w = Window.partitionBy("peer_node", "peer_sid").orderBy("seq")
    return (
        seqs.withColumn("next", F.lead("seq").over(w))
        .where(F.try_subtract(F.col("next"), F.col("seq")) > 1)
        .select(
            "peer_node",
            "peer_sid",
            (F.col("seq") + 1).alias("first"),
            (F.col("next") - 1).alias("last"),
        )
    )


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
    clients = s.get("host_clients") or 0
    out = [
        "edgebus report: %s" % table,
        "%d messages from %d device%s%s, %s .. %s"
        % (
            s["rows"],
            ndev,
            "" if ndev == 1 else "s",
            "; %d message%s from host clients" % (clients, "" if clients == 1 else "s")
            if clients
            else "",
            _utc(s["first"]),
            _utc(s["last"]),
        ),
        "",
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
        ),
        "",
        "sessions (messages: numbered, +N from session-start snapshots, which carry no "
        "seq; missing seq = gaps between received seq numbers):",
    ]
    rows = [_session_row(x) for x in s["sessions"]]
    out.append(
        text_table(["device", "session", "generation", "messages", "seq", "missing", "gaps"], rows)
        if rows
        else "  (no device sessions)"
    )
    return "\n".join(out + _corrupt_lines(s["corrupt"]))


def _session_row(x: dict[str, Any]) -> list[Any]:
    """A session's line of the sessions table."""
    gaps = ", ".join(
        "%d" % a if a == b else "%d..%d" % (a, b) for a, b in x["gaps"][:MAX_GAPS_SHOWN]
    )
    if len(x["gaps"]) > MAX_GAPS_SHOWN:
        gaps += ", ... (%d more)" % (len(x["gaps"]) - MAX_GAPS_SHOWN)
    seq = "-" if x["seq_min"] is None else "%d..%d" % (x["seq_min"], x["seq_max"])
    n = x["messages"] - x["snapshot"]
    return [
        x["peer_node"],
        x["peer_sid"],
        _gens(x["generations"]),
        "%d+%d" % (n, x["snapshot"]) if x["snapshot"] else n,
        seq,
        x["missing"],
        gaps or "none",
    ]


def _corrupt_lines(bad: dict[str, Any]) -> list[str]:
    """The report's lines on what ingest skipped as corrupt (none: nothing)."""
    if not (bad["regions"] or bad["missing"]):
        return []
    out = [
        "",
        "skipped by ingest: %d corrupt log region(s), %d missing segment range(s)"
        % (len(bad["regions"]), len(bad["missing"])),
    ]
    for r in bad["regions"][:MAX_GAPS_SHOWN]:
        out.append("  %s @ %d: %s" % (r["file"], r["offset"], r["reason"]))
    for a, b in bad["missing"][:MAX_GAPS_SHOWN]:
        out.append("  segments %d..%d missing" % (a, b))
    return out
