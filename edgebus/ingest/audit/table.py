"""The delivery audit table (docs/spark.md "Delivery audit"): per device boot
and time window, readings received, late and how late, numbers missing with
the reason a bridge recorded, duplicates, and the gateways that carried them.

The ingest job refreshes it from its table (edgebus.ingest.job DERIVED):
the boots with rows (or ``bridge/gaps`` records) past the audit's high-water
mark per gateway are recomputed from all their rows; the other boots' rows
are kept, and the whole audit is written as one batch (tablelog.write_batch,
replace: an audit is small, a row per boot and window), with the new marks
in the batch's state.  Copies (duplicates) come from the logs themselves
(edgebus.ingest.audit.copies), between the old and new marks.
"""

from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, Any

from edgebus.ingest import tablelog

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

DEFAULT_WINDOW = 3600.0


def _schema() -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DoubleType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    def f(name: str, typ: Any) -> StructField:
        return StructField(name, typ, True)

    gap = StructType([f("first", LongType()), f("last", LongType()), f("why", StringType())])
    return StructType(
        [f("peer_node", StringType()), f("peer_sid", StringType())]
        + [f(n, TimestampType()) for n in ("window_start", "window_end")]
        + [f("generation", LongType())]
        + [f(n, LongType()) for n in ("received", "late", "first_seq", "last_seq")]
        + [f(n, TimestampType()) for n in ("first_time", "last_time")]
        + [f(n, DoubleType()) for n in ("latency_p50", "latency_p99", "latency_max")]
        + [f(n, DoubleType()) for n in ("late_p50", "late_p99", "late_max")]
        + [
            f("missing", LongType()),
            f("missing_why", MapType(StringType(), LongType())),
            f("gaps", ArrayType(gap)),
            f("copies", LongType()),
            f("duplicates", LongType()),
            f("gateways", ArrayType(StringType())),
            f("journal", BooleanType()),
            f("boot_end", StringType()),
        ]
    )


def __getattr__(name: str) -> Any:  # SCHEMA without importing pyspark at import time
    if name == "SCHEMA":
        return _schema()
    raise AttributeError(name)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--audit",
        metavar="DIR",
        help="the delivery audit table (default: the table's directory + '.audit')",
    )
    p.add_argument(
        "--audit-window",
        type=float,
        default=DEFAULT_WINDOW,
        metavar="SECONDS",
        help="the audit's time window per row (default %(default)s)",
    )
    p.add_argument("--no-audit", action="store_true", help="do not write the delivery audit")


def audit_dir(table: str, audit: str | None = None) -> str:
    """Where a table's audit is: audit, or the table's directory + '.audit'."""
    return os.path.abspath(audit or os.path.abspath(table).rstrip(os.sep) + ".audit")


def refresh(spark: SparkSession, args: argparse.Namespace) -> str | None:
    """Bring the audit up to what the table holds; a line for the user, or None
    when nothing changed."""
    if getattr(args, "no_audit", False):
        return None
    table = os.path.abspath(args.table)
    if not os.path.isdir(os.path.join(table, "_spark_metadata")):
        return None
    out = audit_dir(table, getattr(args, "audit", None))
    window = float(getattr(args, "audit_window", DEFAULT_WINDOW))
    if window <= 0:
        raise ValueError("--audit-window must be above 0")
    last, state = tablelog.committed(out)
    # Another window: every row changes, counted again from what the logs hold.
    marks: dict[str, list[int]] = state.get("marks", {}) if state.get("window") == window else {}
    from edgebus.ingest.audit import copies as audit_log
    from edgebus.ingest.audit import queries as audit_spark
    from edgebus.ingest.report.tables import read_table

    logs = list(getattr(args, "log", None) or [])
    # Where the job's reading ends, before the table's listing: the table
    # then holds at least every row from before it.
    ends = audit_log.committed_ends(args.checkpoint, len(logs)) if logs else None
    df = read_table(spark, table)  # one listing for every query below
    read: dict[str, list[int]] = dict(state.get("read", {})) if marks else {}
    copies: dict[audit_log.Key, int] = {}
    for d, end in zip(logs, ends or []):
        was = read.get(d)
        audit_log.count_copies(d, None if was is None else (was[0], was[1]), end, window, copies)
        read[d] = list(end)
    new_marks = dict(marks)
    # Boots with new rows, new bridge/gaps records or new copies in the logs.
    touched = {(k[0], k[1]) for k in copies}
    for r in audit_spark.news(df, marks):
        pos = [r["pos"]["segment"], r["pos"]["offset"]]
        new_marks[r["gw"]] = max(new_marks.get(r["gw"], pos), pos)
        if r["peer_node"] is not None and r["peer_sid"] is not None:
            touched.add((r["peer_node"], r["peer_sid"]))
    new_state = {"window": window, "marks": new_marks, "read": read}
    if not touched:
        if new_state != state:
            tablelog.write_batch(None, out, new_state)
        return None
    old = None
    if last >= 0 and marks:
        old = spark.read.schema(_schema()).parquet(out)
    rows = _recompute(spark, df, old, sorted(touched), window, copies if ends else None)
    new = spark.createDataFrame(rows, _schema())
    if old is not None:
        boots = spark.createDataFrame(sorted(touched), "peer_node STRING, peer_sid STRING")
        new = old.join(boots, audit_spark.BOOT, "left_anti").unionByName(new)
    tablelog.write_batch(audit_spark.with_boot_end(new).coalesce(1), out, new_state, replace=True)
    n_missing = sum(r["missing"] for r in rows)
    return "audit: %d boot%s refreshed (%d readings, %d late, %d missing, %d duplicates) -> %s" % (
        len(touched),
        "" if len(touched) == 1 else "s",
        sum(r["received"] for r in rows),
        sum(r["late"] for r in rows),
        n_missing,
        sum(r["duplicates"] or 0 for r in rows),
        out,
    )


def _recompute(
    spark: SparkSession,
    df: DataFrame,
    old: DataFrame | None,
    touched: list[tuple[str, str]],
    window: float,
    copies: dict[tuple[str, str, int, str], int] | None,
) -> list[dict[str, Any]]:
    """The audit rows of the touched boots, from all their rows in df; their
    copies are old's (the copies counted before) plus copies (new ones);
    None: not counted (no log read), copies and duplicates null."""
    from pyspark.sql import functions as F

    from edgebus.ingest.audit import gaps as audit_gaps
    from edgebus.ingest.audit import queries as audit_spark

    boots = spark.createDataFrame(touched, "peer_node STRING, peer_sid STRING")
    figures, gaps = audit_spark.windows(df, boots, window)
    records = audit_spark.gap_records(df, boots, window)
    journal = audit_spark.journals(df, boots)
    counted: dict[tuple[str, str, int], int] = {}
    carriers: dict[tuple[str, str, int], set[str]] = {}
    for (node, sid, w, g), n in (copies or {}).items():
        counted[(node, sid, w)] = counted.get((node, sid, w), 0) + n
        if g:
            carriers.setdefault((node, sid, w), set()).add(g)
    if old is not None:
        for r in (
            old.join(F.broadcast(boots), audit_spark.BOOT)
            .select(
                *audit_spark.BOOT, F.unix_timestamp("window_start").alias("w"), "copies", "gateways"
            )
            .collect()
        ):
            k = (r["peer_node"], r["peer_sid"], r["w"])
            if copies is not None:
                counted[k] = counted.get(k, 0) + (r["copies"] or 0)
            carriers.setdefault(k, set()).update(r["gateways"] or ())
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in figures:
        rows[(r["peer_node"], r["peer_sid"], r["w"])] = _row(r, window)
    for boot in touched:
        mine = sorted((k[2], v) for k, v in rows.items() if k[:2] == boot)
        lost = audit_gaps.missing(
            [
                (g["first"], g["last"], g["w"])
                for g in gaps
                if (g["peer_node"], g["peer_sid"]) == boot
            ],
            [(x["first"], x["last"], x["why"], x["w"]) for x in records if (x[0], x[1]) == boot],
            min((v["first_seq"] for _, v in mine), default=None),
            max((v["last_seq"] for _, v in mine), default=None),
            mine[0][0] if mine else None,
            mine[-1][0] if mine else None,
        )
        for a, b, why, w in lost:
            row = rows.get((boot[0], boot[1], w))
            if row is None:  # numbers a record names, of a boot with no reading there
                row = rows[(boot[0], boot[1], w)] = _row(
                    {"peer_node": boot[0], "peer_sid": boot[1], "w": w, "received": 0, "late": 0},
                    window,
                )
            row["gaps"].append({"first": a, "last": b, "why": why})
            row["missing"] += b - a + 1
            row["missing_why"][why] = row["missing_why"].get(why, 0) + b - a + 1
    for k in counted:
        if k[:2] in set(touched) and k not in rows:  # only copies of earlier numbers
            rows[k] = _row(
                {"peer_node": k[0], "peer_sid": k[1], "w": k[2], "received": 0, "late": 0}, window
            )
    for k, row in rows.items():
        row["gateways"] = sorted(g for g in carriers.get(k, set()).union(row["gateways"]) if g)
        row["journal"] = True if k[:2] in journal else None
        # Copies of the boot in the window beyond the first of each number:
        # the job's dropped duplicates and any it kept (over --watermark apart).
        if copies is not None:
            row["copies"] = counted.get(k, 0)
            row["duplicates"] = row["copies"] - row["received"]
    return [rows[k] for k in sorted(rows)]


def _utc(ts: float | None) -> datetime.datetime | None:
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)


def _row(r: Any, window: float) -> dict[str, Any]:
    g = r.asDict() if hasattr(r, "asDict") else r
    lat, late = g.get("lat_q") or [None, None], g.get("late_q") or [None, None]
    return {
        "peer_node": g["peer_node"],
        "peer_sid": g["peer_sid"],
        "window_start": _utc(g["w"]),
        "window_end": _utc(g["w"] + window),
        "generation": g.get("generation"),
        "received": g["received"],
        "late": g["late"],
        "first_seq": g.get("first_seq"),
        "last_seq": g.get("last_seq"),
        "first_time": _utc(g.get("first_t")),
        "last_time": _utc(g.get("last_t")),
        "latency_p50": lat[0],
        "latency_p99": lat[1],
        "latency_max": g.get("lat_max"),
        "late_p50": late[0],
        "late_p99": late[1],
        "late_max": g.get("late_max"),
        "missing": 0,
        "missing_why": {},
        "gaps": [],
        "copies": None,
        "duplicates": None,
        "gateways": g.get("gateways") or [],
        "journal": None,
        "boot_end": None,
    }
