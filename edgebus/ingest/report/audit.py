"""`edgebus report`'s delivery audit part: per device boot, from the audit
table (edgebus.ingest.audit), what was received, late, missing and why,
duplicated, and which gateways carried it; the late readings' latency
percentiles from the table itself (percentiles of windows do not add up).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_audit(spark: SparkSession, audit: str) -> DataFrame | None:
    """The audit table, or None when there is none."""
    from edgebus.ingest.audit.table import SCHEMA

    if not os.path.isdir(os.path.join(audit, "_spark_metadata")):
        return None
    return spark.read.schema(SCHEMA).parquet(audit)


def late_latency(spark: SparkSession, table: str) -> dict[Any, list[float | None]]:
    """{(peer_node, peer_sid): [p50, p99]} of the late readings' latency
    (ts_host - ts_device of each number's first copy), and the same over all
    boots under the key None."""
    from pyspark.sql import functions as F

    from edgebus.ingest.audit.queries import first_copies
    from edgebus.ingest.report.tables import read_table

    late = first_copies(read_table(spark, table)).where(F.col("late"))
    lat = (F.col("t") - F.col("td")).alias("lat")
    q = F.array(F.lit(0.5), F.lit(0.99))
    rows = (
        late.select("peer_node", "peer_sid", lat)
        .rollup("peer_node", "peer_sid")
        .agg(F.percentile("lat", q).alias("q"), F.grouping_id().alias("g"))
        .collect()
    )
    out: dict[Any, list[float | None]] = {}
    for r in rows:
        if r["g"] == 0:
            out[(r["peer_node"], r["peer_sid"])] = r["q"]
        elif r["g"] == 3:
            out[None] = r["q"]
    return out


def summarize_audit(spark: SparkSession, table: str, audit: str) -> dict[str, Any] | None:
    """The audit per boot, or None without an audit table:
    {"boots": [{"peer_node", "peer_sid", "received", "late", "missing",
                "missing_why": {why: n}, "duplicates", "gateways", "boot_end",
                "late_p50", "late_p99", "first_time", "last_time"}],
     "received", "late", "missing", "missing_why", "duplicates",
     "late_p50", "late_p99", "ended_unknown": boots ended without a known journal}."""
    from pyspark.sql import functions as F

    df = read_audit(spark, audit)
    if df is None:
        return None
    why = df.select("peer_node", "peer_sid", F.explode("missing_why").alias("why", "n"))
    whys: dict[tuple[str, str], dict[str, int]] = {}
    for r in why.groupBy("peer_node", "peer_sid", "why").agg(F.sum("n").alias("n")).collect():
        whys.setdefault((r["peer_node"], r["peer_sid"]), {})[r["why"]] = r["n"]
    lat = late_latency(spark, table)
    boots = []
    for r in (
        df.groupBy("peer_node", "peer_sid")
        .agg(
            *[F.sum(c).alias(c) for c in ("received", "late", "missing", "duplicates")],
            F.array_sort(F.array_distinct(F.flatten(F.collect_list("gateways")))).alias("gw"),
            F.max("boot_end").alias("boot_end"),
            F.min("first_time").alias("first_time"),
            F.max("last_time").alias("last_time"),
        )
        .orderBy("peer_node", "first_time")
        .collect()
    ):
        key = (r["peer_node"], r["peer_sid"])
        q = lat.get(key) or [None, None]
        boots.append(
            dict(
                r.asDict(),
                gateways=r["gw"],
                missing_why=whys.get(key, {}),
                late_p50=q[0],
                late_p99=q[1],
            )
        )
    for b in boots:
        del b["gw"]
    return audit_totals(boots, lat)


def audit_totals(boots: list[dict[str, Any]], lat: dict[Any, Any]) -> dict[str, Any]:
    """summarize_audit's dict for its boots and late_latency()'s figures."""
    total_why: dict[str, int] = {}
    for b in boots:
        for k, n in b["missing_why"].items():
            total_why[k] = total_why.get(k, 0) + n
    q = lat.get(None) or [None, None]
    return {
        "boots": boots,
        "received": sum(b["received"] or 0 for b in boots),
        "late": sum(b["late"] or 0 for b in boots),
        "missing": sum(b["missing"] or 0 for b in boots),
        "missing_why": total_why,
        "duplicates": sum(b["duplicates"] or 0 for b in boots),
        "late_p50": q[0],
        "late_p99": q[1],
        "ended_unknown": sum(b["boot_end"] == "no_journal_known" for b in boots),
    }


def _s(x: float | None) -> str:
    return "-" if x is None else "%.3g s" % x


def _whys(d: dict[str, int]) -> str:
    return ", ".join("%s %d" % (k, d[k]) for k in sorted(d)) or "-"


def audit_line(a: dict[str, Any]) -> str:
    """The one line: what was lost (and why), how late the late readings came;
    no verdict when the audit saw no reading (an empty table, a wrong log)."""
    if not a["boots"] or not (a["received"] or a["missing"]):
        return "audit: no records audited (no numbered device readings in the table)"
    if a["missing"]:
        lost = "%d numbers missing (%s)" % (a["missing"], _whys(a["missing_why"]))
    else:
        lost = "nothing lost"
    if a["late"]:
        late = "%d readings came late, p50 %s, p99 %s" % (
            a["late"],
            _s(a["late_p50"]),
            _s(a["late_p99"]),
        )
    else:
        late = "none came late"
    line = "audit: %s; %s" % (lost, late)
    if a["duplicates"]:
        line += "; %d duplicates dropped" % a["duplicates"]
    if a["ended_unknown"]:
        line += (
            "; %d ended boot(s) without a known journal may have lost readings "
            "after their last number" % a["ended_unknown"]
        )
    return line


def format_audit(a: dict[str, Any]) -> str:
    """The report's audit section for a summarize_audit() result."""
    from edgebus.ingest.report.tables import text_table

    rows = [
        [
            b["peer_node"],
            b["peer_sid"],
            b["received"],
            b["late"],
            _s(b["late_p50"]),
            _s(b["late_p99"]),
            b["missing"],
            _whys(b["missing_why"]),
            "-" if b["duplicates"] is None else b["duplicates"],
            ",".join(b["gateways"]) or "-",
            b["boot_end"] or "-",
        ]
        for b in a["boots"]
    ]
    head = ["device", "boot", "received", "late", "late p50", "late p99", "missing", "why"]
    return "\n".join(
        [
            "delivery audit (per device boot; docs/spark.md, Delivery audit):",
            text_table(head + ["dupes", "gateways", "ended"], rows),
            audit_line(a),
        ]
    )
