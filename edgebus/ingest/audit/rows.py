"""The delivery audit's rows: per device boot and time window, the figures of
its readings, the numbers missing and why, the copies counted in the logs,
and the gateways that carried them, assembled from the audit's queries."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BootWindow = tuple[str, str, int]  # (peer_node, peer_sid, window start)
Rows = dict[BootWindow, dict[str, Any]]


def recompute(
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
    from edgebus.ingest.audit import queries

    boots = spark.createDataFrame(touched, "peer_node STRING, peer_sid STRING")
    figures, gaps = queries.windows(df, boots, window)
    records = queries.gap_records(df, boots, window)
    journal = queries.journals(df, boots)
    counted, carriers = _counted(old, boots, copies)
    rows: Rows = {}
    for r in figures:
        rows[(r["peer_node"], r["peer_sid"], r["w"])] = _row(r, window)
    for boot in touched:
        _add_missing(rows, boot, gaps, records, window)
    for k in counted:
        if k[:2] in set(touched) and k not in rows:  # only copies of earlier numbers
            rows[k] = _empty_row(k, window)
    for k, row in rows.items():
        row["gateways"] = sorted(g for g in carriers.get(k, set()).union(row["gateways"]) if g)
        row["journal"] = True if k[:2] in journal else None
        # Copies of the boot in the window beyond the first of each number:
        # the job's dropped duplicates and any it kept (over --watermark apart).
        if copies is not None:
            row["copies"] = counted.get(k, 0)
            row["duplicates"] = row["copies"] - row["received"]
    return [rows[k] for k in sorted(rows)]


def _counted(
    old: DataFrame | None,
    boots: DataFrame,
    copies: dict[tuple[str, str, int, str], int] | None,
) -> tuple[dict[BootWindow, int], dict[BootWindow, set[str]]]:
    """Per boot window, the copies (the new ones plus old's, when counting)
    and the gateways that carried them."""
    from pyspark.sql import functions as F

    from edgebus.ingest.audit import queries

    counted: dict[BootWindow, int] = {}
    carriers: dict[BootWindow, set[str]] = {}
    for (node, sid, w, g), n in (copies or {}).items():
        counted[(node, sid, w)] = counted.get((node, sid, w), 0) + n
        if g:
            carriers.setdefault((node, sid, w), set()).add(g)
    if old is not None:
        for r in (
            old.join(F.broadcast(boots), queries.BOOT)
            .select(
                *queries.BOOT, F.unix_timestamp("window_start").alias("w"), "copies", "gateways"
            )
            .collect()
        ):
            k = (r["peer_node"], r["peer_sid"], r["w"])
            if copies is not None:
                counted[k] = counted.get(k, 0) + (r["copies"] or 0)
            carriers.setdefault(k, set()).update(r["gateways"] or ())
    return counted, carriers


def _add_missing(
    rows: Rows, boot: tuple[str, str], gaps: list[Any], records: list[Any], window: float
) -> None:
    """The boot's missing numbers, with their reasons, added to its rows by
    window (a row made for a window with none)."""
    from edgebus.ingest.audit.gaps import missing

    mine = sorted((k[2], v) for k, v in rows.items() if k[:2] == boot)
    lost = missing(
        [(g["first"], g["last"], g["w"]) for g in gaps if (g["peer_node"], g["peer_sid"]) == boot],
        [(x["first"], x["last"], x["why"], x["w"]) for x in records if (x[0], x[1]) == boot],
        min((v["first_seq"] for _, v in mine), default=None),
        max((v["last_seq"] for _, v in mine), default=None),
        mine[0][0] if mine else None,
        mine[-1][0] if mine else None,
    )
    for a, b, why, w in lost:
        row = rows.get((boot[0], boot[1], w))
        if row is None:  # numbers a record names, of a boot with no reading there
            row = rows[(boot[0], boot[1], w)] = _empty_row((boot[0], boot[1], w), window)
        row["gaps"].append({"first": a, "last": b, "why": why})
        row["missing"] += b - a + 1
        row["missing_why"][why] = row["missing_why"].get(why, 0) + b - a + 1


def _empty_row(k: BootWindow, window: float) -> dict[str, Any]:
    """The row of a boot window without readings."""
    return _row({"peer_node": k[0], "peer_sid": k[1], "w": k[2], "received": 0, "late": 0}, window)


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
