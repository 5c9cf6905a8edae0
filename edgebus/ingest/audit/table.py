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

import os
from typing import TYPE_CHECKING, Any

from edgebus.ingest import tablelog
from edgebus.ingest.audit.rows import recompute

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from edgebus.ingest.audit.copies import Key, Mark

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
    from edgebus.ingest.audit.copies import committed_ends
    from edgebus.ingest.report.tables import read_table

    logs = list(getattr(args, "log", None) or [])
    # Where the job's reading ends, before the table's listing: the table
    # then holds at least every row from before it.
    ends = committed_ends(args.checkpoint, len(logs)) if logs else None
    df = read_table(spark, table)  # one listing for every query below
    read: dict[str, list[int]] = dict(state.get("read", {})) if marks else {}
    copies = _new_copies(logs, ends or [], read, window)
    new_marks, touched = _news(df, marks, copies)
    new_state = {"window": window, "marks": new_marks, "read": read}
    if not touched:
        if new_state != state:
            tablelog.write_batch(None, out, new_state)
        return None
    old = None
    if last >= 0 and marks:
        old = spark.read.schema(_schema()).parquet(out)
    rows = recompute(spark, df, old, sorted(touched), window, copies if ends else None)
    _write(spark, rows, old, touched, out, new_state)
    return "audit: %d boot%s refreshed (%d readings, %d late, %d missing, %d duplicates) -> %s" % (
        len(touched),
        "" if len(touched) == 1 else "s",
        sum(r["received"] for r in rows),
        sum(r["late"] for r in rows),
        sum(r["missing"] for r in rows),
        sum(r["duplicates"] or 0 for r in rows),
        out,
    )


def _new_copies(
    logs: list[str], ends: list[Mark], read: dict[str, list[int]], window: float
) -> dict[Key, int]:
    """The copies each log holds between where the audit read it to (read,
    moved on to ends) and ends."""
    from edgebus.ingest.audit.copies import count_copies

    copies: dict[Key, int] = {}
    for d, end in zip(logs, ends):
        was = read.get(d)
        count_copies(d, None if was is None else (was[0], was[1]), end, window, copies)
        read[d] = list(end)
    return copies


def _news(
    df: DataFrame, marks: dict[str, list[int]], copies: dict[Key, int]
) -> tuple[dict[str, list[int]], set[tuple[str, str]]]:
    """The marks moved past the table's new rows, and the boots with new rows,
    new bridge/gaps records or new copies in the logs."""
    from edgebus.ingest.audit import queries

    new_marks = dict(marks)
    touched = {(k[0], k[1]) for k in copies}
    for r in queries.news(df, marks):
        pos = [r["pos"]["segment"], r["pos"]["offset"]]
        new_marks[r["gw"]] = max(new_marks.get(r["gw"], pos), pos)
        if r["peer_node"] is not None and r["peer_sid"] is not None:
            touched.add((r["peer_node"], r["peer_sid"]))
    return new_marks, touched


def _write(
    spark: SparkSession,
    rows: list[dict[str, Any]],
    old: DataFrame | None,
    touched: set[tuple[str, str]],
    out: str,
    state: dict[str, Any],
) -> None:
    """The audit written as one batch: the touched boots' new rows, the other
    boots' old ones."""
    from edgebus.ingest.audit import queries

    new = spark.createDataFrame(rows, _schema())
    if old is not None:
        boots = spark.createDataFrame(sorted(touched), "peer_node STRING, peer_sid STRING")
        new = old.join(boots, queries.BOOT, "left_anti").unionByName(new)
    tablelog.write_batch(queries.with_boot_end(new).coalesce(1), out, state, replace=True)
